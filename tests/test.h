/* test.h — a tiny test harness shared by every test program.
 *
 * A test program defines a table of {name, description, fn} and calls
 * nx_test_main(). Test names read as sentences. `prog --list` prints the
 * table; `prog NAME` runs one test. Each test uses CHECK / CHECKF, which
 * record a failure (with file:line and a message) and keep going, so a run
 * shows every broken assertion. The program ends by printing
 * "N passed, N failed" and exits non-zero on any failure.
 *
 * NX_TEST_DATA (tests/data) and NX_BUILD_DIR are compile-time paths. */
#ifndef NX_TESTS_TEST_H
#define NX_TESTS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *desc;
    void (*fn)(void);
} nx_test;

extern int nx_test_failures;   /* failures in the current test */

#define CHECK(cond)                                                               \
    do {                                                                          \
        if (!(cond)) {                                                            \
            nx_test_failures++;                                                   \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                         \
    } while (0)

#define CHECKF(cond, ...)                                                         \
    do {                                                                          \
        if (!(cond)) {                                                            \
            nx_test_failures++;                                                   \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

/* Runs the table; returns the process exit code. */
int nx_test_main(int argc, char **argv, const nx_test *tests, int n);

#define NX_TEST_MAIN(table)                                                       \
    int main(int argc, char **argv) {                                             \
        return nx_test_main(argc, argv, table, (int)(sizeof table / sizeof table[0])); \
    }

/* Helpers shared by tests (tests/test.c). */
/* A fresh empty directory under the build tree: NX_BUILD_DIR/tmp/<name>.<pid>;
 * returns a static buffer. nx_test_main removes the process's directories when
 * every test it ran passed. */
const char *nx_test_tmpdir(const char *name);
/* Writes bytes to path; returns 0 on success. */
int nx_test_write_file(const char *path, const void *data, size_t n);
/* Reads a whole file (caller frees); NULL on error. */
void *nx_test_read_file(const char *path, size_t *n);
/* Runs a shell command, returns its exit status (0 = success). */
int nx_test_system(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs `nextn ARGS` (the CLI built with the tests) with its stdout and
 * stderr captured into dir/stdout and dir/stderr; returns its exit status. */
int nx_test_nextn(const char *dir, const char *args);
/* The text of dir/<which> (caller frees); "" if it is missing. */
char *nx_test_captured(const char *dir, const char *which);

/* Deterministic test inputs: xorshift64* (seed with any nonzero value). */
typedef struct { uint64_t s; } nx_test_rng;
uint64_t nx_test_rng_next(nx_test_rng *r);
/* A draw from N(0, sigma^2) by Box-Muller. */
float nx_test_rng_normal(nx_test_rng *r, float sigma);

/* Reads a 2-D (or 1-D, as [1, n]) little-endian float32 .npy file; caller
 * frees. NULL on any error. A 3-D file returns its first axis folded into rows. */
float *nx_test_read_npy(const char *path, long *rows, long *cols);
/* Reads token ids separated by commas and/or whitespace; caller frees. */
int *nx_test_read_ids(const char *path, int *n);

/* Shared fixtures for tests of the engine (failures are CHECK failures). */
#include "nextn.h"
/* Loads a checkpoint with n threads; NULL (and a failed CHECK) on error. */
nx_model *nx_test_model(const char *dir, int threads);
/* Loads the model's own MTP head (prenorm: feed the pre-norm hidden). */
nx_drafter *nx_test_drafter(nx_model *m, int prenorm);
/* A checkpoint written by nextn-fixture with these arguments into a fresh
 * temporary directory named after `name`; returns the directory (one of 8
 * rotating static buffers). */
const char *nx_test_fixture(const char *name, const char *args);
/* Logits of every row of seq[0..n) from a fresh state ([n][vocab], caller
 * frees); a failed CHECK on error. */
float *nx_test_logits(nx_model *m, const int32_t *seq, int n);
/* Generates up to n_gen tokens (the prefill's first included) with
 * nx_spec_step; d NULL: plain decoding. Stops after one of o->stop_ids.
 * Returns how many tokens were written to out; stats, if not NULL, gets the
 * session's statistics. Errors are failed CHECKs. */
int nx_test_generate(nx_model *m, nx_drafter *d, const nx_spec_opts *o, const int32_t *prompt, int n_prompt, int n_gen,
                     int32_t *out, nx_spec_stats *stats);
/* 1 if the logprob entries a[0..n) and b[0..n) hold the same values, bit
 * for bit (the top slots past n_top are not part of an entry). */
int nx_test_same_logprobs(const nx_token_logprob *a, const nx_token_logprob *b, int n);
/* n deterministic pseudo-random token ids below vocab. */
void nx_test_tokens(int32_t *t, int n, int vocab, unsigned seed);

/* max |a-b| and normalised MSE sum((a-b)^2) / sum(b^2) over n values. */
typedef struct { double max_abs, nmse; } nx_test_diff;
nx_test_diff nx_test_compare(const float *a, const float *ref, long n);
/* index of the largest value, ties to the lowest index */
long nx_test_argmax(const float *v, long n);

#endif
