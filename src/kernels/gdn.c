/* gdn.c — depthwise conv and gated delta rule (see gdn.h). */
#include "kernels/gdn.h"

#include <assert.h>
#include <stddef.h>

#include "kernels/act.h"
#include "kernels/matmul.h"

void kn_conv_silu(float *out, const float *window, int64_t ld, int T, const float *w, int kc,
                  int64_t c0, int64_t c1) {
    assert(kc >= 1 && T >= 0);
    for (int t = 0; t < T; t++) {
        const float *win = window + (int64_t)t * ld;
        float *o = out + (int64_t)t * ld;
        /* tap by tap over the channels (loops the compiler vectorizes): each
         * channel sums its taps in order, tap 0's product, then a multiply
         * and an add per further tap */
        for (int64_t c = c0; c < c1; c++) o[c] = w[c] * win[c];
        for (int j = 1; j < kc; j++) {
            const float *wj = w + (int64_t)j * ld, *xj = win + (int64_t)j * ld;
            for (int64_t c = c0; c < c1; c++) o[c] += wj[c] * xj[c];
        }
        kn_silu_mul_f32(o + c0, o + c0, NULL, c1 - c0);
    }
}

/* Per row i of S (output channel i), with S k = alpha (S_old k):
 *   m = S_old[i] . k;  delta = beta (v[i] - alpha m)
 *   S[i] = alpha S_old[i] + delta k;  o[i] = S[i] . q
 * Two passes over the row (a dot product, then the update and the read-out
 * together) rather than four (decay, dot, axpy, dot). */
void kn_gated_delta_step(float *S_out, const float *S_in, const float *q, const float *k, const float *v, float alpha,
                         float beta, float *o, int dk, int dv) {
    for (int i = 0; i < dv; i++) {
        const float *row = S_in + (int64_t)i * dk;
        const float m = kn_dot_f32(row, k, dk);
        const float delta = beta * (v[i] - alpha * m);
        o[i] = kn_scale_axpy_dot_f32(S_out + (int64_t)i * dk, row, alpha, delta, k, q, dk);
    }
}
