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

/* ---- Used by matmul.c (callers go through kn_matmul_rows / kn_mat_row_f32) ---- */

/* 1 if w is a well-formed affine view: bits and group in the lists above,
 * dtype NX_DT_U32, a valid sdtype, cols % group == 0, and data, scales and
 * biases set unless the matrix is empty. Checked by assert only. */
int kn_affine_valid(const kn_mat *w);

/* Dequantizes row `row` of affine w into out[0..cols). */
void kn_affine_row_f32(const kn_mat *w, int64_t row, float *out);

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

#endif
