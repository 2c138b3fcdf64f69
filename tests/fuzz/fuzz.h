/* fuzz.h — what every fuzz harness in tests/fuzz shares.
 *
 * A harness is one file, fuzz_<target>.c, that defines
 * LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize when it loads something
 * once). It is built two ways (tests/CMakeLists.txt): with replay.c into a
 * program that runs the regression inputs of tests/data/fuzz/<target> as a
 * ctest, and, under NEXTN_FUZZ, as a libFuzzer binary (scripts/fuzz.sh).
 *
 * Checks here abort instead of counting, unlike tests/test.h: libFuzzer saves
 * an input only when the process dies, and a replay must stop at the input
 * that broke a promise. That is also why a harness includes this header and
 * not test.h (whose CHECK records and carries on).
 *
 * NX_TEST_DATA, NX_MODELS_DIR and NX_BUILD_DIR come from nx_testlib's compile
 * definitions; temporary files go under NX_BUILD_DIR/tmp. */
#ifndef NX_TESTS_FUZZ_H
#define NX_TESTS_FUZZ_H

#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A broken promise of the code under test: prints file:line and the
 * condition (CHECKF: and a message), then aborts. */
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#define CHECKF(cond, ...)                                                                     \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* A failure of the harness itself (no disk space, a missing fixture): not a
 * finding, but nothing sensible can follow, so it aborts too. */
#define FUZZ_DIE(...)                                                                         \
    do {                                                                                      \
        fprintf(stderr, "fuzz harness: " __VA_ARGS__);                                        \
        fputc('\n', stderr);                                                                  \
        abort();                                                                              \
    } while (0)

static inline int fuzz_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static char fuzz_tmp[PATH_MAX];

static inline void fuzz_tmp_remove(void) {
    if (fuzz_tmp[0]) nftw(fuzz_tmp, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* This process's scratch directory, NX_BUILD_DIR/tmp/<name>.<pid> (the pid
 * keeps parallel fuzzing jobs and ctest runs apart), made on the first call
 * and removed at a normal exit (a crash leaves it, with the files that
 * crashed). The path is resolved (realpath), as /proc/self/maps shows it. */
static inline const char *fuzz_tmpdir(const char *name) {
    if (fuzz_tmp[0]) return fuzz_tmp;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tmp", NX_BUILD_DIR);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tmp/%s.%d", NX_BUILD_DIR, name, (int)getpid());
    nftw(path, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);   /* a leftover of a dead process with this pid */
    if (mkdir(path, 0755) != 0 || !realpath(path, fuzz_tmp)) FUZZ_DIE("cannot make %s", path);
    atexit(fuzz_tmp_remove);
    return fuzz_tmp;
}

/* dir/name into a caller's buffer of PATH_MAX bytes; returns it. */
static inline char *fuzz_path(char *buf, const char *dir, const char *name) {
    if (snprintf(buf, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) FUZZ_DIE("path too long: %s/%s", dir, name);
    return buf;
}

/* Writes n bytes to path (replacing it); dies on error. */
static inline void fuzz_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) FUZZ_DIE("cannot write %s", path);
}

/* A whole file in an exact-size buffer (one byte more, a NUL, so text can be
 * used as a C string); *n its size. Caller frees. Dies if unreadable. */
static inline unsigned char *fuzz_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) FUZZ_DIE("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) != 0) FUZZ_DIE("cannot seek %s", path);
    long len = ftell(f);
    rewind(f);
    unsigned char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) FUZZ_DIE("cannot read %s", path);
    fclose(f);
    buf[len] = 0;
    *n = (size_t)len;
    return buf;
}

/* A private copy of the input with nothing after it (not even a NUL), so
 * ASan reports any read past the length the code under test was given. */
static inline char *fuzz_copy(const uint8_t *data, size_t size) {
    char *p = malloc(size ? size : 1);
    if (!p) FUZZ_DIE("out of memory");
    if (size) memcpy(p, data, size);
    return p;
}

#endif
