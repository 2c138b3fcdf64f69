/* act.c — the vector SiLU and sigmoid gate (see act.h): scalar twins that
 * are the definition and AVX2 twins that repeat them lane by lane.
 *
 * Why not expf: libm's expf is a call per element, and SiLU runs on every
 * element of the MLP's intermediate rows, the conv channels and the gated
 * norm: about a million per token on a 0.8B model, most of it on one thread.
 * A polynomial exp vectorizes, and writing it out once in C fixes the
 * operations, so the scalar and SIMD results are the same bits (a review
 * compared the twins on all 2^32 inputs: no difference; exp's worst error on
 * [-87, 88] is 1.01 ulp). The cost of that agreement falls on the scalar twin:
 * in this portable build its eight fmaf are libm calls (about 37 ns an element
 * against 0.7 for the AVX2 twin), which only the --ref mode and CPUs without
 * AVX2 pay. */
#include "kernels/act.h"

#include <assert.h>
#include <string.h>

#include "kernels/avx2.h"

/* Range: e^88 < FLT_MAX and e^-87 is still a normal float, so 2^n below
 * never leaves the exponent range. */
#define EXP_HI 88.0f
#define EXP_LO (-87.0f)
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f      /* ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits */
#define LN2_LO (-2.12194440e-4f)
/* e^r - 1 - r = r^2 (P0 + P1 r + ... + P5 r^5) on |r| <= ln2 / 2 (Cephes) */
#define P0 5.0000001201e-1f
#define P1 1.6666665459e-1f
#define P2 4.1665795894e-2f
#define P3 8.3334519073e-3f
#define P4 1.3981999507e-3f
#define P5 1.9875691500e-4f

float kn_exp(float x) {
    if (x > EXP_HI) return INFINITY;
    x = x < EXP_HI ? x : EXP_HI;   /* a NaN fails the test and becomes EXP_HI */
    x = x > EXP_LO ? x : EXP_LO;
    const float n = nearbyintf(x * LOG2E), nn = 0.0f - n;   /* the current rounding mode: to nearest even */
    float r = fmaf(nn, LN2_HI, x);
    r = fmaf(nn, LN2_LO, r);
    float p = fmaf(P5, r, P4);
    p = fmaf(p, r, P3);
    p = fmaf(p, r, P2);
    p = fmaf(p, r, P1);
    p = fmaf(p, r, P0);
    const float e = fmaf(p, r * r, r) + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;   /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return e * scale;
}

/* v * sigmoid(w) as v / (1 + e^-w): SiLU is x's own gate, attention's
 * output gate another row's. */
static float sigmoid_scaled(float v, float w) { return v / (1.0f + kn_exp(0.0f - w)); }

void kn_silu_mul_f32_ref(float *y, const float *x, const float *u, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    for (int64_t i = 0; i < n; i++) {
        const float s = sigmoid_scaled(x[i], x[i]);
        y[i] = u ? s * u[i] : s;
    }
}

void kn_sigmoid_gate_f32_ref(float *y, const float *g, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && g != NULL)));
    for (int64_t i = 0; i < n; i++) y[i] = g[i] != g[i] ? g[i] : sigmoid_scaled(y[i], g[i]);
}

/* Softmax's first step on p[i0 .. n): scaled in place; returns the larger of
 * mx and their max, and sets *nan when one is NaN. */
static float scale_and_max(float *p, int64_t i0, int64_t n, float scale, float mx, int *nan) {
    for (int64_t i = i0; i < n; i++) {
        p[i] *= scale;
        mx = p[i] > mx ? p[i] : mx;
        *nan |= p[i] != p[i];
    }
    return mx;
}

/* 1, with the row set to NaN, when softmax cannot give numbers. */
static int softmax_failed(float *p, int64_t n, float mx, int nan) {
    if (!nan && isfinite(mx)) return 0;
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return 1;
}

void kn_softmax_f32_ref(float *p, int64_t n, float scale) {
    assert(n >= 1 && p != NULL);
    const int64_t n8 = n & ~(int64_t)7;
    int nan = 0;
    const float mx = scale_and_max(p, 0, n, scale, -INFINITY, &nan);
    if (softmax_failed(p, n, mx, nan)) return;
    double lane[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        p[i] = kn_exp(p[i] - mx);
        if (i < n8) lane[i % 8] += p[i];
    }
    double sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (int64_t i = n8; i < n; i++) sum += p[i];
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) p[i] *= inv;
}

/* e^(x - mx), and 0 for x = -inf (kn_exp clamps its argument at EXP_LO, so
 * a masked token would otherwise weigh e^-87). */
static float exp_or_zero(float x, float mx) { return x == -INFINITY ? 0.0f : kn_exp(x - mx); }

/* sum plus the weights of x[i0..n) in order, each also written to w unless
 * w is NULL: every twin's tail past its vectors. */
static double exp_sum_tail(float *w, const float *x, int64_t i0, int64_t n, float mx, double sum) {
    for (int64_t i = i0; i < n; i++) {
        const float e = exp_or_zero(x[i], mx);
        if (w) w[i] = e;
        sum += e;
    }
    return sum;
}

/* The weights and their sum; w NULL: the sum alone (kn_sum_exp_f32). */
static double exp_sum_ref(float *w, const float *x, int64_t n, float mx) {
    assert(n >= 1 && x != NULL);
    const int64_t n8 = n & ~(int64_t)7;
    double lane[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float e = exp_or_zero(x[i], mx);
        if (w) w[i] = e;
        if (i < n8) lane[i % 8] += e;
    }
    double sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (int64_t i = n8; i < n; i++) sum += w ? w[i] : exp_or_zero(x[i], mx);
    return sum;
}

double kn_sum_exp_f32_ref(const float *x, int64_t n, float mx) { return exp_sum_ref(NULL, x, n, mx); }
double kn_exp_sum_f32_ref(float *w, const float *x, int64_t n, float mx) { return exp_sum_ref(w, x, n, mx); }

#if KN_HAVE_X86
/* kn_exp's middle on one vector width (PFX _mm256 or _mm512, V its float
 * vector type): from x, clamped, the scaled e = 2^-n e^x of the scalar
 * steps -- n = round(x log2 e), r = x - n ln 2 in two steps, e = 1 + r +
 * r^2 p(r) -- in the same operations, so the 8- and 16-lane twins cannot
 * drift apart. */
#define KN_EXP_POLY(V, PFX, x, n, e)                                                                       \
    do {                                                                                                   \
        const V nn_ = PFX##_sub_ps(PFX##_setzero_ps(), n);                                                 \
        V r_ = PFX##_fmadd_ps(nn_, PFX##_set1_ps(LN2_HI), x);                                              \
        r_ = PFX##_fmadd_ps(nn_, PFX##_set1_ps(LN2_LO), r_);                                               \
        V p_ = PFX##_fmadd_ps(PFX##_set1_ps(P5), r_, PFX##_set1_ps(P4));                                   \
        p_ = PFX##_fmadd_ps(p_, r_, PFX##_set1_ps(P3));                                                    \
        p_ = PFX##_fmadd_ps(p_, r_, PFX##_set1_ps(P2));                                                    \
        p_ = PFX##_fmadd_ps(p_, r_, PFX##_set1_ps(P1));                                                    \
        p_ = PFX##_fmadd_ps(p_, r_, PFX##_set1_ps(P0));                                                    \
        e = PFX##_add_ps(PFX##_fmadd_ps(p_, PFX##_mul_ps(r_, r_), r_), PFX##_set1_ps(1.0f));               \
    } while (0)

/* kn_exp on 8 lanes, operation for operation. */
KN_AVX2_INLINE __m256 exp8_avx2(__m256 x) {
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ);
    /* min returns its second operand when one is NaN: as the scalar
     * comparison, a NaN ends up at EXP_HI */
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 e;
    KN_EXP_POLY(__m256, _mm256, x, n, e);
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(e, _mm256_castsi256_ps(bits)), _mm256_set1_ps(INFINITY), over);
}

/* sigmoid_scaled on 8 lanes. */
KN_AVX2_INLINE __m256 sigmoid_scaled8_avx2(__m256 v, __m256 w) {
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), w))));
}

KN_AVX2 void kn_silu_mul_f32_avx2(float *y, const float *x, const float *u, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        __m256 s = sigmoid_scaled8_avx2(xv, xv);
        if (u) s = _mm256_mul_ps(s, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(y + i, s);
    }
    kn_silu_mul_f32_ref(y + n8, x + n8, u ? u + n8 : NULL, n - n8);
}

KN_AVX2 void kn_sigmoid_gate_f32_avx2(float *y, const float *g, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && g != NULL)));
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 s = sigmoid_scaled8_avx2(_mm256_loadu_ps(y + i), gv);
        _mm256_storeu_ps(y + i, _mm256_blendv_ps(s, gv, _mm256_cmp_ps(gv, gv, _CMP_UNORD_Q)));
    }
    kn_sigmoid_gate_f32_ref(y + n8, g + n8, n - n8);
}

/* The scalar twin's steps on 8 lanes: the max is exact in any order; the
 * sums of lanes 0-3 and 4-7 go to two double vectors (so lanes l and l + 4
 * meet first), and the tail follows in order. */
KN_AVX2 void kn_softmax_f32_avx2(float *p, int64_t n, float scale) {
    assert(n >= 1 && p != NULL);
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 sv = _mm256_set1_ps(scale);
    __m256 mv = _mm256_set1_ps(-INFINITY), nanv = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + i), sv);
        _mm256_storeu_ps(p + i, x);
        mv = _mm256_max_ps(x, mv);   /* a NaN in x keeps mv, as the scalar test does */
        nanv = _mm256_or_ps(nanv, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    float m8[8], mx = -INFINITY;
    _mm256_storeu_ps(m8, mv);
    for (int l = 0; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
    int nan = _mm256_movemask_ps(nanv) != 0;
    mx = scale_and_max(p, n8, n, scale, mx, &nan);
    if (softmax_failed(p, n, mx, nan)) return;
    const __m256 mxv = _mm256_set1_ps(mx);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(p + i), mxv));
        _mm256_storeu_ps(p + i, e);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double l4[4];
    _mm256_storeu_pd(l4, _mm256_add_pd(lo, hi));
    double sum = (l4[0] + l4[1]) + (l4[2] + l4[3]);
    for (int64_t i = n8; i < n; i++) sum += (p[i] = kn_exp(p[i] - mx));
    const float inv = (float)(1.0 / sum);
    const __m256 invv = _mm256_set1_ps(inv);
    for (int64_t i = 0; i < n8; i += 8) _mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), invv));
    for (int64_t i = n8; i < n; i++) p[i] *= inv;
}

KN_AVX2_INLINE double exp_sum_avx2(float *w, const float *x, int64_t n, float mx) {
    assert(n >= 1 && x != NULL);
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 mxv = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();   /* lanes 0-3 and 4-7 */
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(v, ninf, _CMP_EQ_OQ), exp8_avx2(_mm256_sub_ps(v, mxv)));
        if (w) _mm256_storeu_ps(w + i, e);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double l4[4];
    _mm256_storeu_pd(l4, _mm256_add_pd(lo, hi));
    return exp_sum_tail(w, x, n8, n, mx, (l4[0] + l4[1]) + (l4[2] + l4[3]));
}

KN_AVX2 double kn_sum_exp_f32_avx2(const float *x, int64_t n, float mx) { return exp_sum_avx2(NULL, x, n, mx); }
KN_AVX2 double kn_exp_sum_f32_avx2(float *w, const float *x, int64_t n, float mx) { return exp_sum_avx2(w, x, n, mx); }

/* ---- The same steps on 16 lanes (the avx512vnni set) ----------------------
 * exp8_avx2 operation for operation on 16-lane vectors (min and max keep
 * their NaN rule, the compare and blend become a mask), so each lane gets
 * kn_exp's bits in half the instructions: the sampler's weights and sums
 * over a 248k vocabulary and the MLP's SiLU are bound by these operations. */
KN_VNNI_INLINE __m512 exp16_avx512(__m512 x) {
    const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_HI), _CMP_GT_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(EXP_HI));
    x = _mm512_max_ps(x, _mm512_set1_ps(EXP_LO));
    const __m512 n =
        _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 e;
    KN_EXP_POLY(__m512, _mm512, x, n, e);
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mask_blend_ps(over, _mm512_mul_ps(e, _mm512_castsi512_ps(bits)), _mm512_set1_ps(INFINITY));
}

KN_VNNI void kn_silu_mul_f32_avx512(float *y, const float *x, const float *u, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    const int64_t n16 = n & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);   /* sigmoid_scaled8_avx2 on 16 lanes */
        const __m512 e = exp16_avx512(_mm512_sub_ps(_mm512_setzero_ps(), xv));
        __m512 s = _mm512_div_ps(xv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        if (u) s = _mm512_mul_ps(s, _mm512_loadu_ps(u + i));
        _mm512_storeu_ps(y + i, s);
    }
    kn_silu_mul_f32_avx2(y + n16, x + n16, u ? u + n16 : NULL, n - n16);
}

/* exp_sum_avx2's steps: lane l of the 8 double sums takes element l of each
 * 8-element block in order (a 16-element step's low half, then its high),
 * so the sum is the same bits. */
KN_VNNI_INLINE double exp_sum_avx512(float *w, const float *x, int64_t n, float mx) {
    assert(n >= 1 && x != NULL);
    const int64_t n16 = n & ~(int64_t)15, n8 = n & ~(int64_t)7;
    const __m512 mxv = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
    __m512d acc = _mm512_setzero_pd();   /* lanes 0-7 */
    for (int64_t i = 0; i < n8; i += 16) {
        const __mmask16 m = i < n16 ? 0xffff : 0x00ff;   /* the last 8-element block alone */
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __mmask16 live = _mm512_mask_cmp_ps_mask(m, v, ninf, _CMP_NEQ_UQ);
        const __m512 e = _mm512_maskz_mov_ps(live, exp16_avx512(_mm512_sub_ps(v, mxv)));
        if (w) _mm512_mask_storeu_ps(w + i, m, e);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        if (m == 0xffff) {
            const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1));
            acc = _mm512_add_pd(acc, _mm512_cvtps_pd(hi));
        }
    }
    double l8[8];
    _mm512_storeu_pd(l8, acc);
    return exp_sum_tail(w, x, n8, n, mx, ((l8[0] + l8[4]) + (l8[1] + l8[5])) + ((l8[2] + l8[6]) + (l8[3] + l8[7])));
}

KN_VNNI double kn_sum_exp_f32_avx512(const float *x, int64_t n, float mx) { return exp_sum_avx512(NULL, x, n, mx); }
KN_VNNI double kn_exp_sum_f32_avx512(float *w, const float *x, int64_t n, float mx) {
    return exp_sum_avx512(w, x, n, mx);
}
#endif
