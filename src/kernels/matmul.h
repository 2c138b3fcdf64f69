/* matmul.h — dense matrix-vector products over stored weight formats, and
 * the small vector primitives the model ops are built from.
 *
 * Layout: a weight matrix W is row-major [rows, cols] exactly as stored in the
 * checkpoint (PyTorch Linear: row o is the weight vector of output o), dense in
 * f32, bf16 or f16, or MLX "affine" quantized (bits > 0; the format, the
 * quantizer and the kernels are in quant.h). Activations are f32.
 *
 * Bit-exactness contract (speculative decoding relies on it): the value of
 * Y[t][r] depends only on W row r and X row t — never on T, on the row range
 * a call covers, or on which other rows are computed with it. Each dot product
 * is one fixed instruction sequence for a given length.
 *
 * Every SIMD kernel has a scalar `_ref` twin with the same signature in the
 * same file (matmul.c, quant.c, act.c). kn_select() picks the newest SIMD
 * set the CPU has (AVX2+FMA+F16C; the int8 and dense products also with
 * AVX-512), or the scalar twins; those are the definition, and the tests
 * compare each SIMD set with them. Kernels never see a model and never allocate. */
#ifndef NX_KERNELS_MATMUL_H
#define NX_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

/* A weight matrix view: data (and scales, biases) point into mapped checkpoint
 * memory (not owned). Dense data is aligned to its element size; affine
 * buffers need no alignment. A zero-initialised view with data, dtype, rows
 * and cols set is a dense matrix.
 *
 * Affine (bits > 0; MLX, spec §2.6.1, quant.h): row r's codes are a
 * little-endian bit stream starting at word r * (cols * bits / 32) of data;
 * element c is the bit field [c*bits, (c+1)*bits) of that stream, and its value
 * is scale[r][c / group] * q + bias[r][c / group], evaluated as one f32 fused
 * multiply-add. cols is a multiple of group.
 *
 * Small floats (fp != 0; fpq.h): elements in E2M1 or E4M3 with one shared
 * scale a group (MLX mxfp4, nvfp4, mxfp8) or a 128 x 128 block (Hugging
 * Face block FP8). */
typedef struct {
    const void *data;      /* dense: elements; affine: uint32 words of packed codes          */
    nx_dtype dtype;        /* NX_DT_F32, NX_DT_BF16 or NX_DT_F16; NX_DT_U32 when bits > 0    */
    int64_t rows, cols;    /* logical shape: cols counts elements, not words                 */
    int bits;              /* 0: dense. Affine (MLX, spec §2.6.1): 2, 3, 4, 5, 6 or 8        */
    int group;             /* affine: elements per scale/bias group: 32, 64 or 128           */
    const void *scales, *biases;  /* affine: [rows, cols / group] each, in sdtype           */
    nx_dtype sdtype;       /* affine: NX_DT_F32, NX_DT_BF16 or NX_DT_F16                     */
    const void *packed;    /* lanes only (quant.h: affine, mxfp4, nvfp4): the codes again, in the int8
                              products' block order (kn_lanes_pack), or NULL. Only those
                              products read it; everything else reads data              */
    int64_t ld;            /* dense: elements from one row's start to the next (>= cols);
                              0: cols (packed). Lets a view pick every k-th row, or one
                              head's part of wider rows. Affine: 0                        */
    int fp;                /* 0, or a small-float format (kn_fp_mode below, fpq.h; mxfp4, nvfp4,
                              mxfp8, block FP8), bits then 0: its codes in data, its
                              scales in scales (sdtype), its group in group               */
} kn_mat;

/* kn_mat.fp: the small-float formats (fpq.h). */
typedef enum { KN_FP_NONE = 0, KN_FP_MXFP4, KN_FP_NVFP4, KN_FP_MXFP8, KN_FP_FP8_BLOCK } kn_fp_mode;

/* Elements from one row of dense w to the next. */
static inline int64_t kn_row_stride(const kn_mat *w) { return w->ld ? w->ld : w->cols; }

/* Kernel sets, oldest first: scalar C (the definition); AVX2 + FMA + F16C;
 * AVX2 with the int8 products on AVX-VNNI's 256-bit vpdpbusd (CPUs without
 * AVX-512: Intel client cores from Alder Lake on); AVX2 plus AVX-512 (F,
 * BW, VL, VNNI): the int8 products on 512-bit vpdpbusd, the dense products
 * below the tiles, the gated delta step and the attention value sums on
 * 16-lane vectors, the sketch scores on vpdpbusd. AVX-512 VNNI does not
 * imply AVX-VNNI (Zen 4, Ice Lake), so a CPU may run the newest set and
 * not the one before it. The SIMD sets compute the same bits (each kernel
 * keeps its AVX2 twin's order of operations and exact integer sums; tests
 * check it), so choosing between them changes speed only. */
typedef enum { KN_ISA_SCALAR = 0, KN_ISA_AVX2 = 1, KN_ISA_AVXVNNI = 2, KN_ISA_AVX512VNNI = 3 } kn_isa;
#define KN_ISA_BEST KN_ISA_AVX512VNNI

/* Selects the newest kernel set this CPU runs, up to max, for every kernel;
 * call at startup, before worker threads run kernels (more calls are
 * harmless). Returns the set chosen. */
kn_isa kn_select(kn_isa max);
/* The set kn_select(max) would choose, selecting nothing. */
kn_isa kn_isa_available(kn_isa max);
/* kn_select(KN_ISA_SCALAR) if force_reference, else kn_select(KN_ISA_BEST).
 * Returns 1 if SIMD kernels are active, 0 for scalar. */
int kn_init(int force_reference);
/* The active set, and its name: "avx512vnni", "avxvnni", "avx2" or "scalar". */
kn_isa kn_isa_active(void);
const char *kn_impl_name(void);

/* Choices within a kernel set that suit one CPU better than another; the
 * same bits either way. kn_select sets them for the CPU it runs on.
 *   wide_l1: int8 products of more than KN_QXBLOCK activation rows (quant.c)
 *     prefetch weight rows into L1 instead of L2, and 5 rows with packed
 *     4-bit pairs run as passes of 4 and 1 rather than one of 5. Chosen for
 *     AMD Zen 5 (family 0x1A), where every step matrix and the LM head of
 *     the 0.8B-shape q4 fixture (2 threads) took 0.78x the time at T = 5,
 *     0.86x at T = 8, 0.99x at T = 32, and whole verifies with their
 *     rollback 0.91x at T = 5 and 0.94x at T = 8 (q8 0.98-0.99x, 512-token
 *     prefills level), both ways in turn in one process; a Zen 4 VM
 *     preferred L2 for wide passes and a Sapphire Rapids VM one pass of 5
 *     (bench/RESULTS.md, twenty-fourth session).
 *   step_ahead: dense products of one activation row (a decode step) fetch
 *     ahead of their loads as those of more rows do (kn_ahead, matmul.c's
 *     KN_DENSE_AHEAD_BYTES). Chosen for Intel CPUs: on an Emerald Rapids
 *     VM (2 threads, whole bf16 steps after a 512-token prompt, both ways in
 *     turn in one process) 0.63x the time with AVX-512, 0.61x with AVX2,
 *     where a core's own misses bound a stream of plain loads; on the Zen 5
 *     VM the same fetches made whole steps 1.08-1.16x slower. */
typedef struct {
    int wide_l1;
    int step_ahead;
} kn_tuning;
kn_tuning kn_tuning_active(void);
/* Replaces the tuning kn_select chose until the next kn_select (tests, benchmarks). */
void kn_tuning_set(kn_tuning t);

/* Y[t*ldy + r] = sum_c W[r][c] * X[t*ldx + c]   for t in [0,T), r in [r0,r1).
 * A row-range worker: the caller splits [0, rows) across threads. W may be
 * dense or affine; an affine product equals, bit for bit, the same twin's
 * product with the f32 matrix of dequantized weights (kn_mat_row_f32). */
void kn_matmul_rows(const kn_mat *w, const float *x, int64_t ldx, int T,
                    float *y, int64_t ldy, int64_t r0, int64_t r1);

/* Rows per tile group of the dense products: from 2 activation rows
 * kn_matmul_rows runs the whole groups from r0 on in tiles (each loaded
 * activation vector serves several weight rows) and the rows after the last
 * one row by row. */
#define KN_TILE_GROUP 12

/* Converts row `row` of w to f32 (embedding lookup): out[0..cols). An affine
 * row is dequantized: out[c] = fmaf(scale, q, bias), the weights the matmul
 * uses. */
void kn_mat_row_f32(const kn_mat *w, int64_t row, float *out);

/* Asks the caches for row r of w (its elements, an affine row's codes,
 * scales and biases, or its packed row where w has packed rows, which the
 * int8 products read instead) ahead of a product that reads it: a hint with no effect
 * on any result, for rows read out of order (mdl_linear_at), which the
 * hardware prefetcher cannot guess. */
void kn_mat_prefetch_row(const kn_mat *w, int64_t r);
/* Asks for every cache line of the n bytes from p: a hint with no effect on
 * any result, in any kernel set (the x86 kernels' own is kn_prefetch_lines_avx2,
 * which can also aim at L2). */
static inline void kn_prefetch_bytes(const void *p, size_t n) {
    for (size_t b = 0; b < n; b += 64) __builtin_prefetch((const char *)p + b, 0, 3);
    if (n) __builtin_prefetch((const char *)p + n - 1, 0, 3);   /* a row need not start on a line */
}

/* Bytes w occupies as stored: its elements, or an affine matrix's codes plus
 * a scale and a bias per group. */
double kn_mat_bytes(const kn_mat *w);

/* Converts n stored elements of type dt at src to f32 (src may be unaligned). */
void kn_to_f32(nx_dtype dt, const void *src, float *dst, int64_t n);

/* ---- vector primitives (f32) ------------------------------------------- */
float kn_dot_f32(const float *a, const float *b, int64_t n);
/* y[i] += a * x[i] */
void kn_axpy_f32(float *y, float a, const float *x, int64_t n);
/* y[i] *= a */
void kn_scale_f32(float *y, float a, int64_t n);
/* A sampler's temperature step: x[i] = x[i] / t, a NaN made -inf and -0
 * made +0, and returns the largest (-inf for n = 0 or all -inf). The
 * division is IEEE's in every twin: the same bits. */
float kn_temper_f32(float *x, int64_t n, float t);
/* The first index of the largest of x[0..n), NaNs skipped (-inf counts); 0
 * when every element is NaN or n is 0. Greedy decoding's choice over a
 * vocabulary of logits. */
int64_t kn_argmax_f32(const float *x, int64_t n);
/* y[i] = fma(b, x[i], a * src[i]) (the product a * src[i] rounded, then one
 * fused multiply-add), and returns the dot product of the new y with z,
 * summed as kn_dot_f32 sums: a decay, an update and a read-out in one pass
 * (the gated delta rule's row step, kernels/gdn.c). y is src, or an array
 * that does not overlap it. */
float kn_scale_axpy_dot_f32(float *y, const float *src, float a, float b, const float *x, const float *z, int64_t n);

/* Scalar references (always available, used by tests and force_reference). */
void kn_matmul_rows_ref(const kn_mat *w, const float *x, int64_t ldx, int T,
                        float *y, int64_t ldy, int64_t r0, int64_t r1);
float kn_dot_f32_ref(const float *a, const float *b, int64_t n);
void kn_axpy_f32_ref(float *y, float a, const float *x, int64_t n);
void kn_scale_f32_ref(float *y, float a, int64_t n);
float kn_temper_f32_ref(float *x, int64_t n, float t);
int64_t kn_argmax_f32_ref(const float *x, int64_t n);
float kn_scale_axpy_dot_f32_ref(float *y, const float *src, float a, float b, const float *x, const float *z, int64_t n);

#endif
