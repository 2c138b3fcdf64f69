/* bench_linear.c — a model's matrix products alone, as one decode or verify
 * step runs them.
 *
 *   bench-linear DIR [THREADS] [REPS] [TS]   THREADS: pool size (default 2)
 *                                            REPS: timed passes per T (default 5)
 *                                            TS: activation row counts (default 1,2,3,4)
 *
 * One pass calls mdl_linear (the model's pool, int8 activations for quantized
 * weights, exactly as a forward does) on every decoder matrix of every layer
 * and on the LM head, each with T rows of random activations of its input
 * width, so every weight is streamed from memory once per pass, as in a step.
 * The table gives the median pass time, the weight bytes it read per second
 * (codes, scales and biases as stored), the multiply-adds per second (2 flops
 * each: the prefill GEMM's rate at T = 32) and the pass time relative to T = 1:
 * set against `nextn bench`'s step time and verify cost, it splits a step into
 * its matmuls and everything else (norms, attention, the GDN recurrence, pool
 * hand-offs). A warm-up pass comes first. NEXTN_BENCH_KERNELS=avx2 (or
 * scalar, avxvnni, avx512vnni) times an older kernel set than the newest the CPU
 * runs. Do not run it while a build runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "model/model.h"

#define MAX_T MDL_CHUNK   /* a prefill chunk's rows */

/* Every matrix a step multiplies: the layers' (the other mixer kind's slots
 * are empty) and the LM head. Returns the count written to out. */
static int step_matrices(const nx_model *m, const kn_mat **out, int cap) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const kn_mat *mats[MDL_LAYER_MATS];
        mdl_layer_mats(&m->layers[l], mats);
        for (int i = 0; i < MDL_LAYER_MATS; i++)
            if (mats[i]->data && mats[i]->rows > 0 && n < cap) out[n++] = mats[i];
    }
    if (n < cap) out[n++] = &m->lm_head;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: bench-linear DIR [THREADS] [REPS] [TS]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    int ts[MAX_T], nts = 0;
    for (const char *p = argc > 4 ? argv[4] : "1,2,3,4"; *p && nts < MAX_T; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
        const int t = atoi(p);
        if (t < 1 || t > MAX_T) {
            fprintf(stderr, "T must be in 1..%d\n", MAX_T);
            return 2;
        }
        ts[nts++] = t;
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "THREADS and REPS must be positive\n");
        return 2;
    }
    char err[1024];
    nx_model *m = NULL;
    nx_load_opts lo = {.n_threads = threads, .kernels = bench_kernels()};
    if (nx_model_load(argv[1], &lo, &m, err, sizeof err) != NX_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    enum { CAP = 16 * CFG_MAX_LAYERS };
    const kn_mat **mats = malloc(CAP * sizeof *mats);
    const int nm = step_matrices(m, mats, CAP);
    double bytes = 0, macs = 0;   /* per activation row */
    int64_t in_max = 0, out_max = 0;
    for (int i = 0; i < nm; i++) {
        bytes += kn_mat_bytes(mats[i]);
        macs += (double)mats[i]->rows * (double)mats[i]->cols;
        if (mats[i]->cols > in_max) in_max = mats[i]->cols;
        if (mats[i]->rows > out_max) out_max = mats[i]->rows;
    }
    mdl_scratch sc;
    float *x = malloc(sizeof(float) * (size_t)(MAX_T * in_max)), *y = malloc(sizeof(float) * (size_t)(MAX_T * out_max));
    double *s = malloc(sizeof(double) * (size_t)reps);
    if (!mats || !x || !y || !s || mdl_scratch_init(&sc, m, 16) != NX_OK) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t r = 0x9E3779B97F4A7C15ULL;
    for (int64_t i = 0; i < MAX_T * in_max; i++) {   /* xorshift64*, values in [-1, 1) */
        r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
        x[i] = (float)((r * 0x2545F4914F6CDD1DULL) >> 40) * 0x1p-23f - 1.0f;
    }
    printf("%s: %d matrices, %.1f MB of weights (%s), %d threads, %s kernels, median of %d passes\n\n", argv[1], nm,
           bytes / 1e6, nx_model_get_info(m)->weight_dtype, nx_pool_size(m->pool), nx_model_get_info(m)->kernels, reps);
    printf("| T | ms / pass | GB/s | GFLOP/s | x T=1 |\n|---:|---:|---:|---:|---:|\n");
    double base = 0;
    for (int k = 0; k < nts; k++) {
        const int T = ts[k];
        for (int rep = -1; rep < reps; rep++) {   /* rep -1: warm-up */
            const double t0 = nx_now_s();
            for (int i = 0; i < nm; i++) mdl_linear(m, &sc, mats[i], x, T, y);
            if (rep >= 0) s[rep] = nx_now_s() - t0;
        }
        const double med = bench_median(s, reps);
        if (T == 1) base = med;   /* the ratio column needs T = 1 measured first */
        const double gflops = 2.0 * macs * T / med / 1e9;
        if (base > 0) printf("| %d | %.2f | %.2f | %.1f | %.2f |\n", T, med * 1e3, bytes / med / 1e9, gflops, med / base);
        else printf("| %d | %.2f | %.2f | %.1f | - |\n", T, med * 1e3, bytes / med / 1e9, gflops);
        fflush(stdout);
    }
    mdl_scratch_free(&sc);
    nx_model_free(m);
    free(mats), free(x), free(y), free(s);
    return 0;
}
