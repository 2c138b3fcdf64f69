/* sketch.h — one-bit sign sketches of a matrix's rows, to rank the rows
 * against an activation row for a sixteenth of a bf16 matrix's bytes, and
 * the selection of the k best scores (kn_top_k_f32).
 *
 * What it is for: a draft scores the whole LM head for one row, and on a
 * small model that head is a third of all weight bytes. Ranking its rows by
 * a sketch and scoring only the k best exactly reads the sketch (1 bit per
 * weight) plus k rows. The sketch only chooses which rows are scored; the
 * scores themselves come from the matrix.
 *
 * Row r of W ([rows][cols], cols a multiple of 64) is sketched as
 * scale[r] * sign(W[r]): bit c of the row is set where the sign bit of
 * W[r][c] is clear (+0 and positive values), and scale[r] = mean_c |W[r][c]|
 * (sums of 64 in f32, added in double). Against x quantized symmetrically to
 * KN_SKETCH_XBITS-bit integers (kn_sketch_quantize_x: xq_c = x_c * (XMAX /
 * max_c |x_c|) in double, rounded to nearest, ties to even, XMAX =
 * KN_SKETCH_XMAX; d = max_c |x_c| / XMAX) its score is
 *
 *     s_r = (float)(2 P_r - S) * (scale[r] * d),
 *     P_r = sum of xq_c over the set bits,  S = sum_c xq_c,
 *
 * an exact integer times one f32 product, so every twin gives the same bits.
 *
 * Two layouts of the same bits, plus [rows] f32 scales (1 + 32 / cols bits
 * per weight), chosen at kn_sketch_bind (kn_sketch_layout_preferred: the
 * active kernel set's):
 * - KN_SKETCH_ROWS: [rows][cols / 64] uint64 words, bit c % 64 of word
 *   c / 64: the scalar set's.
 * - KN_SKETCH_BLOCKS: blocks of 32 rows, [rows / 32 rounded up][cols / 8][32]
 *   bytes: byte i of a block's k-th 32 holds row 32 b + i's bits for columns
 *   8k .. 8k+7 (bit q: column 8k + q): the SIMD sets'. Spreading a row's
 *   bits to bytes took ~7 AVX2 operations per 32 weights; here each nibble
 *   of 32 rows (AVX-512: of 32 rows for two bytes' columns) indexes a
 *   16-entry table of the activations' partial sums (kn_sketch_quantize_x's
 *   tables) in one vpshufb, about 1 operation per 32 weights' worth of one
 *   row (AVX-512: per 64). It also ran 1.7x faster in L2 than counting a
 *   rows-layout row's bits against the activations' bit planes with
 *   AVX-512's VPOPCNTQ (sketch.c). */
#ifndef NX_KERNELS_SKETCH_H
#define NX_KERNELS_SKETCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"

/* Bits of the sketch's activations: 4 (values -7 .. 7), so a nibble
 * table's entries (four values plus the bias) fit a byte and four of them
 * add within a byte lane (no more than the sketch's own 1 bit of a weight is
 * worth: on the 0.8B-shape fixture drafts were accepted as often as with 8
 * bits, 52-55%; with 3 bits 1-3 points less). */
#define KN_SKETCH_XBITS 4
#define KN_SKETCH_XMAX ((1 << (KN_SKETCH_XBITS - 1)) - 1)

/* Widest row: |2P - S| <= 2 * XMAX * cols must convert to f32 exactly (< 2^24). */
#define KN_SKETCH_MAX_COLS ((int64_t)1 << 17)

typedef enum { KN_SKETCH_ROWS, KN_SKETCH_BLOCKS } kn_sketch_layout;

/* Rows a KN_SKETCH_BLOCKS block holds. */
#define KN_SKETCH_BLOCK_ROWS 32

/* A view over a caller's buffer (kn_sketch_bind); nothing is owned. */
typedef struct {
    int64_t rows, cols;      /* cols % 64 == 0, cols <= KN_SKETCH_MAX_COLS  */
    kn_sketch_layout layout;
    uint64_t *bits;          /* KN_SKETCH_ROWS: [rows][cols / 64], else NULL */
    uint8_t *blocks;         /* KN_SKETCH_BLOCKS: as above, else NULL       */
    float *scale;            /* [rows] mean |w| of the row                  */
} kn_sketch;

/* Bytes a sketch of rows x cols needs in either layout (64-byte aligned
 * parts). */
size_t kn_sketch_bytes(int64_t rows, int64_t cols);
/* Points s's arrays into buf (kn_sketch_bytes bytes, 64-byte aligned) and
 * zeroes the bits of a last block's rows past `rows`. */
void kn_sketch_bind(kn_sketch *s, void *buf, int64_t rows, int64_t cols, kn_sketch_layout layout);
/* The layout the active kernel set scores fastest (defined in matmul.c).
 * Every set scores both. */
kn_sketch_layout kn_sketch_layout_preferred(void);
/* Sketches row r from its f32 weights w[0..cols). Returns 0 when a weight
 * is not finite or a sum of 64 |w| overflows f32 (the row then holds no
 * usable sketch). */
int kn_sketch_row(kn_sketch *s, int64_t r, const float *w);

/* The offset of the nibble tables' entries, which keeps them unsigned. */
#define KN_SKETCH_TABLE_BIAS (4 * KN_SKETCH_XMAX)

/* Bytes of kn_sketch_quantize_x's output for a row of cols. */
size_t kn_sketch_x_bytes(int64_t cols);

/* xq[0..cols) = x quantized as above; *d its scale, *sum = S. After the
 * values, at xq + cols, the nibble tables: [cols / 4][16] uint8, entry n of
 * table g = KN_SKETCH_TABLE_BIAS + the sum of xq[4g + q] over the bits q set
 * in n (0 .. 8 XMAX). xq holds kn_sketch_x_bytes(cols) bytes. A zero row
 * gives d = 0 (every score 0). Returns 0, setting nothing, when a value of
 * x is not finite. */
int kn_sketch_quantize_x(const float *x, int64_t cols, int8_t *xq, float *d, int32_t *sum);

/* y[r] = s_r above for r in [r0, r1): a row-range worker. xq is 64-byte
 * aligned, as kn_sketch_quantize_x wrote it. */
void kn_sketch_scores(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1);

/* The twins behind kn_sketch_scores (matmul.c's kn_select picks one set). */
void kn_sketch_scores_ref(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void kn_sketch_scores_avx2(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1);
void kn_sketch_scores_avx512vnni(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0,
                                 int64_t r1);
#endif

/* ---- the k best of n scores ---------------------------------------------- */

/* Bytes of work kn_top_k_f32 needs for n scores. */
size_t kn_top_k_work_bytes(int64_t n);

/* The indices of the k largest of x[0..n) (k <= n), ascending, into idx[0..k);
 * ties at the k-th value go to the lowest indices. Values rank by an
 * unsigned key of their bits: -0 just below +0, a positive NaN above +inf, a
 * negative one below -inf. Returns k. work: kn_top_k_work_bytes(n) bytes, 4-byte aligned.
 *
 * How: a threshold from a strided sample of 1024 scores keeps about 1.25k
 * candidates in one pass; a radix select over their keys (11 + 11 + 10
 * bits) finds the k-th value exactly; a lower threshold is tried if the
 * sample guessed too high. O(n) with one pass over x in the usual case. */
int64_t kn_top_k_f32(const float *x, int64_t n, int64_t k, int32_t *idx, void *work);

/* Runs fn(ctx, i0, i1, tid) over ranges that cover [0, n) -- on a pool's
 * threads, say (nx_pool_run with a grain of 1, runner the pool). */
typedef void (*kn_run_fn)(void *runner, nx_range_fn fn, void *ctx, int64_t n);

/* kn_top_k_f32 (the same indices) with its pass over x split into blocks
 * that run(runner, ...) computes, in any order and on any threads: the
 * scores a pool's threads just wrote are each read by the thread that has
 * them in cache, and the pass, the bulk of the work, is shared. run NULL:
 * kn_top_k_f32's one pass. */
int64_t kn_top_k_f32_split(const float *x, int64_t n, int64_t k, int32_t *idx, void *work, kn_run_fn run,
                           void *runner);

/* kn_top_k_f32's pass over the scores: appends i and its key for every
 * x[i] whose key is >= thr, i in [0, n), to cand / ckey in ascending order
 * of i; returns how many. Both arrays hold n entries; those past the count
 * may be overwritten. The key: x's bits as an unsigned number that orders
 * like the values (sign bit set: all bits flipped; else the sign bit set),
 * so -0 ranks just below +0 and NaNs by their bits, above +inf or below
 * -inf. Every twin gives the same count and the same entries. */
int64_t kn_top_k_collect(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey);
int64_t kn_top_k_collect_ref(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey);
#if defined(__x86_64__) || defined(__i386__)
int64_t kn_top_k_collect_avx512vnni(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey);
#endif

/* What kn_argmax_f32 (matmul.h: the first index of the largest value, NaNs
 * skipped, 0 if all are NaN) returns for a row of n values that holds x[i]
 * at the k distinct indices idx[0..k) (ascending, k < n, as kn_top_k_f32
 * gives them) and -inf everywhere else, reading only those k values: a
 * screened draft's argmax without writing its whole row. */
int64_t kn_argmax_at_f32(const float *x, const int32_t *idx, int64_t k, int64_t n);

#endif
