/* fpq.c — small-float weight formats (see fpq.h): codes, the MLX quantizer,
 * row dequantization (scalar and AVX2 twins) and the product. */
#include "kernels/fpq.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/avx2.h"
#include "kernels/quant.h"

const char *kn_fp_name(kn_fp_mode m) {
    switch (m) {
    case KN_FP_MXFP4: return "mxfp4";
    case KN_FP_NVFP4: return "nvfp4";
    case KN_FP_MXFP8: return "mxfp8";
    case KN_FP_FP8_BLOCK: return "fp8";
    default: return "none";
    }
}

int kn_fp_bits(kn_fp_mode m) { return m == KN_FP_MXFP4 || m == KN_FP_NVFP4 ? 4 : m == KN_FP_NONE ? 0 : 8; }

int kn_fp_group(kn_fp_mode m) {
    return m == KN_FP_NVFP4 ? 16 : m == KN_FP_FP8_BLOCK ? KN_FP8_BLOCK : m == KN_FP_NONE ? 0 : 32;
}

/* ---- Codes ---------------------------------------------------------------- */

static const float e2m1_magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float kn_e2m1_to_f32(unsigned code) {
    const float v = e2m1_magnitude[code & 7];
    return code & 8 ? -v : v;
}

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A normal code's 7 low bits placed at f32 bits 20..26, its exponent
 * rebased from 7 to 127: the code's magnitude, with no rounding and no
 * libm call; a subnormal one is m * 2^-9. (Building every code as an f32
 * 2^120 times too small and scaling it back, a subnormal f32 operand, costs
 * a microcode assist per product on x86: 5x slower rows.) */
float kn_e4m3_to_f32(unsigned code) {
    const uint32_t sign = (uint32_t)(code & 0x80) << 24, low = code & 0x7f;
    if (low == 0x7f) return bits_to_f32(sign | 0x7fc00000u);
    const float v = low < 8 ? (float)low * 0x1p-9f : bits_to_f32((low << 20) + (120u << 23));
    return sign ? -v : v;
}

float kn_e8m0_to_f32(unsigned code) {
    code &= 255;
    return code == 0 ? ldexpf(1.0f, -127) : bits_to_f32((uint32_t)code << 23);
}

unsigned kn_f32_to_e2m1(float x) {
    const float a = fabsf(x);
    if (!(a < 6.0f)) return (signbit(x) ? 8 : 0) | 7;   /* 6 and beyond, and NaN */
    unsigned best = 0;
    for (unsigned i = 1; i < 8; i++)   /* the first nearest: a tie goes to the smaller magnitude */
        if (fabsf(a - e2m1_magnitude[i]) < fabsf(a - e2m1_magnitude[best])) best = i;
    return best && signbit(x) ? 8 | best : best;   /* zero is +0 */
}

unsigned kn_f32_to_e4m3(float x) {
    if (x != x) return 0x7f;
    const unsigned sign = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    if (a >= 464.0f) return sign | 0x7e;   /* past the midpoint of 448 and the NaN slot: 448 */
    if (a < 0x1p-6f) return sign | (unsigned)nearbyintf(a * 0x1p9f);   /* subnormal; 8 is the first normal */
    int k;
    frexpf(a, &k);   /* a in [2^(k-1), 2^k) */
    const int E = k - 1;
    unsigned q = (unsigned)nearbyintf((ldexpf(a, -E) - 1.0f) * 8.0f);
    unsigned code = (unsigned)(E + 7) << 3;
    code += q;   /* q == 8 carries into the exponent */
    return sign | (code > 0x7e ? 0x7e : code);
}

unsigned kn_f32_to_e8m0(float x) {
    if (x != x || isinf(x)) return 255;
    if (!(x > 0.0f)) return 127;
    int k;
    const float f = frexpf(x, &k);   /* x = f 2^k, f in [0.5, 1) */
    int e = f == 0.5f ? k - 1 : k;   /* the smallest power of two >= x */
    e = e < -127 ? -127 : e > 127 ? 127 : e;
    return (unsigned)(e + 127);
}

/* ---- Quantizer ------------------------------------------------------------- */

void kn_fp_quantize_row(const float *w, int64_t cols, kn_fp_mode mode, uint32_t *codes, uint8_t *scales) {
    assert(mode == KN_FP_MXFP4 || mode == KN_FP_NVFP4 || mode == KN_FP_MXFP8);
    const int group = kn_fp_group(mode), bits = kn_fp_bits(mode);
    uint8_t *bytes = (uint8_t *)codes;
    memset(codes, 0, (size_t)(cols * bits / 8));
    for (int64_t g = 0; g < cols / group; g++) {
        const float *wg = w + g * group;
        float amax = 0.0f;
        for (int i = 0; i < group; i++) amax = fmaxf(amax, fabsf(wg[i]));
        const float s = amax / (bits == 4 ? 6.0f : 448.0f);
        const unsigned sc = mode == KN_FP_NVFP4 ? kn_f32_to_e4m3(s) : kn_f32_to_e8m0(s);
        const float scale = mode == KN_FP_NVFP4 ? kn_e4m3_to_f32(sc) : kn_e8m0_to_f32(sc);
        scales[g] = (uint8_t)sc;
        for (int i = 0; i < group; i++) {
            const int64_t c = g * group + i;
            const float v = scale > 0.0f ? wg[i] / scale : 0.0f;
            if (bits == 4) bytes[c / 2] |= (uint8_t)(kn_f32_to_e2m1(v) << (4 * (c & 1)));
            else bytes[c] = (uint8_t)kn_f32_to_e4m3(v);
        }
    }
}

/* ---- Views ------------------------------------------------------------------ */

static int64_t block_cols(const kn_mat *w) { return (w->cols + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK; }

int kn_fp_valid(const kn_mat *w) {
    if (w->bits != 0 || w->group != kn_fp_group((kn_fp_mode)w->fp) || w->ld != 0) return 0;
    const int empty = w->rows == 0 || w->cols == 0;
    if (!empty && (!w->data || !w->scales)) return 0;
    if (w->cols > KN_FP_MAX_COLS) return 0;
    if (w->fp == KN_FP_FP8_BLOCK)
        return w->dtype == NX_DT_F8_E4M3 &&
               (w->sdtype == NX_DT_F32 || w->sdtype == NX_DT_BF16 || w->sdtype == NX_DT_F16);
    return (w->fp == KN_FP_MXFP4 || w->fp == KN_FP_NVFP4 || w->fp == KN_FP_MXFP8) && w->dtype == NX_DT_U32 &&
           w->sdtype == NX_DT_U8 && w->cols % w->group == 0;
}

double kn_fp_bytes(const kn_mat *w) {
    const double elems = (double)w->rows * (double)w->cols;
    if (w->fp == KN_FP_FP8_BLOCK)
        return elems + (double)((w->rows + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK) * (double)block_cols(w) *
                           (double)nx_dtype_size(w->sdtype);
    return elems * kn_fp_bits((kn_fp_mode)w->fp) / 8.0 + elems / w->group;
}

/* Row r's element bytes, and the scales that apply to it: one a group (MLX
 * modes) or one a 128-column block (block FP8, in sdtype). */
static const uint8_t *row_codes(const kn_mat *w, int64_t r) {
    return (const uint8_t *)w->data + (size_t)(r * w->cols * kn_fp_bits((kn_fp_mode)w->fp) / 8);
}
static const void *row_scales(const kn_mat *w, int64_t r) {
    if (w->fp == KN_FP_FP8_BLOCK)
        return (const char *)w->scales + (size_t)(r / KN_FP8_BLOCK * block_cols(w)) * nx_dtype_size(w->sdtype);
    return (const uint8_t *)w->scales + (size_t)(r * (w->cols / w->group));
}

/* Group g's scale of a row whose scales start at s. */
static float group_scale(const kn_mat *w, const void *s, int64_t g) {
    switch (w->fp) {
    case KN_FP_NVFP4: return kn_e4m3_to_f32(((const uint8_t *)s)[g]);
    case KN_FP_FP8_BLOCK: {
        float f;
        kn_to_f32(w->sdtype, (const char *)s + (size_t)g * nx_dtype_size(w->sdtype), &f, 1);
        return f;
    }
    default: return kn_e8m0_to_f32(((const uint8_t *)s)[g]);
    }
}

void kn_fp_prefetch_row(const kn_mat *w, int64_t r) {
    const size_t code_bytes = (size_t)(w->cols * kn_fp_bits((kn_fp_mode)w->fp) / 8);
    const size_t scale_bytes = w->fp == KN_FP_FP8_BLOCK ? (size_t)block_cols(w) * nx_dtype_size(w->sdtype)
                                                        : (size_t)(w->cols / w->group);
    const char *p = (const char *)row_codes(w, r), *s = row_scales(w, r);
    for (size_t b = 0; b < code_bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
    for (size_t b = 0; b < scale_bytes; b += 64) __builtin_prefetch(s + b, 0, 3);
}

/* ---- Dequantization: the scalar definition --------------------------------- */

void kn_fp_row_f32_ref(const kn_mat *w, int64_t row, float *out) {
    assert(kn_fp_valid(w) && 0 <= row && row < w->rows);
    const uint8_t *q = row_codes(w, row);
    const void *s = row_scales(w, row);
    for (int64_t c = 0; c < w->cols; c++) {
        const float scale = group_scale(w, s, c / w->group);
        float e;
        if (kn_fp_bits((kn_fp_mode)w->fp) == 4) e = kn_e2m1_to_f32((q[c / 2] >> (4 * (c & 1))) & 15);
        else e = kn_e4m3_to_f32(q[c]);
        out[c] = e * scale;
    }
}

/* ---- Dequantization: AVX2 --------------------------------------------------
 * E2M1: the 8 nibbles of a word shifted into 8 lanes; vpermps reads the
 * magnitude table with the low 3 bits, and the sign bit moves to bit 31.
 * E4M3: as kn_e4m3_to_f32, 8 lanes at a time, the code's NaN blended in.
 * Then the scale: the same f32 product as the scalar twin. */
#if KN_HAVE_X86

KN_AVX2_INLINE __m256 e4m3x8_avx2(const uint8_t *q) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    const __m256i low = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    const __m256 normal =
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(low, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(low), _mm256_set1_ps(0x1p-9f));
    __m256 v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), low)));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x7f)));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

KN_AVX2_INLINE __m256 e2m1x8_avx2(uint32_t word) {
    const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256 mag = _mm256_permutevar8x32_ps(_mm256_loadu_ps(e2m1_magnitude), idx);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(idx, _mm256_set1_epi32(8)), 28);
    return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}

KN_AVX2 void kn_fp_row_f32_avx2(const kn_mat *w, int64_t row, float *out) {
    assert(kn_fp_valid(w) && 0 <= row && row < w->rows);
    const uint8_t *q = row_codes(w, row);
    const void *s = row_scales(w, row);
    const int64_t cols = w->cols, group = w->group;
    for (int64_t g = 0; g * group < cols; g++) {
        const __m256 scale = _mm256_set1_ps(group_scale(w, s, g));
        const int64_t c0 = g * group, c1 = c0 + group < cols ? c0 + group : cols;
        int64_t c = c0;
        if (w->fp == KN_FP_MXFP4 || w->fp == KN_FP_NVFP4) {
            for (; c < c1; c += 8) {
                uint32_t word;
                memcpy(&word, q + c / 2, 4);
                _mm256_storeu_ps(out + c, _mm256_mul_ps(e2m1x8_avx2(word), scale));
            }
        } else {
            for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(out + c, _mm256_mul_ps(e4m3x8_avx2(q + c), scale));
            /* block FP8's last columns */
            for (; c < c1; c++) out[c] = kn_e4m3_to_f32(q[c]) * _mm256_cvtss_f32(scale);
        }
    }
}

#endif

/* ---- mxfp4 and nvfp4 on int8 activations (fpq.h) -------------------------------- */

/* 2 * E2M1, an integer */
static const int8_t e2m1_twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* h(s) = 2^(s - 128): half an E8M0 scale, infinity for s = 255 */
static float half_e8m0(unsigned s) { return s == 255 ? INFINITY : ldexpf(1.0f, (int)s - 128); }
/* k(s) = e4m3(s) / 2: half an E4M3 scale (exact) */
static float half_e4m3(unsigned s) { return kn_e4m3_to_f32(s) * 0.5f; }

static void assert_qx_args(const kn_mat *w, const kn_qx *qx, int64_t ldy, int64_t r0, int64_t r1) {
    assert(kn_fp_int8(w) && kn_fp_valid(w) && qx != NULL && qx->cols == w->cols && qx->group == 32 && qx->lanes);
    assert(0 <= r0 && r0 <= r1 && r1 <= w->rows && (qx->T <= 1 || ldy >= r1));
    (void)w, (void)qx, (void)ldy, (void)r0, (void)r1;
}

void kn_fp_matmul_qx_rows_ref(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    assert_qx_args(w, qx, ldy, r0, r1);
    const int64_t G = w->cols / 32;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *q = row_codes(w, r), *sc = row_scales(w, r);
        for (int t = 0; t < qx->T; t++) {
            const int8_t *xq = qx->q + (int64_t)t * qx->ldq;
            float acc[16] = {0}, a[8];
            for (int64_t g = 0; g < G; g++) {
                const float d = qx->d[(int64_t)t * G + g];
                const int halves = w->fp == KN_FP_NVFP4 ? 2 : 1, n = 32 / halves;   /* the weights' groups in g */
                for (int h = 0; h < halves; h++) {
                    int32_t I = 0;
                    for (int64_t c = g * 32 + h * n; c < g * 32 + (h + 1) * n; c++)
                        I += e2m1_twice[(q[c / 2] >> (4 * (c & 1))) & 15] * xq[kn_qx_pos(qx, g, c - g * 32)];
                    const float k = halves == 2 ? half_e4m3(sc[2 * g + h]) : half_e8m0(sc[g]);
                    acc[g % 16] = fmaf((float)I, d * k, acc[g % 16]);
                }
            }
            for (int j = 0; j < 8; j++) a[j] = acc[j] + acc[j + 8];
            y[(int64_t)t * ldy + r] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        }
    }
}

#if KN_HAVE_X86

/* h(s) for 8 scale codes: (s - 1) << 23 as f32 bits for s >= 2, the
 * subnormals 2^-128 and 2^-127 below, infinity for 255 */
KN_AVX2_INLINE __m256 half_e8m0x8_avx2(const uint8_t *s8) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s8));
    __m256i v = _mm256_slli_epi32(_mm256_sub_epi32(s, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), s);
    v = _mm256_blendv_epi8(v, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), s));
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7f800000), _mm256_cmpeq_epi32(s, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(v);
}

/* k(s) = e4m3(s) / 2 for 8 codes, one in the low byte of each uint16 lane
 * of b: the code's bits placed in an f16 (sign to bit 15, the rest shifted
 * up 7 bits: the value times 2^-8, subnormals included; the NaN codes made
 * an f16 NaN), widened exactly and multiplied by 2^7 (exact). */
KN_AVX2_INLINE __m256 half_e4m3x8_u16_avx2(__m128i b) {
    const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
    h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7c00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(128.0f));
}

/* k(s) of 8 nvfp4 groups' halves from their 16 scale codes (group j's at
 * s[2j] and s[2j + 1]): *k0 the first halves', *k1 the second halves' */
KN_AVX2_INLINE void half_e4m3_pairs_avx2(const uint8_t *s, __m256 *k0, __m256 *k1) {
    const __m128i w = _mm_loadu_si128((const __m128i *)(const void *)s);
    *k0 = half_e4m3x8_u16_avx2(_mm_and_si128(w, _mm_set1_epi16(0xff)));
    *k1 = half_e4m3x8_u16_avx2(_mm_srli_epi16(w, 8));
}

/* 2 * E2M1 + 16: the unsigned operand of the SIMD sums (fpq_qx.inc; 16, not
 * the least offset 12, so that the correction 16 S is a shift) */
static const uint8_t e2m1_biased[16] = {16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4};

enum { FX_TROWS = 4 };   /* activation rows a pass over a weight row */

/* Prefetches bytes from p: into L1, or into L2 where to_l2. Always inline
 * (GCC drops calls to a function that only prefetches). */
KN_AVX2_INLINE void fx_prefetch_lines(const void *p, size_t bytes, int to_l2) {
    for (size_t b = 0; b < bytes; b += 64) {
        if (to_l2) _mm_prefetch((const char *)p + b, _MM_HINT_T1);
        else _mm_prefetch((const char *)p + b, _MM_HINT_T0);
    }
}

#define FX_ISA avx2
#define FX_INLINE KN_AVX2_INLINE
#define FX_TARGET KN_AVX2
#define FX_VNNI 0
#include "kernels/fpq_qx.inc"
#undef FX_ISA
#undef FX_INLINE
#undef FX_TARGET
#undef FX_VNNI

#define FX_ISA avx512vnni
#define FX_INLINE KN_VNNI_INLINE
#define FX_TARGET KN_VNNI
#define FX_VNNI 1
#include "kernels/fpq_qx.inc"
#undef FX_ISA
#undef FX_INLINE
#undef FX_TARGET
#undef FX_VNNI

#endif

/* ---- Product ------------------------------------------------------------------ */

void kn_fp_matmul_rows(const kn_mat *w, kn_fp_row_fn row_f32, kn_fp_dense_fn dense_f32, const float *x, int64_t ldx,
                       int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    assert(kn_fp_valid(w));
    _Alignas(64) float buf[KN_FP_MAX_COLS];
    const kn_mat row = {.data = buf, .dtype = NX_DT_F32, .rows = 1, .cols = w->cols};
    for (int64_t r = r0; r < r1; r++) {
        row_f32(w, r, buf);
        dense_f32(&row, x, ldx, T, y + r, ldy, 0, 1);
    }
}
