/* test_attention.c — grouped-query attention (kernels/attention.h): the value
 * sum's twins agree bit for bit, each head of a group equals that head alone
 * (so sharing a KV head's loads changes nothing), and the result follows
 * softmax attention written out in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "test.h"

static float *normals(nx_test_rng *r, int64_t n, float sigma) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = nx_test_rng_normal(r, sigma);
    return v;
}

static void test_value_sum_twins_agree_bit_for_bit(void) {
    static const int64_t hds[] = {1, 7, 16, 33, 256};
    static const int64_t ctxs[] = {1, 2, 17, 100, 64, 65, 130};   /* runs of 64 positions: whole, one past, two */
    nx_test_rng r = {0xA77E11ULL};
    if (!kn_init(0)) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++)
            for (int G = 1; G <= 6; G++) {
                const int64_t hd = hds[hi], n = ctxs[ci], stride = hd * 2 + 3, ldo = hd + 5, ldp = n + 2;
                float *v = normals(&r, n * stride, 1.0f), *p = normals(&r, G * ldp, 0.3f);
                float *ya = malloc((size_t)(G * ldo) * sizeof *ya), *yr = malloc((size_t)(G * ldo) * sizeof *yr);
                for (int64_t i = 0; i < G * ldo; i++) ya[i] = yr[i] = -5.0f;
                kn_attn_values_f32(ya, ldo, p, ldp, G, v, stride, n, hd);
                kn_attn_values_f32_ref(yr, ldo, p, ldp, G, v, stride, n, hd);
                CHECKF(memcmp(ya, yr, (size_t)(G * ldo) * sizeof *ya) == 0, "%s hd=%lld n=%lld G=%d: the twins differ",
                       kn_impl_name(), (long long)hd, (long long)n, G);
                int gaps = 0;   /* the columns between rows are left alone */
                for (int h = 0; h < G; h++)
                    for (int64_t d = hd; d < ldo && h * ldo + d < G * ldo; d++) gaps += ya[h * ldo + d] != -5.0f;
                CHECK(gaps == 0);
                free(v), free(p), free(ya), free(yr);
            }
    kn_init(0);
}

static void test_group_heads_equal_single_heads_and_follow_softmax(void) {
    enum { HD = 40, N = 37, STRIDE = 2 * HD };
    nx_test_rng r = {0x5EED0A77ULL};
    for (int mode = 0; mode < 2; mode++) {
        kn_init(mode);
        for (int G = 1; G <= 5; G++) {
            const int64_t ldq = 2 * HD;   /* query, then its gate, as the model stores them */
            float *q = normals(&r, G * ldq, 1.0f), *k = normals(&r, N * STRIDE, 1.0f), *v = normals(&r, N * STRIDE, 1.0f);
            float *out = malloc((size_t)(G * HD) * sizeof *out), one[HD], *scores = malloc((size_t)(G * N) * sizeof *scores);
            const float scale = 1.0f / sqrtf((float)HD);
            kn_attention_group(out, HD, q, ldq, G, k, v, STRIDE, N, HD, scale, scores);
            int differ = 0, off = 0;
            for (int h = 0; h < G; h++) {
                kn_attention_group(one, HD, q + h * ldq, ldq, 1, k, v, STRIDE, N, HD, scale, scores);
                differ += memcmp(one, out + h * HD, sizeof one) != 0;
                double w[N], mx = -INFINITY, sum = 0;
                for (int t = 0; t < N; t++) {
                    double dot = 0;
                    for (int d = 0; d < HD; d++) dot += (double)q[h * ldq + d] * k[t * STRIDE + d];
                    w[t] = dot * scale;
                    mx = fmax(mx, w[t]);
                }
                for (int t = 0; t < N; t++) sum += (w[t] = exp(w[t] - mx));
                for (int d = 0; d < HD; d++) {
                    double o = 0;
                    for (int t = 0; t < N; t++) o += w[t] / sum * v[t * STRIDE + d];
                    off += fabs(out[h * HD + d] - o) > 1e-5;
                }
            }
            CHECKF(differ == 0, "%s G=%d: %d heads differ from the head alone", kn_impl_name(), G, differ);
            CHECKF(off == 0, "%s G=%d: %d outputs off softmax attention", kn_impl_name(), G, off);
            free(q), free(k), free(v), free(out), free(scores);
        }
    }
    kn_init(0);
}

static const nx_test tests[] = {
    {"value_sum_twins_agree_bit_for_bit", "kn_attn_values_f32 == its scalar twin: odd head sizes, 1-6 heads, strides",
     test_value_sum_twins_agree_bit_for_bit},
    {"group_heads_equal_single_heads_and_follow_softmax",
     "each of G heads == that head alone, bit for bit; within 1e-5 of softmax attention in double; both modes",
     test_group_heads_equal_single_heads_and_follow_softmax},
};

NX_TEST_MAIN(tests)
