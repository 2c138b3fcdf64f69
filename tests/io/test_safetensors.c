/* test_safetensors.c — the safetensors reader and writer.
 *
 * Malformed files are built byte by byte (8-byte length, JSON text, zeros) so
 * each case shows exactly what is wrong with it; every failure must return the
 * right status, no set, and a message naming the file and the tensor. Meant to
 * be run under ASan as well: the truncation loop and the allocation-failure
 * loop are there for it. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/fp16.h"
#include "io/safetensors.h"
#include "test.h"

static char g_dir[1024];
static char g_err[512];

static const char *tmp_path(const char *name) {
    static char p[4][1200];
    static int k;
    k = (k + 1) & 3;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static void fresh_dir(const char *name) { snprintf(g_dir, sizeof g_dir, "%s", nx_test_tmpdir(name)); }

/* A file with the given header text (unpadded) and data_size zero bytes. */
static void write_raw(const char *path, const char *header, size_t data_size) {
    size_t n = strlen(header);
    uint8_t *buf = calloc(1, 8 + n + data_size);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    CHECK(nx_test_write_file(path, buf, 8 + n + data_size) == 0);
    free(buf);
}

/* Opens path expecting `want`; the message must name the file and `tensor`. */
static void expect_open_fails(const char *path, nx_status want, const char *tensor, const char *what) {
    static char sentinel;
    st_set *s = (st_set *)(void *)&sentinel;   /* a failed open must reset it to NULL */
    g_err[0] = 0;
    nx_status st = st_open_file(path, &s, g_err, sizeof g_err);
    CHECKF(st == want, "%s: got %s, want %s (%s)", what, nx_status_str(st), nx_status_str(want), g_err);
    CHECKF(s == NULL, "%s: out not NULL on failure", what);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    CHECKF(strstr(g_err, base) != NULL, "%s: message does not name the file: %s", what, g_err);
    if (tensor) CHECKF(strstr(g_err, tensor) != NULL, "%s: message does not name '%s': %s", what, tensor, g_err);
    if (st == NX_OK) st_close(s);
}

static void add(st_writer *w, const char *name, nx_dtype dt, int ndim, const int64_t *shape, const void *data,
                size_t nbytes) {
    nx_status st = st_writer_add(w, name, dt, ndim, shape, data, nbytes, g_err, sizeof g_err);
    CHECKF(st == NX_OK, "add %s: %s", name, g_err);
}

/* Writes a small file with one tensor per name, each [n] F32 holding its
 * index i in every element plus `bias`. */
static void write_simple(const char *path, const char *const *names, int count, int n, float bias) {
    st_writer *w;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < n; j++) v[j] = (float)i + bias;
        int64_t shape[1] = {n};
        add(w, names[i], NX_DT_F32, 1, shape, v, sizeof(float) * (size_t)n);
    }
    CHECK(st_writer_write(w, path, g_err, sizeof g_err) == NX_OK);
    free(v);
    st_writer_free(w);
}

/* ---- Round trip ----------------------------------------------------------- */

static void round_trip_preserves_dtypes_shapes_bytes_and_metadata(void) {
    fresh_dir("st_round_trip");
    const char *path = tmp_path("rt.safetensors");
    float f32[6] = {1, -2, 3.5f, 0, 1e-8f, -1e8f};
    uint16_t bf[5], f16 = nx_f32_to_f16(0.5f);
    for (int i = 0; i < 5; i++) bf[i] = nx_f32_to_bf16((float)i * 0.25f);
    int8_t i8[6] = {-128, -1, 0, 1, 2, 127};
    double f64 = 3.25;
    int64_t s_f32[2] = {2, 3}, s_bf[1] = {5}, s_i8[3] = {3, 1, 2}, s_empty[2] = {4, 0};
    int64_t s_8d[8] = {1, 1, 1, 1, 1, 1, 1, 1};

    st_writer *w;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    CHECK(st_writer_meta(w, "format", "pt", g_err, sizeof g_err) == NX_OK);
    CHECK(st_writer_meta(w, "note", "héllo", g_err, sizeof g_err) == NX_OK);
    add(w, "a.weight", NX_DT_F32, 2, s_f32, f32, sizeof f32);
    add(w, "b.bias", NX_DT_BF16, 1, s_bf, bf, sizeof bf);
    add(w, "scalar", NX_DT_F16, 0, NULL, &f16, 2);
    add(w, "empty", NX_DT_U8, 2, s_empty, NULL, 0);
    add(w, "c.int8", NX_DT_I8, 3, s_i8, i8, sizeof i8);
    add(w, "eight.dims", NX_DT_F64, 8, s_8d, &f64, 8);
    CHECK(st_writer_bytes(w) == sizeof f32 + sizeof bf + 2 + sizeof i8 + 8);
    CHECK(st_writer_write(w, path, g_err, sizeof g_err) == NX_OK);
    st_writer_free(w);
    CHECKF(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0, "the .tmp file was left behind");

    st_set *s = NULL;
    nx_status st = st_open_file(path, &s, g_err, sizeof g_err);
    CHECKF(st == NX_OK, "%s", g_err);
    if (st != NX_OK) return;
    CHECK(st_count(s) == 6);
    CHECK(st_file_count(s) == 1 && strcmp(st_file_path(s, 0), path) == 0);
    /* in the file: by the power of two dividing each size (64 at most), otherwise as added */
    const char *order[6] = {"empty", "a.weight", "eight.dims", "b.bias", "scalar", "c.int8"};
    for (int i = 0; i < 6 && i < st_count(s); i++) {
        const st_tensor *t = st_at(s, i);
        CHECKF(strcmp(t->name, order[i]) == 0, "st_at(%d) is %s, want %s", i, t->name, order[i]);
        CHECKF((uintptr_t)t->data % nx_dtype_size(t->dtype) == 0, "%s is not aligned to its elements", t->name);
        CHECK(st_find(s, order[i]) == t);
        CHECK(strcmp(t->file, path) == 0);
    }
    const st_tensor *t = st_find(s, "a.weight");
    CHECK(t && t->dtype == NX_DT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6);
    CHECK(t && t->nbytes == sizeof f32 && memcmp(t->data, f32, sizeof f32) == 0);
    t = st_find(s, "b.bias");
    CHECK(t && t->dtype == NX_DT_BF16 && t->ndim == 1 && t->shape[0] == 5 && memcmp(t->data, bf, sizeof bf) == 0);
    t = st_find(s, "scalar");
    CHECK(t && t->dtype == NX_DT_F16 && t->ndim == 0 && t->numel == 1 && t->nbytes == 2);
    CHECK(t && nx_f16_to_f32(*(const uint16_t *)t->data) == 0.5f);
    t = st_find(s, "empty");
    CHECK(t && t->dtype == NX_DT_U8 && t->ndim == 2 && t->shape[1] == 0 && t->numel == 0 && t->nbytes == 0);
    t = st_find(s, "c.int8");
    CHECK(t && t->dtype == NX_DT_I8 && t->ndim == 3 && t->shape[0] == 3 && t->shape[2] == 2);
    CHECK(t && memcmp(t->data, i8, sizeof i8) == 0);
    t = st_find(s, "eight.dims");
    CHECK(t && t->ndim == 8 && t->numel == 1 && *(const double *)t->data == 3.25);
    CHECK(st_metadata(s, "format") && strcmp(st_metadata(s, "format"), "pt") == 0);
    CHECK(st_metadata(s, "note") && strcmp(st_metadata(s, "note"), "héllo") == 0);
    CHECK(st_metadata(s, "missing") == NULL);
    CHECK(st_find(s, "absent") == NULL && st_find(s, "a.weigh") == NULL);
    CHECK(st_at(s, -1) == NULL && st_at(s, 6) == NULL && st_file_path(s, 1) == NULL);
    st_close(s);
    st_close(NULL);
    st_writer_free(NULL);
}

/* The format allows no gaps between tensors (Hugging Face's safetensors
 * refuses a file with them): the writer packs them by the largest power of
 * two (up to 64) dividing their sizes, so that a matrix of whole cache lines
 * starts on one and every tensor at a multiple of its element size. */
static void writer_packs_tensors_without_gaps(void) {
    fresh_dir("st_layout");
    const char *path = tmp_path("pad.safetensors");
    uint8_t a[3] = {1, 2, 3}, b[70], m[128];
    uint16_t h[3] = {7, 8, 9};
    float f[2] = {1.5f, -2.0f};
    memset(b, 0xab, sizeof b);
    memset(m, 0xcd, sizeof m);
    int64_t sa[1] = {3}, sb[1] = {70}, sf[1] = {2}, sm[1] = {128};
    st_writer *w;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    add(w, "a", NX_DT_U8, 1, sa, a, 3);
    add(w, "h", NX_DT_BF16, 1, sa, h, 6);
    add(w, "b", NX_DT_U8, 1, sb, b, 70);
    add(w, "f", NX_DT_F32, 1, sf, f, 8);
    add(w, "m", NX_DT_U8, 1, sm, m, 128);
    CHECK(st_writer_write(w, path, g_err, sizeof g_err) == NX_OK);
    st_writer_free(w);

    size_t n = 0;
    uint8_t *file = nx_test_read_file(path, &n);
    CHECK(file != NULL);
    if (!file) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | file[i];
    CHECKF(hl % 8 == 0 && (8 + hl) % 64 == 0, "header length %llu", (unsigned long long)hl);
    CHECK(file[8] == '{' && file[8 + hl - 1] == ' ');
    const char *hdr = (const char *)file + 8;
    /* 128 bytes (64 | size) first, then 8, then 6 and 70 (2 | size, as added),
     * then 3: no gaps, and the data ends where the file does */
    CHECK(strstr(hdr, "\"m\":{\"dtype\":\"U8\",\"shape\":[128],\"data_offsets\":[0,128]}") != NULL);
    CHECK(strstr(hdr, "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[128,136]}") != NULL);
    CHECK(strstr(hdr, "\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[136,142]}") != NULL);
    CHECK(strstr(hdr, "\"b\":{\"dtype\":\"U8\",\"shape\":[70],\"data_offsets\":[142,212]}") != NULL);
    CHECK(strstr(hdr, "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[212,215]}") != NULL);
    const uint8_t *d = file + 8 + hl;
    float f0;
    memcpy(&f0, d + 128, 4);
    CHECK(n == 8 + hl + 215 && d[0] == 0xcd && f0 == 1.5f && d[136] == 7 && d[142] == 0xab && d[212] == 1);
    free(file);
}

static void writer_rejects_bad_arguments_without_writing(void) {
    fresh_dir("st_writer_bad");
    uint8_t x[8] = {0};
    int64_t s2[2] = {2, 2}, neg[1] = {-1}, big[2] = {INT64_MAX / 2, 4};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    st_writer *w;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    add(w, "t", NX_DT_U8, 2, s2, x, 4);
    CHECK(st_writer_add(w, "t", NX_DT_U8, 2, s2, x, 4, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(strstr(g_err, "'t'") != NULL);
    CHECK(st_writer_add(w, "u", NX_DT_F32, 2, s2, x, 8, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(strstr(g_err, "'u'") != NULL);
    CHECK(st_writer_add(w, "", NX_DT_U8, 2, s2, x, 4, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "__metadata__", NX_DT_U8, 2, s2, x, 4, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "n", NX_DT_U8, 1, neg, x, 0, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "o", NX_DT_F32, 2, big, x, 0, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "d", NX_DT_U8, 9, nine, x, 1, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "p", NX_DT_U8, 2, s2, NULL, 4, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_add(w, "q", NX_DT_COUNT, 2, s2, x, 4, g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_meta(w, "", "v", g_err, sizeof g_err) == NX_EINVAL);
    CHECK(st_writer_bytes(w) == 4);
    /* A directory that does not exist: NX_EIO, and nothing is left behind. */
    CHECK(st_writer_write(w, tmp_path("no/such/dir.safetensors"), g_err, sizeof g_err) == NX_EIO);
    CHECK(strstr(g_err, "dir.safetensors") != NULL);
    /* A name that is not UTF-8 cannot go into a JSON header. */
    add(w, "bad\xff", NX_DT_U8, 2, s2, x, 4);
    CHECK(st_writer_write(w, tmp_path("utf8.safetensors"), g_err, sizeof g_err) == NX_EINVAL);
    CHECK(access(tmp_path("utf8.safetensors"), F_OK) != 0 && access(tmp_path("utf8.safetensors.tmp"), F_OK) != 0);
    st_writer_free(w);
}

static void writer_replaces_a_repeated_metadata_key(void) {
    fresh_dir("st_meta");
    st_writer *w;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    CHECK(st_writer_meta(w, "format", "pt", g_err, sizeof g_err) == NX_OK);
    CHECK(st_writer_meta(w, "format", "mlx", g_err, sizeof g_err) == NX_OK);
    CHECK(st_writer_write(w, tmp_path("m.safetensors"), g_err, sizeof g_err) == NX_OK);
    st_writer_free(w);
    st_set *s;
    CHECK(st_open_file(tmp_path("m.safetensors"), &s, g_err, sizeof g_err) == NX_OK);
    CHECK(st_count(s) == 0 && st_metadata(s, "format") && strcmp(st_metadata(s, "format"), "mlx") == 0);
    st_close(s);
}

static void thousands_of_tensors_are_found_by_name(void) {
    fresh_dir("st_many");
    enum { N = 3000 };
    char (*names)[32] = malloc(sizeof(*names) * N);
    const char **ptrs = malloc(sizeof(*ptrs) * N);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.w", i);
        ptrs[i] = names[i];
    }
    write_simple(tmp_path("many.safetensors"), ptrs, N, 1, 0.0f);
    st_set *s;
    CHECK(st_open_file(tmp_path("many.safetensors"), &s, g_err, sizeof g_err) == NX_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const st_tensor *t = st_find(s, names[i]);
        bad += !t || *(const float *)t->data != (float)i || st_at(s, i) != t;
    }
    CHECKF(bad == 0, "%d tensors not found or wrong", bad);
    CHECK(st_find(s, "layers.3000.w") == NULL);
    st_close(s);
    free(names);
    free(ptrs);
}

/* ---- Malformed files ---------------------------------------------------------- */

typedef struct {
    const char *what, *header;
    size_t data_size;
    nx_status want;
    const char *tensor;   /* must appear in the message; NULL: none expected */
} bad_header;

static const bad_header bad_headers[] = {
    {"not JSON", "{\"a\": ", 0, NX_EFORMAT, NULL},
    {"not an object", "[1, 2]", 0, NX_EFORMAT, NULL},
    {"integer too large for json_int_t", "{\"x\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],"
     "\"data_offsets\":[0,1]}}", 1, NX_EFORMAT, NULL},
    {"entry not an object", "{\"w\": 3}", 0, NX_EFORMAT, "'w'"},
    {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"shape missing", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"shape not an array", "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"real dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"string dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "'w'"},
    {"nine dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
     NX_EUNSUPPORTED, "'w'"},
    {"element count overflows", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4],"
     "\"data_offsets\":[0,0]}}", 0, NX_EFORMAT, "'w'"},
    {"byte count overflows", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
     "\"data_offsets\":[0,0]}}", 0, NX_EFORMAT, "'w'"},
    {"data_offsets missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, NX_EFORMAT, "'w'"},
    {"data_offsets of one", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, NX_EFORMAT, "'w'"},
    {"negative offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, NX_EFORMAT, "'w'"},
    {"real offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4, NX_EFORMAT, "'w'"},
    {"end before begin", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, NX_EFORMAT, "'w'"},
    {"past the end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, NX_EFORMAT, "'w'"},
    {"huge offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,"
     "9223372036854775807]}}", 4, NX_EFORMAT, "'w'"},
    {"size mismatch", "{\"x.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,10]}}", 32, NX_EFORMAT,
     "tensor 'x.weight': data_offsets [0, 10] but shape [2, 3] x F32 needs 24 bytes"},
    {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, NX_EFORMAT, "'a' [0, 8] and 'b' [4, 12]"},
    {"nested overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[12],\"data_offsets\":[0,12]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
     "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]}}", 12, NX_EFORMAT, "'a'"},
    {"same range twice", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NX_EFORMAT, "overlap"},
    {"duplicate key", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, NX_EFORMAT, NULL},
    {"metadata not an object", "{\"__metadata__\":[\"pt\"]}", 0, NX_EFORMAT, "__metadata__"},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, NX_EFORMAT, "'format'"},
};

static void every_malformed_header_is_a_clear_error(void) {
    fresh_dir("st_bad_headers");
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        const bad_header *b = &bad_headers[i];
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.safetensors", i);
        write_raw(tmp_path(name), b->header, b->data_size);
        expect_open_fails(tmp_path(name), b->want, b->tensor, b->what);
    }
}

static void short_and_empty_files_are_clear_errors(void) {
    fresh_dir("st_short");
    CHECK(nx_test_write_file(tmp_path("empty.safetensors"), "", 0) == 0);
    expect_open_fails(tmp_path("empty.safetensors"), NX_EFORMAT, NULL, "zero-length file");
    CHECK(strstr(g_err, "empty") != NULL);
    CHECK(nx_test_write_file(tmp_path("five.safetensors"), "\x02\0\0\0\0", 5) == 0);
    expect_open_fails(tmp_path("five.safetensors"), NX_EFORMAT, NULL, "5-byte file");
    /* Header length 1000 in a 10-byte file. */
    CHECK(nx_test_write_file(tmp_path("long.safetensors"), "\xe8\x03\0\0\0\0\0\0{}", 10) == 0);
    expect_open_fails(tmp_path("long.safetensors"), NX_EFORMAT, NULL, "header longer than the file");
    CHECK(nx_test_write_file(tmp_path("huge.safetensors"), "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10) == 0);
    expect_open_fails(tmp_path("huge.safetensors"), NX_EFORMAT, NULL, "header length 2^64-1");
    /* A header that fits the file but not the sanity cap: a sparse file, so
     * the test writes nothing close to 100 MiB. */
    const char *cap = tmp_path("cap.safetensors");
    uint64_t n = (uint64_t)101 << 20;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(n >> (8 * i));
    CHECK(nx_test_write_file(cap, len8, 8) == 0);
    CHECK(truncate(cap, (off_t)(8 + n)) == 0);
    expect_open_fails(cap, NX_EUNSUPPORTED, NULL, "header over the cap");
    expect_open_fails(tmp_path("missing.safetensors"), NX_EIO, NULL, "missing file");
    expect_open_fails(g_dir, NX_EIO, NULL, "a directory");
}

static void empty_tensors_and_empty_files_are_legal(void) {
    fresh_dir("st_empty_ok");
    const char *p = tmp_path("e.safetensors");
    write_raw(p, "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"end\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[4,4]}}", 4);
    st_set *s;
    CHECKF(st_open_file(p, &s, g_err, sizeof g_err) == NX_OK, "%s", g_err);
    CHECK(st_count(s) == 3 && st_find(s, "z") && st_find(s, "z")->nbytes == 0 && st_find(s, "end")->numel == 0);
    CHECK(strcmp(st_at(s, 0)->name, "a") == 0 && strcmp(st_at(s, 1)->name, "end") == 0);
    st_close(s);
    write_raw(p, "{}", 0);
    CHECKF(st_open_file(p, &s, g_err, sizeof g_err) == NX_OK, "%s", g_err);
    CHECK(st_count(s) == 0 && st_at(s, 0) == NULL && st_metadata(s, "format") == NULL);
    st_close(s);
}

static void every_truncation_of_a_valid_file_fails_cleanly(void) {
    fresh_dir("st_truncate");
    const char *names[3] = {"a", "b.weight", "c"};
    const char *full = tmp_path("full.safetensors"), *cut = tmp_path("cut.safetensors");
    write_simple(full, names, 3, 5, 1.0f);
    size_t n = 0;
    uint8_t *bytes = nx_test_read_file(full, &n);
    CHECK(bytes != NULL && n > 8);
    int bad = 0;
    for (size_t len = 0; bytes && len < n; len++) {
        CHECK(nx_test_write_file(cut, bytes, len) == 0);
        st_set *s = NULL;
        g_err[0] = 0;
        nx_status st = st_open_file(cut, &s, g_err, sizeof g_err);
        if (st == NX_OK || s != NULL || !strstr(g_err, "cut.safetensors")) {
            if (bad++ < 5) fprintf(stderr, "  length %zu: %s %s\n", len, nx_status_str(st), g_err);
            st_close(s);
        }
    }
    CHECKF(bad == 0, "%d truncations were not clean errors", bad);
    free(bytes);
}

/* ---- Sets of files -------------------------------------------------------------- */

static const char *const shard1[] = {"model.embed.weight", "model.layers.0.w"};
static const char *const shard2[] = {"model.layers.1.w", "lm_head.weight"};

static void write_shards(void) {
    write_simple(tmp_path("model-00001-of-00002.safetensors"), shard1, 2, 4, 10.0f);
    write_simple(tmp_path("model-00002-of-00002.safetensors"), shard2, 2, 4, 20.0f);
}

static void write_index(const char *weight_map) {
    char text[2048];
    snprintf(text, sizeof text, "{\"metadata\":{\"total_size\":64},\"weight_map\":%s}", weight_map);
    CHECK(nx_test_write_file(tmp_path("model.safetensors.index.json"), text, strlen(text)) == 0);
}

#define GOOD_MAP                                                                                 \
    "{\"model.embed.weight\":\"model-00001-of-00002.safetensors\","                              \
    "\"model.layers.0.w\":\"model-00001-of-00002.safetensors\","                                 \
    "\"model.layers.1.w\":\"model-00002-of-00002.safetensors\","                                 \
    "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}"

static void sharded_set_finds_tensors_in_every_shard(void) {
    fresh_dir("st_shards");
    write_shards();
    write_index(GOOD_MAP);
    st_set *s;
    nx_status st = st_open_dir(g_dir, &s, g_err, sizeof g_err);
    CHECKF(st == NX_OK, "%s", g_err);
    if (st != NX_OK) return;
    CHECK(st_count(s) == 4 && st_file_count(s) == 2);
    CHECK(strstr(st_file_path(s, 0), "model-00001-of-00002") && strstr(st_file_path(s, 1), "model-00002-of-00002"));
    const st_tensor *e = st_find(s, "model.embed.weight"), *h = st_find(s, "lm_head.weight");
    CHECK(e && h && e->file == st_file_path(s, 0) && h->file == st_file_path(s, 1));
    CHECK(e && *(const float *)e->data == 10.0f && h && ((const float *)h->data)[3] == 21.0f);
    CHECK(st_at(s, 0) == e && st_at(s, 3) == h);
    st_close(s);
}

typedef struct {
    const char *what, *weight_map;   /* NULL weight_map: the index text is raw */
    const char *raw;
    nx_status want;
    const char *mention;             /* must appear in the message */
} bad_index;

static const bad_index bad_indexes[] = {
    {"index not JSON", NULL, "{\"weight_map\":", NX_EFORMAT, "index.json"},
    {"index not an object", NULL, "[]", NX_EFORMAT, "index.json"},
    {"weight_map missing", NULL, "{\"metadata\":{}}", NX_EFORMAT, "weight_map"},
    {"weight_map not an object", "[\"a\"]", NULL, NX_EFORMAT, "weight_map"},
    {"weight_map empty", "{}", NULL, NX_EFORMAT, "weight_map"},
    {"file name not a string", "{\"model.embed.weight\": 1}", NULL, NX_EFORMAT, "model.embed.weight"},
    {"file outside the directory", "{\"model.embed.weight\":\"../model-00001-of-00002.safetensors\"}", NULL,
     NX_EFORMAT, "model.embed.weight"},
    {"missing shard", "{\"model.embed.weight\":\"model-00003-of-00003.safetensors\"}", NULL, NX_EIO,
     "model-00003-of-00003.safetensors"},
    {"tensor absent from its file", "{\"model.ghost\":\"model-00001-of-00002.safetensors\"}", NULL, NX_EFORMAT,
     "'model.ghost'"},
    {"tensor in the other shard", "{\"lm_head.weight\":\"model-00001-of-00002.safetensors\","
     "\"model.embed.weight\":\"model-00002-of-00002.safetensors\"}", NULL, NX_EFORMAT, "'lm_head.weight'"},
};

static void index_problems_are_clear_errors(void) {
    fresh_dir("st_bad_index");
    write_shards();
    for (size_t i = 0; i < sizeof bad_indexes / sizeof bad_indexes[0]; i++) {
        const bad_index *b = &bad_indexes[i];
        if (b->weight_map) write_index(b->weight_map);
        else CHECK(nx_test_write_file(tmp_path("model.safetensors.index.json"), b->raw, strlen(b->raw)) == 0);
        static char sentinel;
        st_set *s = (st_set *)(void *)&sentinel;
        g_err[0] = 0;
        nx_status st = st_open_dir(g_dir, &s, g_err, sizeof g_err);
        CHECKF(st == b->want, "%s: got %s (%s)", b->what, nx_status_str(st), g_err);
        CHECKF(s == NULL, "%s: out not NULL", b->what);
        CHECKF(strstr(g_err, b->mention) != NULL, "%s: message lacks '%s': %s", b->what, b->mention, g_err);
        if (st == NX_OK) st_close(s);
    }
    /* A shard that is itself malformed: the message names that shard. */
    write_index(GOOD_MAP);
    write_raw(tmp_path("model-00002-of-00002.safetensors"), "{\"lm_head.weight\": 7}", 0);
    st_set *s;
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_EFORMAT);
    CHECK(strstr(g_err, "model-00002-of-00002.safetensors") && strstr(g_err, "'lm_head.weight'"));
}

static void a_tensor_in_two_shards_is_an_error(void) {
    fresh_dir("st_dup_shards");
    static const char *const dup[] = {"model.layers.1.w", "model.embed.weight"};
    write_simple(tmp_path("model-00001-of-00002.safetensors"), shard1, 2, 4, 10.0f);
    write_simple(tmp_path("model-00002-of-00002.safetensors"), dup, 2, 4, 20.0f);
    write_index("{\"model.embed.weight\":\"model-00001-of-00002.safetensors\","
                "\"model.layers.1.w\":\"model-00002-of-00002.safetensors\"}");
    st_set *s;
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_EFORMAT);
    CHECKF(strstr(g_err, "'model.embed.weight'") && strstr(g_err, "model-00001") && strstr(g_err, "model-00002"),
           "%s", g_err);
    /* The same two files without an index (the *.safetensors fallback). */
    unlink(tmp_path("model.safetensors.index.json"));
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_EFORMAT);
    CHECKF(strstr(g_err, "'model.embed.weight'") != NULL, "%s", g_err);
}

static void directory_without_index_uses_model_safetensors_then_any_file(void) {
    fresh_dir("st_dir_order");
    st_set *s;
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_EIO && s == NULL);
    CHECKF(strstr(g_err, g_dir) != NULL, "%s", g_err);
    CHECK(st_open_dir(tmp_path("nope"), &s, g_err, sizeof g_err) == NX_EIO && strstr(g_err, "nope"));
    write_shards();   /* no index: both files, in name order */
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_OK);
    CHECK(st_file_count(s) == 2 && st_count(s) == 4 && strcmp(st_at(s, 0)->name, "model.embed.weight") == 0);
    st_close(s);
    static const char *const one[] = {"only"};
    write_simple(tmp_path("model.safetensors"), one, 1, 2, 0.0f);
    CHECK(st_open_dir(g_dir, &s, g_err, sizeof g_err) == NX_OK);
    CHECK(st_file_count(s) == 1 && st_count(s) == 1 && st_find(s, "only"));
    st_close(s);
}

/* Fails the 1st, 2nd, ... allocation in turn: each open either succeeds or
 * reports NX_ENOMEM, and ASan sees no leak on any of those paths. */
static void open_and_write_survive_every_allocation_failure(void) {
    fresh_dir("st_alloc_fail");
    write_shards();
    write_index(GOOD_MAP);
    int k, ok = 0;
    for (k = 0; k < 200 && !ok; k++) {
        st_set *s = NULL;
        nx_alloc_fail_after(k);
        nx_status st = st_open_dir(g_dir, &s, g_err, sizeof g_err);
        nx_alloc_fail_after(-1);
        CHECKF(st == NX_OK || st == NX_ENOMEM, "fail after %d: %s %s", k, nx_status_str(st), g_err);
        ok = st == NX_OK && st_count(s) == 4;
        st_close(s);
    }
    CHECKF(ok && k > 3, "open never succeeded (k=%d)", k);
    uint8_t x[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    for (k = 0, ok = 0; k < 200 && !ok; k++) {
        st_writer *w = NULL;
        nx_alloc_fail_after(k);
        nx_status st = st_writer_new(&w, g_err, sizeof g_err);
        if (st == NX_OK) st = st_writer_meta(w, "format", "pt", g_err, sizeof g_err);
        if (st == NX_OK) st = st_writer_add(w, "a", NX_DT_U8, 1, shape, x, 4, g_err, sizeof g_err);
        if (st == NX_OK) st = st_writer_add(w, "b", NX_DT_U8, 1, shape, x, 4, g_err, sizeof g_err);
        if (st == NX_OK) st = st_writer_write(w, tmp_path("w.safetensors"), g_err, sizeof g_err);
        nx_alloc_fail_after(-1);
        CHECKF(st == NX_OK || st == NX_ENOMEM, "writer fail after %d: %s", k, g_err);
        ok = st == NX_OK;
        st_writer_free(w);
    }
    CHECKF(ok && k > 3, "writer never succeeded (k=%d)", k);
}

/* st_release: a tensor of several pages released (whole and in part, and
 * a range running past the mapping) reads back the same bytes; a heap
 * buffer given to it, outside every mapping, keeps its bytes. */
static void released_pages_read_back_the_same_bytes(void) {
    fresh_dir("st-release");
    enum { N = 5 * 4096 };   /* floats: 80 KB, 20 pages */
    float *data = malloc(N * sizeof *data);
    for (int i = 0; i < N; i++) data[i] = (float)i * 0.5f - 7.0f;
    st_writer *w = NULL;
    CHECK(st_writer_new(&w, g_err, sizeof g_err) == NX_OK);
    const int64_t shape[1] = {N};
    add(w, "t", NX_DT_F32, 1, shape, data, N * sizeof *data);
    CHECKF(st_writer_write(w, tmp_path("r.safetensors"), g_err, sizeof g_err) == NX_OK, "%s", g_err);
    st_writer_free(w);
    st_set *s = NULL;
    CHECKF(st_open_file(tmp_path("r.safetensors"), &s, g_err, sizeof g_err) == NX_OK, "%s", g_err);
    const st_tensor *t = s ? st_find(s, "t") : NULL;
    CHECK(t != NULL);
    if (t) {
        CHECK(memcmp(t->data, data, t->nbytes) == 0);
        st_release(s, t->data, t->nbytes);
        CHECK(memcmp(t->data, data, t->nbytes) == 0);
        st_release(s, (const char *)t->data + 1000, 3 * 4096);   /* unaligned, inside */
        st_release(s, (const char *)t->data + t->nbytes - 4096, 1 << 20);   /* past the mapping's end */
        CHECK(memcmp(t->data, data, t->nbytes) == 0);
    }
    float *heap = malloc(N * sizeof *heap);
    memcpy(heap, data, N * sizeof *heap);
    st_release(s, heap, N * sizeof *heap);
    st_release(NULL, heap, N * sizeof *heap);
    CHECK(memcmp(heap, data, N * sizeof *heap) == 0);
    st_close(s);
    free(heap);
    free(data);
}

static const nx_test tests[] = {
    {"released_pages_read_back_the_same_bytes", "st_release: the same bytes after, heap memory untouched, ranges clipped",
     released_pages_read_back_the_same_bytes},
    {"round_trip_preserves_dtypes_shapes_bytes_and_metadata", "writer -> reader keeps every field and byte",
     round_trip_preserves_dtypes_shapes_bytes_and_metadata},
    {"writer_packs_tensors_without_gaps", "space padding to a 64-byte data region, tensors back to back by the power of two dividing their sizes",
     writer_packs_tensors_without_gaps},
    {"writer_rejects_bad_arguments_without_writing", "duplicates, size mismatches, bad names, bad paths",
     writer_rejects_bad_arguments_without_writing},
    {"writer_replaces_a_repeated_metadata_key", "the last value of a metadata key wins",
     writer_replaces_a_repeated_metadata_key},
    {"thousands_of_tensors_are_found_by_name", "3000 tensors, every lookup hits",
     thousands_of_tensors_are_found_by_name},
    {"every_malformed_header_is_a_clear_error", "each bad header: right status, file and tensor named",
     every_malformed_header_is_a_clear_error},
    {"short_and_empty_files_are_clear_errors", "0 bytes, < 8 bytes, header past the end or over the cap",
     short_and_empty_files_are_clear_errors},
    {"empty_tensors_and_empty_files_are_legal", "0-byte tensors and a header with no tensors open",
     empty_tensors_and_empty_files_are_legal},
    {"every_truncation_of_a_valid_file_fails_cleanly", "cut at each length 0..size-1, every open fails",
     every_truncation_of_a_valid_file_fails_cleanly},
    {"sharded_set_finds_tensors_in_every_shard", "index.json + two shards open as one set",
     sharded_set_finds_tensors_in_every_shard},
    {"index_problems_are_clear_errors", "bad weight_map, missing shard, tensor missing from its shard",
     index_problems_are_clear_errors},
    {"a_tensor_in_two_shards_is_an_error", "duplicate names across files, with and without an index",
     a_tensor_in_two_shards_is_an_error},
    {"directory_without_index_uses_model_safetensors_then_any_file", "st_open_dir fallback order",
     directory_without_index_uses_model_safetensors_then_any_file},
    {"open_and_write_survive_every_allocation_failure", "fail the Nth allocation: NX_ENOMEM, no leak",
     open_and_write_survive_every_allocation_failure},
};

NX_TEST_MAIN(tests)
