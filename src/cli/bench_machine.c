/* bench_machine.c — memory read bandwidth and FMA throughput probes for
 * `nextn bench` (see bench_machine.h for what they promise).
 *
 * Threads are plain pthreads created per probe rather than the library's
 * pool: the pool is internal to the model (not in nextn.h), and a probe wants
 * every thread to start a pass at the same instant, which a barrier gives
 * directly. Thread 0 is the caller; it times each pass from the start
 * barrier to the stop barrier, so a pass lasts as long as its slowest
 * thread — what a parallel matmul waits for too. */
#include "bench_machine.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#if defined(__x86_64__) || defined(__i386__)
#define BENCH_HAVE_X86 1
#include <immintrin.h>
#else
#define BENCH_HAVE_X86 0
#endif

/* ---- running a probe on N threads -----------------------------------------
 * Workers are created first and held on a condition variable until all exist
 * (or one failed to start: then they are told to quit), because a barrier
 * cannot be shrunk after a pthread_create failure. */

typedef void (*probe_fn)(void *ctx, int tid);

typedef struct {
    probe_fn fn;
    void *ctx;
    int passes;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go, quit;                  /* guarded by mu                            */
    pthread_barrier_t start, stop; /* one round of both per pass               */
} runner;

typedef struct {
    runner *r;
    int tid;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    runner *r = a->r;
    pthread_mutex_lock(&r->mu);
    while (!r->go && !r->quit) pthread_cond_wait(&r->cv, &r->mu);
    int quit = r->quit;
    pthread_mutex_unlock(&r->mu);
    if (quit) return NULL;
    for (int i = 0; i < r->passes; i++) {
        pthread_barrier_wait(&r->start);
        r->fn(r->ctx, a->tid);
        pthread_barrier_wait(&r->stop);
    }
    return NULL;
}

/* Runs fn(ctx, tid) for tid in [0, threads) once per pass; *best gets the
 * shortest pass in seconds. Returns 0, or -1 with err filled. */
static int run_passes(probe_fn fn, void *ctx, int threads, int passes, double *best, char *err, size_t errlen) {
    runner r = {.fn = fn, .ctx = ctx, .passes = passes};
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    worker_arg *args = calloc((size_t)threads, sizeof *args);
    if (!th || !args) {
        free(th);
        free(args);
        snprintf(err, errlen, "bench: out of memory starting %d probe threads", threads);
        return -1;
    }
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_barrier_init(&r.start, NULL, (unsigned)threads);
    pthread_barrier_init(&r.stop, NULL, (unsigned)threads);
    int started = 1, rc = 0;
    for (; started < threads; started++) {
        args[started] = (worker_arg){&r, started};
        if (pthread_create(&th[started], NULL, worker, &args[started]) != 0) break;
    }
    pthread_mutex_lock(&r.mu);
    if (started < threads) r.quit = 1;
    else r.go = 1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    if (started < threads) {
        snprintf(err, errlen, "bench: could not start probe thread %d of %d", started + 1, threads);
        rc = -1;
    } else {
        *best = 0;
        for (int i = 0; i < passes; i++) {
            pthread_barrier_wait(&r.start);
            double t0 = cli_now();
            fn(ctx, 0);
            pthread_barrier_wait(&r.stop);
            double dt = cli_now() - t0;
            if (i == 0 || dt < *best) *best = dt;
        }
    }
    for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.stop);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    free(th);
    free(args);
    return rc;
}

static int cpu_has(int need_fma) {
#if BENCH_HAVE_X86
    return __builtin_cpu_supports("avx2") && (!need_fma || __builtin_cpu_supports("fma"));
#else
    (void)need_fma;
    return 0;
#endif
}

/* ---- read bandwidth --------------------------------------------------------
 * An integer sum: unlike a float sum it may be reordered freely, so the
 * compiler vectorizes the plain C loop too (with -ffp-contract=off and no
 * -ffast-math a float sum would stay one scalar chain and measure latency). */

#define BENCH_SLICE_ALIGN 4096 /* bytes; slices start on pages and are a multiple of 128 bytes */

typedef struct {
    const uint64_t *buf;
    size_t words;                  /* per thread                               */
    uint64_t (*sum)(const uint64_t *p, size_t n);
    uint64_t *sink;                /* [threads][8]: one cache line per thread  */
} bw_ctx;

/* n is a multiple of 16. Four chains so the adds are not one dependency line. */
static uint64_t sum_words_scalar(const uint64_t *p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a + b + c + d;
}

#if BENCH_HAVE_X86
/* 4 words a vector, 4 vectors (two cache lines) a step; with `ahead` set,
 * each step first asks for the two lines `ahead` bytes on into L2. */
__attribute__((target("avx2"))) static inline uint64_t sum_words_avx2_ahead(const uint64_t *p, size_t n, size_t ahead) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    const size_t fetch_end = ahead && n * sizeof *p > ahead ? n - ahead / sizeof *p : 0; /* none past the slice */
    for (size_t i = 0; i < n; i += 16) {
        if (i < fetch_end) {
            _mm_prefetch((const char *)(p + i) + ahead, _MM_HINT_T1);
            _mm_prefetch((const char *)(p + i) + ahead + 64, _MM_HINT_T1);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx2"))) static uint64_t sum_words_avx2(const uint64_t *p, size_t n) {
    return sum_words_avx2_ahead(p, n, 0);
}

/* The kernels fetch their weights ahead into L2; so does this loop. Where a
 * core's own misses bound its stream (a 2-core Xeon VM: 26 GB/s plain, 32
 * GB/s so), plain loads alone would understate what the weights can get. */
__attribute__((target("avx2"))) static uint64_t sum_words_avx2_prefetch(const uint64_t *p, size_t n) {
    return sum_words_avx2_ahead(p, n, 4096);
}
#endif

static void bw_pass(void *p, int tid) {
    bw_ctx *c = p;
    c->sink[(size_t)tid * 8] += c->sum(c->buf + (size_t)tid * c->words, c->words);
}

int bench_read_bandwidth(size_t bytes, int threads, int passes, int force_scalar, bench_probe *out, char *err,
                         size_t errlen) {
    if (threads < 1) threads = 1;
    if (passes < 1) passes = 1;
    size_t slice = bytes / (size_t)threads / BENCH_SLICE_ALIGN * BENCH_SLICE_ALIGN;
    if (slice == 0) slice = BENCH_SLICE_ALIGN;
    size_t total = slice * (size_t)threads;
    uint64_t *buf = aligned_alloc(BENCH_SLICE_ALIGN, total);
    uint64_t *sink = calloc((size_t)threads * 8, sizeof *sink);
    if (!buf || !sink) {
        free(buf);
        free(sink);
        snprintf(err, errlen, "bench: cannot allocate %zu MiB for the bandwidth probe", total >> 20);
        return -1;
    }
    memset(buf, 0x5a, total); /* back every page: untouched pages all map the one zero page */
    int avx2 = !force_scalar && cpu_has(0);
    bw_ctx c = {buf, slice / sizeof *buf, sum_words_scalar, sink};
    double best = 0;
    int rc = 0;
    /* With AVX2 the passes alternate plain and prefetching loops (a pass
     * each, so a phase of the machine's bandwidth does not favour one), and
     * the best pass of either counts. */
    for (int i = 0; i < passes && !rc; i++) {
#if BENCH_HAVE_X86
        if (avx2) c.sum = i % 2 ? sum_words_avx2_prefetch : sum_words_avx2;
#endif
        double t = 0;
        rc = run_passes(bw_pass, &c, threads, 1, &t, err, errlen);
        if (!rc && (i == 0 || t < best)) best = t;
    }
    free(buf);
    free(sink);
    if (rc) return rc;
    *out = (bench_probe){best > 0 ? (double)total / best / 1e9 : 0, best, total, threads, passes,
                         avx2 ? "avx2, plain and prefetched" : "scalar"};
    return 0;
}

/* ---- FMA throughput --------------------------------------------------------
 * Each chain is a = a*m + c with m just below 1: it converges to c/(1-m), so
 * values stay normal (no denormal slow path) however long it runs. */

#define BENCH_FMA_ITERS_AVX2 (1L << 23)   /* x 12 FMAs x 8 lanes x 2 flops = 1.6 GFLOP per pass */
#define BENCH_FMA_ITERS_SCALAR (1L << 22) /* x 16 chains x 2 flops = 134 MFLOP per pass          */

typedef struct {
    int avx2;
    float *sink;                   /* [threads][16]                            */
} fma_ctx;

static float fma_chains_scalar(long iters) {
    float a[16];
    for (int j = 0; j < 16; j++) a[j] = 0.01f * (float)j;
    const float m = 0.9999f, c = 1e-4f;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++) a[j] = a[j] * m + c;
    float s = 0;
    for (int j = 0; j < 16; j++) s += a[j];
    return s;
}

#if BENCH_HAVE_X86
/* 12 independent accumulators: with FMA latency 4-5 cycles and 2 FMA units,
 * at least 8-10 chains in flight are needed to keep both units busy. */
__attribute__((target("avx2,fma"))) static float fma_chains_avx2(long iters) {
    const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
    __m256 a0 = _mm256_set1_ps(0.00f), a1 = _mm256_set1_ps(0.01f), a2 = _mm256_set1_ps(0.02f), a3 = _mm256_set1_ps(0.03f);
    __m256 a4 = _mm256_set1_ps(0.04f), a5 = _mm256_set1_ps(0.05f), a6 = _mm256_set1_ps(0.06f), a7 = _mm256_set1_ps(0.07f);
    __m256 a8 = _mm256_set1_ps(0.08f), a9 = _mm256_set1_ps(0.09f), a10 = _mm256_set1_ps(0.10f), a11 = _mm256_set1_ps(0.11f);
    for (long i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}
#endif

static void fma_pass(void *p, int tid) {
    fma_ctx *c = p;
    float r;
#if BENCH_HAVE_X86
    if (c->avx2) r = fma_chains_avx2(BENCH_FMA_ITERS_AVX2);
    else
#endif
        r = fma_chains_scalar(BENCH_FMA_ITERS_SCALAR);
    c->sink[(size_t)tid * 16] += r;
}

int bench_fma_throughput(int threads, int passes, int force_scalar, bench_probe *out, char *err, size_t errlen) {
    if (threads < 1) threads = 1;
    if (passes < 1) passes = 1;
    float *sink = calloc((size_t)threads * 16, sizeof *sink);
    if (!sink) {
        snprintf(err, errlen, "bench: out of memory for the FMA probe");
        return -1;
    }
    fma_ctx c = {!force_scalar && cpu_has(1), sink};
    double best = 0;
    int rc = run_passes(fma_pass, &c, threads, passes, &best, err, errlen);
    free(sink);
    if (rc) return rc;
    double flops = c.avx2 ? (double)BENCH_FMA_ITERS_AVX2 * 12 * 8 * 2 : (double)BENCH_FMA_ITERS_SCALAR * 16 * 2;
    flops *= threads;
    *out = (bench_probe){best > 0 ? flops / best / 1e9 : 0, best, 0, threads, passes, c.avx2 ? "avx2" : "scalar"};
    return 0;
}
