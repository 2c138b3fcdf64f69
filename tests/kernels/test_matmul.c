/* test_matmul.c — the matmul kernels and vector primitives against their
 * scalar twins, the bit-exactness contract of matmul.h, and exact conversions.
 *
 * Inputs come from the model's range: weights ~ N(0, 0.05) rounded to the
 * stored format, activations ~ N(0, 1). A fixed-seed xorshift generator makes
 * every run draw the same numbers. Tests that need the SIMD twin switch with
 * kn_init(0) and fall back to comparing the scalar twin with itself (and say
 * so) on a CPU without AVX2+FMA+F16C. */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "test.h"

/* Tolerances of the SIMD matmul against the double-accumulating reference,
 * relative to sum_c |w_c * x_c|. The SIMD dot sums in f32: each lane adds at
 * most n/32 = 32 products (lengths here are <= 1024), then 2 + 3 levels combine
 * accumulators and lanes, then at most 7 tail FMAs follow and the reference's
 * final cast rounds once more: about 45 roundings of 2^-24 ≈ 2.7e-6 worst
 * case. bf16 and f16 weights widen to f32 exactly, so they share the f32 bound;
 * they are named apart so a lossy format gets its own. */
#define KN_TOL_F32 4e-6
#define KN_TOL_BF16 4e-6
#define KN_TOL_F16 4e-6
/* kn_dot_f32 runs the same f32 layout as an f32 weight row. */
#define KN_TOL_DOT_F32 KN_TOL_F32

#define WEIGHT_SIGMA 0.05f   /* model weights are ~N(0, 0.05)       */
#define ACT_SIGMA 1.0f       /* activations after a norm are ~N(0, 1) */
#define MAX_T 16             /* verify batches up to 16 tokens      */

/* 40, 49, 56: a 32-wide block, then tail steps of 8, 16 and 24 landing on
 * accumulators that already hold sums (below 32 the others are still 0, so a
 * step in the wrong one could go unseen) */
static const int64_t lengths[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 40, 49, 56, 255, 1023, 1024};
#define N_LENGTHS ((int)(sizeof lengths / sizeof lengths[0]))

static const nx_dtype formats[] = {NX_DT_F32, NX_DT_BF16, NX_DT_F16};
static double format_tol(nx_dtype dt) {
    return dt == NX_DT_F32 ? KN_TOL_F32 : dt == NX_DT_BF16 ? KN_TOL_BF16 : KN_TOL_F16;
}

/* ---- Inputs ------------------------------------------------------------ */

/* Inputs come from nx_test_rng (test.h). */

/* A [rows, cols] matrix of format dt with weights ~N(0, WEIGHT_SIGMA); free
 * m->data with free(). */
static kn_mat make_weights(nx_test_rng *r, nx_dtype dt, int64_t rows, int64_t cols) {
    size_t es = nx_dtype_size(dt), n = (size_t)(rows * cols);
    void *data = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        float v = nx_test_rng_normal(r, WEIGHT_SIGMA);
        if (dt == NX_DT_F32) ((float *)data)[i] = v;
        else ((uint16_t *)data)[i] = dt == NX_DT_BF16 ? nx_f32_to_bf16(v) : nx_f32_to_f16(v);
    }
    return (kn_mat){.data = data, .dtype = dt, .rows = rows, .cols = cols};
}

static float *make_acts(nx_test_rng *r, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x + 1);
    for (int64_t i = 0; i < n; i++) x[i] = nx_test_rng_normal(r, ACT_SIGMA);
    return x;
}

/* Weight (r, c) widened exactly, for the error scale. */
static double weight_at(const kn_mat *w, int64_t r, int64_t c) {
    float v;
    kn_to_f32(w->dtype, (const char *)w->data + (size_t)(r * w->cols + c) * nx_dtype_size(w->dtype), &v, 1);
    return v;
}

/* Turns on the SIMD twin; returns 0 (and says so once) where the CPU lacks it. */
static int use_simd(void) {
    static int warned;
    int on = kn_init(0);
    if (!on && !warned++) fprintf(stderr, "  note: no AVX2+FMA+F16C here; SIMD checks compare scalar with scalar\n");
    return on;
}

/* ---- Tests ---------------------------------------------------------------- */

static void test_init_selects_avx2_or_scalar_and_force_reference_wins(void) {
    CHECK(kn_init(1) == 0);
    CHECK(strcmp(kn_impl_name(), "scalar") == 0 && kn_isa_active() == KN_ISA_SCALAR);
    int on = kn_init(0);
    int has = 0, vex_vnni = 0, vnni = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;   /* F16C from CPUID leaf 1: clang 14 has no "f16c" builtin name */
    has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &b, &c, &d) &&
          (c & bit_F16C) != 0;
    /* AVX-VNNI: leaf 7 subleaf 1, EAX bit 4 */
    vex_vnni = has && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
    vnni = has && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
    int intel = 0;
#if defined(__x86_64__) || defined(__i386__)
    intel = __get_cpuid(0, &a, &b, &c, &d) && memcmp(&b, "Genu", 4) == 0 && memcmp(&d, "ineI", 4) == 0 &&
            memcmp(&c, "ntel", 4) == 0;
#endif
    const kn_isa below_vex = has ? KN_ISA_AVX2 : KN_ISA_SCALAR, below_512 = vex_vnni ? KN_ISA_AVXVNNI : below_vex;
    CHECKF(on == has, "kn_init(0) = %d but the CPU %s AVX2+FMA+F16C", on, has ? "has" : "lacks");
    /* a SIMD set on an Intel CPU fetches ahead in dense steps (matmul.h) */
    CHECKF(kn_tuning_active().step_ahead == (has && intel), "step_ahead %d on %s CPU", kn_tuning_active().step_ahead,
           intel ? "an Intel" : "a non-Intel");
    CHECKF(strcmp(kn_impl_name(), vnni ? "avx512vnni" : vex_vnni ? "avxvnni" : has ? "avx2" : "scalar") == 0,
           "kn_init(0) chose %s", kn_impl_name());
    /* kn_select caps the set: never above its argument, never above the CPU
     * (AVX-512 VNNI without AVX-VNNI, as on Zen 4, skips a set) */
    CHECK(kn_select(KN_ISA_AVX2) == below_vex);
    CHECK(strcmp(kn_impl_name(), has ? "avx2" : "scalar") == 0);
    CHECK(kn_select(KN_ISA_AVXVNNI) == below_512);
    CHECK(strcmp(kn_impl_name(), vex_vnni ? "avxvnni" : has ? "avx2" : "scalar") == 0);
    CHECK(kn_select(KN_ISA_AVX512VNNI) == (vnni ? KN_ISA_AVX512VNNI : below_512));
    CHECK(kn_select(KN_ISA_SCALAR) == KN_ISA_SCALAR && kn_isa_active() == KN_ISA_SCALAR);
    CHECK(!kn_tuning_active().step_ahead && !kn_tuning_active().wide_l1);
    /* kn_isa_available tells what kn_select would choose and selects nothing */
    CHECK(kn_isa_available(KN_ISA_AVX512VNNI) == (vnni ? KN_ISA_AVX512VNNI : below_512));
    CHECK(kn_isa_available(KN_ISA_AVXVNNI) == below_512);
    CHECK(kn_isa_available(KN_ISA_AVX2) == below_vex);
    CHECK(kn_isa_available(KN_ISA_SCALAR) == KN_ISA_SCALAR && kn_isa_active() == KN_ISA_SCALAR);
    kn_init(0);
}

static void test_matmul_ref_computes_a_hand_checked_product(void) {
    /* W = [[1, 2], [3, 4], [-1, 0.5]], X rows [5, 6] and [-2, 1]: every value
     * and product is exact in each format. */
    const float wf[6] = {1, 2, 3, 4, -1, 0.5f}, x[4] = {5, 6, -2, 1};
    const float want[2][3] = {{17, 39, -2}, {0, -2, 2.5f}};
    for (int f = 0; f < 3; f++) {
        uint16_t wh[6];
        for (int i = 0; i < 6; i++) wh[i] = formats[f] == NX_DT_BF16 ? nx_f32_to_bf16(wf[i]) : nx_f32_to_f16(wf[i]);
        kn_mat w = {.data = formats[f] == NX_DT_F32 ? (const void *)wf : (const void *)wh, .dtype = formats[f], .rows = 3,
                    .cols = 2};
        for (int simd = 0; simd < 2; simd++) {
            float y[2][3];
            if (simd) { use_simd(); kn_matmul_rows(&w, x, 2, 2, &y[0][0], 3, 0, 3); }
            else kn_matmul_rows_ref(&w, x, 2, 2, &y[0][0], 3, 0, 3);
            for (int t = 0; t < 2; t++)
                for (int r = 0; r < 3; r++)
                    CHECKF(y[t][r] == want[t][r], "%s %s: y[%d][%d] = %g, want %g", nx_dtype_name(formats[f]),
                           simd ? "simd" : "ref", t, r, y[t][r], want[t][r]);
        }
    }
}

static void test_matmul_simd_matches_reference_for_every_format_and_length(void) {
    enum { ROWS = 13, T = 5 };   /* odd row count; T = 5 is a 3-row SIMD block plus a 2-row one */
    nx_test_rng r = {0x9E3779B97F4A7C15ULL};
    use_simd();
    for (int f = 0; f < 3; f++) {
        for (int li = 0; li < N_LENGTHS; li++) {
            int64_t n = lengths[li];
            kn_mat w = make_weights(&r, formats[f], ROWS, n);
            float *x = make_acts(&r, T * n);
            float ys[T * ROWS], yr[T * ROWS];
            kn_matmul_rows(&w, x, n, T, ys, ROWS, 0, ROWS);
            kn_matmul_rows_ref(&w, x, n, T, yr, ROWS, 0, ROWS);
            double worst = 0.0;
            for (int t = 0; t < T; t++) {
                for (int64_t row = 0; row < ROWS; row++) {
                    double scale = 0.0;
                    for (int64_t c = 0; c < n; c++) scale += fabs(weight_at(&w, row, c) * x[t * n + c]);
                    double err = fabs((double)ys[t * ROWS + row] - yr[t * ROWS + row]) / scale;
                    if (err > worst) worst = err;
                }
            }
            CHECKF(worst <= format_tol(formats[f]), "%s n=%lld: error %.3g of sum|w*x| exceeds %.3g",
                   nx_dtype_name(formats[f]), (long long)n, worst, format_tol(formats[f]));
            free((void *)w.data);
            free(x);
        }
    }
}

/* The two SIMD sets run different dense kernels (8- and 16-lane vectors,
 * row by row and in tiles) in the same layout: the same bits for every
 * format, length (each tail of the layout) and T = 1..11 (rows, then tiles
 * with 4-, 3- and 2-row blocks), over 29 rows (two tile groups and a rest),
 * where the CPU has both. */
static void test_dense_simd_sets_agree_bit_for_bit(void) {
    enum { ROWS = 29, T = 11 };
    nx_test_rng r = {0x6A09E667F3BCC909ULL};
    if (kn_select(KN_ISA_AVX512VNNI) != KN_ISA_AVX512VNNI) {
        fprintf(stderr, "  note: this CPU lacks the avx512vnni kernels; their dense check did not run\n");
        kn_init(0);
        return;
    }
    float ya[T * ROWS], yb[T * ROWS];
    for (int f = 0; f < 3; f++)
        for (int li = 0; li < N_LENGTHS; li++) {
            const int64_t n = lengths[li];
            kn_mat w = make_weights(&r, formats[f], ROWS, n);
            float *x = make_acts(&r, T * n);
            for (int t = 1; t <= T; t++) {
                kn_select(KN_ISA_AVX2);
                kn_matmul_rows(&w, x, n, t, ya, ROWS, 0, ROWS);
                kn_select(KN_ISA_AVX512VNNI);
                kn_matmul_rows(&w, x, n, t, yb, ROWS, 0, ROWS);
                CHECKF(memcmp(ya, yb, sizeof(float) * (size_t)(t * ROWS)) == 0, "%s n=%lld T=%d: avx2 and avx512vnni differ",
                       nx_dtype_name(formats[f]), (long long)n, t);
            }
            free((void *)w.data);
            free(x);
        }
    kn_init(0);
}

/* Y[t][r] from one call per (r, t) pair, against calls over every T and
 * uneven row ranges; also checks no call writes outside its rows. */
static void check_bit_exact(const kn_mat *w, const float *x, int64_t ldx, const char *what) {
    enum { PAD = 5 };
    const float canary = -12345.0f;
    const int64_t rows = w->rows, ldy = rows + PAD;
    float base[MAX_T][64], y[MAX_T * 64];
    for (int t = 0; t < MAX_T; t++)
        for (int64_t row = 0; row < rows; row++) kn_matmul_rows(w, x + t * ldx, ldx, 1, base[t], 0, row, row + 1);

    /* Full range, every T. */
    for (int T = 1; T <= MAX_T; T++) {
        for (int i = 0; i < MAX_T * 64; i++) y[i] = canary;
        kn_matmul_rows(w, x, ldx, T, y, ldy, 0, rows);
        for (int t = 0; t < T; t++)
            CHECKF(memcmp(&y[t * ldy], base[t], (size_t)rows * sizeof(float)) == 0, "%s: T=%d row t=%d differs",
                   what, T, t);
        for (int i = 0; i < MAX_T * 64; i++)
            if (i >= T * ldy || i % ldy >= rows) CHECKF(y[i] == canary, "%s: T=%d wrote y[%d]", what, T, i);
    }
    /* Uneven row ranges: chunks of 1, 2, 3, 5, 7, ... rows, at two T values. */
    static const int chunks[] = {1, 2, 3, 5, 7, 4, 6, 9};
    for (int T = 5; T <= MAX_T; T += MAX_T - 5) {
        for (int i = 0; i < MAX_T * 64; i++) y[i] = canary;
        int64_t r0 = 0;
        for (int k = 0; r0 < rows; k = (k + 1) % 8) {
            int64_t r1 = r0 + chunks[k] < rows ? r0 + chunks[k] : rows;
            kn_matmul_rows(w, x, ldx, T, y, ldy, r0, r1);
            for (int t = 0; t < T; t++)
                CHECKF(memcmp(&y[t * ldy + r0], &base[t][r0], (size_t)(r1 - r0) * sizeof(float)) == 0,
                       "%s: T=%d rows [%lld,%lld) differ at t=%d", what, T, (long long)r0, (long long)r1, t);
            r0 = r1;
        }
        for (int i = 0; i < MAX_T * 64; i++)
            if (i >= T * ldy || i % ldy >= rows) CHECKF(y[i] == canary, "%s: T=%d ranges wrote y[%d]", what, T, i);
    }
}

static void test_matmul_rows_are_bit_identical_whatever_t_and_row_range(void) {
    enum { ROWS = 37 };   /* odd, and not a multiple of any chunk size */
    static const int64_t cols[] = {1, 7, 33, 255, 1023, 1050};   /* 1050: 1024 (whole tile chunks) + 3 x 8 + 2 */
    nx_test_rng r = {0xD1B54A32D192ED03ULL};
    for (int f = 0; f < 3; f++) {
        for (int ci = 0; ci < 6; ci++) {
            int64_t n = cols[ci], ldx = n + 3;   /* odd stride: rows of X unaligned */
            kn_mat w = make_weights(&r, formats[f], ROWS, n);
            float *x = make_acts(&r, MAX_T * ldx);
            for (int simd = 1; simd >= 0; simd--) {
                if (simd) use_simd();
                else kn_init(1);
                char what[64];
                snprintf(what, sizeof what, "%s %s cols=%lld", kn_impl_name(), nx_dtype_name(formats[f]),
                         (long long)n);
                check_bit_exact(&w, x, ldx, what);
            }
            free((void *)w.data);
            free(x);
        }
    }
    kn_init(0);
}

static void test_matmul_with_no_rows_or_no_tokens_writes_nothing(void) {
    nx_test_rng r = {7};
    kn_mat w = make_weights(&r, NX_DT_BF16, 4, 16);
    float *x = make_acts(&r, 16), y[4] = {1, 2, 3, 4};
    for (int simd = 1; simd >= 0; simd--) {
        if (simd) use_simd();
        else kn_init(1);
        kn_matmul_rows(&w, x, 16, 0, y, 4, 0, 4);
        kn_matmul_rows(&w, x, 16, 1, y, 4, 2, 2);
        CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
    }
    /* Zero columns: the empty sum is 0. */
    kn_mat w0 = {.data = w.data, .dtype = NX_DT_F16, .rows = 4, .cols = 0};
    kn_matmul_rows(&w0, x, 0, 1, y, 4, 0, 4);
    CHECK(y[0] == 0 && y[3] == 0);
    kn_init(0);
    free((void *)w.data);
    free(x);
}

/* A strided view (ld > cols: every other row of a matrix, as one head's
 * rows of a cache that interleaves two) gives the bits of a packed copy of
 * those rows, in every format and kernel set the CPU has, at T = 4 (row by
 * row) and 7 (tiles, KN_TILE_GROUP rows at a time), for uneven row ranges;
 * and kn_mat_row_f32 reads the strided row. */
static void test_strided_rows_equal_a_packed_copy(void) {
    enum { ROWS = 29, T = 7 };
    nx_test_rng r = {0x9C30D5392AF26013ULL};
    static const int64_t cols_list[] = {7, 64, 257};
    float y1[T * ROWS], y2[T * ROWS], row1[257], row2[257];
    for (int f = 0; f < 3; f++)
        for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
            const int64_t cols = cols_list[c];
            const size_t es = nx_dtype_size(formats[f]);
            kn_mat both = make_weights(&r, formats[f], 2 * ROWS, cols);   /* rows of two heads, interleaved */
            char *packed = malloc((size_t)(ROWS * cols) * es);
            for (int64_t i = 0; i < ROWS; i++)
                memcpy(packed + (size_t)(i * cols) * es, (const char *)both.data + (size_t)((2 * i + 1) * cols) * es,
                       (size_t)cols * es);
            const kn_mat strided = {.data = (const char *)both.data + (size_t)cols * es, .dtype = formats[f], .rows = ROWS,
                                    .cols = cols, .ld = 2 * cols};
            const kn_mat dense = {.data = packed, .dtype = formats[f], .rows = ROWS, .cols = cols};
            float *x = make_acts(&r, T * cols);
            static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVXVNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
            for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
                if (kn_select(sets[k]) != sets[k]) continue;   /* the CPU lacks it (dense_simd_sets_agree says so) */
                for (int t = 4; t <= T; t += 3) {
                    memset(y1, 0, sizeof y1), memset(y2, 0, sizeof y2);
                    kn_matmul_rows(&strided, x, cols, t, y1, ROWS, 0, 5);
                    kn_matmul_rows(&strided, x, cols, t, y1, ROWS, 5, ROWS);
                    kn_matmul_rows(&dense, x, cols, t, y2, ROWS, 0, ROWS);
                    CHECKF(memcmp(y1, y2, sizeof y1) == 0, "%s %s cols %lld T %d: strided rows differ from packed",
                           kn_impl_name(), nx_dtype_name(formats[f]), (long long)cols, t);
                }
                kn_mat_row_f32(&strided, ROWS - 1, row1);
                kn_mat_row_f32(&dense, ROWS - 1, row2);
                CHECK(memcmp(row1, row2, (size_t)cols * sizeof *row1) == 0);
            }
            free(x), free(packed), free((void *)both.data);
        }
    kn_init(0);
}

/* kn_matmul_rows (tiles from 2 activation rows) and kn_matmul_rows one row
 * a call (never a tile): the same bits for every kernel set and format, T =
 * 1..6, strided rows over ranges of whole tile groups from odd rows and not,
 * odd column counts. */
static void test_tiled_rows_equal_single_rows(void) {
    enum { ROWS = 2 * KN_TILE_GROUP + 5, T = 6 };
    nx_test_rng r = {0xCAC4ED0005ULL};
    static const int64_t cols_list[] = {7, 40, 256, 257};
    static const int64_t ranges[][2] = {{0, KN_TILE_GROUP}, {0, ROWS}, {3, 3 + 2 * KN_TILE_GROUP}, {1, 9}};
    float y2[T * ROWS], y3[T * ROWS];
    for (int f = 0; f < 3; f++)
        for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
            const int64_t cols = cols_list[c];
            kn_mat both = make_weights(&r, formats[f], 2 * ROWS, cols);
            const kn_mat w = {.data = both.data, .dtype = formats[f], .rows = ROWS, .cols = cols, .ld = 2 * cols};
            float *x = make_acts(&r, T * (cols + 3));
            static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVXVNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
            for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
                if (kn_select(sets[k]) != sets[k]) continue;
                for (int t = 1; t <= T; t++)
                    for (size_t g = 0; g < sizeof ranges / sizeof *ranges; g++) {
                        memset(y2, 0, sizeof y2), memset(y3, 0, sizeof y3);
                        kn_matmul_rows(&w, x, cols + 3, t, y2, ROWS, ranges[g][0], ranges[g][1]);
                        for (int64_t r = ranges[g][0]; r < ranges[g][1]; r++)   /* one row a call: never a tile */
                            kn_matmul_rows(&w, x, cols + 3, t, y3, ROWS, r, r + 1);
                        CHECKF(memcmp(y2, y3, sizeof y2) == 0,
                               "%s %s cols %lld T %d rows [%lld, %lld): tiled and row-at-a-time differ",
                               kn_impl_name(), nx_dtype_name(formats[f]), (long long)cols, t, (long long)ranges[g][0],
                               (long long)ranges[g][1]);
                    }
            }
            free(x), free((void *)both.data);
        }
    kn_init(0);
}

/* The scalar widening of halves is the SIMD one bit for bit, signalling
 * NaNs made quiet as vcvtph2ps makes them (it kept them signalling). */
__attribute__((target("f16c"))) static float f16c_widen(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static void test_scalar_f16_widening_is_f16c_bit_for_bit(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("f16c")) {   /* every AVX2 CPU has it; the SIMD kernels need AVX2 */
        fprintf(stderr, "  note: this CPU lacks F16C; the f16 widening check did not run\n");
        return;
    }
    int bad = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        float a = nx_f16_to_f32((uint16_t)p), b = f16c_widen((uint16_t)p);
        if (memcmp(&a, &b, 4) != 0 && bad++ < 5) CHECKF(0, "0x%04x: scalar %a, F16C %a", p, a, b);
    }
    CHECKF(bad == 0, "%d patterns differ", bad);
}

/* Every 16-bit pattern as a weight, multiplied by 1: the SIMD widening
 * (cvtph, and the bf16 shift) must give the exact value. Pattern p sits in
 * lane p % 8 of an 8-column row, so every lane is covered. The sum adds +0s,
 * so -0 comes out as +0; NaNs are compared as NaN (the sum may change a
 * payload). */
static void test_matmul_reads_every_bf16_and_f16_pattern_exactly(void) {
    enum { COLS = 8, ROWS = 65536 };
    uint16_t *wd = calloc((size_t)ROWS * COLS, sizeof *wd);
    float *y = malloc(ROWS * sizeof *y);
    const float ones[COLS] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int p = 0; p < ROWS; p++) wd[p * COLS + p % COLS] = (uint16_t)p;
    for (int f = 1; f < 3; f++) {
        kn_mat w = {.data = wd, .dtype = formats[f], .rows = ROWS, .cols = COLS};
        for (int simd = 1; simd >= 0; simd--) {
            if (simd) use_simd();
            else kn_init(1);
            kn_matmul_rows(&w, ones, COLS, 1, y, ROWS, 0, ROWS);
            int bad = 0;
            for (int p = 0; p < ROWS; p++) {
                float want = formats[f] == NX_DT_BF16 ? nx_bf16_to_f32((uint16_t)p) : nx_f16_to_f32((uint16_t)p);
                if (want == 0.0f) want = 0.0f;   /* -0 + 0 = +0 */
                int ok = isnan(want) ? isnan(y[p]) : memcmp(&want, &y[p], 4) == 0;
                if (!ok && bad++ < 5)
                    CHECKF(ok, "%s %s: pattern 0x%04x gives %a, want %a", kn_impl_name(), nx_dtype_name(formats[f]),
                           p, y[p], want);
            }
            CHECKF(bad == 0, "%d patterns wrong", bad);
        }
    }
    kn_init(0);
    free(wd);
    free(y);
}

static void test_row_and_buffer_conversions_are_exact_for_every_pattern(void) {
    enum { N = 65536 };
    uint16_t *pat = malloc(N * sizeof *pat);
    unsigned char *unaligned = malloc(N * 2 + 1);
    float *out = malloc(N * sizeof *out);
    for (int p = 0; p < N; p++) pat[p] = (uint16_t)p;
    memcpy(unaligned + 1, pat, N * 2);
    for (int f = 1; f < 3; f++) {
        nx_dtype dt = formats[f];
        for (int via_row = 1; via_row >= 0; via_row--) {
            kn_mat w = {.data = pat, .dtype = dt, .rows = 2, .cols = N / 2};   /* row 1 holds the upper half of the patterns */
            memset(out, 0, N * sizeof *out);
            if (via_row) {
                kn_mat_row_f32(&w, 0, out);
                kn_mat_row_f32(&w, 1, out + N / 2);
            } else {
                kn_to_f32(dt, unaligned + 1, out, N);
            }
            int bad = 0;
            for (int p = 0; p < N; p++) {
                float want = dt == NX_DT_BF16 ? nx_bf16_to_f32((uint16_t)p) : nx_f16_to_f32((uint16_t)p);
                if (isnan(want) ? !isnan(out[p]) : memcmp(&want, &out[p], 4) != 0) bad++;
            }
            CHECKF(bad == 0, "%s via %s: %d of 65536 patterns wrong", nx_dtype_name(dt),
                   via_row ? "kn_mat_row_f32" : "kn_to_f32 (unaligned)", bad);
        }
    }
    /* f32 is a copy, bit for bit, from an unaligned source too. */
    nx_test_rng r = {11};
    float *x = make_acts(&r, 1023);
    memcpy(unaligned + 1, x, 1023 * sizeof(float));
    kn_to_f32(NX_DT_F32, unaligned + 1, out, 1023);
    CHECK(memcmp(out, x, 1023 * sizeof(float)) == 0);
    free(x);
    free(pat);
    free(unaligned);
    free(out);
}

static void test_dot_f32_simd_matches_double_reference(void) {
    nx_test_rng r = {0xA0761D6478BD642FULL};
    use_simd();
    for (int li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li];
        float *a = make_acts(&r, n + 1), *b = make_acts(&r, n);
        for (int off = 0; off < 2; off++) {   /* off = 1: unaligned a */
            double scale = 0.0;
            for (int64_t i = 0; i < n; i++) scale += fabs((double)a[i + off] * b[i]);
            float s = kn_dot_f32(a + off, b, n), ref = kn_dot_f32_ref(a + off, b, n);
            double err = fabs((double)s - ref) / scale;
            CHECKF(err <= KN_TOL_DOT_F32, "n=%lld off=%d: error %.3g of sum|a*b| exceeds %.3g", (long long)n, off, err,
                   KN_TOL_DOT_F32);
            CHECK(kn_dot_f32(a + off, b, n) == s);   /* deterministic */
        }
        free(a);
        free(b);
    }
    CHECK(kn_dot_f32(NULL, NULL, 0) == 0.0f && kn_dot_f32_ref(NULL, NULL, 0) == 0.0f);
}

/* axpy multiplies then adds in both twins and scale is one multiply, so the
 * twins agree bit for bit (no tolerance needed). */
static void test_axpy_and_scale_simd_match_reference_bit_for_bit(void) {
    nx_test_rng r = {0xE7037ED1A0B428DBULL};
    use_simd();
    for (int li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li];
        float *x = make_acts(&r, n + 1), *y0 = make_acts(&r, n + 1);
        float *ys = malloc((size_t)(n + 1) * sizeof *ys), *yr = malloc((size_t)(n + 1) * sizeof *yr);
        float a = nx_test_rng_normal(&r, ACT_SIGMA);
        for (int off = 0; off < 2; off++) {   /* off = 1: unaligned x and y */
            memcpy(ys, y0, (size_t)(n + 1) * sizeof *ys);
            memcpy(yr, y0, (size_t)(n + 1) * sizeof *yr);
            kn_axpy_f32(ys + off, a, x + off, n);
            kn_axpy_f32_ref(yr + off, a, x + off, n);
            CHECKF(memcmp(ys, yr, (size_t)(n + 1) * sizeof *ys) == 0, "axpy n=%lld off=%d", (long long)n, off);
            kn_scale_f32(ys + off, a, n);
            kn_scale_f32_ref(yr + off, a, n);
            CHECKF(memcmp(ys, yr, (size_t)(n + 1) * sizeof *ys) == 0, "scale n=%lld off=%d", (long long)n, off);
        }
        free(x);
        free(y0);
        free(ys);
        free(yr);
    }
}

/* The fused decay + update + read-out: the updated y is bit-identical in both
 * twins (the same two roundings), in place and into another array; the
 * returned dot product is, in the SIMD twin, exactly kn_dot_f32 of the new y
 * with z, and within the dot tolerance of the double reference. Odd lengths
 * and unaligned rows. */
static void test_scale_axpy_dot_updates_like_its_twin_and_reads_out_like_dot(void) {
    nx_test_rng r = {0x9E3779B97F4A7C15ULL};
    use_simd();
    for (int li = 0; li < N_LENGTHS; li++) {
        const int64_t n = lengths[li];
        float *x = make_acts(&r, n + 1), *z = make_acts(&r, n + 1), *y0 = make_acts(&r, n + 1);
        float *ys = malloc((size_t)(n + 1) * sizeof *ys), *yr = malloc((size_t)(n + 1) * sizeof *yr);
        const float a = nx_test_rng_normal(&r, ACT_SIGMA), b = nx_test_rng_normal(&r, ACT_SIGMA);
        for (int off = 0; off < 2; off++) {
            memcpy(ys, y0, (size_t)(n + 1) * sizeof *ys);
            memcpy(yr, y0, (size_t)(n + 1) * sizeof *yr);
            const float s = kn_scale_axpy_dot_f32(ys + off, ys + off, a, b, x + off, z + off, n);
            const float ref = kn_scale_axpy_dot_f32_ref(yr + off, yr + off, a, b, x + off, z + off, n);
            CHECKF(memcmp(ys, yr, (size_t)(n + 1) * sizeof *ys) == 0, "update n=%lld off=%d", (long long)n, off);
            float *yo = malloc((size_t)(n + 1) * sizeof *yo);   /* out of place, from y0 */
            CHECKF(kn_scale_axpy_dot_f32(yo + off, y0 + off, a, b, x + off, z + off, n) == s &&
                       memcmp(yo + off, ys + off, (size_t)n * sizeof *yo) == 0,
                   "n=%lld off=%d: out of place differs from in place", (long long)n, off);
            free(yo);
            int exact = 1;
            for (int64_t i = 0; i < n; i++) exact &= ys[off + i] == fmaf(b, x[off + i], a * y0[off + i]);
            CHECKF(exact, "n=%lld off=%d: y != fma(b, x, a * y)", (long long)n, off);
            CHECKF(s == kn_dot_f32(ys + off, z + off, n), "n=%lld off=%d: read-out != kn_dot_f32", (long long)n, off);
            double scale = 0.0;
            for (int64_t i = 0; i < n; i++) scale += fabs((double)ys[off + i] * z[off + i]);
            CHECKF(fabs((double)s - ref) <= KN_TOL_DOT_F32 * scale, "n=%lld off=%d: %g vs reference %g", (long long)n,
                   off, s, ref);
        }
        free(x), free(z), free(y0), free(ys), free(yr);
    }
}

/* kn_argmax_f32 against its scalar twin and the definition (first index of
 * the largest non-NaN value, 0 when none): lengths 0-40, around 64 and 96
 * (the SIMD twin's 32-element blocks, then 8-element ones) and a vocabulary's,
 * maxima repeated (the first must win, in any lane), NaNs anywhere
 * (including first and everywhere), -inf only. */
static void test_argmax_twins_find_the_first_maximum(void) {
    nx_test_rng r = {0xA2B3A5ULL};
    enum { BIG = 248320 };
    float *x = malloc((size_t)BIG * sizeof *x);
    if (!kn_init(0)) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    static const int64_t more[] = {63, 64, 65, 95, 97, 255, 1023, BIG - 3, BIG - 2, BIG - 1, BIG};
    for (int64_t k = -41; k < (int64_t)(sizeof more / sizeof *more); k++) {
        const int64_t n = k < 0 ? k + 41 : more[k];
        for (int pattern = 0; pattern < 6; pattern++) {
            for (int64_t i = 0; i < n; i++) x[i] = (float)(int)(nx_test_rng_normal(&r, 4.0f));   /* many ties */
            if (pattern == 1 && n) x[0] = NAN;
            if (pattern == 2)
                for (int64_t i = 0; i < n; i += 3) x[i] = NAN;
            if (pattern == 3)
                for (int64_t i = 0; i < n; i++) x[i] = NAN;
            if (pattern == 4)
                for (int64_t i = 0; i < n; i++) x[i] = i % 2 ? -INFINITY : NAN;
            if (pattern == 5 && n > 2) x[n - 1] = x[n / 2] = 1e30f;   /* the same maximum twice */
            int64_t want = -1;
            for (int64_t i = 0; i < n; i++)
                if (x[i] == x[i] && (want < 0 || x[i] > x[want])) want = i;
            if (want < 0) want = 0;
            const int64_t got = kn_argmax_f32(x, n), ref = kn_argmax_f32_ref(x, n);
            CHECKF(got == want && ref == want, "%s n=%lld pattern %d: %lld (ref %lld), want %lld", kn_impl_name(),
                   (long long)n, pattern, (long long)got, (long long)ref, (long long)want);
        }
    }
    free(x);
    kn_init(0);
}

/* kn_temper_f32 against its scalar twin and the definition: x / t with NaN
 * made -inf and -0 made +0, the largest returned; lengths 0-40, around the
 * SIMD twin's 32-element blocks and a vocabulary's, unaligned, with NaNs,
 * infinities, zeros of both signs and everything -inf. */
static void test_temper_twins_divide_and_find_the_maximum(void) {
    nx_test_rng r = {0x7E3B3E5ULL};
    enum { BIG = 248320 };
    float *x0 = malloc((size_t)(BIG + 1) * sizeof *x0), *xs = malloc((size_t)(BIG + 1) * sizeof *xs),
          *xr = malloc((size_t)(BIG + 1) * sizeof *xr);
    use_simd();
    static const int64_t more[] = {63, 64, 65, 95, 97, 255, 1023, BIG - 3, BIG};
    static const float temps[] = {0.7f, 1.0f, 1e-30f};
    for (int64_t k = -41; k < (int64_t)(sizeof more / sizeof *more); k++) {
        const int64_t n = k < 0 ? k + 41 : more[k];
        for (int pattern = 0; pattern < 4; pattern++) {
            const float t = temps[(n + pattern) % 3];
            for (int64_t i = 0; i <= n; i++) x0[i] = nx_test_rng_normal(&r, 4.0f);
            for (int64_t i = 0; pattern == 1 && i <= n; i += 5) x0[i] = i % 2 ? NAN : -0.0f;
            for (int64_t i = 0; pattern == 2 && i <= n; i += 7) x0[i] = i % 2 ? INFINITY : -INFINITY;
            for (int64_t i = 0; pattern == 3 && i <= n; i++) x0[i] = -INFINITY;
            const int off = (int)(n % 2);   /* odd lengths start unaligned */
            memcpy(xs, x0, (size_t)(n + 1) * sizeof *xs);
            memcpy(xr, x0, (size_t)(n + 1) * sizeof *xr);
            const float ms = kn_temper_f32(xs + off, n - off > 0 ? n - off : 0, t);
            const float mr = kn_temper_f32_ref(xr + off, n - off > 0 ? n - off : 0, t);
            int defined = 1;
            float want = -INFINITY;
            for (int64_t i = off; i < n; i++) {
                float v = x0[i] / t;
                v = v != v ? -INFINITY : v == 0 ? 0.0f : v;
                uint32_t a, b;
                memcpy(&a, &v, 4), memcpy(&b, &xr[i], 4);
                defined &= a == b;
                want = v > want ? v : want;
            }
            CHECKF(defined && memcmp(xs, xr, (size_t)(n + 1) * sizeof *xs) == 0 && ms == mr && mr == want &&
                       !signbit(mr == 0 ? mr : 1.0f),
                   "%s n=%lld pattern %d: max %g (ref %g, want %g)", kn_impl_name(), (long long)n, pattern, ms, mr, want);
        }
    }
    free(x0), free(xs), free(xr);
}

static void test_public_kernels_follow_force_reference(void) {
    /* With force_reference the public names must give the _ref results
     * exactly, including the dot product, whose SIMD order differs. */
    nx_test_rng r = {3};
    float *a = make_acts(&r, 1023), *b = make_acts(&r, 1023);
    kn_mat w = make_weights(&r, NX_DT_BF16, 3, 1023);
    float y[3], yr[3];
    kn_init(1);
    CHECK(kn_dot_f32(a, b, 1023) == kn_dot_f32_ref(a, b, 1023));
    kn_matmul_rows(&w, a, 1023, 1, y, 3, 0, 3);
    kn_matmul_rows_ref(&w, a, 1023, 1, yr, 3, 0, 3);
    CHECK(memcmp(y, yr, sizeof y) == 0);
    float a2[1023];
    memcpy(a2, a, sizeof a2);
    CHECK(kn_scale_axpy_dot_f32(a, a, 0.5f, 0.25f, b, b, 1023) == kn_scale_axpy_dot_f32_ref(a2, a2, 0.5f, 0.25f, b, b, 1023));
    CHECK(memcmp(a, a2, sizeof a2) == 0);
    kn_init(0);
    free(a);
    free(b);
    free((void *)w.data);
}

/* kn_tuning's step_ahead only decides whether a dense step (T = 1) fetches
 * ahead of its loads: the same bits either way, in every SIMD set, every
 * format and length, whole matrices and row ranges (a range's cursor stops
 * at the matrix's end, not at the range's). */
static void test_dense_steps_fetch_ahead_or_not_alike(void) {
    enum { ROWS = 61 };
    static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVX2};
    nx_test_rng r = {0xBB67AE8584CAA73BULL};
    float ya[ROWS], yb[ROWS];
    int ran = 0;
    for (int si = 0; si < 2; si++) {
        if (kn_select(sets[si]) != sets[si]) continue;
        ran++;
        for (int f = 0; f < 3; f++)
            for (int li = 0; li < N_LENGTHS; li++) {
                const int64_t n = lengths[li];
                kn_mat w = make_weights(&r, formats[f], ROWS, n);
                float *x = make_acts(&r, n);
                for (int ahead = 0; ahead < 2; ahead++) {
                    kn_tuning_set((kn_tuning){.step_ahead = ahead});
                    float *y = ahead ? yb : ya;
                    kn_matmul_rows(&w, x, n, 1, y, ROWS, 0, 17);
                    kn_matmul_rows(&w, x, n, 1, y, ROWS, 17, ROWS);
                }
                CHECKF(memcmp(ya, yb, sizeof ya) == 0, "%s %s n=%lld: a step with and without step_ahead differ",
                       kn_impl_name(), nx_dtype_name(formats[f]), (long long)n);
                free((void *)w.data);
                free(x);
            }
    }
    if (!ran) fprintf(stderr, "  note: this CPU has no SIMD set; the step_ahead check did not run\n");
    kn_init(0);
}

static const nx_test tests[] = {
    {"dense_steps_fetch_ahead_or_not_alike",
     "kn_tuning.step_ahead on or off: the same bits for dense steps, every SIMD set, format and length",
     test_dense_steps_fetch_ahead_or_not_alike},
    {"dense_simd_sets_agree_bit_for_bit", "avx2 and avx512vnni dense products: same bits, every format and length, T = 1..11",
     test_dense_simd_sets_agree_bit_for_bit},
    {"strided_rows_equal_a_packed_copy", "kn_mat.ld > cols: same bits as a packed copy, every format and kernel set, rows and tiles",
     test_strided_rows_equal_a_packed_copy},
    {"argmax_twins_find_the_first_maximum",
     "kn_argmax_f32 == its twin == first index of the max: lengths 0-40, 63-97, 255, 1023, 248317-248320, ties, NaNs, -inf",
     test_argmax_twins_find_the_first_maximum},
    {"tiled_rows_equal_single_rows",
     "kn_matmul_rows (tiles) == one row a call, bit for bit: every set and format, T 1-6",
     test_tiled_rows_equal_single_rows},
    {"init_selects_avx2_or_scalar_and_force_reference_wins",
     "kn_init picks avx512vnni / avxvnni / avx2 exactly when the CPU has them, and step_ahead on Intel; kn_select caps the set, kn_isa_available says so without selecting; force_reference picks scalar",
     test_init_selects_avx2_or_scalar_and_force_reference_wins},
    {"matmul_ref_computes_a_hand_checked_product", "a 3x2 product with exact values, every format, both twins",
     test_matmul_ref_computes_a_hand_checked_product},
    {"matmul_simd_matches_reference_for_every_format_and_length",
     "f32/bf16/f16, cols 1..1024, 13 rows, within the named tolerance of sum|w*x|",
     test_matmul_simd_matches_reference_for_every_format_and_length},
    {"matmul_rows_are_bit_identical_whatever_t_and_row_range",
     "Y[t][r] is the same bits for T=1..16 and uneven row ranges, each format, both twins",
     test_matmul_rows_are_bit_identical_whatever_t_and_row_range},
    {"matmul_with_no_rows_or_no_tokens_writes_nothing", "T=0 or r0=r1 is a no-op; zero columns give 0",
     test_matmul_with_no_rows_or_no_tokens_writes_nothing},
    {"matmul_reads_every_bf16_and_f16_pattern_exactly", "all 65536 weight patterns times 1, SIMD and scalar",
     test_matmul_reads_every_bf16_and_f16_pattern_exactly},
    {"scalar_f16_widening_is_f16c_bit_for_bit", "nx_f16_to_f32 == vcvtph2ps for all 65536 patterns, NaNs made quiet",
     test_scalar_f16_widening_is_f16c_bit_for_bit},
    {"row_and_buffer_conversions_are_exact_for_every_pattern",
     "kn_mat_row_f32 and unaligned kn_to_f32 equal nx_bf16/f16_to_f32 on all 65536 patterns",
     test_row_and_buffer_conversions_are_exact_for_every_pattern},
    {"dot_f32_simd_matches_double_reference", "kn_dot_f32 within KN_TOL_DOT_F32 at every length, aligned or not",
     test_dot_f32_simd_matches_double_reference},
    {"axpy_and_scale_simd_match_reference_bit_for_bit", "kn_axpy_f32 and kn_scale_f32 equal their twins exactly",
     test_axpy_and_scale_simd_match_reference_bit_for_bit},
    {"scale_axpy_dot_updates_like_its_twin_and_reads_out_like_dot",
     "kn_scale_axpy_dot_f32: y bit-identical to its twin, read-out == kn_dot_f32 of the new y",
     test_scale_axpy_dot_updates_like_its_twin_and_reads_out_like_dot},
    {"temper_twins_divide_and_find_the_maximum",
     "kn_temper_f32 == its twin == x / t with NaN -> -inf, -0 -> +0, and the max: lengths 0-40 .. 248320, unaligned",
     test_temper_twins_divide_and_find_the_maximum},
    {"public_kernels_follow_force_reference", "after kn_init(1) the public kernels return the _ref bits",
     test_public_kernels_follow_force_reference},
};

NX_TEST_MAIN(tests)
