/* bench_matmul.c — weight streaming rate of kn_matmul_rows, dense and affine.
 *
 *   bench-matmul [MB] [REPS] [TS] [ONLY]   MB: bytes of weights per matrix (default 256)
 *                                   REPS: timed calls per case (default 7)
 *                                   TS: activation row counts, e.g. 1,2,4,8 (default 1,4)
 *                                   ONLY: run the cases whose name contains it
 *
 * For dense f32 and bf16 and affine q2..q8 (group 64, bf16 scales and biases), one
 * matrix of 4096 columns and as many rows as fill MB megabytes (so it streams
 * from DRAM, not from cache), filled with random bytes (the rate does not
 * depend on the values; no quantizer run). Each case times REPS calls of
 * kn_matmul_rows over all rows on ONE thread, after one untimed warm-up, and
 * prints the median as GB/s of weight bytes streamed (codes + scales + biases
 * for affine) and as G weights/s (the rate a model's decode step sees), plus
 * the fastest call's G weights/s (less disturbed by other load), by
 * default at T = 1 and T = 4 (T = 4: a verify block of 3 drafts).
 * NEXTN_BENCH_KERNELS=avx2 (or scalar, avxvnni, avx512vnni) times an older kernel set
 * than the newest the CPU runs.
 * Do not run it while a build is running; say how busy the machine was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#ifndef COLS
#define COLS 4096
#endif
#define GROUP 64
#define MAX_T 32

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng_next(void) {   /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* n bytes of random data (malloc'd). */
static void *random_bytes(size_t n) {
    unsigned char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v = rng_next();
        memcpy(p + i, &v, 8);
    }
    for (size_t i = n & ~(size_t)7; i < n; i++) p[i] = (unsigned char)rng_next();
    return p;
}

/* n bf16 values in [0.001, 0.002) (scales) or [-0.1, 0) (biases). */
static uint16_t *random_bf16(size_t n, float lo, float hi) {
    uint16_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        float v = lo + (hi - lo) * (float)(rng_next() >> 40) * 0x1p-24f;
        uint32_t u;
        memcpy(&u, &v, 4);
        p[i] = (uint16_t)(u >> 16);
    }
    return p;
}

/* Median seconds of reps full-matrix calls at T activation rows; *best gets
 * the fastest call (the better figure on a busy machine). */
/* One call over all rows; qx non-NULL: quantize x into it and run the int8
 * product (both timed, as the model runs them). */
static void call(const kn_mat *w, const float *x, int T, kn_qx *qx, float *y) {
    if (!qx) {
        kn_matmul_rows(w, x, COLS, T, y, w->rows, 0, w->rows);
        return;
    }
    qx->T = T;
    kn_quantize_x(qx, x, COLS);
    kn_matmul_qx_rows(w, qx, y, w->rows, 0, w->rows);
}

static double median_s(const kn_mat *w, const float *x, int T, kn_qx *qx, float *y, int reps, double *best) {
    double *s = malloc((size_t)reps * sizeof *s);
    call(w, x, T, qx, y);   /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = nx_now_s();
        call(w, x, T, qx, y);
        s[r] = nx_now_s() - t0;
    }
    double med = bench_median(s, reps);
    *best = s[0];   /* sorted by bench_median */
    free(s);
    return med;
}

int main(int argc, char **argv) {
    const double mb = argc > 1 ? atof(argv[1]) : 256.0;
    const int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (!(mb > 0 && mb < 1e6) || reps < 1 || reps > 10000) {
        fprintf(stderr, "usage: bench-matmul [MB > 0] [REPS >= 1] [TS] [ONLY]\n");
        return 2;
    }
    int ts[MAX_T], nts = 0;
    for (const char *p = argc > 3 ? argv[3] : "1,4"; *p && nts < MAX_T; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
        int t = atoi(p);
        if (t < 1 || t > MAX_T) {
            fprintf(stderr, "T must be in 1..%d\n", MAX_T);
            return 2;
        }
        ts[nts++] = t;
    }
    bench_select_kernels();
    printf("kernels: %s, one thread, %d columns, ~%.1f MB per matrix, median of %d calls\n\n", kn_impl_name(), COLS,
           mb, reps);
    printf("| weights | rows | MB | T | ms/call | GB/s | G weights/s | best G weights/s |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");

    float *x = malloc(MAX_T * COLS * sizeof *x);
    for (int i = 0; i < MAX_T * COLS; i++) x[i] = (float)(rng_next() >> 40) * 0x1p-24f - 0.5f;
    /* 64-byte aligned, as the model's scratch (nx_alloc_aligned): from malloc
     * the rows start 16 bytes into a line and every other 32-byte load of an
     * activation block splits two lines (q4 T = 4 ran 0.75x as fast). */
    void *qxbuf = aligned_alloc(64, (kn_qx_bytes(MAX_T, COLS) + 63) & ~(size_t)63);
    static const int formats[] = {-1, 0, 8, 6, 5, 4, 3, 2};   /* -1: dense f32, 0: dense bf16; else affine bits */
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        const int bits = formats[f] > 0 ? formats[f] : 0, f32 = formats[f] < 0;
        const size_t row_bytes = bits ? (size_t)kn_affine_row_words(COLS, bits) * 4 + 2 * (COLS / GROUP) * 2 : COLS * (f32 ? 4 : 2);
        const int64_t rows = (int64_t)(mb * 1e6 / (double)row_bytes);
        kn_mat w = {.data = random_bytes((size_t)rows * (bits ? row_bytes - 4 * (COLS / GROUP) : row_bytes)),
                    .dtype = bits ? NX_DT_U32 : f32 ? NX_DT_F32 : NX_DT_BF16, .rows = rows, .cols = COLS, .bits = bits};
        if (f32)   /* finite values: random bytes would make NaNs and subnormals */
            for (int64_t i = 0; i < rows * COLS; i++) ((float *)(void *)w.data)[i] = (float)(rng_next() >> 40) * 0x1p-24f - 0.5f;
        if (bits) {
            w.group = GROUP;
            w.sdtype = NX_DT_BF16;
            w.scales = random_bf16((size_t)rows * (COLS / GROUP), 0.001f, 0.002f);
            w.biases = random_bf16((size_t)rows * (COLS / GROUP), -0.1f, 0.0f);
        }
        float *y = malloc((size_t)(MAX_T * rows) * sizeof *y);
        /* affine: f32 activations, then int8 activations (kn_matmul_qx_rows),
         * for lanes then also from packed codes (kn_lanes_pack) */
        const int modes = !bits ? 1 : kn_qx_lanes(&w) ? 3 : 2;
        for (int int8 = 0; int8 < modes; int8++) {
            char name[48];
            if (bits)
                snprintf(name, sizeof name, "affine q%d g%d bf16, %s x%s", bits, GROUP, int8 ? "int8" : "f32",
                         int8 == 2 ? ", packed" : "");
            else snprintf(name, sizeof name, "dense %s", f32 ? "f32" : "bf16");
            if (argc > 4 && !strstr(name, argv[4])) continue;
            if (int8 == 2) {
                void *packed = malloc(kn_lanes_packed_bytes(&w));
                if (packed) kn_lanes_pack(&w, packed, 0, rows);
                w.packed = packed;
            }
            kn_qx qx;
            if (int8) kn_qx_bind(&qx, qxbuf, MAX_T, &w);
            for (int k = 0; k < nts; k++) {
                const int T = ts[k];
                double best, s = median_s(&w, x, T, int8 ? &qx : NULL, y, reps, &best);
                double bytes = (double)rows * (double)row_bytes;
                printf("| %s | %lld | %.1f | %d | %.3f | %.2f | %.2f | %.2f |\n", name, (long long)rows, bytes / 1e6,
                       T, s * 1e3, bytes / s / 1e9, (double)rows * COLS / s / 1e9, (double)rows * COLS / best / 1e9);
                fflush(stdout);
            }
        }
        free((void *)w.data);
        free((void *)w.packed);
        free((void *)w.scales);
        free((void *)w.biases);
        free(y);
    }
    free(x);
    free(qxbuf);
    return 0;
}
