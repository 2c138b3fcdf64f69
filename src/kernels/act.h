/* act.h — scalar activation functions (f32 in, f32 out). */
#ifndef NX_KERNELS_ACT_H
#define NX_KERNELS_ACT_H

#include <math.h>

static inline float kn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float kn_silu(float x) { return x / (1.0f + expf(-x)); }
/* log(1 + e^x), written to stay finite for large |x| (PyTorch switches to the
 * identity above 20; log1p(exp(-|x|)) + max(x, 0) agrees to f32 precision). */
static inline float kn_softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

#endif
