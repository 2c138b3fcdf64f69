/* act.h — activation functions: scalar helpers (f32 in, f32 out), the
 * vector SiLU the model's MLP, depthwise conv and gated norm run on, and the
 * softmax of attention scores. */
#ifndef NX_KERNELS_ACT_H
#define NX_KERNELS_ACT_H

#include <math.h>
#include <stdint.h>

static inline float kn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* log(1 + e^x), written to stay finite for large |x| (PyTorch switches to the
 * identity above 20; log1p(exp(-|x|)) + max(x, 0) agrees to f32 precision). */
static inline float kn_softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

/* y[i] = silu(x[i]) * u[i], or silu(x[i]) when u is NULL, for i < n, with
 * silu(x) = x / (1 + kn_exp(-x)); y may be x or u. Both twins compute kn_exp
 * with the same operations, so they agree bit for bit. */
void kn_silu_mul_f32(float *y, const float *x, const float *u, int64_t n);

/* y[i] = y[i] * sigmoid(g[i]) for i < n, computed as y[i] / (1 + kn_exp(-g[i]))
 * (one rounding for the product), and NaN where g[i] is NaN (kn_exp alone
 * would turn it into a number): attention's output gate. Both twins take the
 * same steps, so they agree bit for bit. Why not kn_sigmoid (libm's expf an
 * element): the gate covers every query head's output, 12k elements a token
 * at the 0.8B shape; a 2048-token q4 prefill's attention jobs took 0.64 s on
 * this twin against 0.69-0.72 s (438 against 428-431 tok/s). */
void kn_sigmoid_gate_f32(float *y, const float *g, int64_t n);

/* e^x in f32: x = n ln2 + r, |r| <= ln2 / 2, e^r = 1 + r + r^2 P(r) with P of
 * degree 5 (Cephes' expf coefficients), times 2^n; within 2 ulp of the exact value for x in [-87, 88]; above
 * 88 it is +inf (so silu(x) of a very negative x is -0, as with libm's expf),
 * below -87 it stays at e^-87 (silu(x) = x there), and a NaN gives e^88
 * (silu still returns NaN: the NaN is its numerator).
 * The scalar definition the SIMD twin follows step by step. */
float kn_exp(float x);

/* p <- softmax(scale * p) over n >= 1 scores, in place: s_i = scale * p_i,
 * m = max s_i, e_i = kn_exp(s_i - m), p_i = e_i * (float)(1 / sum e_i) with
 * the sum in double, in 8 lanes (lane l takes the i = l mod 8 below the
 * last multiple of 8; lanes l and l + 4 are added, then the four in pairs,
 * then the rest in order). A NaN score, or an infinite max, makes every p_i
 * NaN (kn_exp would turn NaN into a number). Both twins follow those steps:
 * the same bits. */
void kn_softmax_f32(float *p, int64_t n, float scale);

/* sum_i kn_exp(x_i - mx) over n >= 1 values (an x_i of -inf adds 0, not the
 * e^-87 kn_exp's clamp would give), in double, summed in the lane
 * order kn_softmax_f32 uses; x is only read. With mx = max x_i, mx + log of
 * it is the log-sum-exp of the row (a token's log-probability is then x_i
 * minus that): the normalizer of a log-softmax, without writing a
 * vocabulary-sized row. Both twins follow those steps: the same bits. */
double kn_sum_exp_f32(const float *x, int64_t n, float mx);

/* w[i] = kn_exp(x[i] - mx), 0 for an x[i] of -inf, for i < n (w may be x),
 * and returns their sum exactly as kn_sum_exp_f32 sums it: a softmax's
 * weights and normalizer in one pass (the sampler's). Both twins follow
 * those steps: the same bits. */
double kn_exp_sum_f32(float *w, const float *x, int64_t n, float mx);

/* The twins behind kn_silu_mul_f32, kn_sigmoid_gate_f32, kn_softmax_f32,
 * kn_sum_exp_f32 and kn_exp_sum_f32 (matmul.c's kn_select picks them). */
void kn_silu_mul_f32_ref(float *y, const float *x, const float *u, int64_t n);
void kn_sigmoid_gate_f32_ref(float *y, const float *g, int64_t n);
void kn_softmax_f32_ref(float *p, int64_t n, float scale);
double kn_sum_exp_f32_ref(const float *x, int64_t n, float mx);
double kn_exp_sum_f32_ref(float *w, const float *x, int64_t n, float mx);
#if defined(__x86_64__) || defined(__i386__)
void kn_silu_mul_f32_avx2(float *y, const float *x, const float *u, int64_t n);
void kn_sigmoid_gate_f32_avx2(float *y, const float *g, int64_t n);
void kn_softmax_f32_avx2(float *p, int64_t n, float scale);
double kn_sum_exp_f32_avx2(const float *x, int64_t n, float mx);
double kn_exp_sum_f32_avx2(float *w, const float *x, int64_t n, float mx);
/* The avx512vnni set's: the AVX2 twins' steps on 16 lanes, the same bits. */
void kn_silu_mul_f32_avx512(float *y, const float *x, const float *u, int64_t n);
double kn_sum_exp_f32_avx512(const float *x, int64_t n, float mx);
double kn_exp_sum_f32_avx512(float *w, const float *x, int64_t n, float mx);
#endif

#endif
