/* norm.h — RMSNorm variants used by Qwen3.5 (spec §3.2). All f32.
 *
 * The weight passed here is the effective multiplier: for zero-centered norms
 * read from raw Hugging Face files the loader has already turned w into 1+w,
 * so one kernel serves both layouts. Sums of squares are accumulated in double
 * so the result does not depend on vector length rounding. */
#ifndef NX_KERNELS_NORM_H
#define NX_KERNELS_NORM_H

#include <stdint.h>

/* y = x * rsqrt(mean(x^2) + eps) * w          (y may alias x) */
void kn_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* Gated RMSNorm, "norm before gate" (Qwen3_5RMSNormGated):
 * y = x * rsqrt(mean(x^2) + eps) * w * silu(z)   (y may alias x) */
void kn_rmsnorm_gated(float *y, const float *x, const float *z, const float *w, int64_t n, float eps);

/* L2 normalisation: x *= scale / sqrt(sum(x^2) + eps)  (HF l2norm, eps 1e-6) */
void kn_l2norm_scaled(float *x, int64_t n, float eps, float scale);

#endif
