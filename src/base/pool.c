/* pool.c — persistent worker threads for row-range kernels (see pool.h).
 *
 * Dispatch: the caller publishes a job, opens its gate and bumps `generation`;
 * workers wait for a new generation, pass the gate, claim ranges, and the
 * last one out of a closed gate lets the caller go on. A decode step issues
 * a few hundred jobs, so each worker spins briefly on the generation counter
 * before it sleeps on `wake`, and the caller on the gate before it sleeps on
 * `done`: that turns most hand-offs into a cache-line read instead of a
 * futex wake-up.
 *
 * The mutex and the condition variables are touched only when a thread
 * sleeps or must be woken: `sleepers` and `caller_waits` say so, each read
 * after the store the sleeper checks (both sequentially consistent, so a
 * thread about to sleep either sees the store or is seen, and woken). The
 * job's fields, the runs and the gate are plain (relaxed) stores ahead of
 * the generation's. Before, every job took the mutex and broadcast, and
 * every field was a sequentially consistent store: each waited for its
 * cache line to come back from the worker's core (~100-200 ns on the VM):
 * the job was announced 0.6-0.8 us after the caller began it and seen by
 * the worker ~0.3 us later; now announced at once and seen 0.2-0.3 us later
 * (rdtsc stamps, 2 threads). Jobs of 16 claims of a busy loop, the two ways
 * in turn: 0.90x / 0.96x / 0.99x the time at ~0.2 / 0.7 / 2.8 us a claim;
 * whole q4 forwards, the two ways in turn per forward, 400 pairs: a step
 * 0.993x / 0.994x, a verify of 4 0.995x (bench/RESULTS.md).
 *
 * The gate: once every index is claimed the caller closes the job's gate and
 * waits only for the workers inside it. A worker that had not come in yet
 * -- asleep, or on a vCPU its host has descheduled -- finds the gate closed
 * (or tagged with a later job) and waits for the next one without touching
 * this one's fields; the caller has done its share by stealing. Before the
 * gate every job waited for every worker to check in: with one core shared
 * with a busy-loop process (taskset), the q4 fixture's plain decode ran
 * 16.1 -> 17.3 tok/s and MTP (K = 3) 27.4 -> 33.4 tok/s (medians of 6 and
 * 5 alternating runs); without the busy loop (steal 0-17%) level: new / old
 * paired medians of 12 plain and 14 MTP runs 1.03x and 1.02x.
 *
 * Split: a job's [0, n), in units of `grain`, starts as one contiguous run
 * per thread. A thread claims the front half of its own run until the run is
 * empty, so its ranges follow one another in memory: one stream for the
 * hardware prefetcher from its share's first row to its last. Then it steals
 * the back half of the largest run left to another thread, makes that its
 * own and goes on, until every run is empty; the last, small claims even out
 * whatever holds one thread back (a late wake-up, a core that the machine's
 * other load slows down). Only the range that ends at n may be shorter than
 * the grain.
 *
 * Why runs: with claims taken in turn from one shared counter (guided
 * scheduling) each thread's ranges jumped over the others', and every jump
 * restarted a stream. On the 2-core VM, every step matrix of the q4 fixture
 * through the model's products took 0.92-0.93x the time with runs at T = 1-4
 * (0.96x at T = 32), whole T = 1 / T = 3 forwards 0.93x (q4) and 0.96x (q8),
 * MTP rounds 0.92x / 0.96-0.98x (one process, both schemes alternating).
 * (Before the guided counter the split was fixed halves, and the caller of a
 * 2-thread decode step waited for its worker in ~8% of the step's samples.) */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"

#define POOL_MAX_THREADS 256
/* Pauses (~23 ns each on the avx512vnni VM) a worker spins on the
 * generation counter before it sleeps, and the caller on the gate before it
 * sleeps until the workers inside are done: long while the process has the
 * cores to itself (a sleep costs a futex wake-up on the caller's path),
 * short while it shares them with other work -- spinning is CPU time taken
 * from that work, the scheduler makes the thread pay it back later, often in
 * the middle of a claim the caller then waits for, and a spinning thread
 * keeps its core looking busy. With a busy loop on the second core, 50
 * against 2000 ran the q4 fixture's plain decode at 23.8-27.1 against
 * 18.9-21.0 tok/s and MTP (K = 3) at 36.7-40.4 against 29.9-33.5; on a quiet
 * machine 50 cost 3-5%. Adapting as below: 1.16x / 1.17x with the busy loop
 * (paired medians, 4 pairs each), level without it (0.995x / 1.00x, 8 pairs;
 * bench/RESULTS.md). The pool tells the two apart by
 * the rate of its threads' involuntary context switches (getrusage), each
 * thread looking at its own every POOL_ADAPT_JOBS jobs once POOL_ADAPT_S
 * have passed: on the quiet VM 10-30 a second, for the thread that shared a
 * core with the busy loop 2,000-2,500. One thread above POOL_SHARED_RATE
 * sets a deadline POOL_SHARED_S ahead, and each thread spins short from its
 * next look until its first look past the deadline: a thread spinning on a
 * free core keeps the scheduler from moving the crowded one there. */
#define POOL_SPIN_QUIET 2000
#define POOL_SPIN_SHARED 50
#define POOL_ADAPT_JOBS 64
#define POOL_ADAPT_S 0.05
#define POOL_SHARED_RATE 200.0   /* involuntary switches a second */
#define POOL_SHARED_S 1.0

/* One thread's view (spin_adapt): a worker's own, or the callers' (in the
 * pool, under run_lock: the counters are per thread, so a look by another
 * caller thread than the last one only starts its count). */
typedef struct {
    long nivcsw;         /* involuntary context switches at the last look */
    double t;            /* seconds (monotonic) at the last look, 0: none */
    pthread_t owner;     /* the thread whose look that was                */
    unsigned jobs;       /* jobs (a worker: generations) seen             */
    int spin;            /* POOL_SPIN_QUIET or POOL_SPIN_SHARED           */
} spin_budget;

/* A thread's unclaimed run of the current job, in units of the grain: the
 * next unit in the low 32 bits, the end in the high 32 -- one word, so that
 * the owner's claims from the front and other threads' steals from the back
 * are each one compare-and-swap. A cache line each: claims do not bounce
 * one line between the cores. */
typedef struct {
    _Alignas(64) atomic_uint_fast64_t run;
} thread_run;

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
    /* The current job's gate: the job's tag (the generation's low 54 bits)
     * in the high bits, GATE_CLOSED, and in the low 9 bits the workers
     * inside it. See gate_enter. */
    atomic_uint_fast64_t gate;
    atomic_int stop;
    atomic_int sleepers;          /* workers asleep on wake (or about to be)   */
    atomic_int caller_waits;      /* the caller asleep on done (or about to be) */
    /* the current job */
    nx_range_fn fn;
    void *ctx;
    int64_t n, grain;
    thread_run *runs;             /* [n_threads]: each thread's unclaimed run  */
    spin_budget caller_spin;      /* the caller's (under run_lock)             */
    /* until when (ms, nx_now_s's clock) every thread spins short */
    atomic_llong shared_until_ms;
};

static void spin_adapt(nx_pool *p, spin_budget *b) {
    if (++b->jobs % POOL_ADAPT_JOBS) return;
#ifdef RUSAGE_THREAD
    struct rusage ru;
    const double t = nx_now_s();
    if (t - b->t < POOL_ADAPT_S || getrusage(RUSAGE_THREAD, &ru) != 0) return;
    if (b->t > 0 && !pthread_equal(b->owner, pthread_self())) b->t = 0;   /* another caller: a new count */
    b->owner = pthread_self();
    if (b->t > 0 && (double)(ru.ru_nivcsw - b->nivcsw) > POOL_SHARED_RATE * (t - b->t))
        atomic_store(&p->shared_until_ms, (long long)(1e3 * (t + POOL_SHARED_S)));
    b->spin = 1e3 * t < (double)atomic_load(&p->shared_until_ms) ? POOL_SPIN_SHARED : POOL_SPIN_QUIET;
    b->nivcsw = ru.ru_nivcsw, b->t = t;
#endif
}

/* The count of workers inside needs 9 bits (at most 255 workers); the rest
 * of the word tags the job, so that a worker that read an old generation
 * and was preempted cannot take a later job's gate for its own -- with 54
 * bits that takes 2^54 jobs in between, where 31 bits took 2^31 (hours). */
#define GATE_INSIDE_BITS 9
_Static_assert(POOL_MAX_THREADS <= (1 << GATE_INSIDE_BITS) - 1, "the gate counts every worker");
#define GATE_INSIDE (((uint64_t)1 << GATE_INSIDE_BITS) - 1)
#define GATE_CLOSED ((uint64_t)1 << GATE_INSIDE_BITS)
static uint64_t gate_tag(uint64_t generation) { return generation << (GATE_INSIDE_BITS + 1); }

/* Joins job `generation` if it is still the current one and still open:
 * 1 (the worker is then counted inside until gate_leave), else 0 (the
 * caller has finished it -- the worker must not touch the job's fields, which
 * may already describe the next one). */
static int gate_enter(nx_pool *p, uint64_t generation) {
    uint64_t v = atomic_load(&p->gate);
    for (;;) {
        if ((v & ~(GATE_CLOSED | GATE_INSIDE)) != gate_tag(generation) || (v & GATE_CLOSED)) return 0;
        if (atomic_compare_exchange_weak(&p->gate, &v, v + 1)) return 1;
    }
}

/* Leaves the current job; the last worker out of a closed job wakes the
 * caller if it sleeps (under the mutex, so that the wake-up cannot fall
 * between the caller's check and its wait; the caller sets caller_waits
 * before that check, the worker reads it after its fetch_sub). */
static void gate_leave(nx_pool *p) {
    const uint64_t v = atomic_fetch_sub(&p->gate, 1);
    if ((v & GATE_CLOSED) && (v & GATE_INSIDE) == 1 && atomic_load(&p->caller_waits)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

static uint64_t run_pack(uint64_t next, uint64_t end) { return end << 32 | next; }
static uint64_t run_next(uint64_t run) { return run & 0xffffffffu; }
static uint64_t run_end(uint64_t run) { return run >> 32; }
static uint64_t run_left(uint64_t run) { return run_end(run) > run_next(run) ? run_end(run) - run_next(run) : 0; }

/* Claims the front half of thread tid's own run; 0 when it is empty. */
static int claim_own(nx_pool *p, int tid, int64_t *i0, int64_t *i1) {
    atomic_uint_fast64_t *run = &p->runs[tid].run;
    uint64_t v = atomic_load(run);
    for (;;) {
        uint64_t next = run_next(v), end = run_end(v), left = run_left(v);
        if (left == 0) return 0;
        uint64_t take = (left + 1) / 2;
        if (atomic_compare_exchange_weak(run, &v, run_pack(next + take, end))) {
            /* in unsigned: units * grain may pass INT64_MAX when n is near it
             * (both are below 2^63, so their product's bound, n - 1 + grain, fits) */
            const uint64_t g = (uint64_t)p->grain, stop = (next + take) * g;
            *i0 = (int64_t)(next * g);
            *i1 = stop < (uint64_t)p->n ? (int64_t)stop : p->n;
            return 1;
        }
    }
}

/* Moves the back half of the largest run of another thread to tid's own
 * (empty) run; 0 when every run is empty. */
static int steal(nx_pool *p, int tid) {
    for (;;) {
        int victim = -1;
        uint64_t v = 0, most = 0;
        for (int t = 0; t < p->n_threads; t++) {
            if (t == tid) continue;
            uint64_t w = atomic_load(&p->runs[t].run), left = run_left(w);
            if (left > most) victim = t, v = w, most = left;
        }
        if (victim < 0) return 0;
        /* the victim keeps the front half it is streaming through */
        uint64_t next = run_next(v), end = run_end(v), cut = end - (most + 1) / 2;
        if (atomic_compare_exchange_strong(&p->runs[victim].run, &v, run_pack(next, cut))) {
            /* tid's own run is empty, so no other thread steals from it
             * between its last claim and this store */
            atomic_store(&p->runs[tid].run, run_pack(cut, end));
            return 1;
        }
    }
}

/* Set while this thread runs a job's fn: a nested nx_pool_run would wait
 * on itself (the run lock, or a worker that is this thread), so it stops
 * the process with a message instead of hanging on large inputs only. */
static _Thread_local int in_job;

/* Runs claimed ranges of the current job on thread tid until none is left. */
static void pool_work(nx_pool *p, int tid) {
    int64_t i0, i1;
    in_job = 1;
    for (;;) {
        while (claim_own(p, tid, &i0, &i1)) p->fn(p->ctx, i0, i1, tid);
        if (!steal(p, tid)) break;
    }
    in_job = 0;
}

static void *pool_main(void *arg) {
    pool_worker *w = arg;
    nx_pool *p = w->pool;
    uint64_t seen = 0;
    spin_budget budget = {.spin = POOL_SPIN_QUIET};
#ifdef __linux__
    /* "nx-pool-N" in top -H, gdb and /proc/self/task/N/comm (15 bytes at most) */
    char name[16];
    snprintf(name, sizeof name, "nx-pool-%d", w->tid % 1000);
    pthread_setname_np(pthread_self(), name);
#endif
    for (;;) {
        uint64_t g = atomic_load(&p->generation);
        for (int spin = 0; g == seen && spin < budget.spin; spin++) {
            __builtin_ia32_pause();
            g = atomic_load(&p->generation);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);   /* before the check: see nx_pool_run */
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        if (gate_enter(p, g)) {   /* else finished without this worker */
            pool_work(p, w->tid);
            gate_leave(p);
        }
        spin_adapt(p, &budget);   /* after the job: its system calls delay nothing */
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
        if (pkg < 0 || core < 0) {   /* no topology (a container's sysfs): count CPUs, capped below */
            n_seen = 0;
            break;
        }
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
    p->caller_spin.spin = POOL_SPIN_QUIET;
    p->runs = nx_alloc_aligned((size_t)n_threads * sizeof *p->runs);
    if (!p->runs) { nx_free(p); return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the thread pool"); }
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
            if (nx_thread_create(&p->workers[i].thread, pool_main, &p->workers[i]) != 0) {
                p->n_threads = i + 1; /* only join the ones that started */
                nx_pool_free(p);
                return nx_fail(err, errlen, NX_ENOMEM, "cannot start worker thread %d", i + 1);
            }
        }
    }
    *out = p;
    return NX_OK;
}

int nx_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    const int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, NX_THREAD_STACK);
    const int rc = pthread_create(t, have_attr ? &attr : NULL, fn, arg);
    if (have_attr) pthread_attr_destroy(&attr);
    return rc;
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
    nx_free_aligned(p->runs);
    nx_free(p);
}

int nx_pool_size(const nx_pool *p) { return p ? p->n_threads : 1; }

void nx_pool_run(nx_pool *p, nx_range_fn fn, void *ctx, int64_t n, int64_t grain) {
    if (in_job) {   /* an invariant failure, not user input (pool.h) */
        fprintf(stderr, "nextn: nx_pool_run called from inside a pool job\n");
        abort();
    }
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    while ((n - 1) / grain >= (int64_t)UINT32_MAX) grain *= 2;   /* units fit a run's 32-bit halves */
    const uint64_t units = (uint64_t)((n - 1) / grain) + 1;   /* n + grain - 1 could overflow */
    uint64_t parts = p ? (uint64_t)p->n_threads : 1;
    if (parts > units) parts = units;
    if (parts <= 1) {
        in_job = 1;
        fn(ctx, 0, n, 0);
        in_job = 0;
        return;
    }
    /* A model (and its pool) may be shared by threads that each decode their
     * own sequence: their jobs take turns. */
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    /* one run per thread that has a unit of work, the others empty; relaxed
     * stores: a worker reads them after the generation below */
    for (int t = 0; t < p->n_threads; t++) {
        const uint64_t u = (uint64_t)t;
        uint64_t a = u < parts ? units * u / parts : 0, b = u < parts ? units * (u + 1) / parts : 0;
        atomic_store_explicit(&p->runs[t].run, run_pack(a, b), memory_order_relaxed);
    }
    /* open the gate for the next generation, then announce it; the
     * generation's store comes before the sleepers' load (both seq_cst), a
     * sleeper counts itself before it checks the generation */
    const uint64_t gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->gate, gate_tag(gen), memory_order_relaxed);
    atomic_store(&p->generation, gen);
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    pool_work(p, 0);

    /* Every index is claimed: close the gate and wait only for the workers
     * inside, still computing their claims. A worker that has not joined
     * yet (asleep, or its vCPU descheduled by the host) is not waited for. */
    const uint64_t v = atomic_fetch_or(&p->gate, GATE_CLOSED);
    if (v & GATE_INSIDE) {
        for (int spin = 0; (atomic_load(&p->gate) & GATE_INSIDE) && spin < p->caller_spin.spin; spin++)
            __builtin_ia32_pause();
        if (atomic_load(&p->gate) & GATE_INSIDE) {
            pthread_mutex_lock(&p->mu);
            atomic_store(&p->caller_waits, 1);   /* before the check: see gate_leave */
            while (atomic_load(&p->gate) & GATE_INSIDE) pthread_cond_wait(&p->done, &p->mu);
            atomic_store(&p->caller_waits, 0);
            pthread_mutex_unlock(&p->mu);
        }
    }
    spin_adapt(p, &p->caller_spin);
    pthread_mutex_unlock(&p->run_lock);
}
