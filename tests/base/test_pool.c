/* test_pool.c — the persistent thread pool: its default size (one per
 * physical core), ranges that cover [0, n) exactly once, its limits, a
 * slow thread's share going to the others, each thread working through
 * its own contiguous share front to back, jobs that do not wait for a
 * worker held outside them (as a host descheduling its vCPU would), and
 * threads asleep on either side of a job woken when they are needed. */
#include "base/clock.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"

static void default_size_is_one_per_physical_core(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(0, &p, err, sizeof err) == NX_OK);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int n = p ? nx_pool_size(p) : 0;
    printf("  default pool: %d threads (%ld online CPUs)\n", n, online);
    CHECK(n >= 1 && n <= online);
    nx_pool_free(p);
    CHECK(nx_pool_new(257, &p, err, sizeof err) == NX_EINVAL && p == NULL);
}

typedef struct {
    atomic_int *hits;
    atomic_int calls;
    int64_t grain;
    atomic_int short_range;
    atomic_int misaligned;   /* ranges that start off a multiple of the grain */
} cover_job;

static void mark(void *ctx, int64_t i0, int64_t i1, int tid) {
    cover_job *j = ctx;
    (void)tid;
    atomic_fetch_add(&j->calls, 1);
    if (i1 - i0 < j->grain) atomic_fetch_add(&j->short_range, 1);
    if (i0 % j->grain) atomic_fetch_add(&j->misaligned, 1);
    for (int64_t i = i0; i < i1; i++) atomic_fetch_add(&j->hits[i], 1);
}

static void ranges_cover_every_index_once(void) {
    char err[256];
    for (int threads = 1; threads <= 5; threads += 2) {
        nx_pool *p = NULL;
        CHECK(nx_pool_new(threads, &p, err, sizeof err) == NX_OK);
        if (!p) continue;
        CHECK(nx_pool_size(p) == threads);
        static const int64_t sizes[] = {0, 1, 2, 7, 64, 1000};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            static const int64_t grains[] = {1, 4, 16, 48};
            for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++) {
                const int64_t grain = grains[gi], n = sizes[s];
                cover_job j = {calloc((size_t)n + 1, sizeof(atomic_int)), 0, grain, 0, 0};
                nx_pool_run(p, mark, &j, n, grain);
                int ok = 1;
                for (int64_t i = 0; i < n; i++) ok &= atomic_load(&j.hits[i]) == 1;
                /* few calls: a claim takes half of a thread's run (a run of
                 * u units gives at most log2(u) + 1 claims) and a steal half
                 * of another's, so the calls grow like P log^2(n / grain);
                 * the bound is generous (oversubscribed threads steal more)
                 * but fails a rule of one unit a claim (n / grain calls) */
                int64_t P = threads < (n + grain - 1) / grain ? threads : (n + grain - 1) / grain;
                double lg = log2((double)n / (double)grain + 1) + 2;
                double bound = n == 0 ? 0 : P <= 1 ? 1 : (double)P * lg * lg;
                CHECKF(ok && atomic_load(&j.calls) <= bound, "threads %d n %lld grain %lld: %d calls", threads, (long long)n,
                       (long long)grain, atomic_load(&j.calls));
                /* only the range that ends at n may be shorter than the grain */
                CHECK(atomic_load(&j.short_range) <= 1);
                /* and every range starts on a multiple of the grain */
                CHECK(atomic_load(&j.misaligned) == 0);
                free(j.hits);
            }
        }
        nx_pool_free(p);
    }
}

typedef struct {
    atomic_llong done_by[2];   /* indices computed by the caller (0), the worker (1) */
    atomic_int worker_started;
} slow_job;

/* The worker's first range takes 50 ms; the caller's first waits (up to 5 s)
 * until the worker has claimed that range, so both have work in flight. */
static void slow_worker(void *ctx, int64_t i0, int64_t i1, int tid) {
    slow_job *j = ctx;
    if (tid == 1 && atomic_exchange(&j->worker_started, 1) == 0) nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    for (int w = 0; tid == 0 && !atomic_load(&j->worker_started) && w < 5000; w++)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    atomic_fetch_add(&j->done_by[tid == 1], i1 - i0);
}

static void a_slow_thread_leaves_its_share_to_the_others(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(2, &p, err, sizeof err) == NX_OK);
    if (!p) return;
    slow_job j = {{0, 0}, 0};
    nx_pool_run(p, slow_worker, &j, 1000, 1);
    long long caller = atomic_load(&j.done_by[0]), worker = atomic_load(&j.done_by[1]);
    /* a fixed split in halves would give the caller exactly 500; with
     * steals the sleeping worker keeps only its first claim (250) */
    CHECKF(atomic_load(&j.worker_started) && worker > 0 && caller + worker == 1000 && caller >= 700,
           "caller %lld, worker %lld", caller, worker);
    nx_pool_free(p);
}

/* One index each: the caller's waits (up to 5 s) until the worker has begun
 * its own, so a worker left asleep fails the check instead of having its
 * index stolen; the worker's then takes 2 ms, so the caller, done first,
 * outlasts its spin and sleeps until the worker leaves. */
typedef struct {
    atomic_int worker_in, done_by[2];
} wake_job;

static void wake_unit(void *ctx, int64_t i0, int64_t i1, int tid) {
    wake_job *j = ctx;
    if (tid != 0) {
        atomic_store(&j->worker_in, 1);
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    for (int w = 0; tid == 0 && !atomic_load(&j->worker_in) && w < 50000; w++)
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    atomic_fetch_add(&j->done_by[tid != 0], (int)(i1 - i0));
}

static void sleeping_threads_are_woken(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(2, &p, err, sizeof err) == NX_OK);
    if (!p) return;
    int joined = 0;
    for (int round = 0; round < 20; round++) {
        /* 5 ms idle: far past the worker's spin, so it is asleep */
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
        wake_job j = {0};
        nx_pool_run(p, wake_unit, &j, 2, 1);
        joined += atomic_load(&j.done_by[1]) == 1 && atomic_load(&j.done_by[0]) == 1;
    }
    CHECKF(joined == 20, "the worker joined %d of 20 jobs after sleeping", joined);
    nx_pool_free(p);
}

/* Each thread's ranges, in the order it was called. */
typedef struct {
    atomic_int arrived[2];      /* [c]: threads that have begun their call c */
    int64_t r[2][64][2];        /* [tid][call] = {i0, i1}                    */
    int calls[2];
} order_job;

/* The threads' first two calls run in lockstep: call c waits (up to 5 s)
 * until the other thread has begun its call c too, so neither gets far
 * enough ahead to empty its share and steal before the other has claimed
 * twice from its own. */
static void record(void *ctx, int64_t i0, int64_t i1, int tid) {
    order_job *j = ctx;
    int c = j->calls[tid]++;
    if (c < 64) j->r[tid][c][0] = i0, j->r[tid][c][1] = i1;
    if (c < 2) {
        atomic_fetch_add(&j->arrived[c], 1);
        for (int w = 0; atomic_load(&j->arrived[c]) < 2 && w < 50000; w++)
            nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
}

static void each_thread_streams_through_its_own_share(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(2, &p, err, sizeof err) == NX_OK);
    if (!p) return;
    for (int rep = 0; rep < 3; rep++) {
        order_job j = {0};
        nx_pool_run(p, record, &j, 1000, 4);
        /* the shares are [0, 500) and [500, 1000), 125 units of 4 each:
         * thread 0 starts at 0 and thread 1 at 500, each with the front
         * 63 units of its share, and each one's next range starts where
         * its first ended (a steal only ever takes a run's back half) */
        CHECKF(atomic_load(&j.arrived[1]) == 2, "calls %d / %d", j.calls[0], j.calls[1]);
        CHECKF(j.r[0][0][0] == 0 && j.r[0][0][1] == 252 && j.r[1][0][0] == 500 && j.r[1][0][1] == 752,
               "first ranges [%lld, %lld) and [%lld, %lld)", (long long)j.r[0][0][0], (long long)j.r[0][0][1],
               (long long)j.r[1][0][0], (long long)j.r[1][0][1]);
        CHECKF(j.r[0][1][0] == j.r[0][0][1] && j.r[1][1][0] == j.r[1][0][1], "second ranges start at %lld and %lld",
               (long long)j.r[0][1][0], (long long)j.r[1][1][0]);
    }
    nx_pool_free(p);
}

/* A worker held in a signal handler until released: a thread that cannot
 * run, as a vCPU the host has descheduled. Lock-free atomics: safe in a
 * handler, and no data race for ThreadSanitizer. */
static atomic_int held, release_held;

static void hold_here(int sig) {
    (void)sig;
    const int saved = errno;
    atomic_store(&held, 1);
    while (!atomic_load(&release_held)) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    atomic_store(&held, 0);
    errno = saved;
}

/* Releases the held worker after 3 s whatever happens, so that a pool that
 * waits for it fails the test instead of hanging it. */
static void *release_later(void *arg) {
    (void)arg;
    for (int w = 0; !atomic_load(&release_held) && w < 3000; w++) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    atomic_store(&release_held, 1);
    return NULL;
}

/* The thread of this process named nx-pool-1 (Linux: /proc/self/task, the
 * name pool.c gives its first worker), or -1 unless there is exactly one:
 * found by name because a sanitizer may run threads of its own. */
static long pool_worker_thread(void) {
    long found = -1;
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
        const long tid = atol(e->d_name);
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
        FILE *f = tid > 0 ? fopen(path, "r") : NULL;
        if (f && fgets(comm, sizeof comm, f) && strncmp(comm, "nx-pool-1\n", 10) == 0) found = tid, n++;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n == 1 ? found : -1;
}

static void jobs_do_not_wait_for_a_worker_that_has_not_joined(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(2, &p, err, sizeof err) == NX_OK);
    if (!p) return;
    cover_job j = {calloc(1000, sizeof(atomic_int)), 0, 1, 0, 0};
    nx_pool_run(p, mark, &j, 1000, 1);   /* the worker is up, and outside any job once this returns */
    /* and after 200 ms idle it sleeps on the pool's condition variable, not
     * in the few instructions where it holds the pool's mutex (held there,
     * it would block the next job's start: a host can do that too, rarely) */
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    const long worker = pool_worker_thread();
    struct sigaction sa = {.sa_handler = hold_here}, old;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
    CHECKF(worker > 0, "no single thread named nx-pool-1 in /proc/self/task");
    atomic_store(&held, 0);
    atomic_store(&release_held, 0);
    if (worker > 0 && syscall(SYS_tgkill, (long)getpid(), worker, SIGUSR1) == 0) {
        for (int w = 0; !held && w < 5000; w++) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
        CHECK(held);
        pthread_t watchdog;
        const int have_watchdog = pthread_create(&watchdog, NULL, release_later, NULL) == 0;
        CHECK(have_watchdog);
        /* 100 jobs with the worker held: the caller claims everything, and
         * each job ends without the worker, long before it is released
         * (a pool that waited for every worker would wait here for good) */
        const double t0 = nx_now_s();
        int ok = 1;
        for (int rep = 0; rep < 100 && held; rep++) {
            for (int i = 0; i < 1000; i++) atomic_store(&j.hits[i], 0);
            nx_pool_run(p, mark, &j, 1000, 1);
            for (int i = 0; i < 1000; i++) ok &= atomic_load(&j.hits[i]) == 1;
        }
        const double dt = nx_now_s() - t0;
        CHECKF(held && ok && dt < 2.0, "100 jobs with the worker held took %.3f s (worker still held: %d)", dt, (int)held);
        release_held = 1;
        if (have_watchdog) pthread_join(watchdog, NULL);
        for (int w = 0; held && w < 5000; w++) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
        CHECK(!held);
    }
    /* released, it joins jobs again: a job of 1000 single indices that
     * waits in its first range for the worker to arrive */
    slow_job s = {{0, 0}, 0};
    nx_pool_run(p, slow_worker, &s, 1000, 1);
    CHECKF(atomic_load(&s.worker_started) && atomic_load(&s.done_by[1]) > 0, "the released worker did %lld",
           (long long)atomic_load(&s.done_by[1]));
    sigaction(SIGUSR1, &old, NULL);
    free(j.hits);
    nx_pool_free(p);
}

/* Ranges of a job over indices near INT64_MAX: the pool's units times its
 * grain pass INT64_MAX there, and must not wrap into negative ranges. */
typedef struct {
    atomic_int n;
    int64_t r[4096][2];
} range_log;

static void log_range(void *ctx, int64_t i0, int64_t i1, int tid) {
    range_log *l = ctx;
    int k = atomic_fetch_add(&l->n, 1);
    if (k < 4096) l->r[k][0] = i0, l->r[k][1] = i1;
}

static int by_start(const void *a, const void *b) {
    const int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

static void huge_ranges_and_grains_do_not_overflow(void) {
    char err[256];
    nx_pool *p = NULL;
    CHECK(nx_pool_new(3, &p, err, sizeof err) == NX_OK);
    if (!p) return;
    static const int64_t cases[][2] = {{INT64_MAX, (int64_t)1 << 40}, {INT64_MAX - 1, (int64_t)1 << 62}, {2, INT64_MAX},
                                       {INT64_MAX, INT64_MAX}, {INT64_MAX, 1}};
    range_log *l = malloc(sizeof *l);
    for (size_t c = 0; l && c < sizeof cases / sizeof cases[0]; c++) {
        atomic_store(&l->n, 0);
        nx_pool_run(p, log_range, l, cases[c][0], cases[c][1]);
        int n = atomic_load(&l->n);
        CHECKF(n >= 1 && n <= 4096, "case %zu: %d calls", c, n);
        if (n < 1 || n > 4096) continue;
        qsort(l->r, (size_t)n, sizeof l->r[0], by_start);
        int64_t at = 0;   /* the ranges tile [0, n) in order */
        for (int k = 0; k < n && at >= 0; k++) at = l->r[k][0] == at && l->r[k][1] > at ? l->r[k][1] : -1;
        CHECKF(at == cases[c][0], "case %zu (n %lld, grain %lld): ranges do not tile [0, n)", c, (long long)cases[c][0],
               (long long)cases[c][1]);
    }
    free(l);
    nx_pool_free(p);
}

/* A job's fn that calls nx_pool_run would wait on itself (only when the
 * inner job has more than one part: small tests would pass); the pool stops
 * the process with a message instead. */
static nx_pool *nested_pool;

static void nest(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)ctx, (void)i0, (void)i1, (void)tid;
    nx_pool_run(nested_pool, log_range, NULL, 0, 1);   /* even an empty inner job */
}

static void a_nested_call_stops_with_a_message(void) {
    for (int outer = 1; outer <= 1000; outer += 999) {   /* a one-part job and a many-part one */
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            freopen("/dev/null", "w", stderr);
            char err[256];
            if (nx_pool_new(2, &nested_pool, err, sizeof err) != NX_OK) _exit(3);
            nx_pool_run(nested_pool, nest, NULL, outer, 1);
            _exit(0);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "outer n %d: status %#x", outer, st);
    }
}

static const nx_test tests[] = {
    {"default_size_is_one_per_physical_core", "nx_pool_new(0): 1 .. online CPUs threads; more than 256 refused",
     default_size_is_one_per_physical_core},
    {"ranges_cover_every_index_once", "1, 3, 5 threads, n = 0..1000, grains 1/4/16/48: every index once, ranges on grain multiples",
     ranges_cover_every_index_once},
    {"a_slow_thread_leaves_its_share_to_the_others", "2 threads, the worker's first range 50 ms late: the caller does >= 70%",
     a_slow_thread_leaves_its_share_to_the_others},
    {"jobs_do_not_wait_for_a_worker_that_has_not_joined",
     "2 threads, the worker held in a signal handler: 100 jobs end on the caller alone; released, it joins again",
     jobs_do_not_wait_for_a_worker_that_has_not_joined},
    {"each_thread_streams_through_its_own_share", "2 threads, n = 1000, grain 4: first ranges at 0 and 500, second ones where the first ended",
     each_thread_streams_through_its_own_share},
    {"huge_ranges_and_grains_do_not_overflow", "n and grain up to INT64_MAX: the ranges tile [0, n), none wraps negative",
     huge_ranges_and_grains_do_not_overflow},
    {"a_nested_call_stops_with_a_message", "nx_pool_run inside a job's fn (one part or many): SIGABRT, not a hang",
     a_nested_call_stops_with_a_message},
    {"sleeping_threads_are_woken",
     "2 threads, 20 jobs after 5 ms idle: the sleeping worker joins each, the caller sleeps until it leaves",
     sleeping_threads_are_woken},
};

NX_TEST_MAIN(tests)
