/* norm.c — RMSNorm, gated RMSNorm and L2 norm (see norm.h). */
#include "kernels/norm.h"

#include <assert.h>
#include <stddef.h>
#include <math.h>

#include "kernels/act.h"

static float inv_rms(const float *x, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / (double)n + eps));
}

void kn_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    assert(n > 0);
    float r = inv_rms(x, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

void kn_rmsnorm_gated(float *y, const float *x, const float *z, const float *w, int64_t n, float eps) {
    assert(n > 0);
    float r = inv_rms(x, n, eps);
    float g[256];   /* silu(z), a block at a time */
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t m = n - i0 < 256 ? n - i0 : 256;
        kn_silu_mul_f32(g, z + i0, NULL, m);
        for (int64_t i = 0; i < m; i++) y[i0 + i] = x[i0 + i] * r * w[i0 + i] * g[i];
    }
}

void kn_l2norm_scaled(float *x, int64_t n, float eps, float scale) {
    assert(n > 0);
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(scale / sqrt(ss + eps));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}
