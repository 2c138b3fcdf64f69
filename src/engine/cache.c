/* cache.c — the prefix cache (cache.h): a list of entries, each a token key
 * with a RAM blob and/or a disk file. Entry counts are small (a budget of a
 * few GB holds tens to hundreds of checkpoints), so a linear list with
 * hashes is enough; the sort in lookup is over those few lengths. */
#include "engine/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/str.h"

#define PC_MAGIC "NXPCACH1"
#define PC_MAX_TOKENS (1 << 26)   /* far above any context; bounds a forged count */

typedef struct {
    char magic[8];
    uint64_t ns;                  /* model + drafter identity                 */
    int32_t n;                    /* tokens in the key                        */
    uint32_t pad;
    uint64_t blob_bytes;
    uint64_t hash;                /* xxh64 of tokens + blob                   */
} pc_file_header;

typedef struct {
    int32_t *tokens;
    int n;
    uint64_t key;                 /* xxh64 of tokens[0..n)                    */
    void *blob;                   /* RAM tier copy, or NULL                   */
    size_t len;
    int on_disk;
    size_t file_bytes;
    uint64_t last_use;            /* LRU clock (a file's mtime in ns at start) */
} pc_entry;

struct pcache {
    size_t ram_budget;
    size_t disk_budget;           /* bytes of files; 0: no limit               */
    char *dir;
    uint64_t ns;
    pcache_log_fn log;
    void *log_ctx;
    pc_entry *e;
    int n, cap;
    uint64_t clock;
    pcache_stats st;
};

static uint64_t key_of(const int32_t *t, int n) { return XXH64(t, (size_t)n * sizeof *t, 0); }

static void file_path(const pcache *c, uint64_t key, int n, char *out, size_t cap) {
    snprintf(out, cap, "%s/%016llx-%016llx-%d.nxc", c->dir, (unsigned long long)c->ns, (unsigned long long)key, n);
}

static int find(const pcache *c, const int32_t *tokens, int n) {
    uint64_t key = key_of(tokens, n);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].n == n && c->e[i].key == key && memcmp(c->e[i].tokens, tokens, (size_t)n * sizeof *tokens) == 0) return i;
    return -1;
}

static void recount(pcache *c) {
    c->st.entries = c->n;
    c->st.ram_entries = c->st.ram_bytes = c->st.disk_bytes = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->e[i].blob) c->st.ram_entries++, c->st.ram_bytes += (int64_t)c->e[i].len;
        if (c->e[i].on_disk) c->st.disk_bytes += (int64_t)c->e[i].file_bytes;
    }
}

/* Room for one more entry: 0, or -1 when out of memory. */
static int grow(pcache *c) {
    if (c->n < c->cap) return 0;
    int cap = c->cap ? 2 * c->cap : 16;
    pc_entry *ne = nx_realloc(c->e, (size_t)cap * sizeof *ne);
    if (!ne) return -1;
    c->e = ne, c->cap = cap;
    return 0;
}

static void remove_at(pcache *c, int i) {
    nx_free(c->e[i].tokens);
    nx_free(c->e[i].blob);
    c->e[i] = c->e[--c->n];
}

/* ---- disk tier ----------------------------------------------------------- */

/* Reads and checks one file; fills the entry's key (tokens) and, with
 * want_blob, its blob. Returns 0, or -1 with why. */
static int read_file(const char *path, uint64_t ns, pc_entry *e, int want_blob, const char **why) {
    FILE *f = fopen(path, "rb");
    *why = "cannot be read";
    if (!f) return -1;
    pc_file_header h;
    int ok = fread(&h, sizeof h, 1, f) == 1;
    *why = "is not a nextn cache file";
    ok = ok && memcmp(h.magic, PC_MAGIC, 8) == 0 && h.ns == ns && h.n >= 1 && h.n <= PC_MAX_TOKENS &&
         h.blob_bytes < ((uint64_t)1 << 40);
    /* the size must add up: a truncated file is caught even when only the
     * key is read (the directory scan) */
    struct stat sb;
    if (ok && (fstat(fileno(f), &sb) != 0 ||
               (uint64_t)sb.st_size != sizeof h + (uint64_t)h.n * sizeof(int32_t) + h.blob_bytes))
        ok = 0, *why = "is truncated";
    if (ok) *why = "is truncated";
    int32_t *tokens = ok ? nx_alloc((size_t)h.n * sizeof *tokens) : NULL;
    void *blob = ok && want_blob ? nx_alloc(h.blob_bytes ? h.blob_bytes : 1) : NULL;
    ok = ok && tokens && (!want_blob || blob) && fread(tokens, (size_t)h.n * sizeof *tokens, 1, f) == 1;
    if (ok && want_blob) {
        ok = (h.blob_bytes == 0 || fread(blob, h.blob_bytes, 1, f) == 1) && fgetc(f) == EOF;
        if (!ok) *why = "is truncated";
        XXH64_state_t *x = ok ? XXH64_createState() : NULL;
        if (x) {
            XXH64_reset(x, 0);
            XXH64_update(x, tokens, (size_t)h.n * sizeof *tokens);
            XXH64_update(x, blob, h.blob_bytes);
            if (XXH64_digest(x) != h.hash) ok = 0, *why = "is damaged (checksum mismatch)";
            XXH64_freeState(x);
        } else ok = 0;
    }
    fclose(f);
    if (!ok) {
        nx_free(tokens);
        nx_free(blob);
        return -1;
    }
    e->tokens = tokens;
    e->n = h.n;
    e->key = key_of(tokens, h.n);
    e->blob = blob;
    e->len = h.blob_bytes;
    return 0;
}

static int write_file(pcache *c, const pc_entry *e) {
    char path[1200], tmp[1300];
    file_path(c, e->key, e->n, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    pc_file_header h = {{0}, c->ns, e->n, 0, e->len, 0};
    memcpy(h.magic, PC_MAGIC, 8);
    XXH64_state_t *x = XXH64_createState();
    if (!x) return -1;
    XXH64_reset(x, 0);
    XXH64_update(x, e->tokens, (size_t)e->n * sizeof *e->tokens);
    XXH64_update(x, e->blob, e->len);
    h.hash = XXH64_digest(x);
    XXH64_freeState(x);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(e->tokens, (size_t)e->n * sizeof *e->tokens, 1, f) == 1 &&
             (e->len == 0 || fwrite(e->blob, e->len, 1, f) == 1);
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int why = errno;   /* before remove() sets its own */
        remove(tmp);
        nx_logf(c->log, c->log_ctx, "prefix cache: cannot write %s (%s)", path, strerror(why));
        return -1;
    }
    return 0;
}

/* A use of a file: its modification time, so a restart finds the order. */
static void touch_file(const pcache *c, const pc_entry *e) {
    char path[1200];
    file_path(c, e->key, e->n, path, sizeof path);
    (void)utimensat(AT_FDCWD, path, NULL, 0);
}

/* Indexes the directory's files of this namespace (keys only), each used
 * last when it was modified; deletes the temp files a crash left. */
static void scan_dir(pcache *c) {
    DIR *d = opendir(c->dir);
    if (!d) return;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)c->ns);
    struct dirent *de;
    int64_t foreign = 0, n_foreign = 0;
    while ((de = readdir(d))) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
        struct stat sb;
        int ours = strncmp(de->d_name, prefix, strlen(prefix)) == 0;
        if (ours && nx_ends_with(de->d_name, ".nxc.tmp")) {   /* a crash's, unless young (see cache.h) */
            if (stat(path, &sb) == 0 && time(NULL) - sb.st_mtime > 3600) remove(path);
            continue;
        }
        if (!nx_ends_with(de->d_name, ".nxc")) continue;
        if (!ours) {
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) foreign += sb.st_size, n_foreign++;
            continue;
        }
        pc_entry e = {0};
        const char *why;
        if (read_file(path, c->ns, &e, 0, &why) != 0) {
            nx_logf(c->log, c->log_ctx, "prefix cache: %s %s; ignored and deleted", path, why);
            c->st.bad_files++;
            remove(path);
            continue;
        }
        if (grow(c) != 0) {
            nx_free(e.tokens);
            break;
        }
        e.on_disk = 1;
        if (stat(path, &sb) == 0) {
            e.file_bytes = (size_t)sb.st_size;
            e.last_use = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
        }
        if (e.last_use > c->clock) c->clock = e.last_use;   /* later uses count from the newest */
        c->e[c->n++] = e;
    }
    closedir(d);
    if (n_foreign)
        nx_logf(c->log, c->log_ctx,
                "prefix cache: %s also holds %lld files (%.1f MB) of other models or options, not counted toward its "
                "budget; delete them when no server uses them",
                c->dir, (long long)n_foreign, (double)foreign / (1 << 20));
}

/* Lets go of the least recently used copies in one tier -- RAM blobs
 * (disk = 0) or files (disk = 1) -- until the tier's budget holds (a disk
 * budget of 0 means none). An entry left with no copy goes entirely. */
static void evict_tier(pcache *c, int disk) {
    size_t budget = disk ? c->disk_budget : c->ram_budget;
    if (disk && (!c->dir || !budget)) return;
    for (;;) {
        size_t used = 0;
        int lru = -1;
        for (int i = 0; i < c->n; i++) {
            if (disk ? !c->e[i].on_disk : !c->e[i].blob) continue;
            used += disk ? c->e[i].file_bytes : c->e[i].len;
            if (lru < 0 || c->e[i].last_use < c->e[lru].last_use) lru = i;
        }
        if (used <= budget || lru < 0) break;
        pc_entry *e = &c->e[lru];
        if (disk) c->st.disk_evictions++;
        else c->st.evictions++;
        if (disk) {
            char path[1200];
            file_path(c, e->key, e->n, path, sizeof path);
            remove(path);
            e->on_disk = 0;
        } else {
            nx_free(e->blob);
            e->blob = NULL;
        }
        if (!e->blob && !e->on_disk) remove_at(c, lru);
    }
}

/* ---- the cache ------------------------------------------------------------ */

nx_status pcache_new(size_t ram_bytes, const char *dir, size_t disk_bytes, uint64_t ns, pcache_log_fn log, void *log_ctx,
                     pcache **out, char *err, size_t errlen) {
    *out = NULL;
    pcache *c = nx_calloc(1, sizeof *c);
    if (!c) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the prefix cache");
    c->ram_budget = ram_bytes;
    c->disk_budget = disk_bytes;
    c->ns = ns;
    c->log = log;
    c->log_ctx = log_ctx;
    if (dir) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            nx_free(c);
            return nx_fail(err, errlen, NX_EIO, "%s: cannot create the cache directory (%s)", dir, strerror(errno));
        }
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            nx_free(c);
            return nx_fail(err, errlen, NX_EIO, "%s: not a directory", dir);
        }
        if (!(c->dir = nx_strdup(dir))) {
            nx_free(c);
            return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the prefix cache");
        }
        scan_dir(c);
        evict_tier(c, 1); /* a smaller budget than last time */
    }
    recount(c);
    *out = c;
    return NX_OK;
}

void pcache_free(pcache *c) {
    if (!c) return;
    while (c->n) remove_at(c, c->n - 1);
    nx_free(c->e);
    nx_free(c->dir);
    nx_free(c);
}

void pcache_put(pcache *c, const int32_t *tokens, int n, void *blob, size_t len) {
    int fits_ram = c && len <= c->ram_budget;   /* else on disk only */
    if (!c || n < 1 || (!c->dir && !fits_ram)) {
        nx_free(blob);
        return;
    }
    int i = find(c, tokens, n);
    if (i >= 0) remove_at(c, i);
    pc_entry e = {0};
    if (grow(c) != 0 || !(e.tokens = nx_alloc((size_t)n * sizeof *tokens))) {
        nx_free(blob);
        return;
    }
    memcpy(e.tokens, tokens, (size_t)n * sizeof *tokens);
    e.n = n;
    e.key = key_of(tokens, n);
    e.blob = blob;
    e.len = len;
    e.last_use = ++c->clock;
    if (c->dir && write_file(c, &e) == 0) {
        e.on_disk = 1;
        e.file_bytes = sizeof(pc_file_header) + (size_t)n * sizeof *tokens + len;
    }
    if (!fits_ram) nx_free(e.blob), e.blob = NULL;
    if (!e.blob && !e.on_disk) { /* the write failed (logged) */
        nx_free(e.tokens);
        recount(c);
        return;
    }
    c->e[c->n++] = e;
    evict_tier(c, 0);
    evict_tier(c, 1);
    recount(c);
}

typedef struct {
    int n, idx;
} pc_cand;

static int by_len(const void *a, const void *b) {
    const pc_cand *x = a, *y = b;
    return (x->n > y->n) - (x->n < y->n);
}

int pcache_lookup(pcache *c, const int32_t *tokens, int n, int min_len, void **blob, size_t *len) {
    *blob = NULL;
    *len = 0;
    if (!c) return 0;
    pc_cand *cand = c->n ? nx_alloc((size_t)c->n * sizeof *cand) : NULL;
    int nc = 0;
    for (int i = 0; cand && i < c->n; i++)
        if (c->e[i].n >= min_len && c->e[i].n <= n) cand[nc++] = (pc_cand){c->e[i].n, i};
    if (nc > 1) qsort(cand, (size_t)nc, sizeof *cand, by_len);
    /* one streaming pass: the digest of tokens[0..L) for each candidate length */
    int best = -1;
    XXH64_state_t *x = nc ? XXH64_createState() : NULL;
    if (x) {
        XXH64_reset(x, 0);
        int at = 0;
        for (int k = 0; k < nc; k++) {
            pc_entry *e = &c->e[cand[k].idx];
            XXH64_update(x, tokens + at, (size_t)(e->n - at) * sizeof *tokens);
            at = e->n;
            if (XXH64_digest(x) == e->key && memcmp(e->tokens, tokens, (size_t)e->n * sizeof *tokens) == 0) best = cand[k].idx;
        }
        XXH64_freeState(x);
    }
    nx_free(cand);
    /* the best match; a disk entry that fails its checks is dropped and the
     * next best is tried */
    while (best >= 0) {
        pc_entry *e = &c->e[best];
        void *copy = NULL;   /* the caller's */
        if (!e->blob && e->on_disk) {
            char path[1200];
            file_path(c, e->key, e->n, path, sizeof path);
            pc_entry got = {0};
            const char *why;
            if (read_file(path, c->ns, &got, 1, &why) != 0 || got.n != e->n || memcmp(got.tokens, e->tokens, (size_t)e->n * sizeof *e->tokens)) {
                nx_logf(c->log, c->log_ctx, "prefix cache: %s %s; treated as a miss and deleted", path, got.tokens ? "holds other tokens" : why);
                nx_free(got.tokens), nx_free(got.blob);
                c->st.bad_files++;
                remove(path);
                int bn = e->n;
                remove_at(c, best);
                recount(c);
                /* look again for a shorter entry */
                int r = pcache_lookup(c, tokens, bn - 1 < n ? bn - 1 : n, min_len, blob, len);
                return r;
            }
            nx_free(got.tokens);
            e->len = got.len;
            if (got.len > c->ram_budget) copy = got.blob;   /* too big to keep in RAM */
            else e->blob = got.blob;
        }
        if (!copy && !(copy = nx_alloc(e->len ? e->len : 1))) break;
        if (e->blob) memcpy(copy, e->blob, e->len);
        e->last_use = ++c->clock;
        if (e->on_disk) touch_file(c, e);
        int matched = e->n;
        *blob = copy;
        *len = e->len;
        evict_tier(c, 0); /* a blob read back from disk counts against the budget (e may move) */
        recount(c);
        c->st.hits++;
        c->st.hit_tokens += matched;
        return matched;
    }
    c->st.misses++;
    return 0;
}

int pcache_has(const pcache *c, const int32_t *tokens, int n) { return c && find(c, tokens, n) >= 0; }

void pcache_drop(pcache *c, const int32_t *tokens, int n) {
    int i = c ? find(c, tokens, n) : -1;
    if (i < 0) return;
    if (c->st.hits > 0) c->st.hits--, c->st.hit_tokens -= n, c->st.misses++;
    if (c->e[i].on_disk) {
        char path[1200];
        file_path(c, c->e[i].key, c->e[i].n, path, sizeof path);
        remove(path);
    }
    remove_at(c, i);
    recount(c);
}

pcache_stats pcache_get_stats(const pcache *c) { return c->st; }
