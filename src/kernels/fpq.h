/* fpq.h — weights stored as small floats with shared scales: MLX's mxfp4,
 * nvfp4 and mxfp8 modes, and Hugging Face's block FP8 (spec §2.6.1, §2.6.3).
 * Their element codes, their dequantization, the quantizer `nextn quantize
 * --mode` writes with, and the product behind kn_matmul_rows.
 *
 * Formats (a kn_mat with fp != KN_FP_NONE; bits stays 0, which means "not
 * affine" to the affine code):
 *   mode        group  element            scale (one a group of a row)
 *   mxfp4       32     E2M1 (4 bits)      uint8 E8M0: 2^(s - 127)
 *   nvfp4       16     E2M1 (4 bits)      uint8 E4M3
 *   mxfp8       32     E4M3 (8 bits)      uint8 E8M0
 *   fp8-block   128    E4M3 (8 bits)      sdtype (f32, bf16, f16), one a
 *                                         128 x 128 block of the matrix
 * MLX modes: data holds uint32 words, row r starting at word r * cols * bits
 * / 32; element c is bits [c * bits, (c + 1) * bits) of the row's
 * little-endian stream (4 bits: 8 a word, the first in the low nibble; 8
 * bits: the row's bytes in order); scales are uint8 [rows, cols / group]
 * (dtype NX_DT_U32, sdtype NX_DT_U8; cols a multiple of group).
 * Block FP8: data holds one E4M3 byte an element, [rows, cols] (dtype
 * NX_DT_F8_E4M3); scales ("weight_scale_inv", a factor despite its name)
 * [ceil(rows / 128), ceil(cols / 128)] in sdtype; any cols.
 *
 * Codes (OCP Microscaling formats):
 *   E2M1: bit 3 the sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
 *   E4M3 ("fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0
 *         is subnormal (m / 8 * 2^-6); S.1111.111 is NaN, 448 the largest.
 *   E8M0: 2^(s - 127) for every s (s = 0 gives 2^-127 and 255 infinity, as
 *         MLX reads them).
 * Value: W[r][c] = element * scale, one f32 product (exact for the MLX
 * modes, whose factors are short; rounded once for block FP8).
 *
 * Products: mxfp4 and nvfp4 multiply int8 activations with integer dot
 * products like the affine formats (below). The others (and these with
 * f32 activations) equal the dense f32 product with the dequantized matrix
 * bit for bit, in every kernel set (matmul.h's contract follows from the
 * dense one's): each row dequantized to f32 (both twins write the same
 * bits) and multiplied by the active set's dense f32 kernel, or, for E4M3
 * at small T, the same weights decoded in registers into the same fmas
 * (kn_fp8_matmul_rows_*). */
#ifndef NX_KERNELS_FPQ_H
#define NX_KERNELS_FPQ_H

#include <stdint.h>
#include "kernels/matmul.h"
#include "kernels/quant.h"

/* Rows this long at most (a dequantized row sits on the calling thread's
 * stack); loaders refuse longer ones. */
#define KN_FP_MAX_COLS 32768
/* kn_fp_matmul_rows's buffer of dequantized rows on the calling thread's
 * stack (384 KB: a tile group of rows up to 8192 columns). */
#define KN_FP_BUF_FLOATS (3 * KN_FP_MAX_COLS)
/* Rows and columns of a block FP8 scale. */
#define KN_FP8_BLOCK 128

/* The mode's name as config.json spells it ("mxfp4", ..., "fp8" for block
 * FP8), its bits an element and its group (a block's width for block FP8). */
const char *kn_fp_name(kn_fp_mode m);
int kn_fp_bits(kn_fp_mode m);
int kn_fp_group(kn_fp_mode m);

/* The element and scale codes above, as f32 (scalar definitions). */
float kn_e2m1_to_f32(unsigned code);
float kn_e4m3_to_f32(unsigned code);
float kn_e8m0_to_f32(unsigned code);
/* The nearest code, saturating at the largest finite value (6 for E2M1, 448
 * for E4M3). E2M1 as mlx.core.quantize picks it (the first nearest entry of
 * its table): a tie goes to the smaller magnitude and a zero is +0; NaN
 * gives 6. E4M3 ties to even, as a float conversion does; NaN gives NaN. */
unsigned kn_f32_to_e2m1(float x);
unsigned kn_f32_to_e4m3(float x);
/* MLX's E8M0 for a group's scale x = amax / 6 (or 448): the smallest power
 * of two >= x, 127 + ceil(log2 x) clamped to [0, 254], so no element
 * saturates (MLX rounds up on every backend since ml-explore/mlx#4353;
 * before it, its CPU and Metal code rounded to nearest and saturated half
 * the groups' largest elements); 127 (a factor of 1) for x = 0, 255 for NaN
 * or infinity. */
unsigned kn_f32_to_e8m0(float x);

/* Quantizes one row of cols finite f32 weights to an MLX mode (mxfp4,
 * nvfp4, mxfp8) as mlx.core.quantize does: per group, the scale is amax / 6
 * (E2M1) or amax / 448 (E4M3) rounded to its scale code (E8M0 as above,
 * E4M3 to nearest), and each element w / scale rounded to its code (0 where
 * the scale is 0). (MLX divides in the weights' own dtype; this divides in
 * f32, so a bf16 source can differ where a quotient rounds across a tie.)
 * Writes cols * bits / 32 words to codes and cols / group bytes to scales. */
void kn_fp_quantize_row(const float *w, int64_t cols, kn_fp_mode mode, uint32_t *codes, uint8_t *scales);

/* 1 if w is a well-formed view of its mode (asserts only). */
int kn_fp_valid(const kn_mat *w);

/* Bytes w's elements and scales take (kn_mat_bytes). */
double kn_fp_bytes(const kn_mat *w);

/* Row `row` of w dequantized into out[0 .. cols): the active twin
 * (kn_mat_row_f32 calls it), the scalar definition and its AVX2 twin (same
 * bits). */
void kn_fp_row_f32(const kn_mat *w, int64_t row, float *out);
void kn_fp_row_f32_ref(const kn_mat *w, int64_t row, float *out);
#if defined(__x86_64__) || defined(__i386__)
void kn_fp_row_f32_avx2(const kn_mat *w, int64_t row, float *out);
#endif

/* kn_matmul_rows for mxfp8 and block FP8 at small T (KN_FP8_FUSED_T and
 * below: a step or a verify), the SIMD sets' twin: the same bits as
 * kn_fp_matmul_rows with the sets' dense f32 kernel (its dot product layout
 * over the same dequantized weights), decoded in registers instead of a row
 * buffer. Larger T take kn_fp_matmul_rows, which decodes a row once for all
 * of them. */
#define KN_FP8_FUSED_T 4
#if defined(__x86_64__) || defined(__i386__)
void kn_fp8_matmul_rows_avx2(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                             int64_t r1);
void kn_fp8_matmul_rows_avx512(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                               int64_t r1);
#endif

/* Asks the caches for row r's elements and scales (kn_mat_prefetch_row). */
void kn_fp_prefetch_row(const kn_mat *w, int64_t r);

/* kn_matmul_rows for an fp matrix: the rows of [r0, r1) dequantized by
 * row_f32, as many at a time as KN_FP_BUF_FLOATS floats hold, then multiplied
 * with the T activation rows by dense_f32 (a dense f32 kn_matmul_rows twin)
 * over a view of them. */
typedef void (*kn_fp_row_fn)(const kn_mat *w, int64_t row, float *out);
typedef void (*kn_fp_dense_fn)(const kn_mat *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                               int64_t r1);
void kn_fp_matmul_rows(const kn_mat *w, kn_fp_row_fn row_f32, kn_fp_dense_fn dense_f32, const float *x, int64_t ldx,
                       int T, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* ---- mxfp4 and nvfp4 on int8 activations -----------------------------------
 * E2M1 values doubled are the integers {0, +-1, 2, 3, 4, 6, 8, 12}, so mxfp4
 * and nvfp4 (rows of whole groups of 32) take the affine formats' int8
 * activations (quant.h: kn_qx, groups of 32, stored in the lanes order) and
 * integer dot products. Weight row r (codes e, scale codes s) times
 * activation row t, with 16 f32 lanes acc[0..15] from 0:
 *   for each activation group g (elements 32 g .. 32 g + 31) in order:
 *     mxfp4: I_g = sum over the group's c of (2 e2m1(e_c)) * xq[c]  (exact)
 *            acc[g % 16] = fma((float)I_g, d[t][g] * h(s_g), acc[g % 16])
 *     nvfp4: I_g0, I_g1 = the same sums over the group's first and second
 *            16 elements, the weights' groups 2g and 2g + 1
 *            acc[g % 16] = fma((float)I_g0, d[t][g] * k(s_2g), acc[g % 16])
 *            acc[g % 16] = fma((float)I_g1, d[t][g] * k(s_2g+1), acc[g % 16])
 *   y = comb(a), a[j] = acc[j] + acc[j + 8],
 *   comb(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
 * where h(s) = 2^(s - 128), half the E8M0 scale (exact; h(255) is infinity,
 * as the scale is), and k(s) = e4m3(s) / 2 (exact; NaN for a NaN code).
 * The scalar twin is the definition; the AVX2 and the AVX-512 VNNI ones
 * (fpq_qx.inc) compute the same bits, from packed rows (quant.h:
 * kn_lanes_pack, which a model runs at load) or from the codes as stored.
 * The result is sum_c w_c (d xq_c): the dequantized weights times the
 * dequantized activations, rounded in a fixed order, so Y[t][r] depends
 * only on row r and activation row t. */
/* 1 if w multiplies int8 activations (kn_matmul_qx_rows): mxfp4, and nvfp4
 * whose rows are whole groups of 32 (others dequantize). */
static inline int kn_fp_int8(const kn_mat *w) { return w->fp && kn_qx_lanes(w); }
void kn_fp_matmul_qx_rows_ref(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void kn_fp_matmul_qx_rows_avx2(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
void kn_fp_matmul_qx_rows_avxvnni(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0, int64_t r1);
void kn_fp_matmul_qx_rows_avx512vnni(const kn_mat *w, const kn_qx *qx, float *y, int64_t ldy, int64_t r0,
                                     int64_t r1);
#endif

#endif
