/* test_attention.c — grouped-query attention (kernels/attention.h): the
 * score pass's twins and the value sum's agree bit for bit, each row of a
 * block (token, head) equals that row alone (so sharing a KV head's loads
 * across heads and tokens changes nothing), and the result follows softmax
 * attention written out in double; a value sum is one fused multiply-add
 * a position;
 * a cache of f16 rows gives the bits of the f32 cache holding the same
 * values, and rows are stored in it rounded and saturated. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "test.h"

static float *normals(nx_test_rng *r, int64_t n, float sigma) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = nx_test_rng_normal(r, sigma);
    return v;
}

/* The f16 copy of n floats, and the f32 values it holds written back into x. */
static uint16_t *to_f16(float *x, int64_t n) {
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) x[i] = nx_f16_to_f32(h[i] = nx_f32_to_f16(x[i]));
    return h;
}

/* Every kernel set's value sums against the scalar twin, bit for bit, rows
 * of f32 and of f16 (== the f32 rows of their values), writing each output
 * row and nothing between: odd head sizes, runs of positions ending inside
 * and past a block, 1-9 tokens at once. */
static void test_value_sum_twins_agree_bit_for_bit(void) {
    static const int64_t hds[] = {1, 7, 16, 33, 256};
    /* runs of 64 positions: whole, one past, two; a run ending inside a block, past its first token (62: blocks
     * of 4, 5 and 9; 63: of 3; 60: the second group of 4 tokens in a block of 9) */
    static const int64_t ctxs[] = {1, 2, 17, 100, 64, 65, 130, 60, 62, 63};
    static const int Ts[] = {1, 2, 3, 4, 5, 9};   /* the 16-lane set takes up to 4 tokens at once */
    static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVX2};   /* AVX-VNNI's attention is AVX2's */
    nx_test_rng r = {0xA77E11ULL};
    if (kn_select(KN_ISA_AVX2) != KN_ISA_AVX2) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                for (int G = 1; G <= 6; G++) {
                    const int T = Ts[ti];
                    const int64_t hd = hds[hi], n = ctxs[ci] + T - 1, stride = hd * 2 + 3, ldo = hd + 5, ldp = n + 2;
                    const int64_t ldo_t = G * ldo + 3, nout = T * ldo_t;
                    const size_t bytes = (size_t)nout * sizeof(float);
                    float *v = normals(&r, n * stride, 1.0f), *p = normals(&r, T * G * ldp, 0.3f);
                    uint16_t *vh = to_f16(v, n * stride);   /* v now holds the values vh holds */
                    float *ya = malloc(bytes), *yr = malloc(bytes), *yh = malloc(bytes), *yhr = malloc(bytes);
                    for (int64_t i = 0; i < nout; i++) yr[i] = yhr[i] = -5.0f;
                    kn_attn_values_ref(yr, ldo, ldo_t, p, ldp, G, T, n - T, v, NX_DT_F32, stride, hd);
                    kn_attn_values_ref(yhr, ldo, ldo_t, p, ldp, G, T, n - T, vh, NX_DT_F16, stride, hd);
                    CHECKF(memcmp(yhr, yr, bytes) == 0, "hd=%lld n=%lld T=%d G=%d: the scalar twin's f16 rows differ",
                           (long long)hd, (long long)n, T, G);
                    int gaps = 0;   /* the columns between rows are left alone */
                    for (int64_t i = 0; i < nout; i++) {
                        const int64_t j = i / ldo_t, w = i % ldo_t;
                        const int in_row = w / ldo < G && w % ldo < hd;
                        gaps += !in_row && yr[j * ldo_t + w] != -5.0f;
                    }
                    CHECK(gaps == 0);
                    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
                        if (kn_select(sets[si]) != sets[si]) continue;
                        for (int64_t i = 0; i < nout; i++) ya[i] = yh[i] = -5.0f;
                        kn_attn_values(ya, ldo, ldo_t, p, ldp, G, T, n - T, v, NX_DT_F32, stride, hd);
                        kn_attn_values(yh, ldo, ldo_t, p, ldp, G, T, n - T, vh, NX_DT_F16, stride, hd);
                        CHECKF(memcmp(ya, yr, bytes) == 0 && memcmp(yh, yr, bytes) == 0,
                               "%s hd=%lld n=%lld T=%d G=%d: differs from the scalar twin (f32 %d, f16 %d)",
                               kn_impl_name(), (long long)hd, (long long)n, T, G, memcmp(ya, yr, bytes) != 0,
                               memcmp(yh, yr, bytes) != 0);
                    }
                    free(v), free(vh), free(p), free(ya), free(yr), free(yh), free(yhr);
                }
    kn_init(0);
}

/* A value sum is one fused multiply-add a position (attention.h), in every
 * set and at every T: with p = (1, a) over v rows (-1, a), a = 1 + 2^-12,
 * the sum is fmaf(a, a, -1) = 2^-11 + 2^-24 exactly, where a multiply and
 * an add would give 2^-11 (a * a rounds to 1 + 2^-11). Rows past the two
 * (p and v 0) add zeros. 16 columns (whole vectors) and 17 (a scalar tail),
 * 4 heads, blocks of 1-5 tokens. */
static void test_value_sum_is_one_fused_multiply_add_a_position(void) {
    const float a = 1.0f + 0x1p-12f, want = 0x1p-11f + 0x1p-24f;
    static const kn_isa sets[] = {KN_ISA_SCALAR, KN_ISA_AVX2, KN_ISA_AVX512VNNI};
    CHECK(a * a == 1.0f + 0x1p-11f);   /* the two-rounding sum this rules out */
    for (int64_t hd = 16; hd <= 17; hd++)
        for (int T = 1; T <= 5; T++) {
            const int G = 4;
            const int64_t n0 = 1, n = n0 + T, ldp = n;
            float *v = calloc((size_t)(n * hd), sizeof *v), *p = calloc((size_t)(T * G * ldp), sizeof *p);
            float *y = malloc((size_t)(T * G * hd) * sizeof *y);
            for (int64_t i = 0; i < hd; i++) v[i] = -1.0f, v[hd + i] = a;
            for (int r = 0; r < T * G; r++) p[r * ldp] = 1.0f, p[r * ldp + 1] = a;
            for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
                if (kn_select(sets[si]) != sets[si]) continue;
                kn_attn_values(y, hd, G * hd, p, ldp, G, T, n0, v, NX_DT_F32, hd, hd);
                int bad = 0;
                for (int64_t i = 0; i < T * G * hd; i++) bad += y[i] != want;
                CHECKF(bad == 0, "%s hd=%lld T=%d: %d sums are not fmaf(a, a, -1)", kn_impl_name(), (long long)hd, T,
                       bad);
            }
            free(v), free(p), free(y);
        }
    kn_init(0);
}

/* The K tiles of n rows of hd elements (row t at x + t * ld), of f32 and, with
 * f16 set, of f16: the values f16 rows hold written back into x first. */
static void *k_tiles(float *x, int64_t ld, int64_t n, int64_t hd, int f16) {
    void *k = calloc((size_t)(kn_k_cap(n) * hd), f16 ? 2 : 4);
    for (int64_t t = 0; t < n; t++) {
        if (f16) free(to_f16(x + t * ld, hd));
        kn_attn_store_k(k, f16 ? NX_DT_F16 : NX_DT_F32, t, x + t * ld, hd);
    }
    return k;
}

/* Every kernel set's score pass against its scalar twin, bit for bit, K
 * tiles of f32 and of f16 (== the f32 tiles of their values), writing each
 * row's positions and nothing else: odd head sizes (130 takes two passes
 * over the tiles), blocks ending inside a tile and past it, 72 rows (two
 * batches of query rows). */
static void test_score_twins_agree_bit_for_bit(void) {
    static const int64_t hds[] = {1, 7, 16, 33, 130, 256};
    static const int64_t n0s[] = {0, 5, 15, 16, 40};
    static const int Ts[] = {1, 2, 4, 9};
    static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
    nx_test_rng r = {0x5C0AE5ULL};
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ni = 0; ni < sizeof n0s / sizeof *n0s; ni++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                for (int G = 1; G <= 8; G += G < 4 ? 1 : 4) {
                    const int T = Ts[ti];
                    const int64_t hd = hds[hi], n0 = n0s[ni], n = n0 + T, lds = n + 3, ldq = hd + 2;
                    const int64_t ldq_t = G * ldq + 1, ns = T * G * lds;
                    float *x = normals(&r, n * hd, 1.0f), *q = normals(&r, T * ldq_t, 1.0f);
                    void *k32 = k_tiles(x, hd, n, hd, 0);
                    float *want = malloc((size_t)ns * sizeof *want), *got = malloc((size_t)ns * sizeof *got);
                    for (int64_t i = 0; i < ns; i++) want[i] = -7.0f;
                    kn_attn_scores_ref(want, lds, q, ldq, ldq_t, G, T, n0, k32, NX_DT_F32, hd);
                    int wrong = 0;   /* written where the row sees the position, and only there */
                    for (int64_t i = 0; i < ns; i++) {
                        const int64_t row = i / lds, t = i % lds;
                        wrong += (t <= n0 + row / G) != (want[i] != -7.0f);
                    }
                    CHECKF(wrong == 0, "hd=%lld n0=%lld T=%d G=%d: the scalar twin wrote %d scores wrongly",
                           (long long)hd, (long long)n0, T, G, wrong);
                    void *k16 = k_tiles(x, hd, n, hd, 1);   /* x now holds the f16 values */
                    void *k32h = k_tiles(x, hd, n, hd, 0);
                    float *want16 = malloc((size_t)ns * sizeof *want16);
                    for (int64_t i = 0; i < ns; i++) want16[i] = -7.0f;
                    kn_attn_scores_ref(want16, lds, q, ldq, ldq_t, G, T, n0, k32h, NX_DT_F32, hd);
                    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
                        if (kn_select(sets[si]) != sets[si]) continue;
                        for (int f16 = 0; f16 <= 1; f16++) {
                            for (int64_t i = 0; i < ns; i++) got[i] = -7.0f;
                            kn_attn_scores(got, lds, q, ldq, ldq_t, G, T, n0, f16 ? k16 : k32,
                                           f16 ? NX_DT_F16 : NX_DT_F32, hd);
                            CHECKF(memcmp(got, f16 ? want16 : want, (size_t)ns * sizeof *got) == 0,
                                   "%s hd=%lld n0=%lld T=%d G=%d %s: differs from the scalar twin on the f32 tiles",
                                   kn_impl_name(), (long long)hd, (long long)n0, T, G, f16 ? "f16" : "f32");
                        }
                    }
                    free(x), free(q), free(k32), free(k16), free(k32h), free(want), free(want16), free(got);
                }
    kn_init(0);
}

/* A block of T tokens after n0 cached rows against the same rows one token
 * and one head at a time, and against softmax attention in double, for
 * every kernel set; the SIMD sets give the same bits. The cache holds
 * exactly the n0 + T rows the block sees (K: the tiles that hold them) and
 * the scores exactly the block's T * G * (n0 + T), so a read or write past
 * them is out of bounds (the sanitizer build catches it). */
static void test_blocks_equal_single_rows_and_follow_softmax(void) {
    enum { HD = 40, STRIDE = 2 * HD, NMAX = 80 };
    static const int Ts[] = {1, 2, 5, 9};
    static const int n0s[] = {0, 7, 36, 66};   /* runs of 12 (scores) and 64 (values) positions */
    static const kn_isa sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
    nx_test_rng r = {0x5EED0A77ULL};
    const float scale = 1.0f / sqrtf((float)HD);
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (size_t ni = 0; ni < sizeof n0s / sizeof *n0s; ni++)
            for (int G = 1; G <= 5; G++) {
                const int T = Ts[ti], n0 = n0s[ni], n_all = n0 + T;
                const int64_t kv_len = (int64_t)(n_all - 1) * STRIDE + HD;
                /* query, then its gate, as the model stores them; tokens 6 heads apart */
                const int64_t ldq = 2 * HD, ldq_t = 6 * ldq, ldo_t = 6 * HD;
                float *k = normals(&r, kv_len, 1.0f), *v = normals(&r, kv_len, 1.0f), *q = normals(&r, T * ldq_t, 1.0f);
                /* every other case with an f16 cache; k and v then hold its values */
                const int f16 = (int)(ti + ni + (size_t)G) % 2;
                void *kh = f16 ? k_tiles(k, STRIDE, n_all, HD, 1) : NULL, *kt = k_tiles(k, STRIDE, n_all, HD, 0);
                uint16_t *vh = f16 ? to_f16(v, kv_len) : NULL;
                float *scores = malloc((size_t)(T * G * n_all) * sizeof *scores), one[HD];
                float *out = malloc((size_t)(T * ldo_t) * sizeof *out), *simd = malloc((size_t)(T * ldo_t) * sizeof *simd);
                float *of32 = malloc((size_t)(T * ldo_t) * sizeof *of32);
                int have_simd = 0;
                for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
                    if (kn_select(sets[si]) != sets[si]) continue;   /* the CPU lacks it */
                    memset(out, 0, (size_t)(T * ldo_t) * sizeof *out);
                    kn_attn_block b = {.out = out, .ldo = HD, .ldo_t = ldo_t, .q = q, .ldq = ldq, .ldq_t = ldq_t,
                                       .G = G, .T = T, .k = kt, .v = v, .kv_stride = STRIDE, .n0 = n0, .hd = HD,
                                       .scale = scale};
                    if (f16) {   /* the f32 cache of the same values first: the f16 one gives its bits */
                        memset(of32, 0, (size_t)(T * ldo_t) * sizeof *of32);
                        b.out = of32;
                        kn_attention(&b, scores);
                        b.out = out, b.k = kh, b.v = vh, b.kv_dtype = NX_DT_F16;
                    }
                    kn_attention(&b, scores);
                    if (f16)
                        CHECKF(memcmp(out, of32, (size_t)(T * ldo_t) * sizeof *out) == 0,
                               "%s T=%d n0=%d G=%d: the f16 cache differs from the f32 cache of its values",
                               kn_impl_name(), T, n0, G);
                    if (sets[si] != KN_ISA_SCALAR) {
                        if (have_simd)
                            CHECKF(memcmp(out, simd, (size_t)(T * ldo_t) * sizeof *out) == 0,
                                   "%s T=%d n0=%d G=%d: differs from the other SIMD set", kn_impl_name(), T, n0, G);
                        memcpy(simd, out, (size_t)(T * ldo_t) * sizeof *out);
                        have_simd = 1;
                    }
                    int differ = 0, off = 0;
                    for (int j = 0; j < T; j++)
                        for (int h = 0; h < G; h++) {
                            const float *qh = q + j * ldq_t + h * ldq;
                            kn_attn_block s1 = b;
                            s1.out = one, s1.q = qh, s1.G = 1, s1.T = 1, s1.n0 = n0 + j;
                            kn_attention(&s1, scores);
                            differ += memcmp(one, out + j * ldo_t + h * HD, sizeof one) != 0;
                            const int n = n0 + j + 1;
                            double w[NMAX], mx = -INFINITY, sum = 0;
                            for (int t = 0; t < n; t++) {
                                double dot = 0;
                                for (int d = 0; d < HD; d++) dot += (double)qh[d] * k[t * STRIDE + d];
                                w[t] = dot * scale;
                                mx = fmax(mx, w[t]);
                            }
                            for (int t = 0; t < n; t++) sum += (w[t] = exp(w[t] - mx));
                            for (int d = 0; d < HD; d++) {
                                double o = 0;
                                for (int t = 0; t < n; t++) o += w[t] / sum * v[t * STRIDE + d];
                                off += fabs(out[j * ldo_t + h * HD + d] - o) > 1e-5;
                            }
                        }
                    CHECKF(differ == 0, "%s T=%d n0=%d G=%d: %d rows differ from the row alone", kn_impl_name(), T, n0,
                           G, differ);
                    CHECKF(off == 0, "%s T=%d n0=%d G=%d: %d outputs off softmax attention", kn_impl_name(), T, n0, G,
                           off);
                }
                free(k), free(kt), free(v), free(kh), free(vh), free(q), free(scores), free(out), free(simd);
                free(of32);
            }
    kn_init(0);
}

/* kn_attn_store_row: f32 rows copied; f16 rows rounded to nearest even,
 * saturated at +-65504 rather than infinite, NaN kept, nothing written past
 * the row. */
static void test_store_row_rounds_and_saturates(void) {
    const float x[] = {1.0f, -2.5f, 0.1f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-12f, 65504.0f, 65519.0f, 7e4f,
                       -1e30f, INFINITY, -INFINITY, NAN, 0x1p-20f, -0.0f};
    enum { N = sizeof x / sizeof *x };
    const uint16_t want[N] = {0x3c00, 0xc100, 0x2e66, 0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x7bff,
                              0xfbff, 0x7bff, 0xfbff, 0, 0x0010, 0x8000};
    uint16_t h[N + 1];
    h[N] = 0xabcd;
    kn_attn_store_row(h, NX_DT_F16, x, N);
    for (int i = 0; i < N; i++) {
        if (isnan(x[i])) CHECKF(isnan(nx_f16_to_f32(h[i])), "element %d: NaN stored as 0x%04x", i, h[i]);
        else CHECKF(h[i] == want[i], "element %d (%g): stored 0x%04x, want 0x%04x", i, (double)x[i], h[i], want[i]);
    }
    CHECK(h[N] == 0xabcd);
    float f[N + 1];
    f[N] = 3.0f;
    kn_attn_store_row(f, NX_DT_F32, x, N);
    CHECK(memcmp(f, x, sizeof x) == 0 && f[N] == 3.0f);
}

static const nx_test tests[] = {
    {"value_sum_twins_agree_bit_for_bit",
     "kn_attn_values of every kernel set == its scalar twin, f32 and f16 rows (== the f32 rows of their values): odd head sizes, "
     "1-6 heads, blocks of 1-9 tokens, strides",
     test_value_sum_twins_agree_bit_for_bit},
    {"value_sum_is_one_fused_multiply_add_a_position",
     "p (1, a) over v rows (-1, a), a = 1 + 2^-12: every set's sum is fmaf(a, a, -1) exactly, not a multiply then "
     "an add; 16 and 17 columns, 4 heads, 1-5 tokens",
     test_value_sum_is_one_fused_multiply_add_a_position},
    {"score_twins_agree_bit_for_bit",
     "kn_attn_scores of every set == its scalar twin (one fused multiply-add chain a score), f32 and f16 K tiles "
     "(== the f32 tiles of their values): odd head sizes, two passes over d, 1-9 tokens, 1-8 heads, only the "
     "positions each row sees written",
     test_score_twins_agree_bit_for_bit},
    {"blocks_equal_single_rows_and_follow_softmax",
     "each row of a block of T tokens x G heads == that row alone, bit for bit; within 1e-5 of softmax attention "
     "in double; every kernel set, the SIMD ones equal; exact-size cache and scores; an f16 cache == the f32 "
     "cache of its values",
     test_blocks_equal_single_rows_and_follow_softmax},
    {"store_row_rounds_and_saturates", "f16 cache rows: nearest even, +-65504 for larger magnitudes, NaN kept",
     test_store_row_rounds_and_saturates},
};

NX_TEST_MAIN(tests)
