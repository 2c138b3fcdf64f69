/* alloc.h — the one allocator every module uses.
 *
 * nx_alloc / nx_calloc / nx_realloc return NULL on failure (callers report
 * NX_ENOMEM); nx_free(NULL) is a no-op. Two diagnostic switches exist for tests:
 *
 *  - the no-allocation guard: decode, draft and verify must run from buffers
 *    allocated at setup. Between nx_alloc_guard_begin() and _end() on a thread,
 *    any allocation on that thread is an invariant failure and aborts with a
 *    message. The tests run decode under the guard.
 *  - fail-after-N: nx_alloc_fail_after(n) makes the (n+1)-th allocation from now
 *    on (on this thread) return NULL, so loaders can be tested for clean
 *    failure paths. n < 0 turns it off.
 *
 * Both are thread-local, so they never affect other threads. */
#ifndef NX_BASE_ALLOC_H
#define NX_BASE_ALLOC_H

#include <stddef.h>

void *nx_alloc(size_t n);
void *nx_calloc(size_t count, size_t size);   /* overflow-checked */
void *nx_realloc(void *p, size_t n);
void  nx_free(void *p);
char *nx_strdup(const char *s);

/* n rounded up to a multiple of 64: where parts of one nx_alloc_aligned
 * block must each start on a cache line. */
static inline size_t nx_round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* 64-byte aligned (cache line / AVX) zeroed block; from 8 MB up 2 MB-aligned
 * and asking for 2 MB pages (transparent huge pages) for all of it. Free
 * with nx_free_aligned. */
void *nx_alloc_aligned(size_t n);
/* nx_alloc_aligned's block, not zeroed: for a large block the caller fills
 * at once (a checkpoint's bytes: 21 MB written into 4 KB pages spent most
 * of its 57 ms in page faults on the 2-core VM). Free with nx_free. */
void *nx_alloc_big(size_t n);
void  nx_free_aligned(void *p);

void nx_alloc_guard_begin(void);
void nx_alloc_guard_end(void);
void nx_alloc_fail_after(long n);

#endif
