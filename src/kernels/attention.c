/* attention.c — one query head against the cache (see attention.h). */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/matmul.h"

void kn_attention_head(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                       int64_t n_ctx, int hd, float scale, float *scores) {
    assert(n_ctx >= 1 && hd >= 1);
    float mx = -INFINITY;
    for (int64_t t = 0; t < n_ctx; t++) {
        scores[t] = kn_dot_f32(q, k + t * kv_stride, hd) * scale;
        if (scores[t] > mx) mx = scores[t];
    }
    double sum = 0.0;
    for (int64_t t = 0; t < n_ctx; t++) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    float inv = (float)(1.0 / sum);
    memset(out, 0, (size_t)hd * sizeof *out);
    for (int64_t t = 0; t < n_ctx; t++) kn_axpy_f32(out, scores[t] * inv, v + t * kv_stride, hd);
}
