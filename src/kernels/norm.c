/* norm.c — RMSNorm, gated RMSNorm and L2 norm (see norm.h). */
#include "kernels/norm.h"

#include <assert.h>
#include <stddef.h>
#include <math.h>

#include "kernels/act.h"

/* Sum of x[i]^2 in double, in eight partial sums (lane i % 8, in order of
 * i, the tail after the last multiple of 8 added to lanes 0..) combined
 * pairwise: a fixed order, so every build and kernel set gives the same
 * bits, and eight independent chains where one chain of dependent double
 * adds took ~4 cycles an element (1024 elements: ~1.5 us a row, a few
 * hundred rows a verify, all on the calling thread). */
static double sum_squares(const float *x, int64_t n) {
    double s[8] = {0};
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8)
        for (int l = 0; l < 8; l++) s[l] += (double)x[i + l] * x[i + l];
    for (int64_t i = n8; i < n; i++) s[i - n8] += (double)x[i] * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float inv_rms(const float *x, int64_t n, float eps) {
    return (float)(1.0 / sqrt(sum_squares(x, n) / (double)n + eps));
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
    float r = (float)(scale / sqrt(sum_squares(x, n) + eps));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}
