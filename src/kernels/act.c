/* act.c — the vector SiLU (see act.h): a scalar twin that is the definition
 * and an AVX2 twin that repeats it lane by lane.
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

void kn_silu_mul_f32_ref(float *y, const float *x, const float *u, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    for (int64_t i = 0; i < n; i++) {
        const float s = x[i] / (1.0f + kn_exp(0.0f - x[i]));
        y[i] = u ? s * u[i] : s;
    }
}

#if KN_HAVE_X86
/* kn_exp on 8 lanes, operation for operation. */
KN_AVX2_INLINE __m256 exp8_avx2(__m256 x) {
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ);
    /* min returns its second operand when one is NaN: as the scalar
     * comparison, a NaN ends up at EXP_HI */
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nn = _mm256_sub_ps(_mm256_setzero_ps(), n);
    __m256 r = _mm256_fmadd_ps(nn, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fmadd_ps(nn, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(P5), r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P0));
    const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(e, _mm256_castsi256_ps(bits)), _mm256_set1_ps(INFINITY), over);
}

KN_AVX2 void kn_silu_mul_f32_avx2(float *y, const float *x, const float *u, int64_t n) {
    assert(n >= 0 && (n == 0 || (y != NULL && x != NULL)));
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        __m256 s = _mm256_div_ps(xv, _mm256_add_ps(one, exp8_avx2(_mm256_sub_ps(zero, xv))));
        if (u) s = _mm256_mul_ps(s, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(y + i, s);
    }
    kn_silu_mul_f32_ref(y + n8, x + n8, u ? u + n8 : NULL, n - n8);
}
#endif
