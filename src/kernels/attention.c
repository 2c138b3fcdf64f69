/* attention.c — the query heads of one KV head against the cache (see
 * attention.h), and the twins of the value sum. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2.h"
#include "kernels/matmul.h"

void kn_attention_group(float *out, int64_t ldo, const float *q, int64_t ldq, int G, const float *k, const float *v,
                        int64_t kv_stride, int64_t n_ctx, int hd, float scale, float *scores) {
    assert(n_ctx >= 1 && hd >= 1 && G >= 1);
    /* scores[h][t] = q_h . k_t: position t as a one-row matrix against the G
     * queries, so k_t is loaded once for all of them (kn_matmul_rows sums each
     * product exactly as kn_dot_f32 does) */
    for (int64_t t = 0; t < n_ctx; t++) {
        const kn_mat kt = {.data = k + t * kv_stride, .dtype = NX_DT_F32, .rows = 1, .cols = hd};
        kn_matmul_rows(&kt, q, ldq, G, scores + t, n_ctx, 0, 1);
    }
    for (int h = 0; h < G; h++) {
        float *s = scores + (int64_t)h * n_ctx, mx = -INFINITY;
        for (int64_t t = 0; t < n_ctx; t++) {
            s[t] *= scale;
            if (s[t] > mx) mx = s[t];
        }
        double sum = 0.0;
        for (int64_t t = 0; t < n_ctx; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t t = 0; t < n_ctx; t++) s[t] *= inv;
    }
    kn_attn_values_f32(out, ldo, scores, n_ctx, G, v, kv_stride, n_ctx, hd);
}

void kn_attn_values_f32_ref(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                            int64_t kv_stride, int64_t n_ctx, int64_t hd) {
    for (int h = 0; h < G; h++) {
        float *o = out + (int64_t)h * ldo;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int64_t t = 0; t < n_ctx; t++) kn_axpy_f32_ref(o, p[(int64_t)h * ldp + t], v + t * kv_stride, hd);
    }
}

#if KN_HAVE_X86
/* Columns in blocks of 16 (two vectors) for up to 4 heads at a time: the 8
 * sums stay in registers while a run of KN_ATTN_TBLOCK positions passes, and
 * each v_t block is loaded once for the heads. The positions go in runs so
 * that a run's V rows (64 KB at hd 256) stay in L2 while all column blocks
 * pass over them; between runs the sums wait in out (exact: they are f32
 * either way). The columns past the last whole block go to the scalar twin. */
#define KN_ATTN_TBLOCK 64

KN_AVX2_INLINE void values_heads_avx2(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                                      int64_t kv_stride, int64_t n_ctx, int64_t hd) {
    const int64_t h16 = hd & ~(int64_t)15;
    for (int64_t t0 = 0; t0 < n_ctx; t0 += KN_ATTN_TBLOCK) {
        const int64_t t1 = t0 + KN_ATTN_TBLOCK < n_ctx ? t0 + KN_ATTN_TBLOCK : n_ctx;
        for (int64_t d = 0; d < h16; d += 16) {
            __m256 acc[4][2];
            for (int h = 0; h < G; h++) {
                float *o = out + (int64_t)h * ldo + d;
                acc[h][0] = t0 ? _mm256_loadu_ps(o) : _mm256_setzero_ps();
                acc[h][1] = t0 ? _mm256_loadu_ps(o + 8) : _mm256_setzero_ps();
            }
            for (int64_t t = t0; t < t1; t++) {
                const float *vt = v + t * kv_stride + d;
                const __m256 v0 = _mm256_loadu_ps(vt), v1 = _mm256_loadu_ps(vt + 8);
                for (int h = 0; h < G; h++) {
                    const __m256 a = _mm256_broadcast_ss(p + (int64_t)h * ldp + t);
                    acc[h][0] = _mm256_add_ps(acc[h][0], _mm256_mul_ps(a, v0));
                    acc[h][1] = _mm256_add_ps(acc[h][1], _mm256_mul_ps(a, v1));
                }
            }
            for (int h = 0; h < G; h++) {
                _mm256_storeu_ps(out + (int64_t)h * ldo + d, acc[h][0]);
                _mm256_storeu_ps(out + (int64_t)h * ldo + d + 8, acc[h][1]);
            }
        }
    }
    if (h16 < hd) kn_attn_values_f32_ref(out + h16, ldo, p, ldp, G, v + h16, kv_stride, n_ctx, hd - h16);
}

KN_AVX2 void kn_attn_values_f32_avx2(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const float *v,
                                     int64_t kv_stride, int64_t n_ctx, int64_t hd) {
    int h = 0;
    for (; h + 4 <= G; h += 4)
        values_heads_avx2(out + h * ldo, ldo, p + h * ldp, ldp, 4, v, kv_stride, n_ctx, hd);
    switch (G - h) {   /* each head count its own inlined copy */
    case 3: values_heads_avx2(out + h * ldo, ldo, p + h * ldp, ldp, 3, v, kv_stride, n_ctx, hd); break;
    case 2: values_heads_avx2(out + h * ldo, ldo, p + h * ldp, ldp, 2, v, kv_stride, n_ctx, hd); break;
    case 1: values_heads_avx2(out + h * ldo, ldo, p + h * ldp, ldp, 1, v, kv_stride, n_ctx, hd); break;
    default: break;
    }
}
#endif
