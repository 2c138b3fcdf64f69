/* alloc.c — checked allocation with a no-allocation guard (see alloc.h). */
#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void *nx_alloc_aligned(size_t n) {
    if (!alloc_allowed()) return NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n) return NULL;
    /* memset rather than calloc semantics: we want the pages touched now, at
     * setup, not as first-touch faults during the first decode step. */
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

void nx_free_aligned(void *p) { free(p); }

void nx_alloc_guard_begin(void) { guard_depth++; }
void nx_alloc_guard_end(void) { if (guard_depth > 0) guard_depth--; }
void nx_alloc_fail_after(long n) { fail_countdown = n; }
