/* safetensors.c — mmap-backed safetensors reader and a writer (see safetensors.h).
 *
 * A set owns one st_file per mapped file and one flat array of st_tensor
 * records in file order. Tensor names and metadata values are not copied: they
 * point into each file's parsed header (a jansson object kept until st_close),
 * which is never modified after parsing, so the strings stay put. Lookup by
 * name goes through an open-addressing hash over that array, built once when
 * the set is complete; building it is also where a name found in two shards
 * is caught.
 *
 * Nothing here trusts the file: every offset is checked against the mapping
 * before a pointer is formed, and every size product is overflow-checked. */
#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"

/* Real headers are well under 1 MiB (about 100 bytes per tensor); the cap only
 * stops a corrupt length from asking jansson for gigabytes. */
#define ST_MAX_HEADER_BYTES ((uint64_t)100 << 20)
#define ST_ALIGN 64          /* writer: the data region's start */
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

typedef struct {
    char *path;              /* as opened (dir/name for sets from a directory) */
    const char *base;        /* last path component, inside path               */
    void *map;               /* whole file, PROT_READ                          */
    size_t size;
    const uint8_t *data;     /* start of the data region: map + 8 + N          */
    size_t data_size;
    json_t *header;          /* owns every name and metadata string we hand out */
    json_t *meta;            /* borrowed from header; NULL when absent          */
} st_file;

struct st_set {
    st_file *files;
    int n_files, cap_files;
    st_tensor *tensors;      /* file order: by file, then by data offset        */
    int n_tensors, cap_tensors;
    int *slots;              /* tensor index + 1; 0 marks an empty slot         */
    size_t n_slots;          /* power of two, at least twice n_tensors          */
};

/* ---- Small helpers -------------------------------------------------------- */

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a 64 */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = nx_alloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* "[2, 3]" into buf; used only for messages. */
static const char *shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static void file_release(st_file *f) {
    if (f->map) munmap(f->map, f->size);
    json_decref(f->header);
    nx_free(f->path);
}

void st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) file_release(&s->files[i]);
    nx_free(s->files);
    nx_free(s->tensors);
    nx_free(s->slots);
    nx_free(s);
}

void st_release(const st_set *s, const void *p, size_t n) {
    if (!s || !p || n == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, e = a + n;
    for (int i = 0; i < s->n_files; i++) {
        const uintptr_t m0 = (uintptr_t)s->files[i].map, m1 = m0 + s->files[i].size;
        const uintptr_t lo = (a > m0 ? a : m0) + page - 1, hi = e < m1 ? e : m1;
        const uintptr_t first = lo / page * page, last = hi / page * page;   /* whole pages only */
        if (last > first) (void)madvise((void *)first, last - first, MADV_DONTNEED);
    }
}

/* ---- Parsing one file ------------------------------------------------------
 *
 * Order of checks: the raw length fields, then JSON syntax, then each entry on
 * its own (dtype, shape, offsets, size agreement), then the entries against
 * each other (overlap). Each message starts with the file path. */

/* Reads a non-negative JSON integer; 0 on success. */
static int get_count(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (int64_t)x;
    return 0;
}

static nx_status parse_entry(const st_file *f, const char *name, json_t *v, st_tensor *t,
                             char *err, size_t errlen) {
    char sbuf[160];
    if (!json_is_object(v))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': entry is not an object", f->path, name);

    json_t *jd = json_object_get(v, "dtype");
    if (!jd) return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': missing dtype", f->path, name);
    if (!json_is_string(jd))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': dtype is not a string", f->path, name);
    if (nx_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': unknown dtype '%s'", f->path, name,
                       json_string_value(jd));

    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': shape is missing or not an array",
                       f->path, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d supported)",
                       f->path, name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        if (get_count(json_array_get(js, i), &t->shape[i]) != 0)
            return nx_fail(err, errlen, NX_EFORMAT,
                           "%s: tensor '%s': shape[%zu] is not a non-negative integer", f->path, name, i);
        if (__builtin_mul_overflow(numel, t->shape[i], &numel))
            return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': shape %s overflows", f->path, name,
                           shape_str(t->shape, (int)i + 1, sbuf, sizeof sbuf));
    }
    t->numel = numel;
    int64_t need;
    if (__builtin_mul_overflow(numel, (int64_t)nx_dtype_size(t->dtype), &need))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': shape %s x %s overflows", f->path, name,
                       shape_str(t->shape, t->ndim, sbuf, sizeof sbuf), nx_dtype_name(t->dtype));

    json_t *jo = json_object_get(v, "data_offsets");
    int64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || get_count(json_array_get(jo, 0), &b) != 0 ||
        get_count(json_array_get(jo, 1), &e) != 0)
        return nx_fail(err, errlen, NX_EFORMAT,
                       "%s: tensor '%s': data_offsets must be [begin, end] of non-negative integers",
                       f->path, name);
    if (b > e)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin",
                       f->path, name, (long long)b, (long long)e);
    if ((uint64_t)e > f->data_size)
        return nx_fail(err, errlen, NX_EFORMAT,
                       "%s: tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%zu bytes)",
                       f->path, name, (long long)b, (long long)e, f->data_size);
    if (e - b != need)
        return nx_fail(err, errlen, NX_EFORMAT,
                       "%s: tensor '%s': data_offsets [%lld, %lld] but shape %s x %s needs %lld bytes", f->path,
                       name, (long long)b, (long long)e, shape_str(t->shape, t->ndim, sbuf, sizeof sbuf),
                       nx_dtype_name(t->dtype), (long long)need);
    t->name = name;
    t->file = f->path;
    t->data = f->data + b;   /* b <= e <= data_size: inside the mapping */
    t->nbytes = (size_t)need;
    return NX_OK;
}

static nx_status parse_meta(st_file *f, json_t *m, char *err, size_t errlen) {
    if (!json_is_object(m))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: __metadata__ is not an object", f->path);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return nx_fail(err, errlen, NX_EFORMAT, "%s: __metadata__ value of '%s' is not a string", f->path, k);
    }
    f->meta = m;
    return NX_OK;
}

/* Physical order; empty tensors sort before a non-empty one at the same offset
 * and ties fall back to the name, so the order never depends on qsort. */
static int cmp_offset(const void *pa, const void *pb) {
    const st_tensor *a = pa, *b = pb;
    if (a->data != b->data) return (const uint8_t *)a->data < (const uint8_t *)b->data ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

static nx_status grow_tensors(st_set *s, size_t more, const char *path, char *err, size_t errlen) {
    size_t need = (size_t)s->n_tensors + more;
    if (need <= (size_t)s->cap_tensors) return NX_OK;
    if (need > (size_t)INT32_MAX / 2)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: too many tensors", path);
    size_t cap = s->cap_tensors ? (size_t)s->cap_tensors : 64;
    while (cap < need) cap *= 2;
    st_tensor *t = nx_realloc(s->tensors, cap * sizeof *t);
    if (!t) return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory for %zu tensors", path, cap);
    s->tensors = t;
    s->cap_tensors = (int)cap;
    return NX_OK;
}

/* Maps `path` (ownership of the string passes to the set, even on failure),
 * validates its header and appends its tensors to s in offset order. */
static nx_status set_add_file(st_set *s, char *path, char *err, size_t errlen) {
    if (s->n_files == s->cap_files) {
        int cap = s->cap_files ? s->cap_files * 2 : 4;
        st_file *nf = nx_realloc(s->files, (size_t)cap * sizeof *nf);
        if (!nf) { nx_free(path); return nx_fail(err, errlen, NX_ENOMEM, "out of memory opening safetensors"); }
        s->files = nf;
        s->cap_files = cap;
    }
    st_file *f = &s->files[s->n_files++];
    memset(f, 0, sizeof *f);
    f->path = path;
    const char *slash = strrchr(path, '/');
    f->base = slash ? slash + 1 : path;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nx_fail(err, errlen, NX_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return nx_fail(err, errlen, NX_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return nx_fail(err, errlen, NX_EFORMAT, "%s: file is empty", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: file too large to map", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);   /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return nx_fail(err, errlen, NX_EIO, "%s: cannot mmap: %s", path, strerror(map_errno));
    f->map = map;
    f->size = (size_t)sb.st_size;

    if (f->size < 8)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length",
                       path, f->size);
    const uint8_t *p = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];   /* little-endian */
    if (n > f->size - 8)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: header length %llu exceeds the file size %zu", path,
                       (unsigned long long)n, f->size);
    if (n > ST_MAX_HEADER_BYTES)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: header length %llu exceeds the %llu MiB limit", path,
                       (unsigned long long)n, (unsigned long long)(ST_MAX_HEADER_BYTES >> 20));
    f->data = p + 8 + n;
    f->data_size = f->size - 8 - (size_t)n;

    json_error_t jerr;
    f->header = json_loadb((const char *)p + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: header is not valid JSON: %s (byte %d)", path, jerr.text,
                       jerr.position);
    if (!json_is_object(f->header))
        return nx_fail(err, errlen, NX_EFORMAT, "%s: header is not a JSON object", path);

    nx_status st = grow_tensors(s, json_object_size(f->header), path, err, errlen);
    if (st != NX_OK) return st;
    int first = s->n_tensors;
    const char *key;
    json_t *v;
    json_object_foreach(f->header, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((st = parse_meta(f, v, err, errlen)) != NX_OK) return st;
            continue;
        }
        st_tensor *t = &s->tensors[s->n_tensors];
        memset(t, 0, sizeof *t);
        if ((st = parse_entry(f, key, v, t, err, errlen)) != NX_OK) return st;
        s->n_tensors++;
    }

    /* Overlap: after sorting by offset, a non-empty tensor overlaps an earlier
     * one exactly when it starts before the furthest end seen so far. */
    if (s->n_tensors == first) return NX_OK;   /* tensors may still be NULL */
    st_tensor *ft = s->tensors + first;
    int nt = s->n_tensors - first;
    qsort(ft, (size_t)nt, sizeof *ft, cmp_offset);
    const st_tensor *far = NULL;
    for (int i = 0; i < nt; i++) {
        if (ft[i].nbytes == 0) continue;
        if (far && (const uint8_t *)ft[i].data < (const uint8_t *)far->data + far->nbytes) {
            size_t b0 = (size_t)((const uint8_t *)far->data - f->data);
            size_t b1 = (size_t)((const uint8_t *)ft[i].data - f->data);
            return nx_fail(err, errlen, NX_EFORMAT, "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap",
                           path, far->name, b0, b0 + far->nbytes, ft[i].name, b1, b1 + ft[i].nbytes);
        }
        if (!far || (const uint8_t *)ft[i].data + ft[i].nbytes > (const uint8_t *)far->data + far->nbytes)
            far = &ft[i];
    }
    return NX_OK;
}

/* Builds the name hash; a name seen twice (necessarily in two files, since
 * one header cannot repeat a key) is an error naming both files. */
static nx_status set_index(st_set *s, char *err, size_t errlen) {
    size_t n = 16;
    while (n < 2 * (size_t)s->n_tensors) n *= 2;
    s->slots = nx_calloc(n, sizeof *s->slots);
    if (!s->slots) return nx_fail(err, errlen, NX_ENOMEM, "out of memory indexing %d tensors", s->n_tensors);
    s->n_slots = n;
    for (int i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        size_t h = (size_t)hash_name(t->name) & (n - 1);
        while (s->slots[h]) {
            const st_tensor *o = &s->tensors[s->slots[h] - 1];
            if (strcmp(o->name, t->name) == 0)
                return nx_fail(err, errlen, NX_EFORMAT, "tensor '%s' appears in both %s and %s", t->name, o->file,
                               t->file);
            h = (h + 1) & (n - 1);
        }
        s->slots[h] = i + 1;
    }
    return NX_OK;
}

static nx_status set_new(st_set **out, char *err, size_t errlen) {
    *out = nx_calloc(1, sizeof **out);
    return *out ? NX_OK : nx_fail(err, errlen, NX_ENOMEM, "out of memory opening safetensors");
}

nx_status st_open_file(const char *path, st_set **out, char *err, size_t errlen) {
    if (!out) return nx_fail(err, errlen, NX_EINVAL, "st_open_file: out is NULL");
    *out = NULL;
    if (!path) return nx_fail(err, errlen, NX_EINVAL, "st_open_file: path is NULL");
    st_set *s;
    nx_status st = set_new(&s, err, errlen);
    if (st != NX_OK) return st;
    char *p = nx_strdup(path);
    if (!p) st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", path);
    if (st == NX_OK) st = set_add_file(s, p, err, errlen);
    if (st == NX_OK) st = set_index(s, err, errlen);
    if (st != NX_OK) { st_close(s); return st; }
    *out = s;
    return NX_OK;
}

/* ---- Directories and sharded sets ---------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens every file named in an index's weight_map, then checks each mapping
 * against what the files actually hold. */
static nx_status open_index(st_set *s, const char *dir, const char *ipath, char *err, size_t errlen) {
    FILE *fp = fopen(ipath, "rb");
    if (!fp) return nx_fail(err, errlen, NX_EIO, "%s: cannot open: %s", ipath, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root) return nx_fail(err, errlen, NX_EFORMAT, "%s: not valid JSON: %s (line %d)", ipath, jerr.text, jerr.line);

    nx_status st = NX_OK;
    const char **names = NULL;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    size_t nmap = json_object_size(wm);
    if (!json_is_object(root)) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: not a JSON object", ipath);
    } else if (!json_is_object(wm)) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: weight_map is missing or not an object", ipath);
    } else if (nmap == 0) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: weight_map is empty", ipath);
    } else if (!(names = nx_calloc(nmap, sizeof *names))) {
        st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", ipath);
    }

    /* The distinct file names, sorted so the shard order is stable. A name
     * with a '/' could reach outside the checkpoint directory: rejected. */
    size_t nf = 0;
    const char *key;
    json_t *v;
    if (st == NX_OK) {
        json_object_foreach(wm, key, v) {
            const char *fn = json_string_value(v);
            if (!fn || !fn[0] || strchr(fn, '/') || strcmp(fn, ".") == 0 || strcmp(fn, "..") == 0) {
                st = nx_fail(err, errlen, NX_EFORMAT, "%s: weight_map entry for tensor '%s' is not a file name in %s",
                             ipath, key, dir);
                break;
            }
            names[nf++] = fn;
        }
    }
    if (st == NX_OK) {
        qsort(names, nf, sizeof *names, cmp_str);
        size_t u = 0;
        for (size_t i = 0; i < nf; i++)
            if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
        nf = u;
    }
    for (size_t i = 0; st == NX_OK && i < nf; i++) {
        char *p = path_join(dir, names[i]);
        if (!p) st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", ipath);
        else if ((st = set_add_file(s, p, err, errlen)) == NX_EIO) nx_err_prefix(err, errlen, "%s", ipath);
    }
    if (st == NX_OK) st = set_index(s, err, errlen);
    if (st == NX_OK) {
        json_object_foreach(wm, key, v) {
            const st_tensor *t = st_find(s, key);
            const char *fn = json_string_value(v), *have = NULL;
            for (int i = 0; t && i < s->n_files; i++)
                if (t->file == s->files[i].path) have = s->files[i].base;
            if (!t || strcmp(have, fn) != 0) {
                st = nx_fail(err, errlen, NX_EFORMAT, "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                             ipath, key, fn);
                break;
            }
        }
    }
    nx_free(names);
    json_decref(root);
    return st;
}

/* The fallback: every *.safetensors in dir, by name (strcmp, not locale). */
static nx_status open_glob(st_set *s, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return nx_fail(err, errlen, NX_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    nx_status st = NX_OK;
    const char *ext = ".safetensors";
    size_t le = strlen(ext);
    struct dirent *de;
    while (st == NX_OK && (de = readdir(d)) != NULL) {
        size_t ln = strlen(de->d_name);
        if (ln <= le || strcmp(de->d_name + ln - le, ext) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = nx_realloc(names, cap * sizeof *nn);
            if (!nn) { st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", dir); break; }
            names = nn;
        }
        if (!(names[n] = nx_strdup(de->d_name))) st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", dir);
        else n++;
    }
    closedir(d);
    if (st == NX_OK && n == 0)
        st = nx_fail(err, errlen, NX_EIO, "%s: no %s, %s or *.safetensors file", dir, ST_INDEX_NAME, ST_SINGLE_NAME);
    if (st == NX_OK) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; st == NX_OK && i < n; i++) {
        char *p = path_join(dir, names[i]);
        st = p ? set_add_file(s, p, err, errlen) : nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", dir);
    }
    if (st == NX_OK) st = set_index(s, err, errlen);
    for (size_t i = 0; i < n; i++) nx_free(names[i]);
    nx_free(names);
    return st;
}

nx_status st_open_dir(const char *dir, st_set **out, char *err, size_t errlen) {
    if (!out) return nx_fail(err, errlen, NX_EINVAL, "st_open_dir: out is NULL");
    *out = NULL;
    if (!dir) return nx_fail(err, errlen, NX_EINVAL, "st_open_dir: dir is NULL");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return nx_fail(err, errlen, NX_EIO, "%s: not a directory", dir);
    st_set *s;
    nx_status st = set_new(&s, err, errlen);
    if (st != NX_OK) return st;
    char *ipath = path_join(dir, ST_INDEX_NAME);
    char *spath = path_join(dir, ST_SINGLE_NAME);
    if (!ipath || !spath) {
        st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", dir);
    } else if (access(ipath, F_OK) == 0) {
        st = open_index(s, dir, ipath, err, errlen);
    } else if (access(spath, F_OK) == 0) {
        st = set_add_file(s, spath, err, errlen);
        spath = NULL;   /* now owned by the set */
        if (st == NX_OK) st = set_index(s, err, errlen);
    } else {
        st = open_glob(s, dir, err, errlen);
    }
    nx_free(ipath);
    nx_free(spath);
    if (st != NX_OK) { st_close(s); return st; }
    *out = s;
    return NX_OK;
}

/* ---- Queries ---------------------------------------------------------------- */

const st_tensor *st_find(const st_set *s, const char *name) {
    if (!s || !name || !s->slots) return NULL;
    size_t m = s->n_slots - 1, h = (size_t)hash_name(name) & m;
    for (; s->slots[h]; h = (h + 1) & m) {
        const st_tensor *t = &s->tensors[s->slots[h] - 1];
        if (strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

int st_count(const st_set *s) { return s ? s->n_tensors : 0; }

const st_tensor *st_at(const st_set *s, int i) {
    return (s && i >= 0 && i < s->n_tensors) ? &s->tensors[i] : NULL;
}

int st_file_count(const st_set *s) { return s ? s->n_files : 0; }

const char *st_file_path(const st_set *s, int i) {
    return (s && i >= 0 && i < s->n_files) ? s->files[i].path : NULL;
}

const char *st_metadata(const st_set *s, const char *key) {
    if (!s || !key || s->n_files == 0) return NULL;
    const st_file *f = &s->files[0];
    for (int i = 0; s->n_tensors > 0 && i < s->n_files; i++)
        if (s->files[i].path == s->tensors[0].file) f = &s->files[i];
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

/* ---- Writer ------------------------------------------------------------------
 *
 * Tensors are kept as owned copies until st_writer_write lays them out. Name
 * uniqueness is checked by a linear scan: checkpoints have hundreds to a few
 * thousand tensors, so the quadratic cost stays far below the data copy. */

typedef struct {
    char *name;
    nx_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t nbytes;
} st_wtensor;

typedef struct {
    char *key, *value;
} st_wmeta;

struct st_writer {
    st_wtensor *t;
    int n, cap;
    st_wmeta *meta;
    int n_meta, cap_meta;
    size_t bytes;
};

nx_status st_writer_new(st_writer **out, char *err, size_t errlen) {
    if (!out) return nx_fail(err, errlen, NX_EINVAL, "st_writer_new: out is NULL");
    *out = nx_calloc(1, sizeof **out);
    return *out ? NX_OK : nx_fail(err, errlen, NX_ENOMEM, "out of memory creating a safetensors writer");
}

void st_writer_free(st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) { nx_free(w->t[i].name); nx_free(w->t[i].data); }
    for (int i = 0; i < w->n_meta; i++) { nx_free(w->meta[i].key); nx_free(w->meta[i].value); }
    nx_free(w->t);
    nx_free(w->meta);
    nx_free(w);
}

size_t st_writer_bytes(const st_writer *w) { return w ? w->bytes : 0; }

nx_status st_writer_meta(st_writer *w, const char *key, const char *value, char *err, size_t errlen) {
    if (!w || !key || !key[0] || !value)
        return nx_fail(err, errlen, NX_EINVAL, "st_writer_meta: empty key or NULL value");
    char *v = nx_strdup(value);
    if (!v) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for metadata '%s'", key);
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[i].key, key) == 0) {   /* a repeated key replaces the value */
            nx_free(w->meta[i].value);
            w->meta[i].value = v;
            return NX_OK;
        }
    char *k = nx_strdup(key);
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? w->cap_meta * 2 : 4;
        st_wmeta *m = k ? nx_realloc(w->meta, (size_t)cap * sizeof *m) : NULL;
        if (!m) { nx_free(k); k = NULL; }
        else { w->meta = m; w->cap_meta = cap; }
    }
    if (!k) { nx_free(v); return nx_fail(err, errlen, NX_ENOMEM, "out of memory for metadata '%s'", key); }
    w->meta[w->n_meta++] = (st_wmeta){k, v};
    return NX_OK;
}

nx_status st_writer_add(st_writer *w, const char *name, nx_dtype dtype, int ndim, const int64_t *shape,
                        const void *data, size_t nbytes, char *err, size_t errlen) {
    char sbuf[160];
    if (!w || !name || !name[0] || strcmp(name, "__metadata__") == 0)
        return nx_fail(err, errlen, NX_EINVAL, "st_writer_add: tensor name '%s' is not allowed",
                       name ? name : "(null)");
    if ((unsigned)dtype >= NX_DT_COUNT || ndim < 0 || ndim > ST_MAX_DIMS || (ndim > 0 && !shape))
        return nx_fail(err, errlen, NX_EINVAL, "tensor '%s': bad dtype or ndim %d", name, ndim);
    int64_t numel = 1, need;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(numel, shape[i], &numel))
            return nx_fail(err, errlen, NX_EINVAL, "tensor '%s': bad shape %s", name,
                           shape_str(shape, ndim, sbuf, sizeof sbuf));
    if (__builtin_mul_overflow(numel, (int64_t)nx_dtype_size(dtype), &need) || (uint64_t)need != nbytes)
        return nx_fail(err, errlen, NX_EINVAL, "tensor '%s': shape %s x %s does not match %zu bytes", name,
                       shape_str(shape, ndim, sbuf, sizeof sbuf), nx_dtype_name(dtype), nbytes);
    if (nbytes && !data) return nx_fail(err, errlen, NX_EINVAL, "tensor '%s': data is NULL", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return nx_fail(err, errlen, NX_EINVAL, "tensor '%s' added twice", name);
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        st_wtensor *t = nx_realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return nx_fail(err, errlen, NX_ENOMEM, "out of memory adding tensor '%s'", name);
        w->t = t;
        w->cap = cap;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = nx_strdup(name);
    t->data = nx_alloc(nbytes);
    if (!t->name || !t->data) {
        nx_free(t->name);
        nx_free(t->data);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory copying tensor '%s' (%zu bytes)", name, nbytes);
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
    w->n++;
    w->bytes += nbytes;
    return NX_OK;
}

static size_t align_up(size_t x) { return (x + ST_ALIGN - 1) & ~(size_t)(ST_ALIGN - 1); }

/* The alignment a tensor keeps the next one's start at: the largest power
 * of two up to ST_ALIGN that divides its size (a multiple of its element
 * size). */
static size_t size_align(size_t nbytes) {
    size_t a = ST_ALIGN;
    while (nbytes % a) a /= 2;
    return a;
}

/* The order tensors are written in. Safetensors allows no gaps between them,
 * so they go by size_align, largest first, otherwise as added: with the data
 * region 64-aligned each one starts at a multiple of its own size_align -- a
 * weight matrix (a multiple of 64 bytes) on a cache line, every tensor on a
 * multiple of its element size, read in place. */
static int *write_order(const st_writer *w) {
    int *order = nx_alloc((size_t)(w->n ? w->n : 1) * sizeof *order), k = 0;
    for (size_t a = ST_ALIGN; order && a >= 1; a /= 2)
        for (int i = 0; i < w->n; i++)
            if (size_align(w->t[i].nbytes) == a) order[k++] = i;
    return order;
}

/* The header JSON: __metadata__ first, then tensors in `order`, back to
 * back. Returns a jansson-allocated string or NULL. */
static char *writer_header(const st_writer *w, const int *order, char *err, size_t errlen, nx_status *st) {
    json_t *root = json_object();
    json_t *meta = w->n_meta ? json_object() : NULL;
    int bad = !root || (w->n_meta && !meta);
    for (int i = 0; !bad && i < w->n_meta; i++)
        bad = json_object_set_new(meta, w->meta[i].key, json_string(w->meta[i].value)) != 0;
    if (!bad && meta) { bad = json_object_set_new(root, "__metadata__", meta) != 0; meta = NULL; }
    size_t off = 0;
    for (int i = 0; !bad && i < w->n; i++) {
        const st_wtensor *t = &w->t[order[i]];
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer(t->shape[d])) != 0) { json_decref(shape); shape = NULL; }
        /* "o" steals shape, also when json_pack fails */
        json_t *e = shape ? json_pack("{s:s, s:o, s:[I,I]}", "dtype", nx_dtype_name(t->dtype), "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes))
                          : NULL;
        int set_failed = e && json_object_set_new(root, t->name, e) != 0;  /* also decrefs e */
        if (!e || set_failed) {
            /* jansson refuses a key that is not valid UTF-8 */
            *st = set_failed ? nx_fail(err, errlen, NX_EINVAL, "tensor '%s': name is not valid UTF-8", t->name)
                             : nx_fail(err, errlen, NX_ENOMEM, "tensor '%s': out of memory encoding the header",
                                       t->name);
            json_decref(root);
            return NULL;
        }
        off += t->nbytes;
    }
    json_decref(meta);
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) *st = nx_fail(err, errlen, bad ? NX_EINVAL : NX_ENOMEM, "cannot encode the safetensors header");
    return text;
}

nx_status st_writer_write(const st_writer *w, const char *path, char *err, size_t errlen) {
    if (!w || !path) return nx_fail(err, errlen, NX_EINVAL, "st_writer_write: NULL writer or path");
    nx_status st = NX_OK;
    int *order = write_order(w);
    if (!order) return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", path);
    char *text = writer_header(w, order, err, errlen, &st);
    if (!text) {
        nx_free(order);
        return st;
    }
    /* Pad with spaces (legal JSON whitespace) so 8 + N is a multiple of 64:
     * the data region starts 64-aligned in a mapping. */
    size_t tlen = strlen(text), hlen = align_up(8 + tlen) - 8;
    char *tmp = nx_alloc(strlen(path) + 5);
    if (!tmp) {
        free(text);
        nx_free(order);
        return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", path);
    }
    sprintf(tmp, "%s.tmp", path);

    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        st = nx_fail(err, errlen, NX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        free(text);
        nx_free(tmp);
        nx_free(order);
        return st;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(text, 1, tlen, fp) == tlen;
    for (size_t i = tlen; ok && i < hlen; i++) ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < w->n; i++) {
        const st_wtensor *t = &w->t[order[i]];
        ok = fwrite(t->data, 1, t->nbytes, fp) == t->nbytes;
    }
    int werr = ok ? 0 : errno;
    /* No fsync: the rename protects readers from a failed or interrupted
     * writer, which is what fixtures and conversions need; durability across a
     * power cut would cost a full flush of gigabytes. */
    if (fclose(fp) != 0 && ok) { ok = 0; werr = errno; }
    if (ok && rename(tmp, path) != 0) { ok = 0; werr = errno; }
    if (!ok) {
        unlink(tmp);
        st = nx_fail(err, errlen, NX_EIO, "%s: write failed: %s", path, strerror(werr));
    }
    free(text);   /* from json_dumps, i.e. jansson's malloc */
    nx_free(tmp);
    nx_free(order);
    return st;
}
