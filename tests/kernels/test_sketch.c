/* test_sketch.c — one-bit sign sketches and top-k selection (kernels/sketch.h):
 * every kernel set's scores equal the definition computed here bit for bit
 * in both layouts (odd row ranges, the AVX2 16-bit bounds, zero
 * activations), the layouts and nibble tables are as documented, the sketch and
 * quantizer refuse values that are not finite, and kn_top_k_f32 picks
 * exactly what a sort picks, ties to the lowest index, also on data that
 * fools its sample, with its pass split into blocks run in any order too,
 * and ranks NaNs by their bits; kn_argmax_at_f32 gives
 * kn_argmax_f32's index for a row that holds -inf beyond its candidates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kernels/matmul.h"
#include "kernels/sketch.h"
#include "test.h"

/* A sketch of rows x cols from normal weights, with exact zeros, -0 and
 * large values sprinkled in; w returned too ([rows][cols], caller frees). */
static void *make_sketch(kn_sketch *s, int64_t rows, int64_t cols, kn_sketch_layout layout, uint64_t seed,
                         float **w_out) {
    void *buf = nx_alloc_aligned(kn_sketch_bytes(rows, cols));
    memset(buf, 0xa5, kn_sketch_bytes(rows, cols));   /* not zeros: bind must clear what it promises to */
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    nx_test_rng r = {seed};
    for (int64_t i = 0; i < rows * cols; i++) {
        w[i] = nx_test_rng_normal(&r, 0.05f);
        if (i % 37 == 5) w[i] = 0.0f;
        if (i % 41 == 7) w[i] = -0.0f;
    }
    kn_sketch_bind(s, buf, rows, cols, layout);
    int ok = 1;
    for (int64_t i = 0; i < rows; i++) ok &= kn_sketch_row(s, i, w + i * cols);
    CHECK(ok);
    *w_out = w;
    return buf;
}

/* The definition, from the weights themselves: bits where the sign bit is
 * clear, the mean |w| summed as sketch.h says (64 at a time in f32 lanes
 * i % 4, combined (l0 + l2) + (l1 + l3), the words' sums in double). */
static float definition(const float *w, int64_t cols, const int8_t *xq, float d, int32_t sum) {
    int32_t P = 0;
    double a = 0;
    for (int64_t j = 0; j < cols; j += 64) {
        float lane[4] = {0, 0, 0, 0};
        for (int i = 0; i < 64; i++) {
            if (!signbit(w[j + i])) P += xq[j + i];
            lane[i % 4] += fabsf(w[j + i]);
        }
        a += (lane[0] + lane[2]) + (lane[1] + lane[3]);
    }
    const float scale = (float)(a / (double)cols);
    return (float)(2 * P - sum) * (scale * d);
}

static void scores_equal_the_definition_in_every_kernel_set(void) {
    /* rows past 8, 16 and 32 (blocks of 32 rows and their tails), the
     * hidden sizes of the family (1024 .. 5120 columns) and others: fewer than
     * 8 words, one and two of the blocks' 4096-column chunks (8192, 4160),
     * and past the 512-bit blocks pass's 8192 (64 * 130: AVX2's pass) */
    static const int64_t shapes[][2] = {{1, 64},    {3, 128},   {4, 192},   {5, 960},   {13, 1088}, {7, 8192},
                                        {9, 64 * 130}, {21, 1024}, {18, 2048}, {17, 2560}, {16, 3072}, {10, 4096},
                                        {11, 5120}, {19, 640},  {9, 192},   {9, 512},   {9, 8192},  {70, 1024},
                                        {45, 4160}, {33, 8192}, {64, 128}};
    static const kn_isa sets[] = {KN_ISA_SCALAR, KN_ISA_AVX2, KN_ISA_AVX512VNNI};
    int tried = 0;
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (kn_select(sets[si]) != sets[si]) {   /* the CPU lacks it */
            printf("  note: no %s on this CPU\n", sets[si] == KN_ISA_AVX2 ? "AVX2" : "AVX-512 VNNI");
            continue;
        }
        tried++;
        for (size_t k = 0; k < 2 * sizeof shapes / sizeof *shapes; k++) {   /* each shape in both layouts */
            const int64_t rows = shapes[k / 2][0], cols = shapes[k / 2][1];
            const kn_sketch_layout layout = k % 2 ? KN_SKETCH_BLOCKS : KN_SKETCH_ROWS;
            kn_sketch s;
            float *w;
            void *buf = make_sketch(&s, rows, cols, layout, 11 + k / 2, &w);
            float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
            int8_t *xq = nx_alloc_aligned(kn_sketch_x_bytes(cols));
            nx_test_rng r = {77 + k};
            for (int variant = 0; variant < 3; variant++) {
                for (int64_t c = 0; c < cols; c++)   /* normal; all zero; the int16 bound (all +max) */
                    x[c] = variant == 0 ? nx_test_rng_normal(&r, 1.0f) : variant == 1 ? 0.0f : 3.5f;
                if (variant == 2)   /* rows 0 and 1 all positive: the blocks' even and odd byte lanes */
                    for (int64_t i = 0; i < cols * (rows > 1 ? 2 : 1); i++) w[i] = 1.0f + (float)(i % cols);
                if (variant == 2) CHECK(kn_sketch_row(&s, 0, w) && (rows == 1 || kn_sketch_row(&s, 1, w + cols)));
                float d;
                int32_t sum;
                CHECK(kn_sketch_quantize_x(x, cols, xq, &d, &sum));
                /* odd ranges: blocks of rows, their tails, and past a first block of 32 */
                const int64_t ranges[3][2] = {{0, rows}, {1, rows - (rows > 2)}, {32, rows}};
                for (int ri = 0; ri < 3; ri++) {
                    const int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
                    if (r0 >= r1) continue;
                    for (int64_t i = 0; i < rows; i++) y[i] = -1234.5f;
                    kn_sketch_scores(&s, xq, d, sum, y, r0, r1);
                    int same = 1, untouched = 1;
                    for (int64_t i = 0; i < rows; i++) {
                        if (i < r0 || i >= r1) untouched &= y[i] == -1234.5f;
                        else same &= memcmp(&y[i], &(float){definition(w + i * cols, cols, xq, d, sum)}, 4) == 0;
                    }
                    CHECKF(same && untouched, "%s %s rows %lld cols %lld variant %d range [%lld, %lld)", kn_impl_name(),
                           layout == KN_SKETCH_ROWS ? "rows" : "blocks", (long long)rows, (long long)cols, variant,
                           (long long)r0, (long long)r1);
                }
                if (variant == 2) {   /* every bit set, every xq at its largest: no 16-bit wrap in AVX2's sums */
                    kn_sketch_scores(&s, xq, d, sum, y, 0, rows > 1 ? 2 : 1);
                    CHECK(sum == KN_SKETCH_XMAX * cols && y[0] == (float)(KN_SKETCH_XMAX * cols) * (s.scale[0] * d));
                    CHECK(rows == 1 || y[1] == (float)(KN_SKETCH_XMAX * cols) * (s.scale[1] * d));
                }
            }
            nx_free_aligned(buf), nx_free_aligned(xq);
            free(w), free(x), free(y);
        }
    }
    kn_init(0);
    CHECK(tried >= 1);
}

static void values_that_are_not_finite_are_refused(void) {
    kn_sketch s;
    void *buf = nx_alloc_aligned(kn_sketch_bytes(2, 128));
    kn_sketch_bind(&s, buf, 2, 128, KN_SKETCH_ROWS);
    float w[128], x[128];
    int8_t *xq = nx_alloc_aligned(kn_sketch_x_bytes(128));
    for (int i = 0; i < 128; i++) w[i] = x[i] = (float)(i - 64) / 8;
    CHECK(kn_sketch_row(&s, 0, w));
    CHECK(!(s.bits[0] & 1) && (s.bits[1] >> 63 & 1));   /* -8 unset, +7.875 set */
    w[0] = -0.0f;
    CHECK(kn_sketch_row(&s, 0, w) && !(s.bits[0] & 1));   /* -0 has its sign bit: unset */
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        float wb[128], xb[128];
        memcpy(wb, w, sizeof wb), memcpy(xb, x, sizeof xb);
        wb[100] = bad[b], xb[3] = bad[b];
        float d = 7;
        int32_t sum = 7;
        CHECKF(!kn_sketch_row(&s, 1, wb), "weight %g accepted", bad[b]);
        CHECKF(!kn_sketch_quantize_x(xb, 128, xq, &d, &sum) && d == 7 && sum == 7, "activation %g accepted", bad[b]);
    }
    float d;
    int32_t sum;
    CHECK(kn_sketch_quantize_x(x, 128, xq, &d, &sum) && xq[0] == -KN_SKETCH_XMAX && d == 8.0f / KN_SKETCH_XMAX);
    memset(x, 0, sizeof x);
    CHECK(kn_sketch_quantize_x(x, 128, xq, &d, &sum) && d == 0 && sum == 0 && xq[5] == 0);
    x[7] = -1e-38f;   /* XMAX / max overflows f32 here (0 * inf would be NaN): the scale is taken in double */
    CHECK(kn_sketch_quantize_x(x, 128, xq, &d, &sum) && xq[7] == -KN_SKETCH_XMAX && xq[6] == 0 && sum == -KN_SKETCH_XMAX);
    nx_free_aligned(buf), nx_free_aligned(xq);
}

/* Both layouts put row r's bit for column c where sketch.h says, with the
 * same scales, and zeros in a last block's rows past the sketch's; the
 * activations' nibble tables hold the bias plus the values their bits pick. */
static void layouts_and_tables_are_as_documented(void) {
    const int64_t rows = 37, cols = 192, R = KN_SKETCH_BLOCK_ROWS;
    kn_sketch a, b;
    float *w, *w2;
    void *buf_a = make_sketch(&a, rows, cols, KN_SKETCH_ROWS, 5, &w);
    void *buf_b = make_sketch(&b, rows, cols, KN_SKETCH_BLOCKS, 5, &w2);
    CHECK(a.bits && !a.blocks && b.blocks && !b.bits && memcmp(a.scale, b.scale, (size_t)rows * sizeof(float)) == 0);
    int bits_ok = 1, pad_zero = 1;
    for (int64_t r = 0; r < 2 * R; r++)
        for (int64_t c = 0; c < cols; c++) {
            const int in_block = b.blocks[((r / R) * (cols / 8) + c / 8) * R + r % R] >> (c % 8) & 1;
            if (r >= rows) {
                pad_zero &= !in_block;
                continue;
            }
            const int want = !signbit(w[r * cols + c]);
            bits_ok &= (int)(a.bits[r * (cols / 64) + c / 64] >> (c % 64) & 1) == want && in_block == want;
        }
    CHECK(bits_ok);
    CHECK(pad_zero);

    float x[192];
    int8_t *xq = nx_alloc_aligned(kn_sketch_x_bytes(cols));
    nx_test_rng rng = {3};
    for (int c = 0; c < cols; c++) x[c] = nx_test_rng_normal(&rng, 1.0f);
    float d;
    int32_t sum;
    CHECK(kn_sketch_quantize_x(x, cols, xq, &d, &sum));
    const uint8_t *tab = (const uint8_t *)xq + cols;
    int tables_ok = 1;
    for (int g = 0; g < cols / 4; g++)
        for (int n = 0; n < 16; n++) {
            int want = KN_SKETCH_TABLE_BIAS;
            for (int q = 0; q < 4; q++) want += n >> q & 1 ? xq[4 * g + q] : 0;
            tables_ok &= tab[16 * g + n] == want;
        }
    CHECK(tables_ok);
    nx_free_aligned(buf_a), nx_free_aligned(buf_b), nx_free_aligned(xq);
    free(w), free(w2);
}

/* ---- top k ---- */

static const float *sort_x;
/* larger first; equal values (as keys: -0 below +0) by lower index */
static int by_score(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = sort_x[i], y = sort_x[j];
    if (x != y) return x > y ? -1 : 1;
    if (signbit(x) != signbit(y)) return signbit(x) ? 1 : -1;
    return i < j ? -1 : i > j;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return i < j ? -1 : i > j;
}

/* kn_run_fn for the tests: the ranges one index at a time, last first (an
 * order no pool would take: the result must not depend on it). */
static void run_backwards(void *runner, nx_range_fn fn, void *ctx, int64_t n) {
    int *calls = runner;
    for (int64_t i = n - 1; i >= 0; i--) fn(ctx, i, i + 1, 0), ++*calls;
}

static void top_k_picks_what_a_sort_picks(void) {
    static const int64_t ns[] = {1, 5, 100, 1000, 4099, 248320};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int64_t n = ns[ni];
        float *x = malloc((size_t)n * sizeof *x);
        int32_t *order = malloc((size_t)n * sizeof *order), *idx = malloc((size_t)n * sizeof *idx);
        void *work = malloc(kn_top_k_work_bytes(n));
        for (int kind = 0; kind < 7; kind++) {
            nx_test_rng r = {1000 + (uint64_t)kind};
            for (int64_t i = 0; i < n; i++) {
                switch (kind) {
                case 0: x[i] = nx_test_rng_normal(&r, 100.0f); break;                    /* spread */
                case 1: x[i] = (float)(nx_test_rng_normal(&r, 1.0f) > 0) - 1.0f; break;   /* two values: ties */
                case 2: x[i] = (float)i; break;                                            /* ascending */
                case 3: x[i] = (float)(n - i); break;                                      /* descending */
                case 4: x[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : -1.0f; break;     /* signed zeros */
                case 5: x[i] = i % 1000 == 0 ? 1e6f : -(float)(i % 7); break;             /* a few huge */
                default: x[i] = nx_test_rng_normal(&r, 1.0f); break;
                }
            }
            if (kind == 6) {   /* every sampled position huge: the first threshold keeps too few, a retry must */
                const int64_t m = n < 1024 ? n : 1024;
                for (int64_t i = 0; i < m; i++) x[i * n / m] = 1e6f + (float)i;
            }
            for (int64_t i = 0; i < n; i++) order[i] = (int32_t)i;
            sort_x = x;
            qsort(order, (size_t)n, sizeof *order, by_score);
            const int64_t ks[] = {1, 2, n / 3, n / 64 + 1, n - 1, n};
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                const int64_t k = ks[ki];
                if (k < 1 || k > n) continue;
                memset(idx, 0xff, (size_t)n * sizeof *idx);
                CHECK(kn_top_k_f32(x, n, k, idx, work) == k);
                int32_t *want = malloc((size_t)k * sizeof *want);
                memcpy(want, order, (size_t)k * sizeof *want);
                qsort(want, (size_t)k, sizeof *want, cmp_i32);
                CHECKF(memcmp(want, idx, (size_t)k * sizeof *idx) == 0 && idx[k < n ? k : 0] == (k < n ? -1 : idx[0]),
                       "n %lld kind %d k %lld: not the sorted top k, ascending", (long long)n, kind, (long long)k);
                /* the pass split into blocks, run last first: the same */
                int calls = 0;
                memset(idx, 0xff, (size_t)n * sizeof *idx);
                CHECK(kn_top_k_f32_split(x, n, k, idx, work, run_backwards, &calls) == k && calls >= 1);
                CHECKF(memcmp(want, idx, (size_t)k * sizeof *idx) == 0 && idx[k < n ? k : 0] == (k < n ? -1 : idx[0]),
                       "n %lld kind %d k %lld: the split pass picks otherwise", (long long)n, kind, (long long)k);
                free(want);
            }
        }
        CHECK(kn_top_k_f32(x, n, 0, idx, work) == 0);
        free(x), free(order), free(idx), free(work);
    }
}

/* NaNs rank by their bits wherever they sit (the vector pre-test of a block
 * of 16 once let a block with only a NaN above the threshold, or a NaN
 * threshold, pass nothing). */
static void top_k_ranks_nans_by_their_bits(void) {
    const int64_t n = 4111;
    float *x = malloc((size_t)n * sizeof *x);
    int32_t idx[2];
    void *work = malloc(kn_top_k_work_bytes(n));
    for (int64_t i = 0; i < n; i++) x[i] = -(float)i;
    x[1001] = NAN;   /* positive NaN: above everything */
    CHECK(kn_top_k_f32(x, n, 1, idx, work) == 1 && idx[0] == 1001);
    CHECK(kn_top_k_f32(x, n, 2, idx, work) == 2 && idx[0] == 0 && idx[1] == 1001);
    const uint32_t neg_nan = 0xffc00000u;
    for (int64_t i = 0; i < n; i++) memcpy(&x[i], &neg_nan, sizeof neg_nan);   /* below everything */
    x[101] = 5.0f;
    CHECK(kn_top_k_f32(x, n, 1, idx, work) == 1 && idx[0] == 101);
    free(x), free(work);
}

/* The key kn_top_k_collect documents, computed the plain way. */
static uint32_t key_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u >> 31 ? ~u : u | 0x80000000u;
}

/* Every set's collect pass keeps exactly the indices whose key is >= thr,
 * ascending, with their keys: lengths around the 16-lane blocks, values
 * with ties, signed zeros, infinities and NaNs of both signs, thresholds
 * from below everything to above everything (NaN keys included). */
static void top_k_collect_keeps_the_keys_at_or_above_the_threshold_in_every_set(void) {
    static const int64_t ns[] = {1, 15, 16, 17, 100, 1000, 4111};
    static const kn_isa sets[] = {KN_ISA_SCALAR, KN_ISA_AVX2, KN_ISA_AVX512VNNI};
    const int64_t nmax = 4111;
    float *x = malloc((size_t)nmax * sizeof *x);
    uint32_t *cand = malloc((size_t)nmax * sizeof *cand), *ckey = malloc((size_t)nmax * sizeof *ckey);
    int32_t *want = malloc((size_t)nmax * sizeof *want);
    nx_test_rng r = {4242};
    int bad = 0, cases = 0, tried = 0;
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (kn_select(sets[si]) != sets[si]) continue;   /* the CPU lacks it (noted above) */
        tried++;
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            const int64_t n = ns[ni];
            for (int64_t i = 0; i < n; i++) {
                const float v = nx_test_rng_normal(&r, 1.0f);
                const uint32_t neg_nan = 0xffc00000u;
                switch (i % 11) {
                case 0: x[i] = 0.0f; break;
                case 1: x[i] = -0.0f; break;
                case 2: x[i] = v > 0 ? INFINITY : -INFINITY; break;
                case 3: x[i] = v > 1.0f ? NAN : v; break;
                case 4: memcpy(&x[i], &neg_nan, sizeof neg_nan); break;
                case 5: x[i] = 1.0f; break;   /* ties */
                default: x[i] = v; break;
                }
            }
            const float thr_values[] = {-INFINITY, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 2.5f, INFINITY, NAN};
            for (size_t ti = 0; ti < sizeof thr_values / sizeof *thr_values + 2; ti++) {
                const uint32_t thr = ti == sizeof thr_values / sizeof *thr_values ? 0u
                                     : ti > sizeof thr_values / sizeof *thr_values ? 0xffffffffu
                                                                                     : key_of(thr_values[ti]);
                int64_t w = 0;
                for (int64_t i = 0; i < n; i++)
                    if (key_of(x[i]) >= thr) want[w++] = (int32_t)i;
                const int64_t c = kn_top_k_collect(x, n, thr, cand, ckey);
                int ok = c == w;
                for (int64_t i = 0; ok && i < c; i++) ok = cand[i] == (uint32_t)want[i] && ckey[i] == key_of(x[want[i]]);
                bad += !ok;
                cases++;
            }
        }
    }
    kn_select(KN_ISA_BEST);
    CHECKF(bad == 0 && tried >= 1 && cases > 0, "%d of %d collect passes differ from the definition", bad, cases);
    free(x), free(cand), free(ckey), free(want);
}

/* kn_argmax_at_f32 on candidate sets of every shape (a prefix of indices, a
 * gap at 0, scattered) whose values mix normal numbers, ties, NaNs and
 * -inf (all NaN, all -inf, -inf inside the prefix or past the gap) equals
 * kn_argmax_f32 of the row filled with -inf outside the candidates. */
static void argmax_at_candidates_equals_the_filled_rows_argmax(void) {
    enum { N = 300 };
    float x[N], row[N];
    int32_t idx[N];
    nx_test_rng r = {77};
    int bad = 0, cases = 0;
    for (int shape = 0; shape < 3; shape++)
        for (int fill = 0; fill < 7; fill++)
            for (int k = 1; k < N; k += 37) {
                for (int i = 0; i < N; i++) x[i] = 1e30f;   /* never read beyond the candidates */
                int c = 0;   /* candidates, ascending */
                for (int i = 0; i < N && c < k; i++)
                    if (shape == 0 || (shape == 1 && i > 0) || (shape == 2 && nx_test_rng_normal(&r, 1.0f) > 0.3f)) idx[c++] = i;
                for (int j = 0; j < c; j++) {
                    const float v = nx_test_rng_normal(&r, 1.0f);
                    switch (fill) {
                    case 0: x[idx[j]] = v; break;
                    case 1: x[idx[j]] = v > 0 ? 1.0f : -1.0f; break;             /* ties */
                    case 2: x[idx[j]] = v > 0.5f ? NAN : v; break;               /* some NaN */
                    case 3: x[idx[j]] = NAN; break;                              /* all NaN */
                    case 4: x[idx[j]] = -INFINITY; break;                        /* all -inf */
                    case 5: x[idx[j]] = v > 0 ? NAN : -INFINITY; break;          /* NaN and -inf */
                    default: x[idx[j]] = j == c - 1 ? -INFINITY : NAN; break;    /* -inf last */
                    }
                }
                for (int i = 0; i < N; i++) row[i] = -INFINITY;
                for (int j = 0; j < c; j++) row[idx[j]] = x[idx[j]];
                cases++;
                bad += kn_argmax_at_f32(x, idx, c, N) != kn_argmax_f32(row, N);
            }
    CHECKF(bad == 0 && cases > 100, "%d of %d candidate sets: not the filled row's argmax", bad, cases);
}

static const nx_test tests[] = {
    {"scores_equal_the_definition_in_every_kernel_set",
     "scalar / AVX2 / AVX-512 scores == the definition bit for bit, rows and blocks layouts: odd rows and ranges, "
     "zero activations, the largest xq * 8320",
     scores_equal_the_definition_in_every_kernel_set},
    {"layouts_and_tables_are_as_documented",
     "rows / blocks layouts: every bit where sketch.h says, same scales, zeroed padding; nibble tables = bias + "
     "subset sums",
     layouts_and_tables_are_as_documented},
    {"values_that_are_not_finite_are_refused", "NaN / inf weights and activations refused; -0 is unset; scales right",
     values_that_are_not_finite_are_refused},
    {"top_k_picks_what_a_sort_picks",
     "n 1 .. 248320, k 1 .. n: the sort's top k ascending, ties to the lowest index, signed zeros, sorted inputs",
     top_k_picks_what_a_sort_picks},
    {"top_k_ranks_nans_by_their_bits", "a positive NaN anywhere ranks first, negative NaNs last, a NaN threshold too",
     top_k_ranks_nans_by_their_bits},
    {"top_k_collect_keeps_the_keys_at_or_above_the_threshold_in_every_set",
     "scalar / AVX2 / AVX-512 collect: n 1 .. 4111 around blocks of 16, signed zeros, infinities, NaNs, every threshold",
     top_k_collect_keeps_the_keys_at_or_above_the_threshold_in_every_set},
    {"argmax_at_candidates_equals_the_filled_rows_argmax",
     "candidates as a prefix, past a gap, scattered; ties, NaN, -inf, all NaN, all -inf: kn_argmax_f32 of the -inf-filled row",
     argmax_at_candidates_equals_the_filled_rows_argmax},
};

NX_TEST_MAIN(tests)
