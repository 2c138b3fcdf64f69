/* fuzz_safetensors.c — the safetensors reader (src/io/safetensors.h).
 *
 * Input: byte 0 picks how the rest is opened (mod 4):
 *   0  st_open_file on f.safetensors = the rest
 *   1  st_open_dir on a directory holding model.safetensors = the rest
 *   2  st_open_dir on a sharded set: the rest is split at "\n@@\n" into
 *      model.safetensors.index.json, s1.safetensors, s2.safetensors, ...
 *   3  st_open_dir with neither index nor model.safetensors: the parts become
 *      s1.safetensors, s2.safetensors, ... (the *.safetensors fallback)
 * At most 5 files are written.
 *
 * Checked, beyond what ASan and UBSan see (they do not see reads of mapped
 * file memory, which is why the bounds are checked by hand):
 *   - a failure leaves the set NULL, has a status the header documents and a
 *     message that names the file or directory;
 *   - on success every tensor lies inside the data region of its own file's
 *     mapping (found in /proc/self/maps) and equals the file's bytes there,
 *     before and after st_release; nbytes = numel x dtype size and numel is
 *     the product of the shape; st_find finds each tensor by name; a file's
 *     tensors come in offset order and the non-empty ones do not overlap;
 *     st_at is NULL outside [0, count). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/safetensors.h"

#define MAX_FILES 5

typedef struct {
    char path[PATH_MAX];
    const uint8_t *bytes;   /* the input's bytes for this file */
    size_t size;
} written_file;

static written_file g_files[MAX_FILES];
static int g_n_files;

/* Every name an input may create, removed before the next input. */
static const char *const k_names[] = {"f.safetensors",  "model.safetensors", "model.safetensors.index.json",
                                      "s1.safetensors", "s2.safetensors",    "s3.safetensors",
                                      "s4.safetensors", "s5.safetensors"};

static void add_file(const char *dir, const char *name, const uint8_t *p, size_t n) {
    written_file *f = &g_files[g_n_files++];
    fuzz_path(f->path, dir, name);
    f->bytes = p;
    f->size = n;
    fuzz_write_file(f->path, p, n);
}

/* Start address of the mapping of path at file offset 0, or 0. */
static uintptr_t map_start(const char *path) {
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) FUZZ_DIE("cannot read /proc/self/maps");
    char line[PATH_MAX + 128];
    uintptr_t best = 0;
    while (fgets(line, sizeof line, fp)) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *slash = strchr(line, '/');
        if (!slash || strcmp(slash, path) != 0) continue;
        unsigned long start, end, off;
        if (sscanf(line, "%lx-%lx %*s %lx", &start, &end, &off) == 3 && off == 0 && (!best || start < best))
            best = start;
    }
    fclose(fp);
    return best;
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)(*(const st_tensor *const *)a)->data, y = (uintptr_t)(*(const st_tensor *const *)b)->data;
    return x < y ? -1 : x > y;
}

static void check_file_tensors(const st_set *s, const written_file *f, const st_tensor **mine) {
    int n = st_count(s), k = 0;
    uintptr_t base = 0;
    uint64_t header = 0;   /* the file's header length: its first 8 bytes, little endian */
    for (int b = 7; b >= 0 && f->size >= 8; b--) header = header << 8 | f->bytes[b];
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_at(s, i);
        if (strcmp(t->file, f->path) != 0) continue;
        if (!base) base = map_start(f->path);
        CHECKF(base != 0, "%s holds tensors but is not mapped", f->path);
        CHECKF(t->dtype < NX_DT_COUNT && t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "tensor %s", t->name);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            CHECKF(t->shape[d] >= 0, "tensor %s: negative dimension", t->name);
            numel *= t->shape[d];
        }
        CHECKF(numel == t->numel && (uint64_t)numel * nx_dtype_size(t->dtype) == t->nbytes, "size of %s", t->name);
        uintptr_t p = (uintptr_t)t->data;
        CHECKF(p >= base + 8 + header && p <= base + f->size && t->nbytes <= base + f->size - p,
               "tensor %s [%p, +%zu) is outside the data region of %s (mapped at %p, %zu bytes, header %llu)",
               t->name, t->data, t->nbytes, f->path, (void *)base, f->size, (unsigned long long)header);
        CHECKF(t->nbytes == 0 || memcmp(t->data, f->bytes + (p - base), t->nbytes) == 0, "bytes of %s", t->name);
        CHECKF(st_find(s, t->name) == t, "st_find(%s)", t->name);
        if (k > 0) CHECKF((uintptr_t)mine[k - 1]->data <= p, "tensors of %s out of offset order", f->path);
        mine[k++] = t;
        /* a released range may be dropped from memory, but reads fault it back in */
        st_release(s, t->data, t->nbytes);
        CHECKF(t->nbytes == 0 || memcmp(t->data, f->bytes + (p - base), t->nbytes) == 0, "%s after st_release",
               t->name);
    }
    qsort(mine, (size_t)k, sizeof *mine, by_address);
    const st_tensor *prev = NULL;
    for (int i = 0; i < k; i++) {
        if (mine[i]->nbytes == 0) continue;
        if (prev)
            CHECKF((uintptr_t)prev->data + prev->nbytes <= (uintptr_t)mine[i]->data, "%s overlaps %s", prev->name,
                   mine[i]->name);
        prev = mine[i];
    }
}

static void check_set(const st_set *s) {
    int n = st_count(s);
    CHECK(n >= 0 && st_at(s, -1) == NULL && st_at(s, n) == NULL);
    for (int i = 0; i < st_file_count(s); i++) CHECK(st_file_path(s, i) != NULL);
    (void)st_metadata(s, "format");
    const st_tensor **mine = malloc(sizeof *mine * (size_t)(n ? n : 1));
    for (int i = 0; i < g_n_files; i++) check_file_tensors(s, &g_files[i], mine);
    free(mine);
    CHECK(st_find(s, "\x01no such tensor") == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *dir = fuzz_tmpdir("fuzz_safetensors");
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof k_names / sizeof *k_names; i++) unlink(fuzz_path(path, dir, k_names[i]));
    g_n_files = 0;
    int mode = data[0] % 4;
    const uint8_t *body = data + 1, *end = data + size;
    if (mode <= 1) {
        add_file(dir, mode == 0 ? "f.safetensors" : "model.safetensors", body, (size_t)(end - body));
    } else {
        for (int part = 0; part < MAX_FILES; part++) {
            const uint8_t *sep = memmem(body, (size_t)(end - body), "\n@@\n", 4);
            const uint8_t *stop = sep ? sep : end;
            char name[64];
            if (mode == 2 && part == 0) snprintf(name, sizeof name, "model.safetensors.index.json");
            else snprintf(name, sizeof name, "s%d.safetensors", mode == 2 ? part : part + 1);
            add_file(dir, name, body, (size_t)(stop - body));
            if (!sep) break;
            body = sep + 4;
        }
    }
    const char *who = mode == 0 ? g_files[0].path : dir;   /* what an error must name */
    st_set *s = (st_set *)1;                                 /* must become NULL on failure */
    char err[512] = "";
    nx_status st = mode == 0 ? st_open_file(who, &s, err, sizeof err) : st_open_dir(dir, &s, err, sizeof err);
    if (st != NX_OK) {
        CHECK(s == NULL);
        CHECKF(st == NX_EIO || st == NX_EFORMAT || st == NX_EUNSUPPORTED || st == NX_ENOMEM, "status %d", st);
        CHECK(err[0] != 0);
        CHECKF(st == NX_ENOMEM || strstr(err, who) != NULL, "the message does not name %s: %s", who, err);
        return 0;
    }
    CHECK(s != NULL);
    check_set(s);
    st_close(s);
    return 0;
}
