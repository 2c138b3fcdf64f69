/* quant.c — MLX affine quantized weights: reading and writing the packed bit
 * stream, the quantizer, and the dequantizing matmul twins (see quant.h).
 *
 * Both twins compute the dense product with the dequantized matrix: they
 * dequantize each weight with one f32 fma and then sum exactly as the dense
 * twins of matmul.c sum f32 weights. The reference sums in double in index
 * order; the AVX2 twin follows the dense "Dot product layout" of matmul.c with
 * no tail (cols is a multiple of 32). So the bit-exactness contract of
 * matmul.h carries over unchanged, and the tests can compare each affine twin
 * with its dense twin on kn_mat_row_f32's rows, bit for bit. */
#include "kernels/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"

#if defined(__x86_64__) || defined(__i386__)
#define KN_HAVE_X86 1
#include <immintrin.h>
#else
#define KN_HAVE_X86 0
#endif

/* ---- Format helpers --------------------------------------------------- */

static int kn_sd_ok(nx_dtype dt) { return dt == NX_DT_F32 || dt == NX_DT_BF16 || dt == NX_DT_F16; }

static int kn_bits_ok(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }

static int kn_group_ok(int group) { return group == 32 || group == 64 || group == 128; }

int kn_affine_valid(const kn_mat *w) {
    return w != NULL && kn_bits_ok(w->bits) && kn_group_ok(w->group) && w->dtype == NX_DT_U32 &&
           kn_sd_ok(w->sdtype) && w->rows >= 0 && w->cols >= 0 && w->cols % w->group == 0 &&
           (w->rows == 0 || w->cols == 0 || (w->data != NULL && w->scales != NULL && w->biases != NULL));
}

/* Element i of a scale or bias array of type dt, as f32 (exact). */
static inline float sd_load(const void *p, nx_dtype dt, int64_t i) {
    if (dt == NX_DT_F32) {
        float f;
        memcpy(&f, (const char *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return dt == NX_DT_BF16 ? nx_bf16_to_f32(h) : nx_f16_to_f32(h);
}

/* Code of element c of the stream that starts at `words`: bits [c*bits,
 * (c+1)*bits), where stream bit k is bit k % 32 of word k / 32. The second
 * word is read only when the field crosses into it. */
static unsigned code_at(const void *words, int64_t c, int bits) {
    const int64_t k = c * bits;
    const unsigned char *p = (const unsigned char *)words + k / 32 * 4;
    uint32_t lo;
    memcpy(&lo, p, 4);
    uint64_t v = lo;
    if (k % 32 + bits > 32) {
        uint32_t hi;
        memcpy(&hi, p + 4, 4);
        v |= (uint64_t)hi << 32;
    }
    return (unsigned)(v >> (k % 32)) & ((1u << bits) - 1);
}

/* Bytes of one row's codes, of its scales (or biases). */
static size_t codes_row_bytes(const kn_mat *w) { return (size_t)kn_affine_row_words(w->cols, w->bits) * 4; }
static size_t sd_row_bytes(const kn_mat *w) { return (size_t)(w->cols / w->group) * nx_dtype_size(w->sdtype); }

/* ---- Quantizer ---------------------------------------------------------- */

/* h as f32, for a 16-bit sdtype. */
static float sd16_widen(uint16_t h, nx_dtype dt) { return dt == NX_DT_BF16 ? nx_bf16_to_f32(h) : nx_f16_to_f32(h); }

/* v rounded to a value of type dt toward -inf (dir < 0) or +inf (dir > 0).
 * First to f32 in that direction, then to the 16-bit format: round to nearest
 * and, if that went the wrong way, step the sign-magnitude pattern one unit
 * (one ulp) toward dir. Overflow gives an infinity, which the caller rules
 * out. */
static float sd_round_dir(double v, nx_dtype dt, int dir) {
    float f = (float)v;
    if (dir > 0 && (double)f < v) f = nextafterf(f, INFINITY);
    if (dir < 0 && (double)f > v) f = nextafterf(f, -INFINITY);
    if (dt == NX_DT_F32) return f;
    uint16_t h = dt == NX_DT_BF16 ? nx_f32_to_bf16(f) : nx_f32_to_f16(f);
    float r = sd16_widen(h, dt);
    if (dir > 0 ? r < f : r > f) {
        int neg = (h & 0x8000u) != 0, mag = h & 0x7fff;
        if (mag == 0) h = dir > 0 ? 0x0001u : 0x8001u;   /* from a zero to the smallest subnormal */
        else if (neg == (dir > 0)) h = (uint16_t)(h - 1);   /* toward zero */
        else h = (uint16_t)(h + 1);                         /* away from zero */
        r = sd16_widen(h, dt);
    }
    return r;
}

static void sd_store(void *p, nx_dtype dt, int64_t i, float v) {
    if (dt == NX_DT_F32) {
        memcpy((char *)p + 4 * i, &v, 4);
        return;
    }
    uint16_t h = dt == NX_DT_BF16 ? nx_f32_to_bf16(v) : nx_f32_to_f16(v);   /* v is exact in dt */
    memcpy((char *)p + 2 * i, &h, 2);
}

void kn_affine_quantize_row(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                            void *scales, void *biases) {
    assert(kn_bits_ok(bits) && kn_group_ok(group) && kn_sd_ok(sdtype) && cols >= 0 && cols % group == 0);
    assert(cols == 0 || (w != NULL && codes != NULL && scales != NULL && biases != NULL));
    if (cols == 0) return;
    const unsigned nbins = (1u << bits) - 1;
    memset(codes, 0, (size_t)kn_affine_row_words(cols, bits) * sizeof *codes);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *wg = w + g * group;
        float lo = wg[0], hi = wg[0];
        for (int c = 1; c < group; c++) {
            if (wg[c] < lo) lo = wg[c];
            if (wg[c] > hi) hi = wg[c];
        }
        assert(isfinite(lo) && isfinite(hi));
        const float bias = sd_round_dir(lo, sdtype, -1);
        double s = ((double)hi - bias) / nbins;   /* in double: the grid reaches hi to within 2^-52 */
        if (s < KN_AFFINE_MIN_SCALE) s = KN_AFFINE_MIN_SCALE;
        const float scale = sd_round_dir(s, sdtype, +1);
        assert(isfinite(bias) && isfinite(scale) && scale > 0);
        sd_store(scales, sdtype, g, scale);
        sd_store(biases, sdtype, g, bias);
        for (int c = 0; c < group; c++) {
            double v = floor(((double)wg[c] - bias) / scale + 0.5);
            unsigned q = v <= 0 ? 0 : v >= nbins ? nbins : (unsigned)v;
            /* The element's field starts at stream bit k; it may spill into the next word. */
            const int64_t k = (g * group + c) * bits;
            codes[k / 32] |= (uint32_t)q << (k % 32);
            if (k % 32 + bits > 32) codes[k / 32 + 1] |= (uint32_t)(q >> (32 - k % 32));
        }
    }
}

/* ---- Scalar reference twin --------------------------------------------- */

/* Weight (row, c) of w, whose row starts at codes / sc / bi. */
static inline float dequant_ref(const kn_mat *w, const void *codes, const void *sc, const void *bi, int64_t c) {
    const int64_t g = c / w->group;
    return fmaf(sd_load(sc, w->sdtype, g), (float)code_at(codes, c, w->bits), sd_load(bi, w->sdtype, g));
}

void kn_affine_row_f32(const kn_mat *w, int64_t row, float *out) {
    assert(kn_affine_valid(w) && 0 <= row && row < w->rows);
    const void *codes = (const char *)w->data + (size_t)row * codes_row_bytes(w);
    const void *sc = (const char *)w->scales + (size_t)row * sd_row_bytes(w);
    const void *bi = (const char *)w->biases + (size_t)row * sd_row_bytes(w);
    for (int64_t c = 0; c < w->cols; c++) out[c] = dequant_ref(w, codes, sc, bi, c);
}

/* The definition: each weight is dequantized again for each activation row,
 * which costs time and keeps the code the formula. */
void kn_affine_matmul_rows_ref(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1) {
    assert(kn_affine_valid(w));
    for (int64_t r = r0; r < r1; r++) {
        const void *codes = (const char *)w->data + (size_t)r * codes_row_bytes(w);
        const void *sc = (const char *)w->scales + (size_t)r * sd_row_bytes(w);
        const void *bi = (const char *)w->biases + (size_t)r * sd_row_bytes(w);
        for (int t = 0; t < T; t++) {
            const float *xt = x + (int64_t)t * ldx;
            double acc = 0.0;
            for (int64_t c = 0; c < w->cols; c++) acc += (double)dequant_ref(w, codes, sc, bi, c) * (double)xt[c];
            y[(int64_t)t * ldy + r] = (float)acc;
        }
    }
}

/* ---- AVX2 + FMA twin -----------------------------------------------------
 * Per 32 elements (one block: `bits` words of codes) the codes of 8 elements at
 * a time are unpacked into 8 int32 lanes in element order, converted to f32
 * and dequantized with one FMA against the group's broadcast scale and bias.
 * The weight vectors then feed the dot products exactly like widened bf16
 * vectors in matmul.c: element i goes to accumulator (i / 8) % 4, lane i % 8,
 * by one FMA in increasing i, and the four accumulators are combined in
 * matmul.c's order. Every path below keeps that sequence per (row, activation
 * row), which is what makes the result independent of T and of the row range.
 *
 * Schedule: row by row, as matmul.c; per row, KN_QTBLOCK = 2 activation rows
 * at a time share each dequantized weight vector (8 accumulators), and an odd
 * T ends with a 1-row pass. Measured with bench/bench_matmul.c on a 2-core AMD
 * EPYC VM, 4096 columns, rows in L2 (the compute-bound case), G weights/s:
 *   q4, T = 1 / 2 / 3 / 4 / 8, 2-row blocks: 12.4 / 9.7 / 5.5 / 4.8 / 2.4
 *                              3-row blocks: 12.6 / 9.5 / 5.7 / 3.9 / 2.2
 * (3 rows need 12 accumulators plus the scale, bias and unpack constants:
 * more than the 16 ymm registers). Dequantizing each 512-element chunk once
 * into an L1 buffer and running every activation row over it gained nothing
 * at T = 4 or 8: beyond T = 2 the activation rows (16 KB each at 4096
 * columns) stream from L2, and that, not the unpacking, sets the pace.
 *
 * Unpacking, by bits (8 elements take `bits` bytes, at byte offset 8k*bits/8):
 *   8     zero-extend 8 bytes to 8 lanes.
 *   2,3,4 broadcast the 16/24/32 bits (a dword load) as a dword, shift lane j
 *         right by j*bits.
 *   5,6   broadcast 40/48 bits as a qword; shift qword j right by 2j*bits (even
 *         element 2j in its low dword), then a copy left by 32-bits (odd element
 *         2j+1 at the bottom of its high dword); blend the two dwords.
 * then mask to `bits` bits. The wide loads of 2, 3, 5 and 6 read past the 8
 * elements; only the last 8 elements of a row could read past the row (and so
 * past the matrix), so that one chunk is read with its exact byte count. */

#if KN_HAVE_X86

/* Activation rows per register block (see "Schedule" above). */
#define KN_QTBLOCK 2

#define KN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KN_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Codes of the 8 elements whose packed bytes start at p, element j in lane j.
 * bits is a constant after inlining; exact: read only the bits*8/8 bytes. */
KN_AVX2_INLINE __m256i unpack8_avx2(const unsigned char *p, int bits, int exact) {
    const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
    if (bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    /* Each memcpy has a constant size, so it compiles to plain loads. */
    if (bits <= 4) {
        uint32_t u = 0;
        if (bits == 2 && exact) memcpy(&u, p, 2);
        else if (bits == 3 && exact) memcpy(&u, p, 3);
        else memcpy(&u, p, 4);
        const __m256i sh = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits, 7 * bits);
        return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)u), sh), mask);
    }
    uint64_t u = 0;
    if (!exact) memcpy(&u, p, 8);
    else if (bits == 5) memcpy(&u, p, 5);
    else memcpy(&u, p, 6);
    const __m256i sh = _mm256_setr_epi64x(0, 2 * bits, 4 * bits, 6 * bits);
    __m256i even = _mm256_srlv_epi64(_mm256_set1_epi64x((long long)u), sh);
    __m256i odd = _mm256_slli_epi64(even, 32 - bits);
    return _mm256_and_si256(_mm256_blend_epi32(even, odd, 0xAA), mask);
}

/* Dequantized weights of the 32 elements from element i (a multiple of 32) of
 * a row of n: w[k] holds elements i + 8k .. i + 8k + 7, fma(q, scale, bias). */
KN_AVX2_INLINE void dequant32_avx2(const unsigned char *codes, int bits, int64_t i, int64_t n, __m256 sv, __m256 bv,
                                   __m256 w[4]) {
    const unsigned char *p = codes + i / 8 * bits;
    for (int k = 0; k < 4; k++)
        w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(unpack8_avx2(p + k * bits, bits, k == 3 && i + 32 == n)), sv, bv);
}

/* Element i of a scale or bias array as f32: sd_load's value, with F16C for
 * f16 instead of the scalar conversion (read once per group). */
KN_AVX2_INLINE float sd_load_avx2(const void *p, nx_dtype dt, int64_t i) {
    if (dt != NX_DT_F16) return sd_load(p, dt, i);
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return _cvtsh_ss(h);
}

/* acc[t][acc_k] = fma(wv, x_t[i..i+8), acc[t][acc_k]) for t < nt; the same
 * macro as matmul.c's KN_FMA_ROWS, for the same reason (acc stays registers). */
#define KN_QFMA_ROWS(acc_k, wv, i)                                                      \
    do {                                                                                \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t][acc_k] =            \
            _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (int64_t)t * ldx + (i)), acc[t][acc_k]); \
    } while (0)

/* matmul.c's combine (step 2 of its layout); no tail, n % 32 == 0. */
KN_AVX2_INLINE float combine_avx2(const __m256 acc[4]) {
    __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* y[t * ldy] = dot(row, x[t * ldx ..]) for t < nt (1 <= nt <= KN_QTBLOCK), over
 * one row of n elements (a multiple of group); codes, sc and bi are the row's.
 * bits and nt are constants after inlining. */
KN_AVX2_INLINE void dot_rows_affine_avx2(const unsigned char *codes, const void *sc, const void *bi, nx_dtype sdt,
                                         int bits, int64_t group, const float *x, int64_t ldx, int nt, int64_t n,
                                         float *y, int64_t ldy) {
    __m256 acc[KN_QTBLOCK][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (int64_t g = 0; i < n; g++) {
        const __m256 sv = _mm256_set1_ps(sd_load_avx2(sc, sdt, g)), bv = _mm256_set1_ps(sd_load_avx2(bi, sdt, g));
        for (const int64_t end = i + group; i < end; i += 32) {
            __m256 w[4];
            dequant32_avx2(codes, bits, i, n, sv, bv, w);
            KN_QFMA_ROWS(0, w[0], i);
            KN_QFMA_ROWS(1, w[1], i + 8);
            KN_QFMA_ROWS(2, w[2], i + 16);
            KN_QFMA_ROWS(3, w[3], i + 24);
        }
    }
    for (int t = 0; t < nt; t++) y[(int64_t)t * ldy] = combine_avx2(acc[t]);
}

/* All rows [r0, r1) at one bit width (a constant in each caller), row by row:
 * each row is finished before the next starts, as in matmul.c. */
KN_AVX2_INLINE void affine_rows_bits_avx2(const kn_mat *w, int bits, const float *x, int64_t ldx, int T, float *y,
                                          int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->cols;
    const size_t cb = codes_row_bytes(w), sb = sd_row_bytes(w);
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *codes = (const unsigned char *)w->data + (size_t)r * cb;
        const void *sc = (const char *)w->scales + (size_t)r * sb, *bi = (const char *)w->biases + (size_t)r * sb;
        int t = 0;
        for (; t + KN_QTBLOCK <= T; t += KN_QTBLOCK)
            dot_rows_affine_avx2(codes, sc, bi, w->sdtype, bits, w->group, x + (int64_t)t * ldx, ldx, KN_QTBLOCK, n,
                                 y + (int64_t)t * ldy + r, ldy);
        if (t < T)   /* odd T: the last activation row alone */
            dot_rows_affine_avx2(codes, sc, bi, w->sdtype, bits, w->group, x + (int64_t)t * ldx, ldx, 1, n,
                                 y + (int64_t)t * ldy + r, ldy);
    }
}

#define KN_AFFINE_ROWS_AVX2(b)                                                                                 \
    static KN_AVX2 void affine_rows_q##b##_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, \
                                                int64_t ldy, int64_t r0, int64_t r1) {                         \
        affine_rows_bits_avx2(w, b, x, ldx, T, y, ldy, r0, r1);                                                \
    }
KN_AFFINE_ROWS_AVX2(2)
KN_AFFINE_ROWS_AVX2(3)
KN_AFFINE_ROWS_AVX2(4)
KN_AFFINE_ROWS_AVX2(5)
KN_AFFINE_ROWS_AVX2(6)
KN_AFFINE_ROWS_AVX2(8)

void kn_affine_matmul_rows_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                int64_t r0, int64_t r1) {
    assert(kn_affine_valid(w));
    switch (w->bits) {
    case 2: affine_rows_q2_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    case 3: affine_rows_q3_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    case 4: affine_rows_q4_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    case 5: affine_rows_q5_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    case 6: affine_rows_q6_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    case 8: affine_rows_q8_avx2(w, x, ldx, T, y, ldy, r0, r1); break;
    default: assert(!"unsupported bit width");
    }
}

#endif /* KN_HAVE_X86 */
