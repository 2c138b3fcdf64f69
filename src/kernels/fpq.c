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
    kn_prefetch_bytes(p, code_bytes);
    kn_prefetch_bytes(s, scale_bytes);
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

/* e4m3(q[i]) * scale for 16 codes, in *w0 (the first 8) and *w1, given
 * scale256 = scale * 256 (finite, or scale itself infinite or NaN). The
 * code's bits placed in an f16 (sign to bit 15, the rest shifted up 7 bits)
 * give its value times 2^-8 exactly, subnormals included; the NaN codes
 * become the f16 NaN that widens to the scalar twin's. The f32 product (e
 * 2^-8)(scale 2^8) is the real e * scale rounded once: the scalar twin's
 * bits, in a few integer operations and a conversion a lane where
 * e4m3x8_avx2 takes a dozen. */
KN_AVX2_INLINE void e4m3x16_scaled_avx2(const uint8_t *q, __m256 scale256, __m256 *w0, __m256 *w1) {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)q));
    __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 1), _mm256_set1_epi16((short)0xbfff));
    const __m256i mag = _mm256_set1_epi16(0x3f80);
    /* a NaN code: sign | 0x3f80 -> sign | 0x7e00 */
    h = _mm256_xor_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h, mag), mag), _mm256_set1_epi16(0x4180)));
    *w0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), scale256);
    *w1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), scale256);
}

/* The scale of an E4M3 group (mxfp8) or block (block FP8) for the AVX2
 * decoders: the factor and, unless scale * 256 overflows (big), that
 * product. */
typedef struct {
    __m256 scale, scale256;
    int big;
} e4m3_scale;

KN_AVX2_INLINE e4m3_scale e4m3_scale_of(const kn_mat *w, const void *s, int64_t g) {
    e4m3_scale e;
    if (w->fp == KN_FP_MXFP8) {
        /* E8M0 c: scale * 256 = 2^(c - 119), the f32 bits (c + 8) << 23 up
         * to c = 246 (c = 0 included), infinity for 255; 247 .. 254 overflow */
        const unsigned c = ((const uint8_t *)s)[g];
        e.big = c > 246 && c != 255;
        e.scale256 = _mm256_castsi256_ps(_mm256_set1_epi32(c == 255 ? 0x7f800000 : (int)((c + 8) << 23)));
        e.scale = _mm256_castsi256_ps(_mm256_set1_epi32(c ? (int)(c << 23) : 0x00400000));   /* kn_e8m0_to_f32 */
        return e;
    }
    const float f = group_scale(w, s, g), f256 = f * 256.0f;
    e.big = isinf(f256) && isfinite(f);
    e.scale = _mm256_set1_ps(f);
    e.scale256 = _mm256_set1_ps(f256);
    return e;
}

/* The 16 weights from code q[0] with scale e, as e4m3x16_scaled_avx2. */
KN_AVX2_INLINE void e4m3x16_weights_avx2(const uint8_t *q, const e4m3_scale *e, __m256 *w0, __m256 *w1) {
    if (!e->big) {
        e4m3x16_scaled_avx2(q, e->scale256, w0, w1);
        return;
    }
    *w0 = _mm256_mul_ps(e4m3x8_avx2(q), e->scale);
    *w1 = _mm256_mul_ps(e4m3x8_avx2(q + 8), e->scale);
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
    if (w->fp == KN_FP_MXFP8 || w->fp == KN_FP_FP8_BLOCK) {
        for (int64_t c0 = 0; c0 < cols; c0 += group) {
            const e4m3_scale e = e4m3_scale_of(w, s, c0 / group);
            const int64_t c1 = c0 + group < cols ? c0 + group : cols;
            int64_t c = c0;
            for (; c + 16 <= c1; c += 16) {
                __m256 w0, w1;
                e4m3x16_weights_avx2(q + c, &e, &w0, &w1);
                _mm256_storeu_ps(out + c, w0);
                _mm256_storeu_ps(out + c + 8, w1);
            }
            for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(out + c, _mm256_mul_ps(e4m3x8_avx2(q + c), e.scale));
            for (; c < c1; c++) out[c] = kn_e4m3_to_f32(q[c]) * _mm256_cvtss_f32(e.scale);   /* block FP8's last columns */
        }
        return;
    }
    for (int64_t g = 0; g * group < cols; g++) {
        const __m256 scale = _mm256_set1_ps(group_scale(w, s, g));
        const int64_t c0 = g * group, c1 = c0 + group < cols ? c0 + group : cols;
        for (int64_t c = c0; c < c1; c += 8) {   /* E2M1 */
            uint32_t word;
            memcpy(&word, q + c / 2, 4);
            _mm256_storeu_ps(out + c, _mm256_mul_ps(e2m1x8_avx2(word), scale));
        }
    }
}

#endif

#if KN_HAVE_X86

/* ---- E4M3 products, decoded in registers (fpq.h) ----------------------------- */

enum { FP8_TROWS = 2 };   /* activation rows a pass over a weight row */

/* acc[t][k] += weights wv times activation rows t < nt at element i. */
#define FP8_FMA(k, wv, i)                                                                                     \
    do {                                                                                                      \
        for (int t = 0; t < nt; t++)                                                                          \
            acc[t][k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (int64_t)t * ldx + (i)), acc[t][k]);         \
    } while (0)

/* y[t * ldy] = row r of E4M3 w (mxfp8, block FP8) times activation row x + t
 * * ldx, t < nt <= FP8_TROWS (a constant after inlining): matmul.c's dot
 * product layout (4 accumulators of 8 lanes, element i < n8 in accumulator
 * (i / 8) % 4 by one fma in increasing i; kn_hsum_avx2; the tail [n8, n) by
 * scalar fmas) over the weights kn_fp_row_f32_avx2 writes, so the bits of
 * the dense product of that row, without storing it. Groups and blocks
 * start on multiples of 32, so each 32 columns take accumulators 0-3 in
 * turn under one scale; a row's last 8 to 24 (block FP8) take 0, 1, 2. */
KN_AVX2_INLINE void fp8_dot_row_avx2(const kn_mat *w, int64_t r, const float *x, int64_t ldx, int nt, float *y,
                                     int64_t ldy) {
    const uint8_t *q = row_codes(w, r);
    const void *s = row_scales(w, r);
    const int64_t n = w->cols, n8 = n & ~(int64_t)7, group = w->group;
    __m256 acc[FP8_TROWS][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    const int64_t n32 = n & ~(int64_t)31;
    __m256 scale256 = _mm256_setzero_ps(), scale = _mm256_setzero_ps();
    int big = 0;
    for (int64_t i = 0; i < n32; i += 32) {
        if (i % group == 0) {   /* a new group's scale */
            const e4m3_scale e = e4m3_scale_of(w, s, i / group);
            big = e.big, scale256 = e.scale256, scale = e.scale;
        }
        /* the weights by one decoder or the other, then one set of fmas:
         * with the fmas in both branches GCC kept the accumulators on the
         * stack across them (3x the time) */
        __m256 w0, w1, w2, w3;
        if (!big) {
            e4m3x16_scaled_avx2(q + i, scale256, &w0, &w1);
            e4m3x16_scaled_avx2(q + i + 16, scale256, &w2, &w3);
        } else {
            w0 = _mm256_mul_ps(e4m3x8_avx2(q + i), scale);
            w1 = _mm256_mul_ps(e4m3x8_avx2(q + i + 8), scale);
            w2 = _mm256_mul_ps(e4m3x8_avx2(q + i + 16), scale);
            w3 = _mm256_mul_ps(e4m3x8_avx2(q + i + 24), scale);
        }
        FP8_FMA(0, w0, i);
        FP8_FMA(1, w1, i + 8);
        FP8_FMA(2, w2, i + 16);
        FP8_FMA(3, w3, i + 24);
    }
    if (n8 > n32) {   /* block FP8: a row's last 8, 16 or 24 before its tail */
        const __m256 sc = _mm256_set1_ps(group_scale(w, s, n32 / group));
        FP8_FMA(0, _mm256_mul_ps(e4m3x8_avx2(q + n32), sc), n32);
        if (n8 > n32 + 8) FP8_FMA(1, _mm256_mul_ps(e4m3x8_avx2(q + n32 + 8), sc), n32 + 8);
        if (n8 > n32 + 16) FP8_FMA(2, _mm256_mul_ps(e4m3x8_avx2(q + n32 + 16), sc), n32 + 16);
    }
    for (int t = 0; t < nt; t++) {
        __m128 sum = kn_hsum_avx2(acc[t], 4);
        for (int64_t j = n8; j < n; j++) {
            const float wj = kn_e4m3_to_f32(q[j]) * group_scale(w, s, j / group);
            sum = _mm_fmadd_ss(_mm_set_ss(wj), _mm_set_ss(x[(int64_t)t * ldx + j]), sum);
        }
        y[(int64_t)t * ldy] = _mm_cvtss_f32(sum);
    }
}
#undef FP8_FMA

KN_AVX2 void kn_fp8_matmul_rows_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                     int64_t r0, int64_t r1) {
    assert(kn_fp_valid(w) && (w->fp == KN_FP_MXFP8 || w->fp == KN_FP_FP8_BLOCK));
    const int64_t dist = 4096 / (w->cols + 1) + 1;   /* rows about 4 KB ahead */
    for (int64_t r = r0; r < r1; r++) {
        if (r + dist < r1) kn_fp_prefetch_row(w, r + dist);
        int t = 0;
        for (; t + FP8_TROWS <= T; t += FP8_TROWS)
            fp8_dot_row_avx2(w, r, x + (int64_t)t * ldx, ldx, FP8_TROWS, y + (int64_t)t * ldy + r, ldy);
        if (t < T) fp8_dot_row_avx2(w, r, x + (int64_t)t * ldx, ldx, 1, y + (int64_t)t * ldy + r, ldy);
    }
}

/* The AVX-512 twin: 32 codes a step decoded in one 512-bit pass, weights
 * 0-15 and 16-31 in two 16-lane vectors whose halves are accumulators 0, 1
 * and 2, 3 of the layout, up to 4 activation rows a pass (2 vectors each),
 * so a verify decodes each weight once. The same weights and fmas in the
 * same order: the same bits. */
enum { FP8_TROWS_512 = 4 };


/* The weights of 32 codes at q with scale256 (all lanes), as
 * e4m3x16_scaled_avx2 twice: elements 0-15 in *w0, 16-31 in *w1. */
KN_VNNI_INLINE void e4m3x32_scaled_avx512(const uint8_t *q, __m512 scale256, __m512 *w0, __m512 *w1) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)q));
    __m512i h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(b, 8), 1), _mm512_set1_epi16((short)0xbfff));
    const __m512i mag = _mm512_set1_epi16(0x3f80);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, mag), mag);
    h = _mm512_xor_si512(h, _mm512_maskz_mov_epi16(nan, _mm512_set1_epi16(0x4180)));
    *w0 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), scale256);
    *w1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), scale256);
}

/* fp8_dot_row_avx2's product for nt <= FP8_TROWS_512 activation rows; gs:
 * log2 of the group (5 for mxfp8, 7 for block FP8), a constant after
 * inlining. A row's scales times 256 are worked out first; where none
 * overflows (every real row) the steps run without a branch. */
KN_VNNI_INLINE void fp8_dot_row_avx512(const kn_mat *w, int64_t r, const float *x, int64_t ldx, int nt, int gs,
                                       float *y, int64_t ldy) {
    const uint8_t *q = row_codes(w, r);
    const void *s = row_scales(w, r);
    const int64_t n = w->cols, n8 = n & ~(int64_t)7, n32 = n & ~(int64_t)31, ng = (n32 + (1 << gs) - 1) >> gs;
    __m512 lo[FP8_TROWS_512], hi[FP8_TROWS_512];   /* accumulators 0|1 and 2|3 */
    for (int t = 0; t < nt; t++) lo[t] = hi[t] = _mm512_setzero_ps();
    _Alignas(64) float s256[KN_FP_MAX_COLS / 32];
    int big = 0;
    for (int64_t g = 0; g < ng; g++) {
        const e4m3_scale e = e4m3_scale_of(w, s, g);
        s256[g] = _mm256_cvtss_f32(e.scale256);
        big |= e.big;
    }
    for (int64_t i = 0; i < n32; i += 32) {
        __m512 w0, w1;
        if (!big) {
            e4m3x32_scaled_avx512(q + i, _mm512_set1_ps(s256[i >> gs]), &w0, &w1);
        } else {   /* the slower decoder, whole row */
            const __m256 scale = _mm256_set1_ps(group_scale(w, s, i >> gs));
            const __m256 a = _mm256_mul_ps(e4m3x8_avx2(q + i), scale), b = _mm256_mul_ps(e4m3x8_avx2(q + i + 8), scale);
            const __m256 c = _mm256_mul_ps(e4m3x8_avx2(q + i + 16), scale), d = _mm256_mul_ps(e4m3x8_avx2(q + i + 24), scale);
            w0 = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
            w1 = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(c)), _mm256_castps_pd(d), 1));
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            lo[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + (int64_t)t * ldx + i), lo[t]);
            hi[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + (int64_t)t * ldx + i + 16), hi[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * ldx;
        __m256 acc[4] = {_mm512_castps512_ps256(lo[t]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo[t]), 1)),
                         _mm512_castps512_ps256(hi[t]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi[t]), 1))};
        if (n8 > n32) {   /* block FP8: a row's last 8, 16 or 24 before its tail */
            const __m256 sc = _mm256_set1_ps(group_scale(w, s, n32 >> gs));
            for (int k = 0; k < 3 && n32 + 8 * k < n8; k++)
                acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(e4m3x8_avx2(q + n32 + 8 * k), sc), _mm256_loadu_ps(xt + n32 + 8 * k), acc[k]);
        }
        __m128 sum = kn_hsum_avx2(acc, 4);
        for (int64_t j = n8; j < n; j++) {
            const float wj = kn_e4m3_to_f32(q[j]) * group_scale(w, s, j >> gs);
            sum = _mm_fmadd_ss(_mm_set_ss(wj), _mm_set_ss(xt[j]), sum);
        }
        y[(int64_t)t * ldy] = _mm_cvtss_f32(sum);
    }
}

/* Row r against every activation row, FP8_TROWS_512 a pass, the leftover
 * count its own inlined copy. */
KN_VNNI_INLINE void fp8_row_all_avx512(const kn_mat *w, int64_t r, const float *x, int64_t ldx, int T, int gs, float *y,
                                       int64_t ldy) {
    int t = 0;
    for (; t + FP8_TROWS_512 <= T; t += FP8_TROWS_512)
        fp8_dot_row_avx512(w, r, x + (int64_t)t * ldx, ldx, FP8_TROWS_512, gs, y + (int64_t)t * ldy + r, ldy);
    switch (T - t) {
    case 3: fp8_dot_row_avx512(w, r, x + (int64_t)t * ldx, ldx, 3, gs, y + (int64_t)t * ldy + r, ldy); break;
    case 2: fp8_dot_row_avx512(w, r, x + (int64_t)t * ldx, ldx, 2, gs, y + (int64_t)t * ldy + r, ldy); break;
    case 1: fp8_dot_row_avx512(w, r, x + (int64_t)t * ldx, ldx, 1, gs, y + (int64_t)t * ldy + r, ldy); break;
    default: break;
    }
}

KN_VNNI void kn_fp8_matmul_rows_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                       int64_t r0, int64_t r1) {
    assert(kn_fp_valid(w) && (w->fp == KN_FP_MXFP8 || w->fp == KN_FP_FP8_BLOCK));
    const int64_t dist = 4096 / (w->cols + 1) + 1;   /* rows about 4 KB ahead */
    for (int64_t r = r0; r < r1; r++) {
        if (r + dist < r1) kn_fp_prefetch_row(w, r + dist);
        if (w->fp == KN_FP_MXFP8) fp8_row_all_avx512(w, r, x, ldx, T, 5, y, ldy);
        else fp8_row_all_avx512(w, r, x, ldx, T, 7, y, ldy);
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
                const float d = qx->d[(int64_t)t * qx->ldg + g];
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
 * up 7 bits: the value times 2^-8, subnormals included; a NaN code's sign |
 * 0x3f80 turned into sign | 0x7e00, the f16 NaN that widens to the scalar
 * twin's sign | 0x7fc00000), widened exactly and multiplied by 2^7 (exact). */
KN_AVX2_INLINE __m256 half_e4m3x8_u16_avx2(__m128i b) {
    const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
    h = _mm_xor_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x4180)));
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

#define FX_ISA avx2
#define FX_INLINE KN_AVX2_INLINE
#define FX_TARGET KN_AVX2
#define FX_VNNI 0
#define FX_AVXVNNI 0
#include "kernels/fpq_qx.inc"
#undef FX_ISA
#undef FX_INLINE
#undef FX_TARGET
#undef FX_AVXVNNI

#define FX_ISA avxvnni
#define FX_INLINE KN_AVXVNNI_INLINE
#define FX_TARGET KN_AVXVNNI
#define FX_AVXVNNI 1
#include "kernels/fpq_qx.inc"
#undef FX_ISA
#undef FX_INLINE
#undef FX_TARGET
#undef FX_VNNI
#undef FX_AVXVNNI

#define FX_ISA avx512vnni
#define FX_INLINE KN_VNNI_INLINE
#define FX_TARGET KN_VNNI
#define FX_VNNI 1
#define FX_AVXVNNI 0
#include "kernels/fpq_qx.inc"
#undef FX_ISA
#undef FX_INLINE
#undef FX_TARGET
#undef FX_VNNI
#undef FX_AVXVNNI

#endif

/* ---- Product ------------------------------------------------------------------ */

void kn_fp_matmul_rows(const kn_mat *w, kn_fp_row_fn row_f32, kn_fp_dense_fn dense_f32, const float *x, int64_t ldx,
                       int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    assert(kn_fp_valid(w));
    _Alignas(64) float buf[KN_FP_BUF_FLOATS];
    /* as many rows as buf holds, in whole tile groups where it holds one,
     * so that the dense kernel's tiles share each activation load among
     * them (a row at a time, a prefill chunk's activations streamed from L2
     * for every row: mxfp8 prefill 51 tok/s against q8's 154) */
    int64_t per = w->cols ? KN_FP_BUF_FLOATS / w->cols : 1;
    if (per >= KN_TILE_GROUP) per = per / KN_TILE_GROUP * KN_TILE_GROUP;
    for (int64_t r = r0; r < r1; r += per) {
        const int64_t nb = r1 - r < per ? r1 - r : per;
        for (int64_t i = 0; i < nb; i++) row_f32(w, r + i, buf + i * w->cols);
        const kn_mat rows = {.data = buf, .dtype = NX_DT_F32, .rows = nb, .cols = w->cols};
        dense_f32(&rows, x, ldx, T, y + r, ldy, 0, nb);
    }
}
