/* attention.h — causal softmax attention for one query head over a KV cache.
 *
 * q: [hd]; k, v: rows [n_ctx] with stride kv_stride floats between positions
 * (the cache interleaves kv heads); out: [hd]. scores: caller scratch of
 * n_ctx floats. Softmax in f32 with the running max subtracted; sums in
 * double. The result for a query depends only on q and the n_ctx cached rows,
 * so a verify block and single-token steps agree bit for bit. */
#ifndef NX_KERNELS_ATTENTION_H
#define NX_KERNELS_ATTENTION_H

#include <stdint.h>

void kn_attention_head(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                       int64_t n_ctx, int hd, float scale, float *scores);

#endif
