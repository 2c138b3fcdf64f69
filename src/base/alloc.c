/* alloc.c — checked allocation with a no-allocation guard (see alloc.h). */
#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local int guard_depth;
static _Thread_local long fail_countdown = -1;

static int alloc_allowed(void) {
    if (guard_depth > 0) {
        /* An invariant failure, not user input: hot paths must not allocate. */
        fprintf(stderr, "nextn: allocation inside a no-allocation phase (decode/verify)\n");
        abort();
    }
    if (fail_countdown == 0) return 0;
    if (fail_countdown > 0) fail_countdown--;
    return 1;
}

void *nx_alloc(size_t n) { return alloc_allowed() ? malloc(n ? n : 1) : NULL; }

void *nx_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    return alloc_allowed() ? calloc(count ? count : 1, size ? size : 1) : NULL;
}

void *nx_realloc(void *p, size_t n) { return alloc_allowed() ? realloc(p, n ? n : 1) : NULL; }

void nx_free(void *p) { free(p); }

char *nx_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = nx_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Blocks from this size up are 2 MB-aligned whole 2 MB pages and ask for
 * them (transparent huge pages, where the kernel offers them for madvise'd
 * ranges) before the first touch. Why: on the 2-core VM the tests and
 * benchmarks run on, a first touch of a 4 KB page cost about 10 us (0.32 s
 * to fault in the 121 MB of a packed 4-bit LM head), of a 2 MB page far
 * less per byte; and a verify's pass over 36 MB of recurrent states in 4 KB
 * pages missed the TLB (model/state.c). */
#define HUGE_ADVICE_BYTES ((size_t)8 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), e = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);   /* advice only: refused is fine */
#else
    (void)p, (void)n;
#endif
}

void *nx_alloc_big(size_t n) {
    if (!alloc_allowed()) return NULL;
    size_t rounded = nx_round64(n);
    if (rounded < n) return NULL;
    if (rounded < HUGE_ADVICE_BYTES) return aligned_alloc(64, rounded ? rounded : 64);
    /* 2 MB-aligned and whole 2 MB pages, all of it advised: with 64-byte
     * alignment the first and last ~2 MB stayed in 4 KB pages (the first
     * layers' states of a session) */
    const size_t whole = (rounded + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    if (whole < rounded) return NULL;
    void *p = aligned_alloc(HUGE_PAGE, whole);
    if (p) advise_huge(p, whole);
    return p;
}

void *nx_alloc_aligned(size_t n) {
    /* memset rather than calloc semantics: we want the pages touched now, at
     * setup, not as first-touch faults during the first decode step. */
    void *p = nx_alloc_big(n);
    if (p) memset(p, 0, n ? nx_round64(n) : 64);
    return p;
}

void nx_free_aligned(void *p) { free(p); }

void nx_alloc_guard_begin(void) { guard_depth++; }
void nx_alloc_guard_end(void) { if (guard_depth > 0) guard_depth--; }
void nx_alloc_fail_after(long n) { fail_countdown = n; }
