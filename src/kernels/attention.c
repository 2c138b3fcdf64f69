/* attention.c — the query heads of one KV head against the cache (see
 * attention.h), and the twins of the value sum. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2.h"
#include "kernels/matmul.h"

/* Positions per run of the value sums (KN_ATTN_TBLOCK of the AVX2 twin). */
#define KN_ATTN_VRUN 64

/* Positions per call of the score pass, and how far ahead of a call its
 * rows are prefetched. The cache is cold at every step (the step's weights
 * went through since), and its rows, kv_stride apart with the other heads'
 * between them, cross a 4 KB page every position or two, where the hardware
 * prefetcher stops. With these prefetches (and the values' below), one
 * thread's attention of the 0.8B shape (bench-attention, Zen 4) took 3.2-3.3
 * -> 2.1-2.2 ms per step at 660 positions, 22.2-23.2 -> 15.9-16.2 at 4000. */
#define KN_ATTN_KRUN 8
#define KN_ATTN_KAHEAD 32

/* Asks for the rows [t0, t1) of a cache (hd floats each) to be fetched. */
static void prefetch_rows(const float *c, int64_t kv_stride, int64_t t0, int64_t t1, int hd) {
    for (int64_t t = t0; t < t1; t++)
        for (int64_t b = 0; b < hd; b += 16) __builtin_prefetch(c + t * kv_stride + b);
}

void kn_attention_group(float *out, int64_t ldo, const float *q, int64_t ldq, int G, const float *k, const float *v,
                        int64_t kv_stride, int64_t n_ctx, int hd, float scale, float *scores) {
    assert(n_ctx >= 1 && hd >= 1 && G >= 1);
    /* scores[h][t] = q_h . k_t: this head's cached rows as one strided
     * matrix against the G queries, so k_t is loaded once for all of them
     * (kn_matmul_rows sums each product exactly as kn_dot_f32 does, whatever
     * rows a call covers); the values' first run is fetched meanwhile */
    const kn_mat kh = {.data = k, .dtype = NX_DT_F32, .rows = n_ctx, .cols = hd, .ld = kv_stride};
    prefetch_rows(k, kv_stride, 0, n_ctx < KN_ATTN_KAHEAD ? n_ctx : KN_ATTN_KAHEAD, hd);
    for (int64_t t0 = 0; t0 < n_ctx; t0 += KN_ATTN_KRUN) {
        const int64_t t1 = t0 + KN_ATTN_KRUN < n_ctx ? t0 + KN_ATTN_KRUN : n_ctx, a = t0 + KN_ATTN_KAHEAD;
        if (a < n_ctx) prefetch_rows(k, kv_stride, a, a + KN_ATTN_KRUN < n_ctx ? a + KN_ATTN_KRUN : n_ctx, hd);
        if (t0 < KN_ATTN_VRUN) prefetch_rows(v, kv_stride, t0, t1 < KN_ATTN_VRUN ? t1 : KN_ATTN_VRUN, hd);
        kn_matmul_rows(&kh, q, ldq, G, scores, n_ctx, t0, t1);
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
 * either way). The first column block's pass over a run prefetches the next
 * run's rows (the first run is fetched during the scores). The columns past
 * the last whole block go to the scalar twin. */
#define KN_ATTN_TBLOCK KN_ATTN_VRUN

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
                if (d == 0 && t + KN_ATTN_TBLOCK < n_ctx)
                    for (int64_t b = 0; b < hd; b += 16) _mm_prefetch((const char *)(vt + KN_ATTN_TBLOCK * kv_stride + b), _MM_HINT_T1);
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
