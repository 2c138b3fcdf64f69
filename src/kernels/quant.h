/* quant.h — MLX "affine" quantized weight matrices (spec §2.6.1): the packed
 * format, the quantizer the `nextn quantize` writer uses, and the dequantizing
 * matmul twins behind kn_matmul_rows.
 *
 * Format (a kn_mat with bits > 0; see matmul.h for the fields):
 *   - codes: row r is a little-endian bit stream of cols * bits bits stored in
 *     uint32 words, starting at word r * kn_affine_row_words(cols, bits).
 *     Stream bit k is bit k % 32 of word k / 32, and element c is the field
 *     [c*bits, (c+1)*bits). For bits 2, 4, 8 a word holds 32/bits whole
 *     elements, the first in the low bits; for 3, 5, 6 elements cross byte and
 *     word boundaries (3-bit element 2 = (byte0 >> 6) | ((byte1 & 1) << 2)).
 *   - scales, biases: [rows, cols / group] in sdtype, one pair per group of
 *     `group` consecutive elements of a row.
 *   - value: W[r][c] = fmaf(scale[r][c/group], q, bias[r][c/group]): one f32
 *     fused multiply-add, so both matmul twins and kn_mat_row_f32 see the very
 *     same f32 weights.
 * cols is a multiple of group and group a multiple of 32, so every row starts
 * on a word boundary and every 32 elements fill exactly `bits` words.
 *
 * Kernels never allocate. The code words need no alignment (they are read
 * with unaligned loads), nor do scales and biases. The host is little-endian
 * (the words are read as the checkpoint stores them). */
#ifndef NX_KERNELS_QUANT_H
#define NX_KERNELS_QUANT_H

#include <stdint.h>
#include "kernels/matmul.h"

/* The smallest scale the quantizer writes (a group whose elements are all
 * equal still gets a positive scale; see kn_affine_quantize_row). */
#define KN_AFFINE_MIN_SCALE 1e-7

/* uint32 words of one row of codes: cols * bits / 32 (cols a multiple of 32). */
static inline int64_t kn_affine_row_words(int64_t cols, int bits) { return cols / 32 * bits; }

/* Bytes of one row's scales (and as many of its biases). */
static inline int64_t kn_affine_sd_row_bytes(const kn_mat *w) {
    return w->cols / w->group * (w->sdtype == NX_DT_F32 ? 4 : 2);
}

/* Quantizes one row of cols f32 weights: writes kn_affine_row_words(cols,
 * bits) words to codes and cols / group values of type sdtype (NX_DT_F32,
 * NX_DT_BF16 or NX_DT_F16) to each of scales and biases. bits is 2, 3, 4, 5, 6
 * or 8; group is 32, 64 or 128 and divides cols; w is finite and each group's
 * range fits sdtype.
 *
 * Per group, with min and max its extremes and nbins = 2^bits - 1:
 *   bias  = min rounded to sdtype toward -inf            (so bias <= min)
 *   scale = max((max - bias) / nbins, KN_AFFINE_MIN_SCALE), rounded to sdtype
 *           toward +inf                                  (so the grid reaches max)
 *   q     = clamp(round((w - bias) / scale), 0, nbins), from the rounded values.
 * MLX's rule is bias = min, scale = (max - min) / nbins; rounding the two
 * outward instead of to nearest keeps every weight inside the grid, so no code
 * clamps and each dequantized weight is within scale / 2 of w (plus the f32
 * rounding of the fma). A group of equal values gets the minimum scale; it
 * dequantizes exactly when the value is exact in sdtype (then bias is the
 * value and q = 0), else within scale / 2 of it. */
void kn_affine_quantize_row(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                            void *scales, void *biases);
/* Its twins (kn_affine_quantize_row dispatches like every kernel): the
 * scalar one is the definition, the AVX2 one writes the same bytes. */
void kn_affine_quantize_row_ref(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                                void *scales, void *biases);
void kn_affine_quantize_row_avx2(const float *w, int64_t cols, int bits, int group, nx_dtype sdtype, uint32_t *codes,
                                 void *scales, void *biases);

/* ---- Used by matmul.c (callers go through kn_matmul_rows / kn_mat_row_f32) ---- */

/* 1 if w is a well-formed affine view: bits and group in the lists above,
 * dtype NX_DT_U32, a valid sdtype, cols % group == 0, and data, scales and
 * biases set unless the matrix is empty. Checked by assert only. */
int kn_affine_valid(const kn_mat *w);

/* Dequantizes row `row` of affine w into out[0..cols): the active twin (each
 * weight one f32 fma, so both write the same bits). The AVX2 one is what
 * makes a lower-bit draft-head copy (spec/mtp.c) cheap at load. */
void kn_affine_row_f32(const kn_mat *w, int64_t row, float *out);
void kn_affine_row_f32_ref(const kn_mat *w, int64_t row, float *out);
#if defined(__x86_64__) || defined(__i386__)
void kn_affine_row_f32_avx2(const kn_mat *w, int64_t row, float *out);
#endif

/* The affine matmul twins, with kn_matmul_rows's contract; the caller has
 * checked the arguments. The scalar one is the definition: each dequantized
 * weight times x, summed in double in index order (as the dense reference).
 * The AVX2 one, for every bit width (no scalar fallback), runs the dense SIMD
 * dot product layout (matmul.c) on the dequantized weights, so it equals the
 * dense f32 SIMD product with the dequantized matrix bit for bit. It needs
 * AVX2+FMA+F16C (kn_init checks). */
void kn_affine_matmul_rows_ref(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void kn_affine_matmul_rows_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                int64_t r0, int64_t r1);
#endif

/* ---- Int8 activations and integer dot products ---------------------------
 * The fast path for affine weights: the activations are quantized to int8 in
 * groups of the weights' group size (32 for mxfp4 and nvfp4: kn_qx_group),
 * so that over one group the products are integers and one f32 fused
 * multiply-add per 8 lanes applies both scales.
 *
 * Activation row t, group g (elements [g*group, (g+1)*group)):
 *   amax    = max |x| over the group
 *   d[t][g] = amax / 127   (f32 division)
 *   xq[c]   = round-half-even(x[c] * (127 / amax)), clamped to [-127, 127];
 *             all 0, and d = 0, when amax < KN_QX_MIN_AMAX (2^-100: 127 / amax
 *             could overflow f32; such a group adds nothing to the product)
 *   S[t][g] = the sum of xq over the group (an exact integer)
 *   H[t][g] = the sum of xq over the group's first 16 elements (for nvfp4's
 *             groups of 16, fpq.h)
 *   s[t][g] = d * S[t][g]   (one f32 rounding)
 * A group holding a NaN or an infinity gets xq = 0 and d = s = NaN, so the
 * product is NaN, as an f32 product would be NaN or infinite. (At the other
 * extreme, s and d * scale overflow to infinity for activations beyond about
 * 1e36, where the f32 product might still be finite: far outside what a
 * normed activation is.)
 *
 * The product of weight row r (scale sc_g, bias b_g, codes q) with activation
 * row t is, with 8 f32 lanes acc[j] and 8 more bl[j], all starting at 0:
 *   for each group g in order:
 *     I_j     = sum of u[c] * xq[c] over the group's c with lane(c) == j,
 *               lane(c) = (c % 32) / 4 (an exact integer: lane j of a
 *               maddubs + madd over the group's 32-element blocks)
 *     acc[j]  = fma((float)I_j, d[t][g] * sc_g, acc[j])   for j = 0..7
 *     bl[g % 8] = fma(c_g, s[t][g], bl[g % 8])
 *   y = comb(acc) + comb(bl), comb(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
 * except for weights in groups of 64 or 128 ("lanes", every bit width),
 * where each group is one of 16 f32 lanes acc[0..15], starting at 0, which
 * also take the bias terms:
 *   for each group g in order:
 *     I_g     = sum of u[c] * xq[c] over the whole group (exact, and exact
 *               as f32: |I_g| <= 128 * 128 * 127 < 2^24)
 *     acc[g % 16] = fma(c_g, s[t][g], acc[g % 16])
 *     acc[g % 16] = fma((float)I_g, d[t][g] * sc_g, acc[g % 16])
 *   y = comb(a), a[j] = acc[j] + acc[j + 8]
 * (the SIMD product sums 8 groups in the 8 int32 lanes of one register, so
 * one convert and one fma per 8 or 16 groups apply their scales, and a row
 * takes one horizontal sum).
 * Here u = q and c_g = b_g, except for 8-bit weights, which are centered: u
 * = q - 128 and c_g = fma(128, sc_g, b_g) (sc_g q + b_g = sc_g u + c_g up to
 * c_g's f32 rounding, at most 2^-24 |c_g| per group and none for bf16 scales
 * and biases within 16 binades of each other; the SIMD product needs u in
 * [-128, 127], and the centered I_j are small where sum q xq would be mostly
 * 128 * sum xq, cancelled by the bias term). This is sum_c (sc_g q + b_g) *
 * (d xq[c]): the dequantized weights times the dequantized activations,
 * rounded in a fixed order. Both twins compute exactly this, so they agree
 * bit for bit, and Y[t][r] depends only on W row r and X row t (matmul.h's
 * contract). Error against the f32 product: the activation rounding, |x - d
 * xq| <= d / 2 = amax / 254 per element, and for 8-bit weights c_g's rounding
 * above. (c_g overflows for scales beyond about 2.6e36, where sc_g * 255
 * would be near f32's limit anyway.)
 *
 * Storage order of xq: a row's groups one after another in element order,
 * except for lanes, which are stored in blocks of 8 groups (8 * group
 * bytes; a row's last block padded with zero groups to 8, so a row takes ldq
 * = ceil(G / 8) * 8 * group bytes) where 32 bytes hold 4 activations of each
 * of the block's 8 groups, group j in int32 lane j, to meet the 8 groups'
 * codes as int32 words (per 64 bytes of packed 4-bit codes, their low
 * nibbles, then their high ones; 8-bit codes packed to match, below):
 * element c of group j of a block at
 *   (c / 64) * 512 + (c % 64 / 16) * 128 + (c % 2) * 64 + (c % 16 / 8) * 32
 *   + 4j + (c % 8) / 2
 * (kn_qx_pos). The same formula serves the groups of 32 of mxfp4 and nvfp4
 * (fpq.h), the lanes formats in groups of 32: blocks of 256 bytes, per 16
 * elements of the 8 groups their evens, then their odds. */

#define KN_QX_MIN_AMAX 0x1p-100f

/* Quantized activations: T rows of cols (a multiple of group) elements,
 * quantized for weights of group size `group`. A view over a caller's buffer
 * (kn_qx_bind); nothing is owned. */
typedef struct {
    int T;
    int64_t cols;
    int group;          /* 32, 64 or 128: the weights' group size            */
    int lanes;          /* 1: the lanes storage order (above)                */
    int64_t ldq;        /* bytes per row of q: cols (lanes: padded, above)    */
    int64_t ldg;        /* entries per row of d, s, si, si16: cols / group
                           rounded up to KN_QX_GROUP_PAD, the rest 0        */
    int8_t *q;          /* [T][ldq] in the storage order above               */
    float *d;           /* [T][ldg] activation scales                        */
    float *s;           /* [T][ldg] d * S, S the sum of the group's xq       */
    int32_t *si;        /* [T][ldg] S itself                                 */
    int32_t *si16;      /* [T][ldg] H: the sum of the first 16 xq            */
} kn_qx;

/* A row's per-group values are padded with zeros to a multiple of this, so
 * that the 8-lane kernels load a last partial block of groups whole (lanes
 * past the row's groups meet zero scales and sums) instead of with a masked
 * load, which GCC 12 also chose for whole blocks ("cnt == 8 ? loadu :
 * maskload" is one masked load to it): the AVX2 q4 product at T = 4 took
 * 1.09x the time in L2 with it, q8 at T = 1 1.33x (bench/RESULTS.md). */
#define KN_QX_GROUP_PAD 16

/* 1 if affine weights of this group size are lanes (above): one group per
 * int32 lane, the activations stored in their own order. Every bit width:
 * 4 and 8 bits since the eighth session; 2, 3, 5 and 6 bits since the
 * fifty-third, when their packed rows took bit planes (below) and their
 * products stopped being bound by unpacking a bit stream (bench/RESULTS.md). */
static inline int kn_affine_lanes(int64_t group) { return group >= 64; }
/* 1 if w's int8 products take lanes: affine lanes, mxfp4, and nvfp4 rows
 * of whole groups of 32 (fpq.h). */
static inline int kn_qx_lanes(const kn_mat *w) {
    if (!w->fp) return kn_affine_lanes(w->group);
    return w->fp == KN_FP_MXFP4 || (w->fp == KN_FP_NVFP4 && w->cols % 32 == 0);
}
/* The group of the activations w's int8 products take (kn_qx.group): the
 * weights' own, 32 for the small floats (nvfp4's groups of 16 pair up). */
static inline int kn_qx_group(const kn_mat *w) { return w->fp ? 32 : w->group; }

/* Where element c of group j of a block of 8 lanes groups is stored,
 * relative to the block (the storage order above). */
static inline int64_t kn_lanes_offset(int64_t c, int64_t j) {
    return c / 64 * 512 + c % 64 / 16 * 128 + c % 2 * 64 + c % 16 / 8 * 32 + 4 * j + c % 8 / 2;
}
/* Where element c of group g of an activation row sits in qx's storage
 * order, from the row's start. */
static inline int64_t kn_qx_pos(const kn_qx *qx, int64_t g, int64_t c) {
    if (!qx->lanes) return g * qx->group + c;
    return g / 8 * 8 * qx->group + kn_lanes_offset(c, g % 8);
}

/* Packed rows of lanes: each row's code bytes in the order the int8
 * products consume them, so that they load each step as it is instead of
 * transposing 8 groups' bytes every time (quant_qx.inc: on the 2-core Zen 4
 * VM, one thread in L2, 1.3x the 4-bit weight rate at T = 1 .. 4), followed
 * by the row's scales and biases, so that a pass reads one stream.
 * Codes, per block of 8 groups (the activations' blocks above): 8 bits,
 * element c of the block's group j at the activation's place above; 4 bits,
 * per 64-element chunk k of a group 8 vectors of 32 bytes, bytes 4j .. 4j +
 * 3 of vector i being bytes 4i .. 4i + 3 of group j's chunk (its elements
 * 64k + 8i .. 64k + 8i + 7, two a byte), i.e. element c in the low (even c)
 * or high nibble of byte (c / 64) * 256 + (c % 64 / 8) * 32 + 4j + (c % 8) /
 * 2, so that 64 bytes' low nibbles, then their high ones, meet the
 * activations' order. Other widths, in bit planes: per 64-element chunk
 * of the block (64 * bits bytes, one chunk after another), with U_n[b] the
 * code whose activation is byte 32n + b of the chunk's 512 (n < 16, b <
 * 32), each code split into fields (6 bits: its low nibble and its top 2
 * bits; 5: low nibble and bit 4; 3: bit 0 and bits 1-2; 2: its 2 bits),
 *   nibbles, 256 bytes: byte (n / 4) * 64 + (n % 2) * 32 + b, the low
 *     nibble for even n / 2, the high one for odd (the 4-bit layout);
 *   2-bit fields, 128 bytes: byte (n / 4) * 32 + b, bits 2 (n % 4) + 0..1;
 *   1-bit fields, 64 bytes: byte (n / 4) * 16 + b % 16, bit 2 (n % 4) + b /
 *     16;
 * in that order, the planes a width has. So the 64 activation bytes
 * [U_4p | U_4p+1] and the next 64 [U_4p+2 | U_4p+3] take 64 bytes of
 * nibbles (as 4 bits do), 32 bytes of 2-bit fields and 16 of 1-bit fields,
 * each broadcast across a 512-bit vector and shifted by a constant per
 * 128-bit lane: a few shifts, masks and ORs per 128 codes, where the codes
 * as stored (a bit stream) take a shuffle and shifts per 32.
 * A row's last block is padded with zero groups to 8, so its codes take
 * kn_lanes_packed_code_bytes = ceil(G / 8) * group * bits bytes; full 4-bit
 * blocks sit at the same offsets as in the codes. Then the row's G scales
 * and its G biases as stored (sdtype), and zeros to a multiple of 64 bytes:
 * kn_lanes_packed_row_bytes. mxfp4 and
 * nvfp4 rows (fpq.h) pack their 4-bit codes the same way in groups of 32
 * (4 vectors a block, element c of group j in byte (c / 8) * 32 + 4j + (c %
 * 8) / 2), then their scale bytes (cols / 32 or cols / 16) and no biases;
 * the zeros after them reach the next multiple of 64 bytes (the codes take
 * a multiple of 64), so a step's 8 to 32 scale bytes can load at once. A model packs its lanes matrices once at load (model/load.c)
 * into memory it owns and sets kn_mat.packed; a product is bit-identical
 * with or without. */
static inline int kn_lanes_bits(const kn_mat *w) { return w->fp ? 4 : w->bits; }
/* Bit planes (above) of a bits-bit code: where a chunk's 2-bit and 1-bit
 * planes start, and at which bit of the code each plane's field sits (6
 * bits: 2-bit at 4; 5: 1-bit at 4; 3: 1-bit at 0, 2-bit at 1; 2: 2-bit at
 * 0). The packers and the products all take them from here. */
static inline int kn_plane2_offset(int bits) { return bits >= 4 ? 256 : 0; }
static inline int kn_plane1_offset(int bits) { return kn_plane2_offset(bits) + (bits & 2 ? 128 : 0); }
static inline int kn_plane2_at(int bits) { return bits >= 4 ? 4 : bits == 3 ? 1 : 0; }
static inline int kn_plane1_at(int bits) { return bits == 5 ? 4 : 0; }
static inline int64_t kn_lanes_scale_row_bytes(const kn_mat *w) {
    return w->fp ? w->cols / w->group : kn_affine_sd_row_bytes(w);
}
static inline int64_t kn_lanes_bias_row_bytes(const kn_mat *w) { return w->fp ? 0 : kn_affine_sd_row_bytes(w); }
static inline int64_t kn_lanes_packed_code_bytes(const kn_mat *w) {
    const int64_t group = kn_qx_group(w);
    return (w->cols / group + 7) / 8 * group * kn_lanes_bits(w);
}
static inline int64_t kn_lanes_packed_row_bytes(const kn_mat *w) {
    return (kn_lanes_packed_code_bytes(w) + kn_lanes_scale_row_bytes(w) + kn_lanes_bias_row_bytes(w) + 63) / 64 * 64;
}
/* The 4-bit codes of groups g8 .. g8 + cnt - 1 (cnt <= 8) of a row as stored
 * (group g's at codes + g * group / 2), as a packed row holds their block:
 * 4 * group bytes at dst, a missing group's bytes 0. */
void kn_lanes_pack4_block(const unsigned char *codes, int64_t group, int64_t g8, int64_t cnt, unsigned char *dst);
/* The chunk's 64 * bits bytes of bit planes (above) from its codes as
 * stored: chunk sb (elements 64 sb .. 64 sb + 63) of groups g8 .. g8 + cnt
 * - 1 (cnt <= 8) of a row of bits-bit codes at codes, bits 2, 3, 4, 5 or 6
 * (kn_lanes_pack's chunks for 2, 3, 5 and 6 bits). */
void kn_lanes_planes_chunk(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                           unsigned char *dst);
/* Its twins (the active set's, as every kernel): the same bytes. */
void kn_lanes_planes_chunk_ref(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                               unsigned char *dst);
#if defined(__x86_64__) || defined(__i386__)
void kn_lanes_planes_chunk_avx2(const unsigned char *codes, int bits, int64_t group, int64_t g8, int64_t cnt, int sb,
                                unsigned char *dst);
#endif
/* Bytes kn_lanes_pack writes for all of w's rows (0 unless lanes). */
size_t kn_lanes_packed_bytes(const kn_mat *w);
/* Writes rows r0 .. r1 - 1 of w's packed codes to dst (kn_lanes_packed_bytes
 * bytes for all rows; row r at r * kn_lanes_packed_row_bytes). w is lanes.
 * A row-range worker: threads may fill disjoint ranges. */
void kn_lanes_pack(const kn_mat *w, void *dst, int64_t r0, int64_t r1);

/* Tiles of a wide int8 product (more than 4 activation rows: a prefill
 * chunk). With AVX-512 VNNI, a pass over lanes rows whose T x cols
 * activation bytes pass KN_QX_TILE_X_BYTES (half a 48 KB L1) takes
 * KN_QX_TILE_BYTES of weight rows at a time and runs each block of
 * activation rows over the whole tile before the next: a block's
 * activations stay in L1 and the tile's rows in L2, where row by row every
 * row re-reads all T rows from L2. The same kernel calls, so the same bits.
 * Measured in quant.c (affine) and fpq_qx.inc (mxfp4, nvfp4). */
#define KN_QX_TILE_BYTES (128 * 1024)
#define KN_QX_TILE_X_BYTES (24 * 1024)
/* 1 if a wide pass of T activation rows of cols int8 bytes runs in tiles. */
static inline int kn_qx_tiled(int T, int64_t cols) { return (int64_t)T * cols > KN_QX_TILE_X_BYTES; }
/* Weight rows of row_bytes a tile holds: a multiple of wrows (the rows a
 * pass takes), at least wrows. */
static inline int64_t kn_qx_tile_rows(size_t row_bytes, int wrows) {
    const int64_t rows = KN_QX_TILE_BYTES / (int64_t)(row_bytes ? row_bytes : 1) / wrows * wrows;
    return rows > wrows ? rows : wrows;
}

/* Bytes of buffer a kn_qx of T rows of cols needs for any group size
 * (padding included). */
size_t kn_qx_bytes(int T, int64_t cols);

/* Sets qx up for T rows to multiply affine, mxfp4 or nvfp4 w with (its
 * cols, kn_qx_group and storage order) and points its arrays into buf
 * (kn_qx_bytes(T, w->cols) bytes, 4-byte aligned). */
void kn_qx_bind(kn_qx *qx, void *buf, int T, const kn_mat *w);

/* Quantizes x (T rows, row stride ldx >= qx->cols) into qx as above, any
 * padding included. */
void kn_quantize_x(kn_qx *qx, const float *x, int64_t ldx);

/* Y[t*ldy + r] = the product above of W row r and qx row t, for t < qx->T and
 * r in [r0, r1). qx was bound for w (or a matrix of the same cols, group and
 * storage order: kn_qx_lanes). A row-range worker like kn_matmul_rows. */
void kn_matmul_qx_rows(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* Products over scattered rows (mdl_linear_at: the rows a screened draft
 * scores): the rows are first copied side by side into a caller's buffer,
 * then multiplied as one range. Why: rows read from DRAM in random order
 * cost a latency each; a loop of copies (a few loads a line, nothing
 * between them) keeps many rows in flight, a product row by row about one,
 * and prefetching rows ahead of the product did not overlap them here (the
 * q4 fixture's head, 2,048 of its 248,320 rows from DRAM, one thread:
 * 420-450 ns a row in place with rows prefetched 8 ahead, 160-270 copied
 * first; MTP rounds, q4, in-process A/B: below and bench/RESULTS.md).
 *
 * kn_gather_rows: the rows a gathered product takes at once in buf_bytes;
 * 0 where w's products do not gather: w has no packed rows (kn_lanes_pack),
 * or the active set reads codes where w stores them (the scalar reference).
 * kn_matmul_qx_gathered: y[a] = row idx[a] of w times qx's one row (qx->T
 * is 1) for a < n <= kn_gather_rows(w, buf's bytes), the bits
 * kn_matmul_qx_rows gives those rows; buf is 64-byte aligned. */
int64_t kn_gather_rows(const kn_mat *w, size_t buf_bytes);
void kn_matmul_qx_gathered(const kn_mat *w, const kn_qx *qx, const int32_t *idx, int64_t n, void *buf, float *y);

/* The twins behind kn_quantize_x and kn_matmul_qx_rows (the scalar ones are the
 * definition; matmul.c's kn_select picks one set). The product has an AVX2,
 * an AVX-VNNI and an AVX-512 VNNI version, equal bit for bit. */
void kn_quantize_x_ref(kn_qx *qx, const float *x, int64_t ldx);
void kn_matmul_qx_rows_ref(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void kn_quantize_x_avx2(kn_qx *qx, const float *x, int64_t ldx);
void kn_matmul_qx_rows_avx2(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
void kn_matmul_qx_rows_avxvnni(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
void kn_matmul_qx_rows_avx512vnni(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
#endif

#endif
