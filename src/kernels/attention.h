/* attention.h — causal softmax attention for the query heads that share one
 * KV head, over a KV cache.
 *
 * q: G query rows of hd floats, ldq apart; k, v: rows [n_ctx] with stride
 * kv_stride floats between positions (the cache interleaves kv heads); out:
 * G rows of hd, ldo apart. scores: caller scratch of G * n_ctx floats.
 * Per query: scores = (q . k_t) * scale (kn_dot_f32's sums), softmax in f32
 * with the running max subtracted and the sum in double, then
 * out = sum_t p_t v_t accumulated in order of t, one multiply and one add per
 * element (kn_axpy_f32's operations). The G heads share each loaded k_t and
 * v_t, but the result for a query depends only on q and the n_ctx cached rows,
 * so a verify block and single-token steps agree bit for bit. */
#ifndef NX_KERNELS_ATTENTION_H
#define NX_KERNELS_ATTENTION_H

#include <stdint.h>

void kn_attention_group(float *out, int64_t ldo, const float *q, int64_t ldq, int G, const float *k, const float *v,
                        int64_t kv_stride, int64_t n_ctx, int hd, float scale, float *scores);

/* out[h][d] = sum over t < n_ctx of p[h][t] * v[t][d] for h < G, d < hd,
 * starting from 0 and adding the products in order of t (multiply, then add:
 * no fused multiply-add), so both twins give kn_axpy_f32's bits. */
void kn_attn_values_f32(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                        int64_t kv_stride, int64_t n_ctx, int64_t hd);
void kn_attn_values_f32_ref(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                            int64_t kv_stride, int64_t n_ctx, int64_t hd);
#if defined(__x86_64__) || defined(__i386__)
void kn_attn_values_f32_avx2(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                             int64_t kv_stride, int64_t n_ctx, int64_t hd);
#endif

#endif
