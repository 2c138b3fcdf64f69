/* test_cache.c — the prefix cache on its own (src/engine/cache.h): the
 * longest prefix wins, RAM and disk budgets evict the least recently used,
 * the disk tier is re-indexed on start (its order of use too), other
 * namespaces are left alone and damaged files are misses. Blobs here are
 * plain bytes. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include "base/alloc.h"
#include "engine/cache.h"

static void *blob_of(size_t n, unsigned char fill) {
    unsigned char *b = nx_alloc(n);
    memset(b, fill, n);
    return b;
}

static int files_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".nxc") != NULL;
    if (d) closedir(d);
    return n;
}

static const int32_t seq[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

static void the_longest_prefix_wins(void) {
    pcache *c = NULL;
    CHECK(pcache_new(1 << 20, NULL, 0, 1, NULL, NULL, &c, NULL, 0) == NX_OK);
    pcache_put(c, seq, 3, blob_of(100, 3), 100);
    pcache_put(c, seq, 6, blob_of(100, 6), 100);
    pcache_put(c, (const int32_t[]){5, 6, 99, 8, 9, 10, 11}, 7, blob_of(100, 7), 100); /* not a prefix */
    void *b;
    size_t len;
    CHECK(pcache_lookup(c, seq, 10, 2, &b, &len) == 6 && len == 100 && ((unsigned char *)b)[0] == 6);
    nx_free(b);
    CHECK(pcache_lookup(c, seq, 5, 2, &b, &len) == 3 && ((unsigned char *)b)[0] == 3); /* only 5 tokens given */
    nx_free(b);
    CHECK(pcache_lookup(c, seq, 10, 7, &b, &len) == 0 && b == NULL); /* min_len */
    CHECK(pcache_lookup(c, (const int32_t[]){1, 2, 3}, 3, 1, &b, &len) == 0);
    pcache_put(c, seq, 6, blob_of(50, 9), 50); /* the same key replaced */
    CHECK(pcache_lookup(c, seq, 10, 2, &b, &len) == 6 && len == 50 && ((unsigned char *)b)[0] == 9);
    nx_free(b);
    pcache_stats st = pcache_get_stats(c);
    CHECK(st.hits == 3 && st.misses == 2 && st.entries == 3 && st.ram_bytes == 250);
    /* a hit whose blob would not restore is dropped, and was a miss */
    CHECK(pcache_lookup(c, seq, 10, 2, &b, &len) == 6);
    nx_free(b);
    pcache_drop(c, seq, 6);
    st = pcache_get_stats(c);
    CHECK(!pcache_has(c, seq, 6) && st.hits == 3 && st.hit_tokens == 6 + 3 + 6 && st.misses == 3 && st.entries == 2);
    pcache_free(c);
}

static void budgets_evict_the_least_recently_used(void) {
    const char *dir = nx_test_tmpdir("pcache-unit");
    pcache *c = NULL;
    /* RAM holds 2 blobs of 1000, disk 3 files (each 1000 + header + key) */
    CHECK(pcache_new(2000, dir, 3 * 1100, 7, NULL, NULL, &c, NULL, 0) == NX_OK);
    for (int k = 1; k <= 3; k++) pcache_put(c, seq, k, blob_of(1000, (unsigned char)k), 1000);
    void *b;
    size_t len;
    CHECK(pcache_lookup(c, seq, 1, 1, &b, &len) == 1); /* entry 1 used: now the newest */
    nx_free(b);
    pcache_put(c, seq, 4, blob_of(1000, 4), 1000);       /* the disk holds 3: entry 2 goes */
    CHECK(files_in(dir) == 3);
    CHECK(!pcache_has(c, seq, 2) && pcache_has(c, seq, 1) && pcache_has(c, seq, 3) && pcache_has(c, seq, 4));
    pcache_stats st = pcache_get_stats(c);
    CHECKF(st.ram_bytes <= 2000 && st.disk_bytes <= 3 * 1100, "ram %lld disk %lld", (long long)st.ram_bytes,
           (long long)st.disk_bytes);
    pcache_free(c);
    /* restart: the files are indexed again; another namespace sees none */
    CHECK(pcache_new(0, dir, 0, 8, NULL, NULL, &c, NULL, 0) == NX_OK);
    CHECK(pcache_lookup(c, seq, 10, 1, &b, &len) == 0);
    pcache_free(c);
    CHECK(pcache_new(0, dir, 0, 7, NULL, NULL, &c, NULL, 0) == NX_OK);
    CHECK(pcache_lookup(c, seq, 10, 1, &b, &len) == 4 && len == 1000 && ((unsigned char *)b)[999] == 4);
    nx_free(b);
    CHECK(files_in(dir) == 3);
    pcache_free(c);
    /* a smaller budget at start trims the directory */
    CHECK(pcache_new(0, dir, 1100, 7, NULL, NULL, &c, NULL, 0) == NX_OK);
    CHECK(files_in(dir) == 1);
    pcache_free(c);
}

static int logged;
static void count_log(void *ctx, const char *line) {
    logged += strstr(line, "damaged") || strstr(line, "truncated");
}

static void damaged_files_are_logged_misses(void) {
    const char *dir = nx_test_tmpdir("pcache-unit-bad");
    pcache *c = NULL;
    CHECK(pcache_new(0, dir, 0, 9, count_log, NULL, &c, NULL, 0) == NX_OK);
    pcache_put(c, seq, 4, blob_of(400, 1), 400);
    pcache_put(c, seq, 8, blob_of(400, 2), 400);
    pcache_free(c);
    /* flip a byte in the blob of every file */
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strstr(de->d_name, ".nxc")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t n;
        unsigned char *bytes = nx_test_read_file(path, &n);
        if (strstr(de->d_name, "-8.nxc")) {
            bytes[n - 10] ^= 1;
            nx_test_write_file(path, bytes, n);
        }
        free(bytes);
    }
    if (d) closedir(d);
    logged = 0;
    CHECK(pcache_new(0, dir, 0, 9, count_log, NULL, &c, NULL, 0) == NX_OK);
    void *b;
    size_t len;
    /* the 8-token entry fails its checksum: logged, deleted, the 4-token one serves */
    CHECK(pcache_lookup(c, seq, 10, 1, &b, &len) == 4 && ((unsigned char *)b)[0] == 1);
    nx_free(b);
    CHECK(logged == 1 && pcache_get_stats(c).bad_files == 1 && files_in(dir) == 1);
    pcache_free(c);
}

/* Files are stamped when used; tests wait between uses so that the stamps
 * (kernel ticks of a few ms) differ. */
static void tick(void) { usleep(20000); }

static int others_logged;
static void log_others(void *ctx, const char *line) { others_logged += strstr(line, "of other models") != NULL; }

static void the_order_of_use_survives_a_restart(void) {
    const char *dir = nx_test_tmpdir("pcache-unit-order");
    pcache *c = NULL;
    void *b;
    size_t len;
    CHECK(pcache_new(0, dir, 0, 11, NULL, NULL, &c, NULL, 0) == NX_OK);
    for (int k = 2; k <= 4; k++) pcache_put(c, seq, k, blob_of(1000, (unsigned char)k), 1000), tick();
    CHECK(pcache_lookup(c, seq, 2, 2, &b, &len) == 2); /* the oldest file, used last */
    nx_free(b);
    /* no RAM tier: nothing was evicted from it */
    CHECK(pcache_get_stats(c).evictions == 0 && pcache_get_stats(c).ram_entries == 0);
    pcache_free(c);
    /* a temp file a crash left (two hours old), one being written (new), and
     * a file of another namespace */
    char tmp[1400], young[1400];
    snprintf(tmp, sizeof tmp, "%s/%016llx-0000000000000001-3.nxc.tmp", dir, 11ull);
    snprintf(young, sizeof young, "%s/%016llx-0000000000000002-3.nxc.tmp", dir, 11ull);
    nx_test_write_file(tmp, "x", 1);
    nx_test_write_file(young, "x", 1);
    const struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    CHECK(utimensat(AT_FDCWD, tmp, old, 0) == 0);
    CHECK(pcache_new(0, dir, 0, 12, NULL, NULL, &c, NULL, 0) == NX_OK);
    pcache_put(c, seq, 5, blob_of(1000, 5), 1000);
    pcache_free(c);
    /* restart with room for one file: the one used last stays */
    others_logged = 0;
    CHECK(pcache_new(0, dir, 1100, 11, log_others, NULL, &c, NULL, 0) == NX_OK);
    CHECKF(pcache_has(c, seq, 2) && !pcache_has(c, seq, 3) && !pcache_has(c, seq, 4), "kept: 2 %d, 3 %d, 4 %d",
           pcache_has(c, seq, 2), pcache_has(c, seq, 3), pcache_has(c, seq, 4));
    pcache_stats st = pcache_get_stats(c);
    CHECK(st.disk_evictions == 2 && st.evictions == 0);
    CHECK(access(tmp, F_OK) != 0 && access(young, F_OK) == 0);   /* the crash's temp file went */
    remove(young);
    CHECK(others_logged == 1 && files_in(dir) == 2); /* the other namespace's file stays, named in the log */
    pcache_free(c);
}

/* A checkpoint larger than the whole RAM tier lives on disk only: it does
 * not push out the entries RAM holds, neither when written nor when read. */
static void a_blob_larger_than_ram_stays_on_disk(void) {
    const char *dir = nx_test_tmpdir("pcache-unit-big");
    pcache *c = NULL;
    void *b;
    size_t len;
    CHECK(pcache_new(2000, dir, 0, 13, NULL, NULL, &c, NULL, 0) == NX_OK);
    pcache_put(c, seq, 2, blob_of(900, 2), 900);
    pcache_put(c, seq, 3, blob_of(900, 3), 900);
    pcache_put(c, seq, 6, blob_of(5000, 6), 5000);
    pcache_stats st = pcache_get_stats(c);
    CHECKF(st.ram_entries == 2 && st.ram_bytes == 1800 && st.evictions == 0 && st.entries == 3,
           "ram %lld entries, %lld bytes, %lld evictions", (long long)st.ram_entries, (long long)st.ram_bytes,
           (long long)st.evictions);
    CHECK(pcache_lookup(c, seq, 10, 2, &b, &len) == 6 && len == 5000 && ((unsigned char *)b)[4999] == 6);
    nx_free(b);
    st = pcache_get_stats(c);
    CHECK(st.ram_entries == 2 && st.evictions == 0 && st.hits == 1);
    pcache_free(c);
    /* without a disk tier such a blob is not kept at all */
    CHECK(pcache_new(2000, NULL, 0, 13, NULL, NULL, &c, NULL, 0) == NX_OK);
    pcache_put(c, seq, 6, blob_of(5000, 6), 5000);
    CHECK(pcache_get_stats(c).entries == 0);
    pcache_free(c);
}

static int write_failures;
static void log_write_failure(void *ctx, const char *line) {
    (void)ctx;
    write_failures += strstr(line, "prefix cache: cannot write") != NULL;
}

/* A cache directory that cannot be made or is a file is refused at start.
 * One that goes away later costs the disk copies only: a blob that fits the
 * RAM tier is kept there, one larger is dropped, each failure logged. */
static void an_unusable_cache_directory_is_refused_or_logged(void) {
    char dir[1100], file[1200], err[512];
    snprintf(dir, sizeof dir, "%s", nx_test_tmpdir("pcache-unit-gone"));
    snprintf(file, sizeof file, "%s/a-file", dir);
    CHECK(nx_test_write_file(file, "x", 1) == 0);
    pcache *c = (pcache *)&err;
    CHECKF(pcache_new(2000, file, 0, 14, NULL, NULL, &c, err, sizeof err) == NX_EIO && !c && strstr(err, "a-file: not a directory"),
           "%s", err);
    snprintf(file, sizeof file, "%s/no/such/dir", dir);
    CHECKF(pcache_new(2000, file, 0, 14, NULL, NULL, &c, err, sizeof err) == NX_EIO && !c &&
               strstr(err, "no/such/dir: cannot create the cache directory"),
           "%s", err);
    snprintf(file, sizeof file, "%s/cache", dir);
    write_failures = 0;
    CHECK(pcache_new(2000, file, 0, 14, log_write_failure, NULL, &c, err, sizeof err) == NX_OK);
    CHECK(rmdir(file) == 0);
    pcache_put(c, seq, 3, blob_of(900, 3), 900);
    pcache_put(c, seq, 6, blob_of(5000, 6), 5000);
    pcache_stats st = pcache_get_stats(c);
    CHECKF(write_failures == 2 && st.entries == 1 && st.ram_entries == 1 && st.disk_bytes == 0,
           "%d failures logged, %lld entries, %lld in RAM, %lld bytes on disk", write_failures, (long long)st.entries,
           (long long)st.ram_entries, (long long)st.disk_bytes);
    void *b = NULL;
    size_t len = 0;
    CHECK(pcache_lookup(c, seq, 10, 2, &b, &len) == 3 && len == 900 && ((unsigned char *)b)[899] == 3);
    nx_free(b);
    pcache_free(c);
}

static const nx_test tests[] = {
    {"the_longest_prefix_wins", "entries that begin the prompt, the longest first; min_len; same key replaced",
     the_longest_prefix_wins},
    {"budgets_evict_the_least_recently_used", "RAM and disk budgets drop the least recently used; restart re-indexes",
     budgets_evict_the_least_recently_used},
    {"damaged_files_are_logged_misses", "a flipped byte: logged, deleted, and the next longest entry serves",
     damaged_files_are_logged_misses},
    {"the_order_of_use_survives_a_restart", "a smaller disk budget at start keeps the file used last; old crash temp files go",
     the_order_of_use_survives_a_restart},
    {"a_blob_larger_than_ram_stays_on_disk", "a checkpoint larger than the RAM tier evicts nothing from it",
     a_blob_larger_than_ram_stays_on_disk},
    {"an_unusable_cache_directory_is_refused_or_logged",
     "a file or an uncreatable path refused at start; a directory gone later: logged, RAM keeps what fits",
     an_unusable_cache_directory_is_refused_or_logged},
};

NX_TEST_MAIN(tests)
