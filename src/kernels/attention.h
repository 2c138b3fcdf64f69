/* attention.h — causal softmax attention for the query heads that share one
 * KV head, over a KV cache, for a block of consecutive tokens at once.
 *
 * A block is T tokens of one sequence and the G query heads of one KV head:
 * row (j, h) for j < T, h < G. Token j sees cache rows 0 .. n0 + j (its own
 * row included), so a block of T = 1 is a decode step, T = K + 1 a verify and
 * larger T a prefill chunk. The cache holds f32 or IEEE half (f16: half the
 * bytes to stream; each element widens to f32 exactly, and everything after
 * the load is the f32 math). V rows are hd elements, kv_stride elements
 * apart; K lies in tiles of KN_KTILE positions (kn_k_elem), so that one
 * vector holds one element of KN_KTILE rows and a score is a chain of fused
 * multiply-adds down the lanes, with no sum across a vector.
 * Per row: scores = (q . k_t) * scale (kn_attn_scores' sums), kn_softmax_f32,
 * then out = sum_t p_t v_t accumulated in order of t, one fused
 * multiply-add per element (fmaf). The rows share each loaded k_t
 * and v_t (one pass over the cache per block, not one per token), but a
 * row's result depends only on its query and the rows it sees, so a verify
 * block and single-token steps agree bit for bit. */
#ifndef NX_KERNELS_ATTENTION_H
#define NX_KERNELS_ATTENTION_H

#include <stdint.h>
#include "base/dtype.h"

typedef struct {
    float *out;
    int64_t ldo, ldo_t;       /* out row (j, h) at out + j * ldo_t + h * ldo          */
    const float *q;
    int64_t ldq, ldq_t;       /* query row (j, h) at q + j * ldq_t + h * ldq          */
    int G, T;                 /* query heads, tokens                                  */
    const void *k;            /* K tiles (kn_k_elem) of the positions the block sees  */
    const void *v;            /* V row t at element t * kv_stride of v                */
    nx_dtype kv_dtype;        /* the cache's elements: NX_DT_F32 (0) or NX_DT_F16     */
    int64_t kv_stride;
    int64_t n0;               /* token j sees rows 0 .. n0 + j                        */
    int hd;                   /* head dim                                             */
    float scale;              /* applied to every score (1 / sqrt(hd))                */
} kn_attn_block;

/* Positions per K tile. Element d of position t's K row is element
 * kn_k_elem(t, d, hd) of its head's tiles: tile t / KN_KTILE holds hd
 * vectors of KN_KTILE elements, element d of each of its positions. A head
 * of cap positions (a multiple of KN_KTILE) fills cap * hd elements, as rows
 * would. A tile's lanes past the last position written are never read into
 * a result. */
#define KN_KTILE 16
/* Positions that whole tiles for n positions hold: n rounded up to KN_KTILE. */
static inline int64_t kn_k_cap(int64_t n) { return (n + KN_KTILE - 1) / KN_KTILE * KN_KTILE; }
static inline int64_t kn_k_elem(int64_t t, int64_t d, int64_t hd) {
    return (t / KN_KTILE * hd + d) * KN_KTILE + t % KN_KTILE;
}

/* Writes the block's T * G output rows. scores: caller scratch of at least
 * T * G * (n0 + T) floats. */
void kn_attention(const kn_attn_block *b, float *scores);

/* Score row (j, h) at s + (j * G + h) * lds, element t for every t <= n0 +
 * j (nothing past it): the sum over d of q[d] * k_t[d] for the query row
 * at q + j * ldq_t + h * ldq, as one chain of fused multiply-adds in order
 * of d from 0 (fmaf(q[d], k_t[d], sum)), unscaled. Each (row, position)'s
 * sum is that chain whatever T, G and vector width, so every twin gives the
 * same bits. k: one head's K tiles (kn_k_elem), elements of kdt (NX_DT_F32
 * or NX_DT_F16). */
void kn_attn_scores(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                    const void *k, nx_dtype kdt, int64_t hd);
void kn_attn_scores_ref(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                        const void *k, nx_dtype kdt, int64_t hd);
#if defined(__x86_64__) || defined(__i386__)
void kn_attn_scores_avx2(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                         const void *k, nx_dtype kdt, int64_t hd);
void kn_attn_scores_avx512(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T,
                           int64_t n0, const void *k, nx_dtype kdt, int64_t hd);
#endif

/* out row (j, h) = sum over t <= n0 + j of p[(j * G + h) * ldp + t] * v_t,
 * for j < T, h < G, each column starting from 0 and adding the products in
 * order of t, each a fused multiply-add (fmaf(p_t, v_t[i], out[i])), so
 * every twin gives the same bits on the rows widened to f32, whatever T
 * and vector width. (A multiply and an add a step until the fifty-seventh
 * session: the fused form halves the arithmetic of a block's pass, which
 * bounds it from T = 2 on; bench/RESULTS.md.) v's rows are of vdt
 * (NX_DT_F32 or NX_DT_F16). */
void kn_attn_values(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                    const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd);
void kn_attn_values_ref(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                        const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd);
#if defined(__x86_64__) || defined(__i386__)
void kn_attn_values_avx2(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                         const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd);
void kn_attn_values_avx512(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T,
                           int64_t n0, const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd);
#endif

/* Writes n f32 values x as one cache row of dt at dst: a copy for
 * NX_DT_F32; for NX_DT_F16 each rounded to nearest even, magnitudes past
 * f16's largest finite value (65504) stored as +-65504 rather than
 * infinity (a NaN stays NaN), so that one outlier cannot turn every later
 * score of its head into NaN. */
void kn_attn_store_row(void *dst, nx_dtype dt, const float *x, int64_t n);
/* The same for position t's K row of hd elements x into a head's tiles k. */
void kn_attn_store_k(void *k, nx_dtype dt, int64_t t, const float *x, int64_t hd);

#endif
