/* pool.h — a persistent pthread pool that splits index ranges.
 *
 * Created once (per model) and reused for every kernel call: no thread is
 * created per call. nx_pool_run(pool, fn, ctx, n) calls fn(ctx, i0, i1, tid)
 * on disjoint contiguous ranges that cover [0, n) and returns when all are
 * done. Each thread (the caller is thread 0) starts on its own contiguous
 * share and claims it front to back in halving pieces, and one that runs
 * out takes over the back half of another's, so one thread may be called
 * several times in a job -- one call at a time, so per-thread scratch
 * indexed by tid stays private. A worker that has not joined a job by the
 * time the caller, its own claims done, closes it sits the job out (its tid
 * is not called), and the job ends without waiting for it. Workers are
 * named "nx-pool-N" (Linux). The split
 * only decides which thread computes which index; kernels compute each index
 * the same way whatever the split, so results do not depend on the thread
 * count or on timing.
 * Calls must not be nested: fn must not call nx_pool_run on any pool (it
 * would wait on itself; the process stops with a message instead). Several
 * caller threads may share a pool: jobs of more than one part run one after
 * another, but a job of one part runs at once on its caller as tid 0, beside
 * another caller's job -- so scratch indexed by tid must belong to the
 * caller (its state), not to the pool or the model. */
#ifndef NX_BASE_POOL_H
#define NX_BASE_POOL_H

#include <pthread.h>
#include <stdint.h>
#include "nextn.h"

/* Bytes of stack every thread that runs kernels asks for: they keep row
 * scratch on it (kernels/fpq.c: up to 384 KB), and a platform's default
 * can be smaller than glibc's usual 8 MB. */
#define NX_THREAD_STACK ((size_t)8 << 20)

/* pthread_create with NX_THREAD_STACK of stack (the default where the
 * attribute cannot be set): for threads that run kernels or call
 * nx_pool_run (the caller is thread 0). 0 on success. */
int nx_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

typedef struct nx_pool nx_pool;
typedef void (*nx_range_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

/* n_threads <= 0: one per physical core (online CPUs where sysfs does not
 * tell cores apart). */
nx_status nx_pool_new(int n_threads, nx_pool **out, char *err, size_t errlen);
void nx_pool_free(nx_pool *p);
int nx_pool_size(const nx_pool *p);

/* Splits [0, n) into ranges of at least `grain` indices (grain >= 1; only
 * the range that ends at n may be shorter), each starting on a multiple of
 * `grain`, and runs them on the pool's threads. n <= 0 returns at once; n <=
 * grain runs on the caller alone. */
void nx_pool_run(nx_pool *p, nx_range_fn fn, void *ctx, int64_t n, int64_t grain);

#endif
