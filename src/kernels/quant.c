/* quant.c — MLX affine quantized weights: reading and writing the packed bit
 * stream, the quantizer twins (the AVX2 one writes the scalar one's bytes; it
 * makes --draft-head-bits copies and `nextn quantize` fast), and two pairs of
 * matmul twins (see quant.h).
 *
 * f32 activations (kn_matmul_rows, --f32-activations): both twins compute the
 * dense product with the dequantized matrix: they dequantize each weight with
 * one f32 fma and then sum exactly as the dense twins of matmul.c sum f32
 * weights. The reference sums in double in index order; the AVX2 twin follows
 * the dense "Dot product layout" of matmul.c with no tail (cols is a multiple
 * of 32). So the bit-exactness contract of matmul.h carries over unchanged,
 * and the tests can compare each affine twin with its dense twin on
 * kn_mat_row_f32's rows, bit for bit.
 *
 * int8 activations (kn_quantize_x + kn_matmul_qx_rows, the default): integer
 * dot products per group, the formula written out in quant.h, which the
 * scalar twin follows literally and the AVX2 twin reproduces bit for bit. */
#include "kernels/quant.h"
#include "kernels/fpq.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"

#include "kernels/avx2.h"

/* ---- Format helpers --------------------------------------------------- */

static int kn_sd_ok(nx_dtype dt) { return dt == NX_DT_F32 || dt == NX_DT_BF16 || dt == NX_DT_F16; }

static int kn_bits_ok(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }

static int kn_group_ok(int group) { return group == 32 || group == 64 || group == 128; }

int kn_affine_valid(const kn_mat *w) {
    return w != NULL && kn_bits_ok(w->bits) && kn_group_ok(w->group) && w->dtype == NX_DT_U32 && w->ld == 0 &&
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

/* Row r of w: where its codes, scales and biases start. */
typedef struct {
    const unsigned char *codes;
    const void *sc, *bi;
} affine_row;

/* Where w's rows start, as stored (packed 0) or in its packed rows
 * (kn_lanes_pack: codes, then scales, then biases): row r's codes at codes
 * + r * code_stride, its scales and biases at sc and bi + r * sd_stride.
 * Taken once for a run of rows: the sizes take divisions. */
typedef struct {
    const unsigned char *codes, *sc, *bi;
    size_t code_stride, sd_stride;
} affine_rows;

static inline affine_rows rows_of(const kn_mat *w, int packed) {
    const size_t sb = (size_t)kn_affine_sd_row_bytes(w);
    if (packed) {
        const unsigned char *p = w->packed;
        const size_t cb = (size_t)kn_lanes_packed_code_bytes(w), stride = (size_t)kn_lanes_packed_row_bytes(w);
        return (affine_rows){p, p + cb, p + cb + sb, stride, stride};
    }
    return (affine_rows){w->data, w->scales, w->biases, (size_t)kn_affine_row_words(w->cols, w->bits) * 4, sb};
}

/* Row r of a. a is passed by value: through a pointer (its address taken)
 * the VNNI q4 product ran at 0.55x in L2. */
static inline affine_row row_in(affine_rows a, int64_t r) {
    return (affine_row){a.codes + (size_t)r * a.code_stride, a.sc + (size_t)r * a.sd_stride,
                        a.bi + (size_t)r * a.sd_stride};
}

static inline affine_row row_at(const kn_mat *w, int64_t r) {
    const affine_rows a = rows_of(w, 0);
    return row_in(a, r);
}

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

/* The smallest and largest of n finite values, as a scan in index order
 * finds them: of equal values the first stays, which fixes the sign of a zero
 * minimum (the bias stores it). */
static void group_range(const float *w, int n, float *lo, float *hi) {
    float l = w[0], h = w[0];
    for (int c = 1; c < n; c++) {
        if (w[c] < l) l = w[c];
        if (w[c] > h) h = w[c];
    }
    *lo = l, *hi = h;
}

/* A group's bias and scale (quant.h) from its extremes, stored as element g of
 * the scale and bias arrays; both twins share it. */
static void group_params(float lo, float hi, unsigned nbins, nx_dtype sdtype, void *scales, void *biases, int64_t g,
                         float *bias, float *scale) {
    assert(isfinite(lo) && isfinite(hi));
    const float b = sd_round_dir(lo, sdtype, -1);
    double s = ((double)hi - b) / nbins;   /* in double: the grid reaches hi to within 2^-52 */
    if (s < KN_AFFINE_MIN_SCALE) s = KN_AFFINE_MIN_SCALE;
    const float sc = sd_round_dir(s, sdtype, +1);
    assert(isfinite(b) && isfinite(sc) && sc > 0);
    sd_store(scales, sdtype, g, sc);
    sd_store(biases, sdtype, g, b);
    *bias = b, *scale = sc;
}

/* ORs codes q[0..n) into the stream at element c0 (the stream starts zeroed).
 * Element c's field starts at stream bit k = c * bits; it may spill into the
 * next word. */
static void put_codes(uint32_t *codes, int64_t c0, const uint8_t *q, int n, int bits) {
    for (int c = 0; c < n; c++) {
        const int64_t k = (c0 + c) * bits;
        codes[k / 32] |= (uint32_t)q[c] << (k % 32);
        if (k % 32 + bits > 32) codes[k / 32 + 1] |= (uint32_t)(q[c] >> (32 - k % 32));
    }
}

void kn_affine_quantize_row_ref(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                                void *scales, void *biases) {
    assert(kn_bits_ok(bits) && kn_group_ok(group) && kn_sd_ok(sdtype) && cols >= 0 && cols % group == 0);
    assert(cols == 0 || (w != NULL && codes != NULL && scales != NULL && biases != NULL));
    if (cols == 0) return;
    const unsigned nbins = (1u << bits) - 1;
    memset(codes, 0, (size_t)kn_affine_row_words(cols, bits) * sizeof *codes);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *wg = w + g * group;
        float lo, hi, bias, scale;
        uint8_t q[128];
        group_range(wg, group, &lo, &hi);
        group_params(lo, hi, nbins, sdtype, scales, biases, g, &bias, &scale);
        for (int c = 0; c < group; c++) {
            const double v = floor(((double)wg[c] - bias) / scale + 0.5);
            q[c] = (uint8_t)(v <= 0 ? 0 : v >= nbins ? nbins : (unsigned)v);
        }
        put_codes(codes, g * group, q, group, bits);
    }
}

/* ---- Scalar reference twin --------------------------------------------- */

/* Weight (row, c) of w, whose row starts at codes / sc / bi. */
static inline float dequant_ref(const kn_mat *w, const void *codes, const void *sc, const void *bi, int64_t c) {
    const int64_t g = c / w->group;
    return fmaf(sd_load(sc, w->sdtype, g), (float)code_at(codes, c, w->bits), sd_load(bi, w->sdtype, g));
}

void kn_affine_row_f32_ref(const kn_mat *w, int64_t row, float *out) {
    assert(kn_affine_valid(w) && 0 <= row && row < w->rows);
    const affine_row ar = row_at(w, row);
    const void *codes = ar.codes, *sc = ar.sc, *bi = ar.bi;
    for (int64_t c = 0; c < w->cols; c++) out[c] = dequant_ref(w, codes, sc, bi, c);
}

/* The definition: each weight is dequantized again for each activation row,
 * which costs time and keeps the code the formula. */
void kn_affine_matmul_rows_ref(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1) {
    assert(kn_affine_valid(w));
    for (int64_t r = r0; r < r1; r++) {
        const affine_row ar = row_at(w, r);
        const void *codes = ar.codes, *sc = ar.sc, *bi = ar.bi;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (int64_t)t * ldx;
            double acc = 0.0;
            for (int64_t c = 0; c < w->cols; c++) acc += (double)dequant_ref(w, codes, sc, bi, c) * (double)xt[c];
            y[(int64_t)t * ldy + r] = (float)acc;
        }
    }
}

/* ---- Int8 activations: scalar twins (the definition, quant.h) ------------ */

/* Groups per block of the storage order (quant.h): one per int32 lane of a
 * 256-bit vector. */
#define QX_BLOCK_GROUPS 8

/* Bytes of one row of q: cols, padded to whole blocks of 8 groups for
 * lanes. */
static int64_t qx_row_bytes(int64_t cols, int group, int lanes) {
    const int64_t block = (int64_t)QX_BLOCK_GROUPS * group;
    return lanes ? (cols + block - 1) / block * block : cols;
}

/* kn_qx.ldg for a row of `groups` groups. */
static size_t qx_padded_groups(int64_t groups) {
    return (size_t)((groups + KN_QX_GROUP_PAD - 1) / KN_QX_GROUP_PAD * KN_QX_GROUP_PAD);
}

size_t kn_qx_bytes(int T, int64_t cols) {
    assert(T >= 0 && cols >= 0);
    const size_t G = qx_padded_groups(cols / 32);   /* the most groups any group size gives */
    /* 8 * group divides 1024 for every group size, so no row pads past this */
    return (size_t)T * ((size_t)qx_row_bytes(cols, 128, 1) + G * (2 * sizeof(float) + 2 * sizeof(int32_t)));
}

void kn_qx_bind(kn_qx *qx, void *buf, int T, const kn_mat *w) {
    assert(qx != NULL && T >= 0 && (kn_affine_valid(w) || kn_fp_int8(w)));
    const int64_t cols = w->cols;
    const int group = kn_qx_group(w);
    const size_t G = qx_padded_groups(cols / group);
    char *p = buf;
    qx->T = T;
    qx->cols = cols;
    qx->group = group;
    qx->lanes = kn_qx_lanes(w);
    qx->ldq = qx_row_bytes(cols, group, qx->lanes);
    qx->ldg = (int64_t)G;
    /* ldq is a multiple of 32, so every array after q starts 4-byte aligned. */
    qx->q = (int8_t *)p, p += (size_t)T * (size_t)qx->ldq;
    qx->d = (float *)(void *)p, p += (size_t)T * G * sizeof(float);
    qx->s = (float *)(void *)p, p += (size_t)T * G * sizeof(float);
    qx->si = (int32_t *)(void *)p, p += (size_t)T * G * sizeof(int32_t);
    qx->si16 = (int32_t *)(void *)p;
}

size_t kn_lanes_packed_bytes(const kn_mat *w) {
    return kn_qx_lanes(w) ? (size_t)w->rows * (size_t)kn_lanes_packed_row_bytes(w) : 0;
}

/* Bytes 0, 2, 4 and 6 of little-endian v, in that order. */
static inline uint32_t even_bytes(uint64_t v) {
    v &= 0x00ff00ff00ff00ffu;
    v = (v | v >> 8) & 0x0000ffff0000ffffu;
    return (uint32_t)(v | v >> 16);
}

void kn_lanes_pack4_block(const unsigned char *codes, int64_t group, int64_t g8, int64_t cnt, unsigned char *dst) {
    assert(0 < cnt && cnt <= QX_BLOCK_GROUPS);
    memset(dst, 0, (size_t)(4 * group));
    for (int64_t j = 0; j < cnt; j++)
        for (int64_t b = 0; b < group / 2; b += 4)   /* bytes b .. b + 3 of group g8 + j */
            memcpy(dst + b / 32 * 256 + b % 32 / 4 * 32 + 4 * j, codes + (g8 + j) * group / 2 + b, 4);
}

/* The 8 codes of `bits` bits whose stream starts at byte p, code i in byte
 * i. bits is a constant after inlining. */
static inline uint64_t spread8(const unsigned char *p, int bits) {
    uint64_t u = 0, r = 0;
    memcpy(&u, p, (size_t)bits);
    for (int i = 0; i < 8; i++) r |= (u >> (i * bits) & ((1u << bits) - 1)) << (8 * i);
    return r;
}

/* Each byte of lo's and hi's fields (8 values below 4 in each, elements 0-7
 * and 8-15 of 16) at quant.h's places within one word of bit planes: byte m
 * = f(2m) | f(8 + 2m) << 2 | f(2m + 1) << 4 | f(9 + 2m) << 6. */
static inline uint32_t fields_word(uint64_t lo, uint64_t hi) {
    return even_bytes(lo) | even_bytes(hi) << 2 | even_bytes(lo >> 8) << 4 | even_bytes(hi >> 8) << 6;
}

/* kn_lanes_planes_chunk for a constant width: per 16 codes of a group, their
 * words of each plane (quant.h) assembled from bytes, 8 codes at a time. */
static inline void planes_chunk_bits(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt,
                                     int sb, unsigned char *dst) {
    unsigned char *two = dst + kn_plane2_offset(bits), *one = dst + kn_plane1_offset(bits);
    const int at2 = kn_plane2_at(bits), at1 = kn_plane1_at(bits);
    const uint64_t m4 = 0x0f0f0f0f0f0f0f0fu, m2 = 0x0303030303030303u, m1 = 0x0101010101010101u;
    memset(dst, 0, (size_t)(64 * bits));
    for (int64_t j = 0; j < cnt; j++)
        for (int k = 0; k < 4; k++) {   /* elements 64 sb + 16k .. + 15 of group g8 + j */
            const unsigned char *p = codes + ((g8 + j) * group + 64 * sb + 16 * k) / 8 * bits;
            const uint64_t lo = spread8(p, bits), hi = spread8(p + bits, bits);
            uint32_t w;
            if (bits >= 4) {   /* nibbles: elements 2m and 2m + 1 in byte m, 8 elements a word */
                w = even_bytes(lo & m4) | even_bytes(lo >> 8 & m4) << 4;
                memcpy(dst + 64 * k + 4 * j, &w, 4);
                w = even_bytes(hi & m4) | even_bytes(hi >> 8 & m4) << 4;
                memcpy(dst + 64 * k + 32 + 4 * j, &w, 4);
            }
            if (bits & 2) {
                w = fields_word(lo >> at2 & m2, hi >> at2 & m2);
                memcpy(two + 32 * k + 4 * j, &w, 4);
            }
            if (bits & 1) {   /* groups j and j + 4 share bytes: bit j / 4 of each pair of bits */
                uint32_t o;
                memcpy(&o, one + 16 * k + 4 * (j % 4), 4);
                o |= fields_word(lo >> at1 & m1, hi >> at1 & m1) << (j / 4);
                memcpy(one + 16 * k + 4 * (j % 4), &o, 4);
            }
        }
}

/* A kn_lanes_planes_chunk twin's body: its width's function, the width a
 * constant so that each has its own constant shifts (the parameters by
 * their names in kn_lanes_planes_chunk). */
#define PLANES_CHUNK_BY_WIDTH(chunk_bits)                                 \
    do {                                                                  \
        assert(0 < cnt && cnt <= QX_BLOCK_GROUPS && 64 * sb < group);     \
        switch (bits) {                                                   \
        case 2: chunk_bits(codes, 2, group, g8, cnt, sb, dst); break;     \
        case 3: chunk_bits(codes, 3, group, g8, cnt, sb, dst); break;     \
        case 4: chunk_bits(codes, 4, group, g8, cnt, sb, dst); break;     \
        case 5: chunk_bits(codes, 5, group, g8, cnt, sb, dst); break;     \
        case 6: chunk_bits(codes, 6, group, g8, cnt, sb, dst); break;     \
        default: assert(!"bit planes are for 2 to 6 bits");              \
        }                                                                 \
    } while (0)

void kn_lanes_planes_chunk_ref(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                               unsigned char *dst) {
    PLANES_CHUNK_BY_WIDTH(planes_chunk_bits);
}

void kn_lanes_pack(const kn_mat *w, void *dst, int64_t r0, int64_t r1) {
    assert(kn_qx_lanes(w) && (w->fp || kn_affine_valid(w)) && dst != NULL && 0 <= r0 && r0 <= r1 && r1 <= w->rows);
    const int bits = kn_lanes_bits(w), group = kn_qx_group(w);
    const int64_t G = w->cols / group, chunk = group * bits / 8;   /* code bytes per group */
    const int64_t packed_bytes = kn_lanes_packed_row_bytes(w), cb = kn_lanes_packed_code_bytes(w);
    const int64_t row_codes = w->cols * bits / 8, sb = kn_lanes_scale_row_bytes(w), bb = kn_lanes_bias_row_bytes(w);
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *src = (const unsigned char *)w->data + r * row_codes;
        unsigned char *out = (unsigned char *)dst + r * packed_bytes;
        memset(out, 0, (size_t)packed_bytes);   /* a last block's missing groups, the padding */
        for (int64_t g8 = 0; g8 < G; g8 += QX_BLOCK_GROUPS) {
            const int64_t cnt = G - g8 < QX_BLOCK_GROUPS ? G - g8 : QX_BLOCK_GROUPS;
            unsigned char *block = out + g8 * chunk;
            if (bits == 4) {
                kn_lanes_pack4_block(src, group, g8, cnt, block);
                continue;
            }
            if (bits != 8) {   /* bit planes, chunk by chunk */
                for (int sb = 0; sb < group / 64; sb++)
                    kn_lanes_planes_chunk(src, bits, group, g8, cnt, sb, block + 64 * bits * sb);
                continue;
            }
            for (int64_t j = 0; j < cnt; j++)   /* each code byte at its activation's place (kn_lanes_offset) */
                for (int64_t c = 0; c < group; c += 8) {   /* 8 codes: the evens' 4 bytes, then the odds' */
                    uint64_t v;
                    memcpy(&v, src + (g8 + j) * chunk + c, 8);
                    const uint32_t ev = even_bytes(v), od = even_bytes(v >> 8);
                    memcpy(block + kn_lanes_offset(c, j), &ev, 4);
                    memcpy(block + kn_lanes_offset(c + 1, j), &od, 4);
                }
        }
        memcpy(out + cb, (const char *)w->scales + r * sb, (size_t)sb);
        if (bb) memcpy(out + cb + sb, (const char *)w->biases + r * bb, (size_t)bb);
    }
}

static inline int qx_lane(int64_t c) { return (int)(c % 32 / 4); }

/* The scale d and its inverse id for a group whose largest magnitude is amax
 * (finite): 0 and 0 below KN_QX_MIN_AMAX, where 127 / amax could overflow. */
static inline void qx_scale(float amax, float *d, float *id) {
    if (amax < KN_QX_MIN_AMAX) {
        *d = *id = 0.0f;
        return;
    }
    *d = amax / 127.0f;
    *id = 127.0f / amax;
}

/* Quantizes one group of n elements of x into q (in element order), *d, *s
 * and *si (quant.h; a group with a NaN or an infinity: NaN, NaN and 0). */
static void quantize_group_ref(const float *x, int n, int8_t *q, const kn_qx *qx, int64_t k) {
    float amax = 0.0f;
    int bad = 0;
    for (int c = 0; c < n; c++) {
        const float a = fabsf(x[c]);
        if (!(a <= FLT_MAX)) bad = 1;   /* NaN or infinity */
        else if (a > amax) amax = a;
    }
    if (bad) {
        memset(q, 0, (size_t)n);
        qx->d[k] = qx->s[k] = NAN;
        qx->si[k] = qx->si16[k] = 0;
        return;
    }
    float scale, id;
    qx_scale(amax, &scale, &id);
    int32_t sum = 0, first16 = 0;
    for (int c = 0; c < n; c++) {
        float v = nearbyintf(x[c] * id);   /* the current rounding mode: half to even */
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        q[c] = (int8_t)v;
        sum += (int32_t)v;
        if (c == 15) first16 = sum;
    }
    qx->d[k] = scale;
    qx->s[k] = scale * (float)sum;
    qx->si[k] = sum;
    qx->si16[k] = first16;
}

/* Zeros in row t's per-group entries past its G groups (quant.h's
 * KN_QX_GROUP_PAD), in every twin's output. */
static void qx_zero_group_pad(const kn_qx *qx, int t, int64_t G) {
    const int64_t k = (int64_t)t * qx->ldg + G;
    const size_t n = (size_t)(qx->ldg - G);
    memset(qx->d + k, 0, n * sizeof(float)), memset(qx->s + k, 0, n * sizeof(float));
    memset(qx->si + k, 0, n * sizeof(int32_t)), memset(qx->si16 + k, 0, n * sizeof(int32_t));
}

/* Every group of every row of x, each group's bytes then moved to their
 * places in the storage order; for lanes, the lanes of a partial last
 * block's missing groups are zeroed. */
void kn_quantize_x_ref(kn_qx *qx, const float *x, int64_t ldx) {
    assert(qx != NULL && (qx->T <= 1 || ldx >= qx->cols));
    const int64_t n = qx->cols, G = n / qx->group;
    int8_t tmp[128];
    for (int t = 0; t < qx->T; t++) {
        int8_t *row = qx->q + (int64_t)t * qx->ldq;
        if (qx->lanes) {   /* a partial last block: its missing groups' lanes */
            const int64_t last = G / QX_BLOCK_GROUPS * QX_BLOCK_GROUPS * qx->group;
            memset(row + last, 0, (size_t)(qx->ldq - last));
        }
        qx_zero_group_pad(qx, t, G);
        for (int64_t g = 0; g < G; g++) {
            const int64_t k = (int64_t)t * qx->ldg + g;
            quantize_group_ref(x + (int64_t)t * ldx + g * qx->group, qx->group, tmp, qx, k);
            for (int c = 0; c < qx->group; c++) row[kn_qx_pos(qx, g, c)] = tmp[c];
        }
    }
}

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): the AVX2 combine order. */
static float combine8_ref(const float a[8]) {
    const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    return (s0 + s2) + (s1 + s3);
}

void kn_matmul_qx_rows_ref(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    assert(kn_affine_valid(w) && qx != NULL && qx->cols == w->cols && qx->group == w->group);
    assert(qx->lanes == kn_qx_lanes(w));
    assert(0 <= r0 && r0 <= r1 && r1 <= w->rows && (qx->T <= 1 || ldy >= r1));
    const int64_t n = w->cols, group = w->group, G = n / group;
    for (int64_t r = r0; r < r1; r++) {
        const affine_row ar = row_at(w, r);
        const void *codes = ar.codes, *sc = ar.sc, *bi = ar.bi;
        /* 8-bit codes centered (quant.h): u = q - 128, c_g = fma(128, sc_g, b_g) */
        const int32_t center = w->bits == 8 ? 128 : 0;
        for (int t = 0; t < qx->T; t++) {
            const int8_t *xq = qx->q + (int64_t)t * qx->ldq;
            /* lanes: group g in lane g % 16 of acc, its bias term first;
             * else 8 lanes each, the bias terms in bl */
            float acc[16] = {0}, bl[8] = {0};
            for (int64_t g = 0; g < G; g++) {
                int32_t lane[8] = {0};   /* lanes: lane 0 alone, the whole group (I_g) */
                for (int64_t c = 0; c < group; c++)
                    lane[qx->lanes ? 0 : qx_lane(c)] +=
                        ((int32_t)code_at(codes, g * group + c, w->bits) - center) * xq[kn_qx_pos(qx, g, c)];
                const int64_t k = (int64_t)t * qx->ldg + g;
                const float scale = sd_load(sc, w->sdtype, g), bias = sd_load(bi, w->sdtype, g), dg = qx->d[k] * scale;
                const float cg = center ? fmaf(128.0f, scale, bias) : bias;
                if (qx->lanes) {
                    acc[g % 16] = fmaf(cg, qx->s[k], acc[g % 16]);
                    acc[g % 16] = fmaf((float)lane[0], dg, acc[g % 16]);
                    continue;
                }
                for (int j = 0; j < 8; j++) acc[j] = fmaf((float)lane[j], dg, acc[j]);
                bl[g % 8] = fmaf(cg, qx->s[k], bl[g % 8]);
            }
            if (qx->lanes) {
                for (int j = 0; j < 8; j++) acc[j] += acc[j + 8];
                y[(int64_t)t * ldy + r] = combine8_ref(acc);
            } else {
                y[(int64_t)t * ldy + r] = combine8_ref(acc) + combine8_ref(bl);
            }
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

/* y[t * ldy] = dot(row, x[t * ldx ..]) for t < nt (1 <= nt <= KN_QTBLOCK), over
 * one row of n elements (a multiple of group); ar is the row.
 * bits and nt are constants after inlining. */
KN_AVX2_INLINE void dot_rows_affine_avx2(affine_row ar, nx_dtype sdt, int bits, int64_t group, const float *x,
                                         int64_t ldx, int nt, int64_t n, float *y, int64_t ldy) {
    const unsigned char *codes = ar.codes;
    const void *sc = ar.sc, *bi = ar.bi;
    __m256 acc[KN_QTBLOCK][4];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (int64_t g = 0; i < n; g++) {
        const __m256 sv = _mm256_set1_ps(sd_load_avx2(sc, sdt, g)), bv = _mm256_set1_ps(sd_load_avx2(bi, sdt, g));
        for (const int64_t end = i + group; i < end; i += 32) {
            __m256 w[4];
            dequant32_avx2(codes, bits, i, n, sv, bv, w);
            KN_FMA_ROWS(0, w[0], i);
            KN_FMA_ROWS(1, w[1], i + 8);
            KN_FMA_ROWS(2, w[2], i + 16);
            KN_FMA_ROWS(3, w[3], i + 24);
        }
    }
    for (int t = 0; t < nt; t++) y[(int64_t)t * ldy] = _mm_cvtss_f32(kn_hsum_avx2(acc[t], 4));   /* n % 32 == 0: no tail */
}

/* All rows [r0, r1) at one bit width (a constant in each caller), row by row:
 * each row is finished before the next starts, as in matmul.c. */
KN_AVX2_INLINE void affine_rows_bits_avx2(const kn_mat *w, int bits, const float *x, int64_t ldx, int T, float *y,
                                          int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->cols;
    for (int64_t r = r0; r < r1; r++) {
        const affine_row ar = row_at(w, r);
        int t = 0;
        for (; t + KN_QTBLOCK <= T; t += KN_QTBLOCK)
            dot_rows_affine_avx2(ar, w->sdtype, bits, w->group, x + (int64_t)t * ldx, ldx, KN_QTBLOCK, n,
                                 y + (int64_t)t * ldy + r, ldy);
        if (t < T)   /* odd T: the last activation row alone */
            dot_rows_affine_avx2(ar, w->sdtype, bits, w->group, x + (int64_t)t * ldx, ldx, 1, n,
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

KN_AVX2 void kn_affine_row_f32_avx2(const kn_mat *w, int64_t row, float *out) {
    assert(kn_affine_valid(w) && 0 <= row && row < w->rows);
    const affine_row ar = row_at(w, row);
    const int64_t n = w->cols;
    for (int64_t g = 0, i = 0; i < n; g++) {
        const __m256 sv = _mm256_set1_ps(sd_load_avx2(ar.sc, w->sdtype, g)), bv = _mm256_set1_ps(sd_load_avx2(ar.bi, w->sdtype, g));
        for (const int64_t end = i + w->group; i < end; i += 32) {
            __m256 v[4];
            switch (w->bits) {   /* each width its own inlined unpacking */
            case 2: dequant32_avx2(ar.codes, 2, i, n, sv, bv, v); break;
            case 3: dequant32_avx2(ar.codes, 3, i, n, sv, bv, v); break;
            case 4: dequant32_avx2(ar.codes, 4, i, n, sv, bv, v); break;
            case 5: dequant32_avx2(ar.codes, 5, i, n, sv, bv, v); break;
            case 6: dequant32_avx2(ar.codes, 6, i, n, sv, bv, v); break;
            default: dequant32_avx2(ar.codes, 8, i, n, sv, bv, v); break;
            }
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + i + 8 * k, v[k]);
        }
    }
}

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

/* ---- Int8 activations: AVX2 twins ------------------------------------------
 * The quantizer packs 32 int32 codes at a time into bytes in element order
 * (lanes: then transposed by blocks of 8 groups, quant.h). The matmul
 * unpacks the weight codes of a 32-element block to 32 bytes in element order
 * (q8 in groups of 32: loaded as they are; q4 in groups of 32: nibbles split
 * and interleaved; 2, 3, 5, 6: unpack8_avx2 four times, then packed), so a
 * maddubs + madd puts elements 4j..4j+3 of the block into int32 lane j, and
 * adding the blocks of a group gives quant.h's I_j exactly; lanes (4 and 8
 * bits from group 64) meet 8 groups' code bytes as packed rows hold them (or
 * transposed so), so that lane j sums group j (I_g). The int16 pair sums cannot
 * saturate: a code is at most 63 for bits <= 6 (63 * 127 * 2 < 32767). 8-bit
 * codes (up to 255) would, so they are centered (quant.h: u = q - 128 in
 * [-128, 127]) and multiplied with the sign trick (|u| times xq with u's sign;
 * 128 * 127 * 2 < 32767).
 *
 * Schedule: row by row (a wide product, T > KN_QXBLOCK, 2 rows at a time on
 * AVX-512VL except for lanes; packed 4-bit lanes 2 at a time at every T:
 * quant_qx.inc; with AVX-512 VNNI, a wide product of lanes whose activations
 * outgrow L1 in tiles of rows, qx_wide_tiles below); per row, up to KN_QXBLOCK
 * activation rows share each unpacked block (an int32 group accumulator and
 * an f32 accumulator each), so a verify block of 4 tokens unpacks every
 * weight once.
 *
 * The product itself is in quant_qx.inc, compiled three times below: for
 * AVX2, for AVX2 with AVX-VNNI and for AVX-512 VNNI; with either VNNI one
 * vpdpbusd does a block's maddubs + madd + add (same exact int32 lanes, so
 * the same bits). Measured on a 2-core AMD EPYC (Zen 4) VM, one thread,
 * weights in L2 (bench-matmul 0.5 31 1,2,4,8 int8), G weights/s, AVX2 ->
 * AVX-512 VNNI: q8 T = 1/2/4/8 19.4/12.8/7.5/4.1 ->
 * 20.3/13.1/8.3/4.8, q4 32.0/21.5/11.8/5.6 -> 31.9/23.4/13.0/6.3: the f32
 * part per group (convert, scale, accumulate) then cost as much as the
 * integer part, which is why lanes now sum 8 groups per register (one f32
 * step per 8 groups; quant_qx.inc). */

/* Activation rows per register block, and so also the line between a step
 * or a verify (T <= KN_QXBLOCK: one block) and a wide pass (quant_qx.inc). */
#define KN_QXBLOCK 4
/* A wide pass (T > KN_QXBLOCK) of lanes rows with AVX-512 VNNI runs row by
 * row while its T activation rows fit L1 next to a row's codes, and in tiles
 * past that (quant.h: KN_QX_TILE_BYTES; quant_qx.inc, qx_rows_loop): each
 * block of KN_QXBLOCK activation rows over a whole tile of rows, so a
 * block's activations stay in L1 and the tile's rows in L2 (a block then
 * reads about 1/4 as many bytes from L2 as row by row, where every row or
 * pair reads all T activation rows there). Measured on the Zen 5 VM (48 KB
 * L1), bench-linear with both ways in turn in one process (2 threads, paired
 * medians of the time, tiles of 128 KB against row by row):
 *   q4 pairs, 4B shape: every matrix T = 32 0.72-0.75x, T = 16 0.74x;
 *     2560 columns T = 32 / 16 / 8 / 6 / 5 0.82 / 0.84-0.90 / 1.01 / 1.12 /
 *     1.07x, 4096 columns T = 8 / 6 / 5 0.67 / 0.91 / 0.89x, 9216 columns
 *     0.77 / 0.87 / 0.87x; 0.8B shape: 3584 columns T = 32 / 16 / 8 / 6
 *     0.76-0.82 / 0.76-0.82 / 0.87 / 0.97x, 1024 columns T = 32 / 16 / 8
 *     0.97-1.06 / 1.00-1.02 / 1.06x: a pair's activation loads serve two
 *     rows, and rows of up to 2048 columns keep theirs in L1 well enough;
 *   q8 (single rows), 0.8B shape: 3584 columns T = 32 / 16 / 8 / 6 0.55 /
 *     0.56 / 0.84 / 0.98x, 1024 columns 0.92 / 0.99 / 0.99 / 1.04x;
 *   q4 pairs of 2048 columns, 2B shape (every matrix that wide): T = 32 /
 *     28 / 24 / 20 / 16 0.84 / 0.88 / 0.89 / 0.95 / 0.98-0.99x; 0.8B shape
 *     (its two 2048-column matrices a layer) T = 32 / 16 0.90 / 1.02x; whole
 *     prefills (as below) 2B q4 0.91x (240.7 -> 263.7 tok/s), 0.8B q4 level
 *     (1.015 / 0.992x).
 * Hence a pass tiles past 24 KB of activations (T x columns, half this L1)
 * and q4 pairs only past 2048 columns or 32 KB (at 2048 columns T > 16: a
 * prefill chunk, never a verify): at the verifies' T = 5 / 6 / 8 then
 * level (4B q4 1.02 / 1.00 / 0.99x, 0.8B q4 1.00 / 1.00 / 1.02x, q8 0.99 /
 * 1.01 / 1.00x). Whole prefills (256 tokens at 4B, 512 at 0.8B; fresh
 * sessions, both ways in turn in one process, the same first token): 4B q4
 * 0.81x the time (67.6 -> 83.3 tok/s), 0.8B q8 0.80x (301 -> 366), 0.8B
 * q4 0.96x. Tiles of 64 / 256 / 512 KB: T = 32 0.74 / 0.75 / 0.76x at 4B
 * (128 KB: 0.72-0.75x). The AVX2 and AVX-VNNI copies, about half as fast
 * there, ran level with tiles (0.99-1.02x at 1024 and 3584 columns, 0.99x
 * over the 4B shape at T = 32): they keep row by row. The bit-plane widths
 * (2, 3, 5 and 6 bits, lanes since the fifty-third session) take the same
 * tiles, not measured apart. */
#define QX_PAIR_TILE_X_BYTES (32 * 1024)
static inline int qx_wide_tiles(int q4_pairs, int T, int64_t cols) {
    return kn_qx_tiled(T, cols) && (!q4_pairs || cols > 2048 || (int64_t)T * cols > QX_PAIR_TILE_X_BYTES);
}

/* Rows ahead whose codes, scales and biases a row's pass prefetches (0:
 * none), for each set's kernel; row_bytes counts all three. Measured on the
 * 2-core AMD EPYC VM (bench-linear: every step matrix and the LM head of the
 * 0.8B-shape fixture, 2 threads, ms per pass at T = 1, alternating rounds).
 * A step or a verify (T <= KN_QXBLOCK), 8 bits as stored (group 32, or
 * before packed 8-bit rows), either kernel: none. 24
 * rows ahead is 26-91 KB of q8 rows, past the 32 KB L1 the lines land in,
 * and slows every pass: VNNI 24 rows
 * 34.1/26.3/26.5, none 28.1/19.1/18.8, 4 KB 28.6/21.2/23.6; AVX2 24 rows
 * 36.8/33.2/35.5, none 29.5/26.3/27.8.
 * 4 bits: three streams per row of under 1 KB each are more than the
 * hardware prefetcher follows well. AVX2 (an earlier whole-process A/B of q4
 * decode: 0.92x the wall time at 24 rows ahead, 0.98x at 4; here 24 rows
 * 18.3/17.6/18.1 against 4 KB 20.2/18.6/18.5); the faster VNNI kernel wants
 * less: 24 rows 16.5/15.8/15.7, none 15.4/15.3/16.4, 4 KB 14.7/14.4/14.9.
 * A wide pass: 4 KB ahead into L2 for VNNI's row pairs (qx_prefetch_row;
 * lanes run single rows there, for which the reach is one row longer than
 * needed);
 * none for AVX2's single rows, which run as fast either way (1.00x, 1.01x
 * at T = 8 and 32).
 * 8-bit lanes from packed rows (bench-linear on the q8 fixture, 2 threads, ms
 * a pass at T = 1 / 4): VNNI none 16.9-17.4 / 18.4-18.7, 2 rows ahead
 * 13.4-14.1 / 15.7-15.9, 4 rows 14.2-13.5 / 15.8-16.0, 8 rows 14.1 / 16.5-16.7;
 * AVX2 none 16.3-16.5 / 32.4-32.7, 2 rows 14.3-14.8 / 32.6-34.2, 4 rows
 * 14.5-14.9 / 33.2-33.9, 24 rows 15.6-17.1 / 35.4-35.6: both take the 4 KB
 * reach of the VNNI nibbles (4 rows of 1024 columns).
 * Rows longer than 4 KB (the 4B and 9B shapes' down projections: 9216 and
 * 12288 columns): the reach stays the bytes it was measured as, AVX2's 24
 * q4 rows of 1024 columns (576 bytes) for longer rows too (24 rows of 9216
 * columns, 110 KB, land in an L1 of 48 KB and are gone by their turn; the
 * other widths below 8 bits take the same bytes, not measured apart), and
 * a VNNI q4 pair's rows at least 2 on (4096 / row_bytes + 1 was 1 there:
 * the pair's partner, so every second row went unfetched). On the Zen 5
 * VM, bench-linear's matrices of the 4B-shape q4 fixture, both ways in turn
 * in one process (2 threads, medians of the paired ratios): VNNI, the 9216-
 * column matrices T = 1 / 3 / 4 0.90-0.96 / 0.78-0.80 / 0.87-0.88x the time
 * (one run of five 1.05x at T = 4), every matrix 1.01 / 0.95 / 0.99x; AVX2
 * 0.72 / 0.77 / 0.76x and 0.89 / 0.92 / 0.93x; the 0.8B shape's (rows up
 * to 3584 columns) AVX2 0.97x. 8-bit single rows keep 1 row: 2 ran 1.05x
 * slower at T = 1 on the 4B q8 fixture's 9216-column matrices. */
#define QX_AVX2_Q4_ROWS 24                         /* as measured: rows of 1024 columns, 576 bytes */
#define QX_AVX2_Q4_REACH (QX_AVX2_Q4_ROWS * 576)
static inline int64_t qx_prefetch_rows_avx2(int bits, int packed, size_t row_bytes, int T) {
    const int wide = T > KN_QXBLOCK;
    if (row_bytes == 0) return 0;   /* 0 columns: nothing to fetch */
    if (bits == 8 && packed && !wide) return (int64_t)(4096 / row_bytes) + 1;
    if (bits == 8 || wide) return 0;
    const int64_t rows = QX_AVX2_Q4_REACH / (int64_t)row_bytes;   /* never more rows than measured */
    return rows < 1 ? 1 : rows > QX_AVX2_Q4_ROWS ? QX_AVX2_Q4_ROWS : rows;
}

/* AVX-VNNI runs the AVX2 copy's loops: AVX2's reach (not measured apart). */
static inline int64_t qx_prefetch_rows_avxvnni(int bits, int packed, size_t row_bytes, int T) {
    return qx_prefetch_rows_avx2(bits, packed, row_bytes, T);
}

/* A step's or a verify's 4-bit rows fetch in two reaches; with AVX-512
 * VNNI, packed pairs (dot_lanes_q4_pair): each line KN_FAR_BYTES past
 * the L1 cursor into L2, then into L1 2 KB ahead of the loads (T = 1-3) or
 * 4 KB (T = 4); the rest take one reach of 4 KB into L1. On the Zen 5 VM (2 threads, the ways in turn in
 * one process, paired medians; every step matrix and the LM head of the
 * 0.8B q4 fixture, bench-linear), against one 4 KB reach: T = 1 2 KB + 32
 * KB 0.85-0.87x the time of an 8 KB reach alone, which ran 0.89-0.94x the
 * 4 KB (16 KB alone 0.96-1.02x, 4 KB + 32 KB 0.89x, 2 KB + 16 / 24 / 64 KB
 * 0.98 / 0.85 / 0.89x); T = 2 2 KB + 32 KB 0.90x; T = 3 0.84-0.96x (4 KB +
 * 32 KB 0.89-0.99x); T = 4 4 KB + 32 KB 0.88-0.96x (2 KB + 32 KB
 * 0.91-1.03x). Whole q4 steps after a 512-token prompt (150 pairs): 2 KB +
 * 32 KB against 8 KB alone 0.931-0.940x, three runs (8 KB against itself
 * 1.003x); 8 KB alone against 4 KB 0.950-0.978x, six runs; in a slow
 * phase 2 KB + 32 KB against 4 KB 0.83x. MTP rounds (K = 3, greedy, the
 * two ways by round in ABBA order, 400-600 rounds a run): rounds 0.93-0.96x
 * the time in five runs, 0.99-1.04x in three of a slow phase (its verify
 * 1.02-1.07x there, 0.93-0.96x in the others). The L2 hint
 * (T1) and T2 measured alike. In fast phases these products ran at
 * 0.53-0.79x a plain read of their bytes: a step waits on its loads, and
 * the hardware prefetcher alone does not reach far enough. q8's packed
 * rows keep a 4 KB near reach (8 KB ran level at T = 1, 1.04-1.05x at T =
 * 4) and take the far one (below).
 * AVX2's 4-bit rows (and AVX-VNNI's, the same loops, not measured apart)
 * take the far reach as well, a row at a time beside their 24-row one
 * (qx_rows_loop): with `NEXTN_BENCH_KERNELS=avx2`, T = 1 0.90-0.97x (five
 * runs), T = 2 0.92x, T = 4 0.93-0.96x.
 * The bit-plane widths' packed rows (single rows, with AVX-512 VNNI) take
 * the far reach beside their 4 KB one, a row at a time: whole steps of the
 * 6-bit fixture after a 512-token prompt (120 pairs a run) T = 1
 * 0.91-1.05x, median of six runs 1.00x; T = 4 0.95x (two runs); 5-bit T = 1
 * 1.00x, T = 4 0.91x. Their near reach at 2 KB for T < 4: 0.98-0.99x, not
 * kept.
 * Packed 8-bit rows take it too, a row at a time beside their line-a-step
 * one (fifty-fourth session; the fifty-second measured 16-64 KB level in a
 * trial whose code is gone: this loop's q8 branch skips the general rows'
 * far reach, so qx_prefetch_far alone reaches no q8 row, which may be what
 * it measured). Every step matrix and the head of the q8 fixture, a probe
 * of the read bandwidth before each pair (both ways in turn in one
 * process, paired medians): T = 1 0.72-0.73x the time where the probe
 * read above 45 GB/s, 0.88-0.91x below (16 KB / 64 KB / 128 KB: 0.72 /
 * 0.73 / 0.77x in fast phases; 16 KB against 32 KB level); T = 4 0.71x,
 * T = 2 0.77x fast, 0.94x slow; whole
 * steps after a 512-token prompt T = 1 0.75x and 0.89x (two runs, 120
 * pairs), T = 4 0.84x; the same with a probe before each pair: T = 1
 * 0.87x (0.75x fast, 0.88x slow), T = 4 0.71x. AVX2's packed q8 rows (a
 * line per two steps) take it too: whole steps T = 1 0.95 / 0.91 / 0.91x
 * (0.91-0.93x fast, 0.97-1.03x slow), T = 4 1.006x, level (there AVX2's q8
 * products are bound by their arithmetic); bench-linear's products alone
 * had run 1.06x slower with it in a slow phase. So do AVX2's bit-plane
 * rows (the same probed whole steps): 6-bit T = 1 1.005x (slow) and 0.94x
 * (fast), T = 4 0.85x; 5-bit T = 1 0.89x; 3-bit 0.98x. Rows in groups of
 * 32 (not lanes, codes and scales apart) ran slower with it: q4 g32 with
 * VNNI T = 1 1.08x, T = 4 1.04x; they keep one reach.
 * Since the fifty-fifth session packed 8-bit rows fetch their far reach a
 * line a step beside the near one (kn_cursor2), as the 4-bit pairs do,
 * where their line-a-step cursor runs; with AVX-512 VNNI a step (T = 1)
 * takes the loop's row prefetches instead (qx_rows_loop says what each
 * measured). */

/* The far reach of a step's or a verify's rows (above): bytes past the
 * L1 reach fetched into L2, 0 for none. */
static inline size_t qx_prefetch_far_avx2(int bits, int packed, int T) {
    return (bits == 4 || packed) && T <= KN_QXBLOCK ? KN_FAR_BYTES : 0;
}

static inline size_t qx_prefetch_far_avxvnni(int bits, int packed, int T) {
    return qx_prefetch_far_avx2(bits, packed, T);
}

static inline size_t qx_prefetch_far_avx512vnni(int bits, int packed, int T) {
    return packed && T <= KN_QXBLOCK ? KN_FAR_BYTES : 0;
}

static inline int64_t qx_prefetch_rows_avx512vnni(int bits, int packed, size_t row_bytes, int T) {
    const int wide = T > KN_QXBLOCK;
    if ((bits == 8 && !wide && !packed) || row_bytes == 0) return 0;   /* 0 columns: nothing to fetch */
    const size_t reach = bits == 4 && packed && T < 4 ? 2048 : 4096;
    const int64_t rows = (int64_t)(reach / row_bytes) + (wide ? 2 : 1);
    return bits == 4 && packed && rows < 2 ? 2 : rows;   /* a pair's rows: past its partner */
}

/* Prefetches one row's codes (cb bytes), scales and biases (sb bytes each):
 * into L1 for a step or a verify, into L2 only for a wide pass (T >
 * KN_QXBLOCK), whose activation rows fill L1 (there, 2-thread q4 passes at T
 * = 8 and 32: 0.92x and 0.95x the time of no prefetch; into L1: slower),
 * except on CPUs whose kn_tuning says wide_l1 (matmul.h: Zen 5). A
 * wide pass runs two rows at once, and this VM's hardware prefetcher does
 * not follow two streams: in a trial that paired rows from T = 3, q8 (not
 * prefetched then) ran 1.8-2x slower at T = 3 and 4. */

KN_AVX2_INLINE void qx_prefetch_row(affine_row a, size_t cb, size_t sb, int to_l2) {
    kn_prefetch_lines_avx2(a.codes, cb, to_l2);
    kn_prefetch_lines_avx2(a.sc, sb, to_l2);
    kn_prefetch_lines_avx2(a.bi, sb, to_l2);
}

/* The 32 codes of 5 or 6 bits at p (4 bits bytes) as unsigned bytes in
 * element order. It reads 16 bytes at p and at p + 2 bits, past the
 * block's 4 bits bytes, so a caller passes any block but a row's last.
 * Each 8 codes (bits bytes) make two dwords of 4 codes: codes 0-3 from the
 * group's first 3 bytes, codes 4-7 from the 3 bytes that hold bit 4 bits
 * on, shifted down by its place in its byte (4 for 5 bits); then field k of
 * a dword, bits
 * [k bits, (k + 1) bits), moves to byte k by a shift of k (8 - bits).
 * 12-13 operations where the unpack8 path takes about 25. The products of
 * every step matrix and the head of the 0.8B fixture (2 threads, both ways
 * in turn in one process, T = 1 / 4): 6-bit 0.85-0.89 / 0.86-0.88x the
 * time, 5-bit 0.91 / 0.92x. 3-bit codes ran 1.13-1.14x slower this way
 * than by unpack8's one 32-bit load and shift for 8 codes: they keep it. */
KN_AVX2_INLINE __m256i unpack32_odd_avx2(const unsigned char *p, int bits) {
    const int hi = 4 * bits / 8, sh = 4 * bits % 8;   /* where codes 4-7 start: byte, bit */
    const __m256i raw = _mm256_loadu2_m128i((const __m128i *)(const void *)(p + 2 * bits), (const __m128i *)(const void *)p);
    const char b0 = 0, b1 = (char)bits, h0 = (char)hi, h1 = (char)(bits + hi);
    const __m256i pick = _mm256_setr_epi8(b0, b0 + 1, b0 + 2, -1, h0, h0 + 1, h0 + 2, -1, b1, b1 + 1, b1 + 2, -1, h1, h1 + 1, h1 + 2,
                                          -1, b0, b0 + 1, b0 + 2, -1, h0, h0 + 1, h0 + 2, -1, b1, b1 + 1, b1 + 2, -1, h1, h1 + 1,
                                          h1 + 2, -1);
    __m256i v = _mm256_shuffle_epi8(raw, pick);
    if (sh) v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, sh, 0, sh, 0, sh, 0, sh));
    const int f = 8 - bits, m = (1 << bits) - 1;
    const __m256i c0 = _mm256_and_si256(v, _mm256_set1_epi32(m));
    const __m256i c1 = _mm256_and_si256(_mm256_slli_epi32(v, f), _mm256_set1_epi32(m << 8));
    const __m256i c2 = _mm256_and_si256(_mm256_slli_epi32(v, 2 * f), _mm256_set1_epi32(m << 16));
    const __m256i c3 = _mm256_and_si256(_mm256_slli_epi32(v, 3 * f), _mm256_set1_epi32(m << 24));
    return _mm256_or_si256(_mm256_or_si256(c0, c1), _mm256_or_si256(c2, c3));
}

/* The 32 codes of the block from element i (a multiple of 32) of a row of n,
 * as unsigned bytes in element order. bits is a constant after inlining. */
KN_AVX2_INLINE __m256i unpack32_u8_avx2(const unsigned char *codes, int bits, int64_t i, int64_t n) {
    const unsigned char *p = codes + (uint64_t)i / 8 * (unsigned)bits;
    if (bits == 8) return _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (bits == 4) {
        const __m128i m = _mm_set1_epi8(0x0f), raw = _mm_loadu_si128((const __m128i *)(const void *)p);
        const __m128i lo = _mm_and_si128(raw, m), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
        return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    }
    if ((bits == 5 || bits == 6) && i + 32 < n) return unpack32_odd_avx2(p, bits);
    const __m256i a = unpack8_avx2(p, bits, 0), b = unpack8_avx2(p + bits, bits, 0);
    const __m256i c = unpack8_avx2(p + 2 * bits, bits, 0), d = unpack8_avx2(p + 3 * bits, bits, i + 32 == n);
    /* dwords [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] -> element order */
    const __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 32 int32 values (each in [-127, 127]) a..d, elements 0-7 .. 24-31, as 32
 * int8 in element order. */
KN_AVX2_INLINE __m256i pack32_i8_avx2(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* v[k] lane j <- v[j] lane k: an 8 x 8 transpose of int32 words (the
 * storage order's blocks of 8 groups, quant.h). */
KN_AVX2_INLINE void transpose8_epi32_avx2(__m256i v[8]) {
    __m256i a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
    }
}

/* 32 bytes in element order -> [their 16 even elements | their 16 odd ones]:
 * the lanes order's split of a 64-element chunk (quant.h), half of it. */
KN_AVX2_INLINE __m256i evens_odds_avx2(__m256i b) {
    /* per 128-bit lane the even bytes first, then the odd ones: qwords [even
     * 0-14, odd 1-15, even 16-30, odd 17-31], then the evens together */
    const __m256i deint = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                           0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, deint), _MM_SHUFFLE(3, 1, 2, 0));
}

/* The 8-bit codes of chunk sb (elements 64 sb .. 64 sb + 63) of a block of
 * cnt <= 8 groups from cj (group g's codes at cj + g * group), as packed rows
 * hold them (quant.h), 32 bytes each: the block's elements 64 sb + 8i + {0,
 * 2, 4, 6} in e[(i / 2) * 4 + i % 2], its elements 64 sb + 8i + {1, 3, 5, 7}
 * in e[(i / 2) * 4 + 2 + i % 2], group j in int32 lane j (missing groups 0).
 * For a product on codes as stored. */
KN_AVX2_INLINE void lanes8_chunk_avx2(const unsigned char *cj, int64_t group, int64_t cnt, int sb, __m256i e[16]) {
    __m256i ev[8], od[8];
    for (int j = 0; j < 8; j++) {
        if (j >= cnt) {
            ev[j] = od[j] = _mm256_setzero_si256();
            continue;
        }
        const unsigned char *p = cj + j * group + 64 * sb;
        const __m256i a = evens_odds_avx2(_mm256_loadu_si256((const __m256i *)(const void *)p));
        const __m256i b = evens_odds_avx2(_mm256_loadu_si256((const __m256i *)(const void *)(p + 32)));
        ev[j] = _mm256_permute2x128_si256(a, b, 0x20);
        od[j] = _mm256_permute2x128_si256(a, b, 0x31);
    }
    transpose8_epi32_avx2(ev);
    transpose8_epi32_avx2(od);
    for (int i = 0; i < 8; i++) e[i / 2 * 4 + i % 2] = ev[i], e[i / 2 * 4 + 2 + i % 2] = od[i];
}

/* quantize_group_ref with vectors; n is a multiple of 32 (in lanes order 32
 * or a multiple of 64). q gets the group's 32-byte vectors as the storage
 * order transposes them: 32 elements in order; in lanes order, per 64
 * elements the 32 even ones, then the 32 odd ones (word k of each holds the
 * 4 elements of word k of 4-bit codes' low or high nibbles), and for n = 32
 * the 16 evens, then the 16 odds. */
static KN_AVX2 void quantize_group_avx2(const float *x, int n, int in_lanes, int8_t *q, const kn_qx *qx, int64_t gk) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = _mm256_set1_ps(FLT_MAX);
    __m256 vmax = _mm256_setzero_ps(), vbad = _mm256_setzero_ps();
    for (int c = 0; c < n; c += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + c), absmask);
        vbad = _mm256_or_ps(vbad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));   /* !(a <= FLT_MAX) */
        vmax = _mm256_max_ps(vmax, a);
    }
    if (_mm256_movemask_ps(vbad)) {
        memset(q, 0, (size_t)n);
        qx->d[gk] = qx->s[gk] = NAN;
        qx->si[gk] = qx->si16[gk] = 0;
        return;
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));   /* max is exact in any order */
    float scale, inv;
    qx_scale(amax, &scale, &inv);
    const __m256 id = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i sums = _mm256_setzero_si256(), prev = _mm256_setzero_si256();
    for (int c = 0; c < n; c += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            /* cvtps rounds in the current mode, like nearbyintf */
            const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * k), id));
            v[k] = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        }
        __m256i b = pack32_i8_avx2(v[0], v[1], v[2], v[3]);
        const __m256i part = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b), ones16);   /* lane i: elements 4i .. 4i + 3 */
        if (c == 0) {   /* H: lanes 0-3 of the first 32 */
            __m128i h = _mm256_castsi256_si128(part);
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
            qx->si16[gk] = _mm_cvtsi128_si32(h);
        }
        sums = _mm256_add_epi32(sums, part);
        if (in_lanes) {
            b = evens_odds_avx2(b);
            if (n == 32) {   /* mxfp4's and nvfp4's groups of 32: the 16 evens, then the 16 odds */
                _mm256_storeu_si256((__m256i *)(void *)q, b);
                continue;
            }
            if (c % 64 == 0) {
                prev = b;
                continue;
            }
            /* the 64 elements from c - 32: all evens, then all odds */
            _mm256_storeu_si256((__m256i *)(void *)(q + c - 32), _mm256_permute2x128_si256(prev, b, 0x20));
            _mm256_storeu_si256((__m256i *)(void *)(q + c), _mm256_permute2x128_si256(prev, b, 0x31));
        } else {
            _mm256_storeu_si256((__m256i *)(void *)(q + c), b);
        }
    }
    const int32_t sum = kn_hsum_epi32_avx2(sums);
    qx->d[gk] = scale;
    qx->s[gk] = scale * (float)sum;
    qx->si[gk] = sum;
}

/* kn_quantize_x_ref's bytes: groups in element order where they are stored
 * so; for lanes 8 groups at a time, each group's evens and odds vectors
 * (quantize_group_avx2) transposed as int32 words into the block's lanes:
 * vector i's word k of group j goes to (i / 2) * 512 + (k / 2) * 128 + (i %
 * 2) * 64 + (k % 2) * 32 + 4j from the start of the block (quant.h's
 * formula); in groups of 32 (one vector, its 16 evens then its 16 odds)
 * word k goes to (k % 4 / 2) * 128 + (k / 4) * 64 + (k % 2) * 32 + 4j. */
KN_AVX2 void kn_quantize_x_avx2(kn_qx *qx, const float *x, int64_t ldx) {
    assert(qx != NULL && (qx->T <= 1 || ldx >= qx->cols));
    const int64_t n = qx->cols, group = qx->group, G = n / group;
    int8_t tmp[QX_BLOCK_GROUPS][128] __attribute__((aligned(32)));
    for (int t = 0; t < qx->T; t++) {
        int8_t *row = qx->q + (int64_t)t * qx->ldq;
        const float *xt = x + (int64_t)t * ldx;
        qx_zero_group_pad(qx, t, G);
        if (!qx->lanes) {
            for (int64_t g = 0, k = (int64_t)t * qx->ldg; g < G; g++)
                quantize_group_avx2(xt + g * group, (int)group, 0, row + g * group, qx, k + g);
            continue;
        }
        for (int64_t g8 = 0; g8 < G; g8 += QX_BLOCK_GROUPS) {
            const int64_t cnt = G - g8 < QX_BLOCK_GROUPS ? G - g8 : QX_BLOCK_GROUPS, k = (int64_t)t * qx->ldg + g8;
            for (int j = 0; j < QX_BLOCK_GROUPS; j++) {
                if (j < cnt)
                    quantize_group_avx2(xt + (g8 + j) * group, (int)group, 1, tmp[j], qx, k + j);
                else
                    memset(tmp[j], 0, (size_t)group);   /* a partial block's missing groups */
            }
            for (int i = 0; i < group / 32; i++) {
                __m256i v[8];
                for (int j = 0; j < 8; j++) v[j] = _mm256_load_si256((const __m256i *)(const void *)(tmp[j] + 32 * i));
                transpose8_epi32_avx2(v);
                int8_t *dst = row + g8 * group + (i / 2) * 512 + (i % 2) * 64;
                for (int w = 0; w < 8; w++) {
                    /* groups of 32: words 0-3 hold the evens of elements 0-7, 8-15,
                     * 16-23, 24-31, words 4-7 the odds */
                    const int64_t off = group == 32 ? w % 4 / 2 * 128 + w / 4 * 64 + w % 2 * 32 : w / 2 * 128 + w % 2 * 32;
                    _mm256_storeu_si256((__m256i *)(void *)(dst + off), v[w]);
                }
            }
        }
    }
}

/* Elements g .. g+cnt-1 (1 <= cnt <= 8) of a scale or bias array as f32 lanes,
 * 0 beyond cnt. dt is a constant after inlining. */
KN_AVX2_INLINE __m256 load8_sd_avx2(const void *p, nx_dtype dt, int64_t g, int64_t cnt) {
    const size_t es = dt == NX_DT_F32 ? 4 : 2;
    const unsigned char *src = (const unsigned char *)p + (size_t)g * es;
    if (cnt < 8) {   /* a row's last groups: never read past the array */
        /* the copy declared here, not zeroed for every block: that cost the
         * AVX2 q4 product at T = 1 1.11x the time in L2 (bench/RESULTS.md) */
        unsigned char tmp[32] = {0};
        memcpy(tmp, src, (size_t)cnt * es);
        return kn_load8_avx2(tmp, dt, 0);
    }
    return kn_load8_avx2(src, dt, 0);
}

/* kn_lanes_planes_chunk_ref's bytes with vectors, for a constant width:
 * each group's 64 codes unpacked to bytes (unpack32_u8_avx2), moved to
 * their activations' places (lanes8_chunk_avx2: the 16 vectors U_n of
 * quant.h), and each plane built from those by planes_step's operations
 * run backwards. One 8192 x 1024 matrix in memory: 0.11 ns a code, the
 * scalar twin 1.4 (with which the 0.8B-shape 6-bit fixture loaded in 0.76
 * s against 0.15 s at 4 bits, the page cache warm). */
KN_AVX2_INLINE void planes_chunk_bits_avx2(const unsigned char *codes, int bits, int64_t group, int64_t g8,
                                           int64_t cnt, int sb, unsigned char *dst) {
    unsigned char tmp[QX_BLOCK_GROUPS * 64] __attribute__((aligned(32)));   /* group j's 64 codes at 64 j */
    const int64_t end = (g8 + cnt) * group;   /* no code read past the last group's */
    for (int64_t j = 0; j < cnt; j++) {
        const int64_t i = (g8 + j) * group + 64 * sb;
        _mm256_store_si256((__m256i *)(void *)(tmp + 64 * j), unpack32_u8_avx2(codes, bits, i, end));
        _mm256_store_si256((__m256i *)(void *)(tmp + 64 * j + 32), unpack32_u8_avx2(codes, bits, i + 32, end));
    }
    __m256i u[16];
    lanes8_chunk_avx2(tmp, 64, cnt, 0, u);
    unsigned char *two = dst + kn_plane2_offset(bits), *one = dst + kn_plane1_offset(bits);
    const int at2 = kn_plane2_at(bits), at1 = kn_plane1_at(bits);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    if (bits >= 4)   /* word m: U_(m/2)*4+m%2 in the low nibbles, U_(m/2)*4+2+m%2 in the high ones */
        for (int m = 0; m < 8; m++) {
            const __m256i lo = _mm256_and_si256(u[m / 2 * 4 + m % 2], m4);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(u[m / 2 * 4 + 2 + m % 2], m4), 4);
            _mm256_storeu_si256((__m256i *)(void *)(dst + 32 * m), _mm256_or_si256(lo, hi));
        }
    for (int p = 0; p < 4; p++) {
        __m256i f2 = _mm256_setzero_si256(), f1 = _mm256_setzero_si256();
        for (int f = 0; f < 4; f++) {   /* U_4p+f's fields at bits 2f */
            if (bits & 2) f2 = _mm256_or_si256(f2, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(u[4 * p + f], at2), m2), 2 * f));
            if (bits & 1) f1 = _mm256_or_si256(f1, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(u[4 * p + f], at1), m1), 2 * f));
        }
        if (bits & 2) _mm256_storeu_si256((__m256i *)(void *)(two + 32 * p), f2);
        if (bits & 1) {   /* the high 16 bytes' bits one place up, into the low 16 */
            const __m128i o = _mm_or_si128(_mm256_castsi256_si128(f1), _mm_slli_epi16(_mm256_extracti128_si256(f1, 1), 1));
            _mm_storeu_si128((__m128i *)(void *)(one + 16 * p), o);
        }
    }
}

KN_AVX2 void kn_lanes_planes_chunk_avx2(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt,
                                        int sb, unsigned char *dst) {
    PLANES_CHUNK_BY_WIDTH(planes_chunk_bits_avx2);
}

#define QX_ISA avx2
#define QX_INLINE KN_AVX2_INLINE
#define QX_TARGET KN_AVX2
#define QX_VNNI 0
#define QX_AVXVNNI 0
#define QX_WROWS 1
#include "quant_qx.inc"
#undef QX_ISA
#undef QX_INLINE
#undef QX_TARGET
#undef QX_AVXVNNI
#undef QX_WROWS

/* The AVX2 copy once more, its integer steps on AVX-VNNI (QX_AVXVNNI). */
#define QX_ISA avxvnni
#define QX_INLINE KN_AVXVNNI_INLINE
#define QX_TARGET KN_AVXVNNI
#define QX_AVXVNNI 1
#define QX_WROWS 1
#include "quant_qx.inc"
#undef QX_ISA
#undef QX_INLINE
#undef QX_TARGET
#undef QX_VNNI
#undef QX_AVXVNNI
#undef QX_WROWS

#define QX_ISA avx512vnni
#define QX_INLINE KN_VNNI_INLINE
#define QX_TARGET KN_VNNI
#define QX_VNNI 1
#define QX_AVXVNNI 0
#define QX_WROWS 2
#include "quant_qx.inc"
#undef QX_ISA
#undef QX_INLINE
#undef QX_TARGET
#undef QX_VNNI
#undef QX_AVXVNNI
#undef QX_WROWS

/* kn_affine_quantize_row_ref with vectors, the same codes, scales and biases:
 * a group's extremes by min/max, which are exact in any order (only the sign
 * of a zero minimum depends on it, so such a group is scanned again in index
 * order); each code through the reference's own double operations (w - bias,
 * / scale, + 0.5, floor, clamp) four lanes at a time; 8- and 4-bit codes
 * stored as bytes, the other widths through put_codes. */
KN_AVX2 void kn_affine_quantize_row_avx2(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                                         void *scales, void *biases) {
    assert(kn_bits_ok(bits) && kn_group_ok(group) && kn_sd_ok(sdtype) && cols >= 0 && cols % group == 0);
    assert(cols == 0 || (w != NULL && codes != NULL && scales != NULL && biases != NULL));
    if (cols == 0) return;
    const unsigned nbins = (1u << bits) - 1;
    unsigned char *bytes = (unsigned char *)codes;
    memset(codes, 0, (size_t)kn_affine_row_words(cols, bits) * sizeof *codes);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *wg = w + g * group;
        __m256 vlo = _mm256_loadu_ps(wg), vhi = vlo;
        for (int c = 8; c < group; c += 8) {
            const __m256 v = _mm256_loadu_ps(wg + c);
            vlo = _mm256_min_ps(vlo, v), vhi = _mm256_max_ps(vhi, v);
        }
        __m128 l4 = _mm_min_ps(_mm256_castps256_ps128(vlo), _mm256_extractf128_ps(vlo, 1));
        __m128 h4 = _mm_max_ps(_mm256_castps256_ps128(vhi), _mm256_extractf128_ps(vhi, 1));
        l4 = _mm_min_ps(l4, _mm_movehl_ps(l4, l4)), h4 = _mm_max_ps(h4, _mm_movehl_ps(h4, h4));
        float lo = _mm_cvtss_f32(_mm_min_ss(l4, _mm_movehdup_ps(l4)));
        float hi = _mm_cvtss_f32(_mm_max_ss(h4, _mm_movehdup_ps(h4)));
        if (lo == 0.0f) group_range(wg, group, &lo, &hi);
        float bias, scale;
        group_params(lo, hi, nbins, sdtype, scales, biases, g, &bias, &scale);
        const __m256d vb = _mm256_set1_pd(bias), vs = _mm256_set1_pd(scale), half = _mm256_set1_pd(0.5);
        const __m256d zero = _mm256_setzero_pd(), top = _mm256_set1_pd(nbins);
        uint8_t q[128];
        for (int c = 0; c < group; c += 8) {
            const __m256 v = _mm256_loadu_ps(wg + c);
            __m128i half_q[2];   /* codes of elements c..c+3, c+4..c+7 as int32 */
            for (int h = 0; h < 2; h++) {
                const __m256d d = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v));
                const __m256d r = _mm256_floor_pd(_mm256_add_pd(_mm256_div_pd(_mm256_sub_pd(d, vb), vs), half));
                half_q[h] = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(r, zero), top));
            }
            const __m128i q16 = _mm_packus_epi32(half_q[0], half_q[1]);
            _mm_storel_epi64((__m128i *)(void *)(q + c), _mm_packus_epi16(q16, q16));
        }
        /* The stream's bit k is bit k % 32 of word k / 32, and the host is
         * little-endian, so stream byte b is memory byte b: an 8-bit code is
         * one byte, a 4-bit pair one byte with the even element low. */
        if (bits == 8) {
            memcpy(bytes + g * group, q, (size_t)group);
        } else if (bits == 4) {
            for (int c = 0; c < group; c += 2) bytes[(g * group + c) / 2] = (unsigned char)(q[c] | q[c + 1] << 4);
        } else {
            put_codes(codes, g * group, q, group, bits);
        }
    }
}

#endif /* KN_HAVE_X86 */
