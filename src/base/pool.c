/* pool.c — persistent worker threads for row-range kernels (see pool.h).
 *
 * Dispatch: the caller publishes a job and bumps `generation` under the mutex;
 * workers wait on `wake` for a new generation, run their range, and the last
 * one to finish signals `done`. A decode step issues a few hundred jobs, so
 * each worker spins briefly on the generation counter before sleeping: that
 * turns most hand-offs into a cache-line read instead of a futex wake-up.
 *
 * Split: every thread, the caller included, claims ranges from a shared
 * counter until none is left (guided scheduling: a claim takes 1 / (2 *
 * threads) of what is left, rounded down to a multiple of `grain` but at
 * least `grain`; only the range that ends at n may be shorter). The first claims are large,
 * contiguous runs; the last, small ones even out whatever holds one thread
 * back -- a late wake-up, a core that the machine's other load slows down.
 * With a fixed split in halves the caller of a 2-thread decode step waited
 * for its worker in ~8% of the step's perf samples. */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"

#define POOL_MAX_THREADS 256
#define POOL_SPIN_ITERS 2000    /* a few microseconds of spinning before sleeping */

typedef struct {
    nx_pool *pool;
    int tid;
    pthread_t thread;
} pool_worker;

struct nx_pool {
    int n_threads;                /* including the caller                      */
    pool_worker *workers;         /* n_threads - 1 entries                     */
    pthread_mutex_t mu;
    pthread_mutex_t run_lock;     /* one multi-part job at a time (see pool.h)  */
    pthread_cond_t wake, done;
    atomic_uint_fast64_t generation;
    atomic_int pending;           /* workers still running the current job    */
    atomic_int stop;
    /* the current job */
    nx_range_fn fn;
    void *ctx;
    int64_t n, grain;
    int parts;                    /* sizes the claims (every thread may claim) */
    atomic_int_fast64_t next;     /* first index not yet claimed               */
};

/* Claims the next range [*i0, *i1) of the current job; 0 when all of it is
 * claimed. */
static int pool_claim(nx_pool *p, int64_t *i0, int64_t *i1) {
    int_fast64_t a = atomic_load(&p->next);
    for (;;) {
        if (a >= p->n) return 0;
        /* a multiple of the grain, so that claims start on grain boundaries
         * (callers pick grains that keep their tiles and cache lines whole) */
        int64_t left = p->n - a, size = left / (2 * p->parts) / p->grain * p->grain;
        if (size < p->grain) size = p->grain;
        if (size > left) size = left;
        if (atomic_compare_exchange_weak(&p->next, &a, a + size)) {
            *i0 = a, *i1 = a + size;
            return 1;
        }
    }
}

/* Runs claimed ranges of the current job on thread tid until none is left. */
static void pool_work(nx_pool *p, int tid) {
    int64_t i0, i1;
    while (pool_claim(p, &i0, &i1)) p->fn(p->ctx, i0, i1, tid);
}

static void *pool_main(void *arg) {
    pool_worker *w = arg;
    nx_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load(&p->generation);
        for (int spin = 0; g == seen && spin < POOL_SPIN_ITERS; spin++) {
            __builtin_ia32_pause();
            g = atomic_load(&p->generation);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        pool_work(p, w->tid);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* An integer read from a sysfs file, or -1. */
static long read_sys_long(const char *fmt, int cpu) {
    char path[128];
    snprintf(path, sizeof path, fmt, cpu);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* Physical cores of the online CPUs: distinct (package, core) pairs in
 * Linux sysfs; the online CPU count where that cannot be read. Decode is
 * bound by memory bandwidth, and a second hyperthread on a core adds no
 * bandwidth, only contention for the core's caches and its FMA units. */
static int physical_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    if (online <= 0) return 1;
    enum { MAX_CPUS = 1024 };
    static const char *const base = "/sys/devices/system/cpu/cpu%d/";
    int seen[MAX_CPUS][2];
    int n_seen = 0;
    char fmt[160];
    for (int cpu = 0; cpu < conf && cpu < MAX_CPUS; cpu++) {
        snprintf(fmt, sizeof fmt, "%sonline", base);
        if (cpu > 0 && read_sys_long(fmt, cpu) == 0) continue;       /* offline (cpu0 has no file) */
        snprintf(fmt, sizeof fmt, "%stopology/physical_package_id", base);
        long pkg = read_sys_long(fmt, cpu);
        snprintf(fmt, sizeof fmt, "%stopology/core_id", base);
        long core = read_sys_long(fmt, cpu);
        if (pkg < 0 || core < 0) return (int)online;
        int dup = 0;
        for (int i = 0; i < n_seen && !dup; i++) dup = seen[i][0] == (int)pkg && seen[i][1] == (int)core;
        if (!dup) seen[n_seen][0] = (int)pkg, seen[n_seen][1] = (int)core, n_seen++;
    }
    int n = n_seen > 0 && n_seen <= online ? n_seen : (int)online;
    /* no more than the CPUs this process may run on (taskset, cpusets) */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n) n = CPU_COUNT(&set);
    return n < POOL_MAX_THREADS ? n : POOL_MAX_THREADS;
}

nx_status nx_pool_new(int n_threads, nx_pool **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_threads <= 0) n_threads = physical_cores();
    if (n_threads > POOL_MAX_THREADS)
        return nx_fail(err, errlen, NX_EINVAL, "thread count %d is more than %d", n_threads, POOL_MAX_THREADS);
    nx_pool *p = nx_calloc(1, sizeof *p);
    if (!p) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->workers = nx_calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) { nx_pool_free(p); return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the thread pool"); }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].tid = i + 1;
            if (pthread_create(&p->workers[i].thread, NULL, pool_main, &p->workers[i]) != 0) {
                p->n_threads = i + 1; /* only join the ones that started */
                nx_pool_free(p);
                return nx_fail(err, errlen, NX_ENOMEM, "cannot start worker thread %d", i + 1);
            }
        }
    }
    *out = p;
    return NX_OK;
}

void nx_pool_free(nx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1 && p->workers; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    nx_free(p->workers);
    nx_free(p);
}

int nx_pool_size(const nx_pool *p) { return p ? p->n_threads : 1; }

void nx_pool_run(nx_pool *p, nx_range_fn fn, void *ctx, int64_t n, int64_t grain) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t parts = p ? p->n_threads : 1;
    if (parts > (n + grain - 1) / grain) parts = (n + grain - 1) / grain;
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* A model (and its pool) may be shared by threads that each decode their
     * own sequence: their jobs take turns. */
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->parts = (int)parts;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    pool_work(p, 0);

    for (int spin = 0; atomic_load(&p->pending) > 0 && spin < POOL_SPIN_ITERS; spin++) __builtin_ia32_pause();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->run_lock);
}
