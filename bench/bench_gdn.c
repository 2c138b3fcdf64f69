/* bench_gdn.c — the Gated DeltaNet recurrence of a step, a verify and a
 * rollback's replay, each layer's state from DRAM.
 *
 *   bench-gdn [THREADS] [REPS] [FLUSH_MB]   THREADS: pool size (default 2)
 *                                           REPS: timed passes (default 30)
 *                                           FLUSH_MB: bytes read before each
 *                                           layer (default 16)
 *
 * The 0.8B shape's recurrence: 18 layers of 16 value heads, each head a
 * 128 x 128 f32 state (1 MB a layer), stepped through kn_gated_delta_steps
 * one pool job a layer, a head an index, as model/layer.c's delta_heads
 * runs it (each head's next one in the thread's claim prefetched). Before
 * each layer FLUSH_MB of other memory is read on the pool, as a forward's
 * weights would be between two GDN layers (423 MB over 24 layers at q4),
 * so the states come from DRAM. The cases, one after another in each pass:
 *   step       T = 1 in place (a decode step)
 *   verify T   T = 2, 3, 4 from the state into a second one, streamed past
 *              the caches, each token's delta recorded (a verify of T - 1
 *              drafts keeps its prior state)
 *   replay T   T = 1, 2, 3 recorded updates in place (kn_gated_delta_replay:
 *              a rollback keeping T of the block)
 * Prints each case's median time a layer (us) and the best. The states'
 * values do not change the time. NEXTN_BENCH_KERNELS=avx2 (or scalar,
 * avxvnni, avx512vnni) times an older kernel set. Do not run it while a
 * build runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/pool.h"
#include "bench_util.h"
#include "kernels/gdn.h"
#include "kernels/matmul.h"

enum { LAYERS = 18, HEADS = 16, DK = 128, DV = 128, MAX_T = 4, MAX_REPS = 1000 };
#define HEAD_FLOATS ((size_t)DK * DV)

typedef struct {
    float *in, *out;              /* this layer's states: [HEADS][DV][DK] each */
    int T, stream;                /* stream: out of place, non-temporal        */
    int replay;                   /* the recorded updates in place instead     */
    const float *q, *k, *v;       /* [MAX_T][HEADS * 128] token inputs         */
    const float *alpha, *beta;
    float *o;                     /* [MAX_T][HEADS * DV]                       */
    float *delta;                 /* [MAX_T][HEADS * DV] the verify's record   */
} gdn_job;

/* Heads [j0, j1) of one layer, as delta_heads steps them (or replay_heads
 * replays them). */
static void gdn_heads(void *ctx, int64_t j0, int64_t j1, int tid) {
    (void)tid;
    const gdn_job *g = ctx;
    const int64_t ld = HEADS * DK;
    for (int64_t j = j0; j < j1; j++) {
        float *in = g->in + j * HEAD_FLOATS, *out = g->stream ? g->out + j * HEAD_FLOATS : in;
        const float *next = j + 1 < j1 ? in + HEAD_FLOATS : NULL;
        if (g->replay) {
            kn_gated_delta_replay(in, next, g->T, g->k + j * DK, g->delta + j * DV, ld, g->alpha, DK, DV);
            continue;
        }
        const kn_delta_tokens tk = {g->T, g->q + j * DK, g->k + j * DK, g->v + j * DV, ld, g->alpha, g->beta,
                                    g->o + j * DV, HEADS * DV, g->stream ? g->delta + j * DV : NULL, ld};
        kn_gated_delta_steps(out, in, next, &tk, DK, DV, g->stream);
    }
    if (g->stream) kn_store_fence();
}

typedef struct {
    const unsigned char *p;
    uint64_t sum;   /* what the reads add up to, so that they are not dropped */
} flush_job;

/* Pages [i0, i1) of the flush buffer, a byte a line. */
static void flush_pages(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    flush_job *f = ctx;
    uint64_t s = 0;
    for (int64_t i = i0 * 4096; i < i1 * 4096; i += 64) s += f->p[i];
    __atomic_fetch_add(&f->sum, s, __ATOMIC_RELAXED);
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 30;
    const int flush_mb = argc > 3 ? atoi(argv[3]) : 16;
    if (threads < 1 || reps < 1 || reps > MAX_REPS || flush_mb < 0) {
        fprintf(stderr, "usage: bench-gdn [THREADS] [REPS <= %d] [FLUSH_MB]\n", MAX_REPS);
        return 2;
    }
    bench_select_kernels();
    char err[256];
    nx_pool *pool = NULL;
    if (nx_pool_new(threads, &pool, err, sizeof err) != NX_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t layer_floats = HEADS * HEAD_FLOATS, flush_step = (size_t)flush_mb << 20;
    /* the flush reads a different part of a buffer well past the L3 each
     * layer, as a forward reads different weights */
    const size_t flush_n = flush_step ? (flush_step * 8 > ((size_t)256 << 20) ? flush_step * 8 : (size_t)256 << 20) : 0;
    float *state = nx_alloc_aligned(2 * LAYERS * layer_floats * sizeof(float));
    float *in = malloc((size_t)MAX_T * HEADS * DK * sizeof(float)), *o = malloc((size_t)MAX_T * HEADS * DV * sizeof(float));
    /* 64-byte aligned, as the model's record (its deltas go past the caches) */
    float *delta = nx_alloc_aligned((size_t)MAX_T * HEADS * DV * sizeof(float));
    unsigned char *flush = flush_n ? nx_alloc_aligned(flush_n) : NULL;
    double *s = malloc((size_t)reps * sizeof *s);
    flush_job fj = {flush, 0};
    if (!state || !in || !o || !delta || (flush_n && !flush) || !s) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < 2 * LAYERS * layer_floats; i++) state[i] = (float)(i * 2654435761u % 1000) * 1e-4f;
    for (int i = 0; i < MAX_T * HEADS * DK; i++) in[i] = (float)(i % 13) * 0.01f - 0.06f;
    memset(delta, 0, (size_t)MAX_T * HEADS * DV * sizeof(float));
    if (flush) memset(flush, 1, flush_n);
    const float alpha[MAX_T] = {0.9f, 0.95f, 0.85f, 0.9f}, beta[MAX_T] = {0.5f, 0.4f, 0.6f, 0.5f};

    static const struct {
        const char *name;
        int T, stream, replay;
    } cases[] = {{"step", 1, 0, 0},     {"verify 2", 2, 1, 0}, {"verify 3", 3, 1, 0}, {"verify 4", 4, 1, 0},
                 {"replay 1", 1, 0, 1}, {"replay 2", 2, 0, 1}, {"replay 3", 3, 0, 1}};
    enum { NCASES = sizeof cases / sizeof cases[0] };
    printf("GDN recurrence: %d layers x %d heads of %d x %d, %d threads, %s kernels, %d MB read before each layer, "
           "median of %d passes (us a layer)\n\n| case | median | best |\n|---|---:|---:|\n",
           LAYERS, HEADS, DV, DK, nx_pool_size(pool), kn_impl_name(), flush_mb, reps);
    size_t at = 0;
    for (int c = 0; c < NCASES; c++) {
        for (int rep = -1; rep < reps; rep++) {   /* rep -1: warm-up */
            double t = 0;
            for (int l = 0; l < LAYERS; l++) {
                if (flush) {
                    if (at + flush_step > flush_n) at = 0;
                    fj.p = flush + at;
                    nx_pool_run(pool, flush_pages, &fj, (int64_t)(flush_step / 4096), 16);
                    at += flush_step;
                }
                /* a verify reads one state and writes the other, as a
                 * session's two alternate */
                float *a = state + (size_t)l * layer_floats, *b = state + (size_t)(LAYERS + l) * layer_floats;
                gdn_job g = {a, b, cases[c].T, cases[c].stream, cases[c].replay, in, in, in, alpha, beta, o, delta};
                const double t0 = nx_now_s();
                nx_pool_run(pool, gdn_heads, &g, HEADS, 1);
                t += nx_now_s() - t0;
            }
            if (rep >= 0) s[rep] = t / LAYERS * 1e6;
        }
        const double med = bench_median(s, reps);
        printf("| %s | %.1f | %.1f |\n", cases[c].name, med, s[0]);
        fflush(stdout);
    }
    if (fj.sum == 1) printf("\n");   /* keeps the flush's reads */
    nx_pool_free(pool);
    nx_free_aligned(state), nx_free_aligned(flush);
    free(in), free(o), free(s);
    nx_free_aligned(delta);
    return 0;
}
