/* gdn.c — depthwise conv and gated delta rule (see gdn.h). */
#include "kernels/gdn.h"

#include <assert.h>

#include "kernels/act.h"
#include "kernels/matmul.h"

void kn_conv_silu(float *out, const float *window, int64_t ld, int T, const float *w, int kc,
                  int64_t c0, int64_t c1) {
    assert(kc >= 1 && T >= 0);
    for (int t = 0; t < T; t++) {
        const float *win = window + (int64_t)t * ld;
        float *o = out + (int64_t)t * ld;
        for (int64_t c = c0; c < c1; c++) {
            const float *wc = w + c * kc;
            float acc = 0.0f;
            for (int j = 0; j < kc; j++) acc += wc[j] * win[(int64_t)j * ld + c];
            o[c] = kn_silu(acc);
        }
    }
}

void kn_gated_delta_step(float *S, const float *q, const float *k, const float *v, float alpha, float beta,
                         float *o, int dk, int dv) {
    for (int i = 0; i < dv; i++) {
        float *row = S + (int64_t)i * dk;
        kn_scale_f32(row, alpha, dk);                 /* decay              */
        float m = kn_dot_f32(row, k, dk);             /* m = S k            */
        float delta = beta * (v[i] - m);              /* delta rule         */
        kn_axpy_f32(row, delta, k, dk);               /* S += delta k^T     */
        o[i] = kn_dot_f32(row, q, dk);                /* o = S q            */
    }
}
