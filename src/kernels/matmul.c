/* matmul.c — dense matrix products over f32/bf16/f16 weights and the f32 vector
 * primitives (see matmul.h). Affine quantized weights are dispatched to quant.c,
 * small-float ones (mxfp4, nvfp4, mxfp8, block FP8) to fpq.c.
 *
 * Every kernel exists twice: a scalar `_ref` twin, which is the definition, and
 * an AVX2+FMA+F16C version compiled per function with a target attribute (the
 * build stays portable; no -mavx2). The int8 product (quant.c), the dense
 * products (rows and tiles, below), the gated delta step (gdn.c), the
 * attention value sums (attention.c) and the sketch scores (sketch.c) have a
 * third version, on AVX-512.
 * kn_select() points one small table at one set, and the public kn_* entry
 * points call through it. (Past the ~800 lines a file should keep to: the
 * three twins of the dense product share the dot product layout's static
 * helpers — loads, accumulator pairing, the finish — which one file keeps
 * private; the table must see every twin.)
 *
 * Loop order, and why: CPU decode is bound by memory bandwidth, so each weight
 * row is streamed from DRAM once per call. kn_matmul_rows walks rows outer and
 * the T activation rows inner; after the first activation the row sits in L1/L2,
 * so verifying K drafted tokens costs about the weight traffic of decoding one.
 *
 * Bit-exactness (matmul.h): in both twins Y[t][r] is one function of (W row r,
 * X row t, cols) alone. The scalar twin sums in double in index order. The SIMD
 * twin fixes the lane, accumulator, combine order and tail of every product
 * (see "Dot product layout" below); computing several activation rows at once
 * only interleaves independent dot products and never changes the operations
 * inside one. The SIMD code is all intrinsics, so neither the compiler's FMA
 * contraction nor its register allocation can change a result. */
#include "kernels/matmul.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/fpq.h"
#include "kernels/gdn.h"
#include "kernels/quant.h"
#include "kernels/sketch.h"

#include "kernels/avx2.h"
#if KN_HAVE_X86
#include <cpuid.h>
#endif

/* ---- Preconditions -----------------------------------------------------
 * Shared by both twins so that force_reference catches the same misuse. */

/* Marked unused: only assert() calls it, so it is dead under NDEBUG. */
__attribute__((unused)) static int kn_dtype_ok(nx_dtype dt) {
    return dt == NX_DT_F32 || dt == NX_DT_BF16 || dt == NX_DT_F16;
}

static void assert_matmul_args(const kn_mat *w, const float *x, int64_t ldx, int T, const float *y,
                               int64_t ldy, int64_t r0, int64_t r1) {
    assert(w != NULL && (w->fp ? kn_fp_valid(w) : w->bits == 0 ? kn_dtype_ok(w->dtype) : kn_affine_valid(w)));
    assert(w->rows >= 0 && w->cols >= 0 && (w->ld == 0 || (w->bits == 0 && w->ld >= w->cols)));
    assert(0 <= r0 && r0 <= r1 && r1 <= w->rows);
    assert(T >= 0);
    /* Rows of X and Y must not overlap when there are several of them. */
    assert(T <= 1 || (ldx >= w->cols && ldy >= r1));
    assert(T == 0 || r0 == r1 || (y != NULL && (x != NULL || w->cols == 0) && w->data != NULL));
    (void)w, (void)x, (void)ldx, (void)T, (void)y, (void)ldy, (void)r0, (void)r1;
}

/* ---- Scalar reference twins ----------------------------------------------
 * Plain loops in index order. Dot products accumulate in double: a product of
 * two floats is exact in double, so each term is exact and the only rounding
 * is the sum's (and the final cast). That makes the reference more accurate
 * than any f32 order, independent of FMA contraction, and a fixed definition
 * for the SIMD twin to be measured against. */

/* Dot product of n weights of type dt at w with x, in double. */
static double dot_ref(const void *w, nx_dtype dt, const float *x, int64_t n) {
    double acc = 0.0;
    switch (dt) {
    case NX_DT_F32: {
        const float *p = w;
        for (int64_t i = 0; i < n; i++) acc += (double)p[i] * (double)x[i];
        break;
    }
    case NX_DT_BF16: {
        const uint16_t *p = w;
        for (int64_t i = 0; i < n; i++) acc += (double)nx_bf16_to_f32(p[i]) * (double)x[i];
        break;
    }
    case NX_DT_F16: {
        const uint16_t *p = w;
        for (int64_t i = 0; i < n; i++) acc += (double)nx_f16_to_f32(p[i]) * (double)x[i];
        break;
    }
    default:
        assert(!"unsupported weight dtype");
    }
    return acc;
}

void kn_matmul_rows_ref(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                        int64_t r0, int64_t r1) {
    assert_matmul_args(w, x, ldx, T, y, ldy, r0, r1);
    if (w->bits) {
        kn_affine_matmul_rows_ref(w, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    if (w->fp) {
        kn_fp_matmul_rows(w, kn_fp_row_f32_ref, kn_matmul_rows_ref, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    const int64_t n = w->cols;
    const size_t row_bytes = (size_t)kn_row_stride(w) * nx_dtype_size(w->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w->data + (size_t)r * row_bytes;
        for (int t = 0; t < T; t++) y[(int64_t)t * ldy + r] = (float)dot_ref(wr, w->dtype, x + (int64_t)t * ldx, n);
    }
}

float kn_dot_f32_ref(const float *a, const float *b, int64_t n) {
    assert(n >= 0 && (n == 0 || (a != NULL && b != NULL)));
    return (float)dot_ref(a, NX_DT_F32, b, n);
}

/* Two roundings (multiply, then add), never a fused multiply-add: the SIMD twin
 * does the same, so both modes agree bit for bit. This relies on the build's
 * -ffp-contract=off (CMakeLists.txt), which keeps the compiler from fusing it. */
void kn_axpy_f32_ref(float *y, float a, const float *x, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void kn_scale_f32_ref(float *y, float a, int64_t n) {
    assert(n >= 0 && (n == 0 || y != NULL));
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

float kn_temper_f32_ref(float *x, int64_t n, float t) {
    assert(n >= 0 && (n == 0 || x != NULL));
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] / t;
        v = v != v ? -INFINITY : v + 0.0f;   /* + 0: -0 becomes +0 */
        x[i] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

int64_t kn_argmax_f32_ref(const float *x, int64_t n) {
    assert(n >= 0 && (n == 0 || x != NULL));
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

/* The update is the same two roundings in both twins (a * y[i], then fmaf),
 * so y comes out bit-identical; the dot product sums in double, as dot_ref.
 * (fmaf is a libm call in this portable build, and a slow one on a CPU
 * without FMA: the price of the twins agreeing.) */
float kn_scale_axpy_dot_f32_ref(float *y, const float *src, float a, float b, const float *x, const float *z, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && src != NULL && x != NULL && z != NULL)));
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(b, x[i], a * src[i]);
    return (float)dot_ref(y, NX_DT_F32, z, n);
}

/* ---- Conversions ---------------------------------------------------------
 * Exact widening of stored elements to f32 (bf16 and f16 fit in f32 without
 * rounding). Used for embedding lookups, one row per token, so a scalar loop is
 * enough. Reads go through memcpy because src may be unaligned. */

void kn_to_f32(nx_dtype dt, const void *src, float *dst, int64_t n) {
    assert(kn_dtype_ok(dt) && n >= 0 && (n == 0 || (src != NULL && dst != NULL)));
    const unsigned char *s = src;
    switch (dt) {
    case NX_DT_F32:
        if (n > 0) memcpy(dst, s, (size_t)n * sizeof(float));
        break;
    case NX_DT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = nx_bf16_to_f32(h);
        }
        break;
    case NX_DT_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = nx_f16_to_f32(h);
        }
        break;
    default:
        break;
    }
}

double kn_mat_bytes(const kn_mat *w) {
    if (w->fp) return kn_fp_bytes(w);
    const double per = w->bits ? w->bits / 8.0 + 2.0 * (double)nx_dtype_size(w->sdtype) / w->group
                               : (double)nx_dtype_size(w->dtype);
    return (double)w->rows * (double)w->cols * per;
}

void kn_mat_row_f32(const kn_mat *w, int64_t row, float *out) {
    assert(w != NULL);
    if (w->bits) {
        kn_affine_row_f32(w, row, out);
        return;
    }
    if (w->fp) {
        kn_fp_row_f32(w, row, out);
        return;
    }
    assert(kn_dtype_ok(w->dtype) && 0 <= row && row < w->rows);
    const size_t row_bytes = (size_t)kn_row_stride(w) * nx_dtype_size(w->dtype);
    kn_to_f32(w->dtype, (const char *)w->data + (size_t)row * row_bytes, out, w->cols);
}

/* ---- AVX2 + FMA + F16C twins ---------------------------------------------
 * Dot product layout — the fixed sequence behind bit-exactness. For a row of
 * n weights, with n32 = n & ~31 and n8 = n & ~7:
 *   1. four accumulators of 8 f32 lanes; element i < n8 goes to accumulator
 *      (i / 8) % 4, lane i % 8, by one FMA, in increasing i. The 32-wide loop
 *      covers [0, n32); at most three 8-wide steps cover [n32, n8).
 *   2. s = (acc0 + acc1) + (acc2 + acc3), then lanes are summed as
 *      (lo128 + hi128), then the upper pair onto the lower, then lane 1 onto 0.
 *   3. the tail [n8, n) is added one element at a time with a scalar FMA.
 * Why four accumulators: an FMA has about 4 cycles of latency and two issue per
 * cycle, so one chain would run far below the memory bandwidth at T = 1, while
 * four 8-lane chains keep up with DRAM; more buys nothing when memory bound.
 *
 * For T > 1, dot_rows_avx2 lets KN_TBLOCK activation rows share each widened
 * weight vector (three rows use 12 accumulators, which with the weight vector
 * fits the 16 ymm registers), but it still loads an activation vector per FMA.
 * dot_tile_avx2 shares both ways over a tile of weight rows x activation rows
 * and keeps the layout by running one accumulator of each product at a time
 * (see there). Measured with bench/bench_matmul.c, bf16, 1024 columns, one
 * thread, G weights/s at T = 1 / 2 / 3 / 4: from L3 17.8 / 9.9 / 7.9 / 5.2
 * (row by row before: 17.1 / 10.2 / 6.9 / 4.7), from DRAM 7.6 / 4.7 / 5.1 /
 * 4.6 (before: 6.2 / 4.6 / 2.9 / 2.5). */

#if KN_HAVE_X86

#define KN_TBLOCK 3

/* Steps 2 and 3 of the layout: the four accumulators of one product combined,
 * plus the tail [n8, n) of weights w and activations xt. */
KN_AVX2_INLINE float finish_avx2(const __m256 acc[4], const void *w, nx_dtype dt, const float *xt, int64_t n) {
    __m128 s = kn_hsum_avx2(acc, 4);
    for (int64_t j = n & ~(int64_t)7; j < n; j++) s = _mm_fmadd_ss(_mm_set_ss(kn_load1_avx2(w, dt, j)), _mm_set_ss(xt[j]), s);
    return _mm_cvtss_f32(s);
}

/* Bytes of a stored dense element (f32, bf16, f16): a constant after
 * inlining, for the steps' prefetches. */
static inline size_t dense_size(nx_dtype dt) { return dt == NX_DT_F32 ? 4 : 2; }

/* y[t * ldy] = dot(w[0..n), x[t * ldx ..]) for t < nt (1 <= nt <= KN_TBLOCK),
 * each in the layout above; each 32-column step also fetches its bytes'
 * worth ahead (kn_ahead; nothing where ahead.end is 0: later blocks of
 * activation rows, and a step unless kn_tuning's step_ahead, see
 * KN_DENSE_AHEAD_BYTES). nt and dt are constants after inlining. */
KN_AVX2_INLINE void dot_rows_avx2(const void *w, nx_dtype dt, const float *x, int64_t ldx, int nt,
                                  int64_t n, float *y, int64_t ldy, kn_ahead ahead) {
    __m256 acc[KN_TBLOCK][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
    int64_t i = 0;
    for (; i < n32; i += 32) {
        if (ahead.end) kn_ahead_step_avx2(&ahead, 32 * dense_size(dt));
        __m256 w0 = kn_load8_avx2(w, dt, i);
        KN_FMA_ROWS(0, w0, i);
        __m256 w1 = kn_load8_avx2(w, dt, i + 8);
        KN_FMA_ROWS(1, w1, i + 8);
        __m256 w2 = kn_load8_avx2(w, dt, i + 16);
        KN_FMA_ROWS(2, w2, i + 16);
        __m256 w3 = kn_load8_avx2(w, dt, i + 24);
        KN_FMA_ROWS(3, w3, i + 24);
    }
    /* Written out rather than indexed by (i / 8) % 4, so acc stays in registers. */
    if (i < n8) { __m256 wv = kn_load8_avx2(w, dt, i); KN_FMA_ROWS(0, wv, i); i += 8; }
    if (i < n8) { __m256 wv = kn_load8_avx2(w, dt, i); KN_FMA_ROWS(1, wv, i); i += 8; }
    if (i < n8) { __m256 wv = kn_load8_avx2(w, dt, i); KN_FMA_ROWS(2, wv, i); i += 8; }
    for (int t = 0; t < nt; t++) y[(int64_t)t * ldy] = finish_avx2(acc[t], w, dt, x + (int64_t)t * ldx, n);
}

/* Steps 1-3 of the layout for a tile of rw weight rows (at w, rows apart by
 * row_bytes) against nt activation rows at once: rw * nt products share each
 * loaded weight vector nt times and each activation vector rw times, where
 * dot_rows_avx2 loads an activation vector per FMA. Shapes (rw x nt): 4 x 2,
 * 3 x 3, 2 x 4, so the accumulators plus the activation vectors fit the 16
 * registers. That leaves no room for four accumulators per product, so
 * the columns go in chunks of KN_TILE_COLS (the chunk's weights and
 * activations stay in L1), and each chunk makes four passes, pass k running
 * accumulator k of every product over its blocks in the chunk (i with
 * (i / 8) % 4 == k, increasing) and parking it in `part`; after the last chunk
 * each accumulator k < 3 takes its step in [n32, n8), if any. Every
 * accumulator sees exactly the FMAs, in the order, that dot_rows_avx2 gives it,
 * so the results are the same bits.
 *
 * For nt > 1 each step also fetches its bytes' worth ahead (kn_ahead,
 * KN_DENSE_AHEAD_BYTES): with rows of a few KB, the hardware prefetcher does
 * not run far enough ahead of a tile's interleaved streams. */
#ifndef KN_TILE_COLS
#define KN_TILE_COLS 256
#endif
_Static_assert(KN_TILE_COLS > 0 && KN_TILE_COLS % 32 == 0, "a chunk must hold whole 32-column blocks");
_Static_assert(KN_TILE_GROUP % 12 == 0, "a group is a multiple of every tile height");
#define KN_TILE_MIN_T 2    /* fewer activation rows go row by row (see matmul_rows_fmt_avx2) */
_Static_assert(KN_TILE_MIN_T >= 2, "the AVX2 tiles take 2 to 4 activation rows, never 1");

/* a[r][t] = fma(w_r[i..i+8), x_t[i..i+8), a[r][t]) over the tile; a macro
 * over dot_tile_avx2's locals, so that a stays registers. */
#define KN_TILE_STEP(i)                                                                                        \
    do {                                                                                                       \
        __m256 v[4];                                                                                           \
        if (nt > 1) kn_ahead_step_avx2(&ahead, (size_t)rw * 8 * dense_size(dt));                              \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) v[t] = _mm256_loadu_ps(x + (int64_t)t * ldx + (i)); \
        _Pragma("GCC unroll 4") for (int r = 0; r < rw; r++) {                                                 \
            const __m256 wv = kn_load8_avx2(w0 + (size_t)r * row_bytes, dt, (i));                                 \
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[r][t] = _mm256_fmadd_ps(wv, v[t], a[r][t]);  \
        }                                                                                                      \
    } while (0)

/* a = part[k], part[k] = a: accumulator k of every product of the tile. */
#define KN_TILE_LOAD(k)                                                             \
    _Pragma("GCC unroll 4") for (int r = 0; r < rw; r++)                            \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[r][t] = part[k][r][t]
#define KN_TILE_STORE(k)                                                            \
    _Pragma("GCC unroll 4") for (int r = 0; r < rw; r++)                            \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) part[k][r][t] = a[r][t]

KN_AVX2_INLINE void dot_tile_avx2(const void *w, size_t row_bytes, int rw, nx_dtype dt, const float *x, int64_t ldx,
                                  int nt, int64_t n, float *y, int64_t ldy, kn_ahead ahead) {
    __m256 part[4][4][4];   /* [accumulator][weight row][activation row] */
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
    const char *w0 = w;
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < rw; r++)
            for (int t = 0; t < nt; t++) part[k][r][t] = _mm256_setzero_ps();
    for (int64_t c0 = 0; c0 < n32; c0 += KN_TILE_COLS) {
        const int64_t c1 = c0 + KN_TILE_COLS < n32 ? c0 + KN_TILE_COLS : n32;
        for (int k = 0; k < 4; k++) {
            __m256 a[4][4];
            KN_TILE_LOAD(k);
            for (int64_t i = c0 + 8 * k; i < c1; i += 32) KN_TILE_STEP(i);
            KN_TILE_STORE(k);
        }
    }
    for (int k = 0; k < 3 && n32 + 8 * k < n8; k++) {   /* accumulator k's last step, in [n32, n8) */
        __m256 a[4][4];
        KN_TILE_LOAD(k);
        KN_TILE_STEP(n32 + 8 * k);
        KN_TILE_STORE(k);
    }
    for (int r = 0; r < rw; r++)
        for (int t = 0; t < nt; t++) {
            const __m256 acc[4] = {part[0][r][t], part[1][r][t], part[2][r][t], part[3][r][t]};
            y[(int64_t)t * ldy + r] = finish_avx2(acc, w0 + (size_t)r * row_bytes, dt, x + (int64_t)t * ldx, n);
        }
}

/* How far past the rows it reads a dense product of 2 or more activation
 * rows prefetches: each tile, and each row short of a whole group, of its
 * first block of activation rows fetches its bytes' worth that far ahead
 * in address order as it goes (kn_ahead), up to the matrix's end. Against
 * fetching each chunk's lines of the next row group into L2 at once (the
 * scheme before), on the Zen 5 VM, bench-linear over the bf16 0.8B-shape
 * fixture, 2 threads, both ways in turn in one process (paired medians of
 * the time): AVX-512 T = 2 / 3 / 4 0.83 / 0.79 / 0.78-0.80x, T = 5 / 8 /
 * 16 / 32 0.86 / 0.89 / 0.88 / 0.95x; AVX2 T = 2 / 3 / 4 0.80 / 0.70 /
 * 0.86x, T = 5 / 8 / 32 0.83 / 0.88 / 0.93x; greedy MTP sessions (rounds
 * in turn, the same output) K = 1 / 2 / 3 0.83 / 0.84 / 0.81x the time a
 * round. 4 and 16 KB ahead ran within a few percent of 8. A step (T = 1)
 * reads each row as one stream that the hardware prefetcher follows: the
 * same prefetch there ran 0.87-0.89x the time in a slow phase of
 * bench-linear but 0.97-1.05x in a fast one, and 1.09-1.16x in greedy
 * plain sessions, so a step has none there; on Intel CPUs, where plain
 * loads leave a core's stream short, it does (kn_tuning's step_ahead).
 * Each line the cursor fetches into L1, it also fetches the line
 * KN_FAR_BYTES on into L2 (avx2.h; fifty-fourth session). bf16 fixture,
 * whole forwards after a 512-token prompt, both ways in turn in one process
 * with a read-bandwidth probe before each pair (paired medians, 40-60
 * pairs): AVX-512 T = 2 / 4 / 8 0.80 / 0.64 / 0.79x the time (T = 4 0.64x
 * in fast phases and in slow ones; a reach of 24 or 56 KB 0.64x, 8 KB
 * level with 24), AVX2 T = 4 0.81x; bench-linear's products at T = 16
 * 0.89x. A step took no far reach either: there bench-linear's products ran
 * 0.73x the time, but whole steps 1.08-1.14x. */
#define KN_DENSE_AHEAD_BYTES 8192

/* The prefetch cursor (kn_ahead) of a row or a tile of w whose rows end
 * before row `next`: KN_DENSE_AHEAD_BYTES past the rows it reads at once;
 * where fetch is 0 (a later block of activation rows, over the rows the
 * first one fetched; a step without kn_tuning's step_ahead), one that
 * fetches nothing. */
static inline kn_ahead dense_ahead(const kn_mat *w, size_t row_bytes, int64_t next, int fetch) {
    const size_t end = fetch ? (size_t)w->rows * row_bytes : 0;
    return (kn_ahead){w->data, (size_t)next * row_bytes + KN_DENSE_AHEAD_BYTES, end};
}

/* Whether the rows a product of T activation rows runs one by one fetch
 * ahead (their first block): always from 2 rows, a step (T = 1) where the
 * CPU's tuning says (kn_tuning's step_ahead). */
static inline int dense_rows_fetch(int T) { return T > 1 || kn_tuning_active().step_ahead; }

/* Tile height for nt activation rows (2, 3 or 4: dot_tile_avx2's shapes). */
static inline int tile_rows(int nt) { return nt == 4 ? 2 : nt == 3 ? 3 : 4; }

/* All rows [r0, r1) of one weight format; dt is a constant in each caller.
 * Below KN_TILE_MIN_T activation rows (decode; KN_TILE_MIN_T = 2 in the model's
 * products) the rows go one by one through dot_rows_avx2: that is bound by
 * memory, and one stream per thread is what the prefetcher follows best.
 * From 2 rows (verify blocks, prefill chunks) row by row reloads every
 * activation vector for each weight row, and those loads, not memory, set
 * the pace: perf put the stalls on the weight loads, prefetching rows ahead
 * made it slower, and tiles (5 rows and up, until this measurement) made a
 * bf16 T = 3 forward on 2 threads 88.9 / 94.2 / 89.4 -> 69.8 / 66.8 / 68.3
 * ms with this set (T = 2 73.0 / 74.9 -> 60.4 / 57.5, T = 4 88.3 / 88.3 ->
 * 65.7 / 71.3), 84.1 / 81.8 / 84.0 -> 61.6 / 60.3 / 65.1 with the AVX-512
 * one. (A whole-process A/B before commit b409248's kernels had found tiles
 * 1.15x slower for MTP decode.) The rows go in
 * groups of KN_TILE_GROUP (24 KB of bf16 at 1024 columns, so
 * the group stays in L1/L2 while every block of activation rows passes over
 * it: the weights are read from DRAM once whatever T is); activation rows go
 * in blocks of 3 (the fastest tile, 3 x 3), the last 2 to 4 as one block
 * (T >= 2 never leaves a single row); each block tiles the group. Rows short of a whole group run row by row
 * (dot_rows_avx2). A 500-token bf16 prefill of the same model took 0.92x the
 * wall time of row by row (whole-process A/B, median of 4 pairs). */
KN_AVX2_INLINE void matmul_rows_fmt_avx2(const kn_mat *w, nx_dtype dt, const float *x, int64_t ldx, int T,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->cols;
    const size_t row_bytes = (size_t)kn_row_stride(w) * nx_dtype_size(dt);
    int64_t r = r0;
    if (T >= KN_TILE_MIN_T)
        for (; r + KN_TILE_GROUP <= r1; r += KN_TILE_GROUP) {
            const char *wg = (const char *)w->data + (size_t)r * row_bytes;
            for (int t = 0; t < T;) {
                const int left = T - t, nt = left >= 5 ? 3 : left;
                const int rw = tile_rows(nt);
                const float *xt = x + (int64_t)t * ldx;
                float *yt = y + (int64_t)t * ldy + r;
                /* every (rw, nt) pair its own inlined copy; the first block prefetches */
                for (int j = 0; j < KN_TILE_GROUP; j += rw) {
                    const void *wj = wg + (size_t)j * row_bytes;
                    const kn_ahead ah = dense_ahead(w, row_bytes, r + j + rw, t == 0);
                    switch (nt) {
                    case 4: dot_tile_avx2(wj, row_bytes, 2, dt, xt, ldx, 4, n, yt + j, ldy, ah); break;
                    case 3: dot_tile_avx2(wj, row_bytes, 3, dt, xt, ldx, 3, n, yt + j, ldy, ah); break;
                    case 2: dot_tile_avx2(wj, row_bytes, 4, dt, xt, ldx, 2, n, yt + j, ldy, ah); break;
                    default: assert(!"no 1-row tile"); break;
                    }
                }
                t += nt;
            }
        }
    const int fetch = dense_rows_fetch(T);
    for (; r < r1; r++) {
        const void *wr = (const char *)w->data + (size_t)r * row_bytes;
        kn_ahead ah = dense_ahead(w, row_bytes, r + 1, fetch);
        int t = 0;
        for (; t + KN_TBLOCK <= T; t += KN_TBLOCK, ah.end = 0)   /* the first block prefetches */
            dot_rows_avx2(wr, dt, x + (int64_t)t * ldx, ldx, KN_TBLOCK, n, y + (int64_t)t * ldy + r, ldy, ah);
        /* The T % KN_TBLOCK leftover rows, each block size its own inlined copy. */
        switch (T - t) {
        case 2: dot_rows_avx2(wr, dt, x + (int64_t)t * ldx, ldx, 2, n, y + (int64_t)t * ldy + r, ldy, ah); break;
        case 1: dot_rows_avx2(wr, dt, x + (int64_t)t * ldx, ldx, 1, n, y + (int64_t)t * ldy + r, ldy, ah); break;
        default: break;
        }
    }
}

static KN_AVX2 void matmul_rows_f32_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y,
                                         int64_t ldy, int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx2(w, NX_DT_F32, x, ldx, T, y, ldy, r0, r1);
}

static KN_AVX2 void matmul_rows_bf16_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y,
                                          int64_t ldy, int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx2(w, NX_DT_BF16, x, ldx, T, y, ldy, r0, r1);
}

static KN_AVX2 void matmul_rows_f16_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y,
                                         int64_t ldy, int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx2(w, NX_DT_F16, x, ldx, T, y, ldy, r0, r1);
}

/* A SIMD set's dense product for one format (f32, bf16, f16). */
typedef void (*kn_rows_fn)(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                           int64_t r1);

/* kn_matmul_rows for a SIMD set: affine weights to quant.c, dense ones to
 * the set's kernel for their format (dense[0..2]: f32, bf16, f16; dense[3]:
 * its fused E4M3 product, fpq.h). */
static void matmul_rows_simd(const kn_rows_fn dense[4], const kn_mat *w, const float *x, int64_t ldx, int T, float *y,
                             int64_t ldy, int64_t r0, int64_t r1) {
    assert_matmul_args(w, x, ldx, T, y, ldy, r0, r1);
    if (T == 0 || r0 == r1) return;
    if (w->bits) {
        kn_affine_matmul_rows_avx2(w, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    if (w->fp) {   /* dequantized rows through the set's dense f32 product (fpq.h) */
        if ((w->fp == KN_FP_MXFP8 || w->fp == KN_FP_FP8_BLOCK) && T <= KN_FP8_FUSED_T)
            dense[3](w, x, ldx, T, y, ldy, r0, r1);   /* the same, decoded in registers */
        else kn_fp_matmul_rows(w, kn_fp_row_f32_avx2, dense[0], x, ldx, T, y, ldy, r0, r1);
        return;
    }
    switch (w->dtype) {
    case NX_DT_F32: dense[0](w, x, ldx, T, y, ldy, r0, r1); break;
    case NX_DT_BF16: dense[1](w, x, ldx, T, y, ldy, r0, r1); break;
    case NX_DT_F16: dense[2](w, x, ldx, T, y, ldy, r0, r1); break;
    default: assert(!"unsupported weight dtype");
    }
}

static void matmul_rows_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                             int64_t r0, int64_t r1) {
    static const kn_rows_fn dense[4] = {matmul_rows_f32_avx2, matmul_rows_bf16_avx2, matmul_rows_f16_avx2,
                                        kn_fp8_matmul_rows_avx2};
    matmul_rows_simd(dense, w, x, ldx, T, y, ldy, r0, r1);
}

static KN_AVX2 float dot_f32_avx2(const float *a, const float *b, int64_t n) {
    assert(n >= 0 && (n == 0 || (a != NULL && b != NULL)));
    float out;
    dot_rows_avx2(a, NX_DT_F32, b, 0, 1, n, &out, 0, (kn_ahead){0});
    return out;
}

/* Multiply then add, as the scalar twin does (see kn_axpy_f32_ref): this is
 * memory bound, so the fused form would buy no speed, only a mode-dependent
 * last bit. */
static KN_AVX2 void axpy_f32_avx2(float *y, float a, const float *x, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    const __m256 av = _mm256_set1_ps(a);
    const int64_t n8 = n & ~(int64_t)7;
    int64_t i = 0;
    for (; i < n8; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        _mm_store_ss(y + i, _mm_add_ss(_mm_load_ss(y + i), _mm_mul_ss(_mm_set_ss(a), _mm_load_ss(x + i))));
}

/* Four sets of eight lanes, lane l of set k over the elements i with i mod
 * 32 = 8k + l (the 8-element blocks between the last multiple of 32 and of 8
 * go to set 0): each keeps the first index of its largest non-NaN value (-1
 * while it has seen only NaNs); then the largest value over the 32 lanes,
 * the lowest index among equals, which is the first index of the maximum, as
 * the scalar twin finds; the tail after the last multiple of 8 is compared in
 * order. Four sets because a lane's compare-and-blend is a chain through its
 * running maximum (~5 cycles a block): one set ran a 248k vocabulary at
 * ~10 GB/s, ~95 us a row on the calling thread, for every sampled or drafted
 * token. Indices in int32 lanes: an n past them (never a vocabulary) goes to
 * the scalar twin. */
KN_AVX2_INLINE void argmax_step_avx2(__m256 *mv, __m256i *iv, const float *x, __m256i at) {
    const __m256 v = _mm256_loadu_ps(x);
    const __m256 first = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_setzero_si256(), *iv)),
                                       _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, *mv, _CMP_GT_OQ), first);
    *mv = _mm256_blendv_ps(*mv, v, take);
    *iv = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*iv), _mm256_castsi256_ps(at), take));
}

static KN_AVX2 int64_t argmax_f32_avx2(const float *x, int64_t n) {
    assert(n >= 0 && (n == 0 || x != NULL));
    if (n > INT32_MAX - 32) return kn_argmax_f32_ref(x, n);   /* lane indices are int32 */
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), step = _mm256_set1_epi32(32);
    __m256 mv[4];
    __m256i iv[4], at[4];
    for (int k = 0; k < 4; k++)
        mv[k] = _mm256_set1_ps(-INFINITY), iv[k] = _mm256_set1_epi32(-1), at[k] = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * k));
    int64_t i = 0;
    for (; i < n32; i += 32)
        for (int k = 0; k < 4; k++) {
            argmax_step_avx2(&mv[k], &iv[k], x + i + 8 * k, at[k]);
            at[k] = _mm256_add_epi32(at[k], step);
        }
    for (; i < n8; i += 8) argmax_step_avx2(&mv[0], &iv[0], x + i, _mm256_add_epi32(lane, _mm256_set1_epi32((int)i)));
    float m32[32];
    int32_t i32[32];
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(m32 + 8 * k, mv[k]);
        _mm256_storeu_si256((__m256i *)(void *)(i32 + 8 * k), iv[k]);
    }
    int64_t best = -1;
    float bv = 0.0f;
    for (int l = 0; l < 32; l++)
        if (i32[l] >= 0 && (best < 0 || m32[l] > bv || (m32[l] == bv && i32[l] < best))) best = i32[l], bv = m32[l];
    for (int64_t j = n8; j < n; j++)
        if (x[j] == x[j] && (best < 0 || x[j] > bv)) best = j, bv = x[j];
    return best < 0 ? 0 : best;
}

static KN_AVX2 void scale_f32_avx2(float *y, float a, int64_t n) {
    assert(n >= 0 && (n == 0 || y != NULL));
    const __m256 av = _mm256_set1_ps(a);
    const int64_t n8 = n & ~(int64_t)7;
    int64_t i = 0;
    for (; i < n8; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), av));
    for (; i < n; i++) y[i] *= a;
}

/* Four running maxima, so that the compare chains overlap; max_ps of two
 * non-NaN values is the larger (equal ones are equal but for the sign of a
 * zero, and no -0 is left). */
static KN_AVX2 float temper_f32_avx2(float *x, int64_t n, float t) {
    assert(n >= 0 && (n == 0 || x != NULL));
    const __m256 tv = _mm256_set1_ps(t), ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
    __m256 mv[4] = {ninf, ninf, ninf, ninf};
    const int64_t n32 = n & ~(int64_t)31;
    int64_t i = 0;
    for (; i < n32; i += 32)
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), tv);
            v = _mm256_blendv_ps(_mm256_add_ps(v, zero), ninf, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            _mm256_storeu_ps(x + i + 8 * k, v);
            mv[k] = _mm256_max_ps(mv[k], v);
        }
    float m8[8], mx = -INFINITY;
    _mm256_storeu_ps(m8, _mm256_max_ps(_mm256_max_ps(mv[0], mv[1]), _mm256_max_ps(mv[2], mv[3])));
    for (int l = 0; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
    const float rest = kn_temper_f32_ref(x + i, n - i, t);
    return rest > mx ? rest : mx;
}

/* kn_scale_axpy_dot_f32: the update of 8 elements, then its FMA into the dot
 * product's accumulator of the "Dot product layout" (block i / 8 goes to
 * accumulator (i / 8) % 4), so the result is what dot_f32_avx2 would give on
 * the new y. */
static KN_AVX2 float scale_axpy_dot_f32_avx2(float *y, const float *src, float a, float b, const float *x, const float *z,
                                             int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && src != NULL && x != NULL && z != NULL)));
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
/* block i of the update into accumulator k (a constant: acc stays in registers) */
#define KN_SAD_STEP(k, i)                                                                                      \
    do {                                                                                                       \
        const __m256 v = _mm256_fmadd_ps(bv, _mm256_loadu_ps(x + (i)), _mm256_mul_ps(av, _mm256_loadu_ps(src + (i)))); \
        _mm256_storeu_ps(y + (i), v);                                                                          \
        acc[k] = _mm256_fmadd_ps(v, _mm256_loadu_ps(z + (i)), acc[k]);                                         \
    } while (0)
    int64_t i = 0;
    for (; i < n32; i += 32) {
        KN_SAD_STEP(0, i);
        KN_SAD_STEP(1, i + 8);
        KN_SAD_STEP(2, i + 16);
        KN_SAD_STEP(3, i + 24);
    }
    if (i < n8) { KN_SAD_STEP(0, i); i += 8; }
    if (i < n8) { KN_SAD_STEP(1, i); i += 8; }
    if (i < n8) { KN_SAD_STEP(2, i); i += 8; }
#undef KN_SAD_STEP
    for (int64_t j = n8; j < n; j++) y[j] = fmaf(b, x[j], a * src[j]);
    return finish_avx2(acc, y, NX_DT_F32, z, n);
}

/* ---- AVX-512 twins of the dense products (the avx512vnni set) -----------
 * dot_rows_avx2 with 16-lane vectors: one register holds accumulators 0 and
 * 1 of the dot product layout (lanes 0-7 and 8-15), another 2 and 3, so each
 * 16-lane FMA is exactly two of dot_rows_avx2's 8-lane ones, in the same
 * order: the same bits, with half the instructions (the widening of bf16 and
 * f16 too). In [n32, n8) a 16-wide step is a whole register and an 8-wide
 * one half a register, masked. Four
 * activation rows share each widened weight vector (the 32 registers hold
 * their eight accumulators), so a verify of up to 3 drafts widens every
 * weight once. The tiles (prefill) pair accumulators the same way. */

#define KN_TBLOCK_512 4

/* Stored elements w[i .. i+16) as f32; only the first 8 when half. */
KN_VNNI_INLINE __m512 load16_avx512(const void *w, nx_dtype dt, int64_t i, int half) {
    if (dt == NX_DT_F32) return half ? _mm512_maskz_loadu_ps(0x00FF, (const float *)w + i) : _mm512_loadu_ps((const float *)w + i);
    const uint16_t *p = (const uint16_t *)w + i;
    const __m256i h = half ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p))
                           : _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (dt == NX_DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* finish_avx2 for one product whose four accumulators are the halves of a01
 * (0 in lanes 0-7, 1 in 8-15) and a23. */
KN_VNNI_INLINE float finish_pairs_avx512(__m512 a01, __m512 a23, const void *w, nx_dtype dt, const float *xt, int64_t n) {
#define KN_HI8(v) _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
    const __m256 acc[4] = {_mm512_castps512_ps256(a01), KN_HI8(a01), _mm512_castps512_ps256(a23), KN_HI8(a23)};
#undef KN_HI8
    return finish_avx2(acc, w, dt, xt, n);
}

/* dot_rows_avx2's y for t < nt (1 <= nt <= KN_TBLOCK_512), and its
 * prefetch. */
KN_VNNI_INLINE void dot_rows_avx512(const void *w, nx_dtype dt, const float *x, int64_t ldx, int nt, int64_t n, float *y,
                                    int64_t ldy, kn_ahead ahead) {
    __m512 a01[KN_TBLOCK_512], a23[KN_TBLOCK_512];
    for (int t = 0; t < nt; t++) a01[t] = _mm512_setzero_ps(), a23[t] = _mm512_setzero_ps();
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
    int64_t i = 0;
    for (; i < n32; i += 32) {
        if (ahead.end) kn_ahead_step_avx2(&ahead, 32 * dense_size(dt));
        const __m512 w01 = load16_avx512(w, dt, i, 0), w23 = load16_avx512(w, dt, i + 16, 0);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            const float *xt = x + (int64_t)t * ldx + i;
            a01[t] = _mm512_fmadd_ps(w01, _mm512_loadu_ps(xt), a01[t]);
            a23[t] = _mm512_fmadd_ps(w23, _mm512_loadu_ps(xt + 16), a23[t]);
        }
    }
    /* [n32, n8): accumulator 0 (and 1) in a01, then 2 in a23 */
    if (i + 16 <= n8) {
        const __m512 wv = load16_avx512(w, dt, i, 0);
        for (int t = 0; t < nt; t++) a01[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + (int64_t)t * ldx + i), a01[t]);
        i += 16;
        if (i < n8) {
            const __m512 wh = load16_avx512(w, dt, i, 1);
            for (int t = 0; t < nt; t++)
                a23[t] = _mm512_mask3_fmadd_ps(wh, _mm512_maskz_loadu_ps(0x00FF, x + (int64_t)t * ldx + i), a23[t], 0x00FF);
        }
    } else if (i < n8) {
        const __m512 wh = load16_avx512(w, dt, i, 1);
        for (int t = 0; t < nt; t++)
            a01[t] = _mm512_mask3_fmadd_ps(wh, _mm512_maskz_loadu_ps(0x00FF, x + (int64_t)t * ldx + i), a01[t], 0x00FF);
    }
    for (int t = 0; t < nt; t++) y[(int64_t)t * ldy] = finish_pairs_avx512(a01[t], a23[t], w, dt, x + (int64_t)t * ldx, n);
}

/* a[r][t] = fma(w_r[i..i+16), x_t[i..i+16), a[r][t]) over the tile; only
 * the first 8 columns when half (masked). A macro over dot_tile_avx512's
 * locals, so that a stays registers. */
#define KN_TILE_STEP_512(i, half)                                                                              \
    do {                                                                                                       \
        __m512 v[4];                                                                                           \
        if (nt > 1 && !(half)) kn_ahead_step_avx2(&ahead, (size_t)rw * 16 * dense_size(dt));                  \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) v[t] =                                             \
            (half) ? _mm512_maskz_loadu_ps(0x00FF, x + (int64_t)t * ldx + (i)) : _mm512_loadu_ps(x + (int64_t)t * ldx + (i)); \
        _Pragma("GCC unroll 4") for (int r = 0; r < rw; r++) {                                                 \
            const __m512 wv = load16_avx512(w0 + (size_t)r * row_bytes, dt, (i), (half));                       \
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[r][t] =                                      \
                (half) ? _mm512_mask3_fmadd_ps(wv, v[t], a[r][t], 0x00FF) : _mm512_fmadd_ps(wv, v[t], a[r][t]); \
        }                                                                                                      \
    } while (0)

/* dot_tile_avx2 with 16-lane vectors: a register holds accumulators 2p and
 * 2p + 1 of one product (lanes 0-7, 8-15), and a chunk runs pair p = 0, then
 * 1: block i's columns [i + 16p, i + 16p + 16) by one 16-lane FMA, which is
 * the two 8-lane FMAs dot_tile_avx2 gives accumulators 2p and 2p + 1, in the
 * same order (the same bits). The 32 registers hold tiles up to 4 x 4 (16
 * accumulators, 4 activation vectors, a weight vector). */
KN_VNNI_INLINE void dot_tile_avx512(const void *w, size_t row_bytes, int rw, nx_dtype dt, const float *x, int64_t ldx,
                                    int nt, int64_t n, float *y, int64_t ldy, kn_ahead ahead) {
    __m512 part[2][4][4];   /* [accumulator pair][weight row][activation row] */
    const int64_t n32 = n & ~(int64_t)31, n8 = n & ~(int64_t)7;
    const char *w0 = w;
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < rw; r++)
            for (int t = 0; t < nt; t++) part[p][r][t] = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < n32; c0 += KN_TILE_COLS) {
        const int64_t c1 = c0 + KN_TILE_COLS < n32 ? c0 + KN_TILE_COLS : n32;
        for (int p = 0; p < 2; p++) {
            __m512 a[4][4];
            KN_TILE_LOAD(p);
            for (int64_t i = c0 + 16 * p; i < c1; i += 32) KN_TILE_STEP_512(i, 0);
            KN_TILE_STORE(p);
        }
    }
    /* [n32, n8): accumulator 0's step (and 1's) in pair 0, then 2's in pair 1 */
    if (n32 + 16 <= n8) {
        __m512 a[4][4];
        KN_TILE_LOAD(0);
        KN_TILE_STEP_512(n32, 0);
        KN_TILE_STORE(0);
        if (n32 + 16 < n8) {
            KN_TILE_LOAD(1);
            KN_TILE_STEP_512(n32 + 16, 1);
            KN_TILE_STORE(1);
        }
    } else if (n32 < n8) {
        __m512 a[4][4];
        KN_TILE_LOAD(0);
        KN_TILE_STEP_512(n32, 1);
        KN_TILE_STORE(0);
    }
    for (int r = 0; r < rw; r++)
        for (int t = 0; t < nt; t++)
            y[(int64_t)t * ldy + r] =
                finish_pairs_avx512(part[0][r][t], part[1][r][t], w0 + (size_t)r * row_bytes, dt, x + (int64_t)t * ldx, n);
}

/* matmul_rows_fmt_avx2 on 16-lane vectors: from KN_TILE_MIN_T activation rows,
 * groups of KN_TILE_GROUP weight rows in 4 x 4 tiles (the last 1-3
 * activation rows as 4 x nt); rows short of a group, and fewer activation
 * rows, through dot_rows_avx512, four activation rows a pass. (Tiles from 2
 * rows, see matmul_rows_fmt_avx2: bf16 generate --draft 2 -n 128, three
 * pairs, 20.5 / 20.7 / 18.1 -> 24.4 / 30.5 / 26.8 tok/s.) */
KN_VNNI_INLINE void matmul_rows_fmt_avx512(const kn_mat *w, nx_dtype dt, const float *x, int64_t ldx, int T, float *y,
                                           int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->cols;
    const size_t row_bytes = (size_t)kn_row_stride(w) * nx_dtype_size(dt);
    int64_t r = r0;
    if (T >= KN_TILE_MIN_T)
        for (; r + KN_TILE_GROUP <= r1; r += KN_TILE_GROUP) {
            const char *wg = (const char *)w->data + (size_t)r * row_bytes;
            for (int t = 0; t < T; t += KN_TBLOCK_512) {
                const int nt = T - t < KN_TBLOCK_512 ? T - t : KN_TBLOCK_512;
                const float *xt = x + (int64_t)t * ldx;
                float *yt = y + (int64_t)t * ldy + r;
                /* every nt its own inlined copy; the first block prefetches */
                for (int j = 0; j < KN_TILE_GROUP; j += 4) {
                    const void *wj = wg + (size_t)j * row_bytes;
                    const kn_ahead ah = dense_ahead(w, row_bytes, r + j + 4, t == 0);
                    switch (nt) {
                    case 4: dot_tile_avx512(wj, row_bytes, 4, dt, xt, ldx, 4, n, yt + j, ldy, ah); break;
                    case 3: dot_tile_avx512(wj, row_bytes, 4, dt, xt, ldx, 3, n, yt + j, ldy, ah); break;
                    case 2: dot_tile_avx512(wj, row_bytes, 4, dt, xt, ldx, 2, n, yt + j, ldy, ah); break;
                    default: dot_tile_avx512(wj, row_bytes, 4, dt, xt, ldx, 1, n, yt + j, ldy, ah); break;
                    }
                }
            }
        }
    const int fetch = dense_rows_fetch(T);
    for (; r < r1; r++) {
        const void *wr = (const char *)w->data + (size_t)r * row_bytes;
        kn_ahead ah = dense_ahead(w, row_bytes, r + 1, fetch);
        for (int t = 0; t < T; t += KN_TBLOCK_512, ah.end = 0) {   /* the first block prefetches */
            const float *xt = x + (int64_t)t * ldx;
            float *yt = y + (int64_t)t * ldy + r;
            switch (T - t < KN_TBLOCK_512 ? T - t : KN_TBLOCK_512) {   /* each count its own inlined copy */
            case 4: dot_rows_avx512(wr, dt, xt, ldx, 4, n, yt, ldy, ah); break;
            case 3: dot_rows_avx512(wr, dt, xt, ldx, 3, n, yt, ldy, ah); break;
            case 2: dot_rows_avx512(wr, dt, xt, ldx, 2, n, yt, ldy, ah); break;
            default: dot_rows_avx512(wr, dt, xt, ldx, 1, n, yt, ldy, ah); break;
            }
        }
    }
}
_Static_assert(KN_TILE_GROUP % 4 == 0, "a group is whole 4-row tiles");

static KN_VNNI void matmul_rows_f32_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                           int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx512(w, NX_DT_F32, x, ldx, T, y, ldy, r0, r1);
}

static KN_VNNI void matmul_rows_bf16_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                            int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx512(w, NX_DT_BF16, x, ldx, T, y, ldy, r0, r1);
}

static KN_VNNI void matmul_rows_f16_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                           int64_t r0, int64_t r1) {
    matmul_rows_fmt_avx512(w, NX_DT_F16, x, ldx, T, y, ldy, r0, r1);
}

static void matmul_rows_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                               int64_t r1) {
    static const kn_rows_fn dense[4] = {matmul_rows_f32_avx512, matmul_rows_bf16_avx512, matmul_rows_f16_avx512,
                                        kn_fp8_matmul_rows_avx512};
    matmul_rows_simd(dense, w, x, ldx, T, y, ldy, r0, r1);
}

#endif /* KN_HAVE_X86 */

/* ---- Dispatch ------------------------------------------------------------
 * One table per implementation and one pointer to the active table: the only
 * mutable global in the kernels. kn_select (each model load) sets it with one
 * store, while no kernel runs (nextn.h asks callers to load while no other
 * model runs). It starts at the scalar table, so a kernel called before any
 * kn_select is correct, only slow. */

typedef struct {
    const char *name;
    void (*matmul_rows)(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                        int64_t r0, int64_t r1);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n);
    void (*scale_f32)(float *y, float a, int64_t n);
    float (*temper_f32)(float *x, int64_t n, float t);
    int64_t (*argmax_f32)(const float *x, int64_t n);
    float (*scale_axpy_dot_f32)(float *y, const float *src, float a, float b, const float *x, const float *z, int64_t n);
    void (*silu_mul_f32)(float *y, const float *x, const float *u, int64_t n);
    void (*sigmoid_gate_f32)(float *y, const float *g, int64_t n);
    void (*softmax_f32)(float *p, int64_t n, float scale);
    double (*sum_exp_f32)(const float *x, int64_t n, float mx);
    double (*exp_sum_f32)(float *w, const float *x, int64_t n, float mx);
    void (*attn_scores)(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                        const void *k, nx_dtype kdt, int64_t hd);
    void (*attn_values)(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                        const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd);
    void (*quantize_x)(kn_qx *qx, const float *x, int64_t ldx);
    void (*matmul_qx_rows)(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
    void (*fp_qx_rows)(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
    void (*affine_quantize_row)(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                                void *scales, void *biases);
    void (*affine_row_f32)(const kn_mat *w, int64_t row, float *out);
    void (*lanes_planes_chunk)(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                               unsigned char *dst);
    void (*fp_row_f32)(const kn_mat *w, int64_t row, float *out);
    void (*sketch_scores)(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1);
    kn_sketch_layout sketch_layout;   /* the layout sketch_scores takes fastest */
    int64_t (*top_k_collect)(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey);
    void (*gated_delta_steps)(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk, int dk,
                              int dv, int stream);
    void (*gated_delta_replay)(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                               const float *alpha, int dk, int dv);
    void (*conv_silu)(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                      int64_t c1);
} kn_impl;

static const kn_impl kn_impl_scalar = {
    .name = "scalar", .matmul_rows = kn_matmul_rows_ref,
    .dot_f32 = kn_dot_f32_ref, .axpy_f32 = kn_axpy_f32_ref, .scale_f32 = kn_scale_f32_ref, .argmax_f32 = kn_argmax_f32_ref,
    .temper_f32 = kn_temper_f32_ref,
    .scale_axpy_dot_f32 = kn_scale_axpy_dot_f32_ref, .silu_mul_f32 = kn_silu_mul_f32_ref,
    .sigmoid_gate_f32 = kn_sigmoid_gate_f32_ref, .softmax_f32 = kn_softmax_f32_ref,
    .sum_exp_f32 = kn_sum_exp_f32_ref, .exp_sum_f32 = kn_exp_sum_f32_ref,
    .attn_scores = kn_attn_scores_ref, .attn_values = kn_attn_values_ref, .quantize_x = kn_quantize_x_ref,
    .matmul_qx_rows = kn_matmul_qx_rows_ref, .fp_qx_rows = kn_fp_matmul_qx_rows_ref,
    .affine_quantize_row = kn_affine_quantize_row_ref, .lanes_planes_chunk = kn_lanes_planes_chunk_ref,
    .affine_row_f32 = kn_affine_row_f32_ref, .fp_row_f32 = kn_fp_row_f32_ref, .sketch_scores = kn_sketch_scores_ref,
    .sketch_layout = KN_SKETCH_ROWS,
    .top_k_collect = kn_top_k_collect_ref,
    .gated_delta_steps = kn_gated_delta_steps_rows, .gated_delta_replay = kn_gated_delta_replay_ref,
    .conv_silu = kn_conv_silu_ref};
#if KN_HAVE_X86
/* The AVX2 set's entries but its int8 products, which the AVX-VNNI set
 * shares (the sketch scores included). */
#define KN_AVX2_SHARED                                                                                               \
    .matmul_rows = matmul_rows_avx2, .dot_f32 = dot_f32_avx2, .axpy_f32 = axpy_f32_avx2,                             \
    .scale_f32 = scale_f32_avx2, .argmax_f32 = argmax_f32_avx2, .scale_axpy_dot_f32 = scale_axpy_dot_f32_avx2,       \
    .temper_f32 = temper_f32_avx2,                                                                                   \
    .silu_mul_f32 = kn_silu_mul_f32_avx2, .sigmoid_gate_f32 = kn_sigmoid_gate_f32_avx2,                              \
    .softmax_f32 = kn_softmax_f32_avx2, .sum_exp_f32 = kn_sum_exp_f32_avx2, .attn_values = kn_attn_values_avx2,     \
    .attn_scores = kn_attn_scores_avx2,                                                                              \
    .exp_sum_f32 = kn_exp_sum_f32_avx2,                                                                              \
    .quantize_x = kn_quantize_x_avx2,                                                                                \
    .affine_quantize_row = kn_affine_quantize_row_avx2, .affine_row_f32 = kn_affine_row_f32_avx2,                   \
    .lanes_planes_chunk = kn_lanes_planes_chunk_avx2,                                                                \
    .fp_row_f32 = kn_fp_row_f32_avx2, .sketch_scores = kn_sketch_scores_avx2,                                      \
    .sketch_layout = KN_SKETCH_BLOCKS, .top_k_collect = kn_top_k_collect_ref,                                        \
    .gated_delta_steps = kn_gated_delta_steps_rows, .gated_delta_replay = kn_gated_delta_replay_avx2,              \
    .conv_silu = kn_conv_silu_avx2
static const kn_impl kn_impl_avx2 = {.name = "avx2", KN_AVX2_SHARED, .matmul_qx_rows = kn_matmul_qx_rows_avx2,
                                     .fp_qx_rows = kn_fp_matmul_qx_rows_avx2};
/* The AVX2 set with the int8 products on AVX-VNNI (the QX_AVXVNNI and
 * FX_AVXVNNI copies of quant_qx.inc and fpq_qx.inc). */
static const kn_impl kn_impl_avxvnni = {.name = "avxvnni", KN_AVX2_SHARED,
                                        .matmul_qx_rows = kn_matmul_qx_rows_avxvnni,
                                        .fp_qx_rows = kn_fp_matmul_qx_rows_avxvnni};
#undef KN_AVX2_SHARED
/* The AVX2 set with the int8 product on vpdpbusd (quant_qx.inc), and the
 * sketch scores' nibble look-ups (sketch.c), the dense row-by-row products,
 * the gated delta step, the attention scores and value sums, the SiLU and
 * the softmax weights' sums (act.c) on 512-bit vectors. */
static const kn_impl kn_impl_avx512vnni = {
    .name = "avx512vnni", .matmul_rows = matmul_rows_avx512,
    .dot_f32 = dot_f32_avx2, .axpy_f32 = axpy_f32_avx2, .scale_f32 = scale_f32_avx2, .argmax_f32 = argmax_f32_avx2,
    .temper_f32 = temper_f32_avx2, .scale_axpy_dot_f32 = scale_axpy_dot_f32_avx2,
    .silu_mul_f32 = kn_silu_mul_f32_avx512,
    .sigmoid_gate_f32 = kn_sigmoid_gate_f32_avx2, .softmax_f32 = kn_softmax_f32_avx2,
    .sum_exp_f32 = kn_sum_exp_f32_avx512, .exp_sum_f32 = kn_exp_sum_f32_avx512,
    .attn_scores = kn_attn_scores_avx512, .attn_values = kn_attn_values_avx512, .quantize_x = kn_quantize_x_avx2,
    .matmul_qx_rows = kn_matmul_qx_rows_avx512vnni, .fp_qx_rows = kn_fp_matmul_qx_rows_avx512vnni,
    .affine_quantize_row = kn_affine_quantize_row_avx2, .lanes_planes_chunk = kn_lanes_planes_chunk_avx2,
    .affine_row_f32 = kn_affine_row_f32_avx2, .fp_row_f32 = kn_fp_row_f32_avx2,
    .sketch_scores = kn_sketch_scores_avx512vnni, .sketch_layout = KN_SKETCH_BLOCKS,
    .top_k_collect = kn_top_k_collect_avx512vnni,
    .gated_delta_steps = kn_gated_delta_steps_avx512, .gated_delta_replay = kn_gated_delta_replay_avx512,
    .conv_silu = kn_conv_silu_avx512};
#endif

static _Atomic(const kn_impl *) kn_active = &kn_impl_scalar;
static _Atomic int kn_wide_l1;     /* kn_tuning.wide_l1 */
static _Atomic int kn_step_ahead;  /* kn_tuning.step_ahead */

/* The active table; relaxed: it only changes between model loads, and each
 * table is constant. */
static inline const kn_impl *active(void) { return atomic_load_explicit(&kn_active, memory_order_relaxed); }

#if KN_HAVE_X86
/* F16C is read from CPUID (leaf 1, ECX bit 29) rather than
 * __builtin_cpu_supports("f16c"), which clang 14 rejects. Its registers are the
 * AVX state, whose OS support the "avx2" check already covers; the AVX-512
 * checks cover the OS's saving of the AVX-512 state (XCR0). */
static int kn_cpu_has_avx2(void) {
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

/* AVX-VNNI (the VEX form): CPUID leaf 7 subleaf 1, EAX bit 4. */
static int kn_cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    return kn_cpu_has_avx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
}

static int kn_cpu_has_avx512vnni(void) {
    return kn_cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* AMD family 0x1A (Zen 5) or later: CPUID leaf 0's vendor, leaf 1's base
 * family 0xF plus its extended family. */
static int kn_cpu_is_amd_zen5(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base = (a >> 8) & 0xf, ext = (a >> 20) & 0xff;
    return base == 0xf && base + ext >= 0x1a;
}

/* CPUID leaf 0's vendor: "GenuineIntel". */
static int kn_cpu_is_intel(void) {
    unsigned a, b, c, d;
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
}
#endif

kn_isa kn_isa_available(kn_isa max) {
#if KN_HAVE_X86
    if (max >= KN_ISA_AVX512VNNI && kn_cpu_has_avx512vnni()) return KN_ISA_AVX512VNNI;
    if (max >= KN_ISA_AVXVNNI && kn_cpu_has_avxvnni()) return KN_ISA_AVXVNNI;
    if (max >= KN_ISA_AVX2 && kn_cpu_has_avx2()) return KN_ISA_AVX2;
#endif
    (void)max;
    return KN_ISA_SCALAR;
}

kn_isa kn_select(kn_isa max) {
    const kn_isa isa = kn_isa_available(max);
    const kn_impl *pick = &kn_impl_scalar;
#if KN_HAVE_X86
    if (isa == KN_ISA_AVX512VNNI) pick = &kn_impl_avx512vnni;
    else if (isa == KN_ISA_AVXVNNI) pick = &kn_impl_avxvnni;
    else if (isa == KN_ISA_AVX2) pick = &kn_impl_avx2;
#endif
    atomic_store_explicit(&kn_active, pick, memory_order_relaxed);   /* one store: never a set in between */
    int wide_l1 = 0, step_ahead = 0;
#if KN_HAVE_X86
    wide_l1 = isa == KN_ISA_AVX512VNNI && kn_cpu_is_amd_zen5();
    step_ahead = isa >= KN_ISA_AVX2 && kn_cpu_is_intel();
#endif
    atomic_store_explicit(&kn_wide_l1, wide_l1, memory_order_relaxed);
    atomic_store_explicit(&kn_step_ahead, step_ahead, memory_order_relaxed);
    return kn_isa_active();
}

kn_tuning kn_tuning_active(void) {
    return (kn_tuning){atomic_load_explicit(&kn_wide_l1, memory_order_relaxed),
                       atomic_load_explicit(&kn_step_ahead, memory_order_relaxed)};
}

void kn_tuning_set(kn_tuning t) {
    atomic_store_explicit(&kn_wide_l1, t.wide_l1 != 0, memory_order_relaxed);
    atomic_store_explicit(&kn_step_ahead, t.step_ahead != 0, memory_order_relaxed);
}

kn_isa kn_isa_active(void) {
#if KN_HAVE_X86
    const kn_impl *a = active();
    if (a == &kn_impl_avx512vnni) return KN_ISA_AVX512VNNI;
    if (a == &kn_impl_avxvnni) return KN_ISA_AVXVNNI;
    if (a == &kn_impl_avx2) return KN_ISA_AVX2;
#endif
    return KN_ISA_SCALAR;
}

int kn_init(int force_reference) { return kn_select(force_reference ? KN_ISA_SCALAR : KN_ISA_BEST) != KN_ISA_SCALAR; }

const char *kn_impl_name(void) { return active()->name; }

void kn_matmul_rows(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                    int64_t r1) {
    active()->matmul_rows(w, x, ldx, T, y, ldy, r0, r1);
}

float kn_dot_f32(const float *a, const float *b, int64_t n) { return active()->dot_f32(a, b, n); }

void kn_axpy_f32(float *y, float a, const float *x, int64_t n) { active()->axpy_f32(y, a, x, n); }

void kn_scale_f32(float *y, float a, int64_t n) { active()->scale_f32(y, a, n); }
float kn_temper_f32(float *x, int64_t n, float t) { return active()->temper_f32(x, n, t); }

int64_t kn_argmax_f32(const float *x, int64_t n) { return active()->argmax_f32(x, n); }

float kn_scale_axpy_dot_f32(float *y, const float *src, float a, float b, const float *x, const float *z, int64_t n) {
    return active()->scale_axpy_dot_f32(y, src, a, b, x, z, n);
}

void kn_silu_mul_f32(float *y, const float *x, const float *u, int64_t n) { active()->silu_mul_f32(y, x, u, n); }

void kn_sigmoid_gate_f32(float *y, const float *g, int64_t n) { active()->sigmoid_gate_f32(y, g, n); }

void kn_softmax_f32(float *p, int64_t n, float scale) { active()->softmax_f32(p, n, scale); }

double kn_sum_exp_f32(const float *x, int64_t n, float mx) { return active()->sum_exp_f32(x, n, mx); }
double kn_exp_sum_f32(float *w, const float *x, int64_t n, float mx) { return active()->exp_sum_f32(w, x, n, mx); }

void kn_attn_scores(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                    const void *k, nx_dtype kdt, int64_t hd) {
    active()->attn_scores(s, lds, q, ldq, ldq_t, G, T, n0, k, kdt, hd);
}

void kn_attn_values(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                    const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd) {
    active()->attn_values(out, ldo, ldo_t, p, ldp, G, T, n0, v, vdt, kv_stride, hd);
}

void kn_quantize_x(kn_qx *qx, const float *x, int64_t ldx) { active()->quantize_x(qx, x, ldx); }

void kn_matmul_qx_rows(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (w->fp) active()->fp_qx_rows(w, qx, y, ldy, r0, r1);
    else active()->matmul_qx_rows(w, qx, y, ldy, r0, r1);
}

int64_t kn_gather_rows(const kn_mat *w, size_t buf_bytes) {
    const size_t rb = w->packed ? (size_t)kn_lanes_packed_row_bytes(w) : 0;
    if (rb == 0 || active() == &kn_impl_scalar) return 0;   /* rb 0: no columns */
    return (int64_t)(buf_bytes / rb);
}

void kn_matmul_qx_gathered(const kn_mat *w, const kn_qx *qx, const int32_t *idx, int64_t n, void *buf, float *y) {
    const size_t rb = (size_t)kn_lanes_packed_row_bytes(w);
    assert(qx->T == 1 && n >= 0 && kn_gather_rows(w, (size_t)n * rb) >= n);
    for (int64_t a = 0; a < n; a++) {
        assert(0 <= idx[a] && idx[a] < w->rows);
        memcpy((char *)buf + (size_t)a * rb, (const char *)w->packed + (size_t)idx[a] * rb, rb);
    }
    /* A view of the copies: the SIMD sets read packed rows only (and
     * kn_gather_rows gathers for none else), so its data, scales and
     * biases, still w's, are never read. */
    kn_mat v = *w;
    v.rows = n;
    v.packed = buf;
    kn_matmul_qx_rows(&v, qx, y, n, 0, n);
}

void kn_affine_row_f32(const kn_mat *w, int64_t row, float *out) { active()->affine_row_f32(w, row, out); }

void kn_fp_row_f32(const kn_mat *w, int64_t row, float *out) { active()->fp_row_f32(w, row, out); }

void kn_lanes_planes_chunk(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                           unsigned char *dst) {
    active()->lanes_planes_chunk(codes, bits, group, g8, cnt, sb, dst);
}

void kn_affine_quantize_row(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                            void *scales, void *biases) {
    active()->affine_quantize_row(w, cols, bits, group, sdtype, codes, scales, biases);
}

void kn_mat_prefetch_row(const kn_mat *w, int64_t r) {
    if (w->packed) {   /* what the int8 products read instead (quant.h) */
        const int64_t row_bytes = kn_lanes_packed_row_bytes(w);
        kn_prefetch_bytes((const char *)w->packed + (size_t)(r * row_bytes), (size_t)row_bytes);
    } else if (w->fp) {
        kn_fp_prefetch_row(w, r);
    } else if (w->bits) {
        const int64_t words = kn_affine_row_words(w->cols, w->bits), sb = kn_affine_sd_row_bytes(w);
        kn_prefetch_bytes((const uint32_t *)w->data + r * words, (size_t)words * 4);
        kn_prefetch_bytes((const char *)w->scales + (size_t)(r * sb), (size_t)sb);
        kn_prefetch_bytes((const char *)w->biases + (size_t)(r * sb), (size_t)sb);
    } else {
        const size_t es = nx_dtype_size(w->dtype);
        kn_prefetch_bytes((const char *)w->data + (size_t)(r * kn_row_stride(w)) * es, (size_t)w->cols * es);
    }
}

void kn_gated_delta_step(float *S_out, const float *S_in, const float *q, const float *k, const float *v, float alpha,
                         float beta, float *o, int dk, int dv) {
    const kn_delta_tokens tk = {1, q, k, v, 0, &alpha, &beta, o, 0, NULL, 0};
    active()->gated_delta_steps(S_out, S_in, NULL, &tk, dk, dv, 0);
}

void kn_gated_delta_steps(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk, int dk, int dv,
                          int stream) {
    active()->gated_delta_steps(S_out, S_in, S_next, tk, dk, dv, stream);
}

void kn_gated_delta_replay(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                           const float *alpha, int dk, int dv) {
    active()->gated_delta_replay(S, S_next, T, k, delta, ld, alpha, dk, dv);
}

void kn_conv_silu(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                  int64_t c1) {
    active()->conv_silu(out, rows, ld, T, w, kc, c0, c1);
}

void kn_sketch_scores(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1) {
    active()->sketch_scores(s, xq, d, sum, y, r0, r1);
}

kn_sketch_layout kn_sketch_layout_preferred(void) { return active()->sketch_layout; }

int64_t kn_top_k_collect(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey) {
    return active()->top_k_collect(x, n, thr, cand, ckey);
}
