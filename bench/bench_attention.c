/* bench_attention.c — one decode step's attention over a cold KV cache.
 *
 *   bench-attention [CTX] [REPS] [T]   CTX: cached positions (default 660)
 *                                      REPS: timed steps (default 50)
 *                                      T: tokens per step (default 1; a
 *                                      verify of K drafts is K + 1)
 *
 * The 0.8B shape's attention: 6 layers x 2 KV heads of 4 query heads each,
 * head dim 256, caches head by head (as nx_state holds them: model.h's mdl_kv),
 * each call kn_attention on ONE thread, for the T tokens after CTX - T cached ones. Before each step a buffer
 * twice the L3 (at least 64 MB: bench_flush_bytes) is read, as a step's weights would, so the caches come
 * from DRAM.
 * Prints the median step time. NEXTN_BENCH_KERNELS=avx2 (or scalar,
 * avxvnni, avx512vnni) times an older kernel set; NEXTN_BENCH_KV=f16 a cache of f16
 * rows (nx_load_opts.kv_cache). Do not run it while a build runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "bench_util.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"

enum { LAYERS = 6, NKV = 2, G = 4, HD = 256 };

int main(int argc, char **argv) {
    const int64_t ctx = argc > 1 ? atol(argv[1]) : 660;
    const int reps = argc > 2 ? atoi(argv[2]) : 50, T = argc > 3 ? atoi(argv[3]) : 1;
    if (ctx < 1 || reps < 1 || T < 1 || T > ctx) {
        fprintf(stderr, "usage: bench-attention [CTX] [REPS] [T], 1 <= T <= CTX\n");
        return 2;
    }
    bench_select_kernels();
    const char *kv_env = getenv("NEXTN_BENCH_KV");
    const nx_dtype dt = kv_env && strcmp(kv_env, "f16") == 0 ? NX_DT_F16 : NX_DT_F32;
    const size_t es = dt == NX_DT_F16 ? 2 : 4;
    /* heads cap positions apart, whole K tiles (model.h's mdl_kv) */
    const int64_t cap = kn_k_cap(ctx);
    const size_t kvn = (size_t)cap * NKV * HD, flush_n = bench_flush_bytes();
    void *k[LAYERS], *v[LAYERS];
    float *q = malloc((size_t)T * G * HD * sizeof *q), *out = malloc((size_t)T * G * HD * sizeof *out);
    float *scores = malloc((size_t)T * G * (size_t)ctx * sizeof *scores);
    double *s = malloc((size_t)reps * sizeof *s);
    unsigned char *flush = malloc(flush_n);
    if (!q || !out || !scores || !s || !flush) return 1;
    for (int l = 0; l < LAYERS; l++) {
        k[l] = malloc(kvn * es), v[l] = malloc(kvn * es);
        if (!k[l] || !v[l]) return 1;
        for (size_t i = 0; i < kvn; i++) {
            const float kf = (float)(i * 2654435761u % 1000) * 1e-3f - 0.5f;
            const float vf = (float)(i * 40503u % 1000) * 1e-3f - 0.5f;
            if (dt == NX_DT_F16) ((uint16_t *)k[l])[i] = nx_f32_to_f16(kf), ((uint16_t *)v[l])[i] = nx_f32_to_f16(vf);
            else ((float *)k[l])[i] = kf, ((float *)v[l])[i] = vf;
        }
    }
    for (int i = 0; i < T * G * HD; i++) q[i] = (float)(i % 17) * 0.01f;
    memset(flush, 1, flush_n);
    volatile unsigned sink = 0;
    for (int r = 0; r < reps; r++) {
        for (size_t i = 0; i < flush_n; i += 64) sink += flush[i];
        const double t0 = nx_now_s();
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < NKV; h++) {
                const kn_attn_block b = {.out = out, .ldo = HD, .ldo_t = G * HD, .q = q, .ldq = HD, .ldq_t = G * HD,
                                         .G = G, .T = T, .k = (char *)k[l] + h * cap * HD * es,
                                         .v = (char *)v[l] + h * cap * HD * es, .kv_dtype = dt, .kv_stride = HD,
                                         .n0 = ctx - T, .hd = HD, .scale = 0.0625f};
                kn_attention(&b, scores);
            }
        s[r] = nx_now_s() - t0;
    }
    printf("kernels %s, %s cache, ctx %lld, T %d: %.3f ms per step (6 layers x 2 KV heads, one thread, cold cache), "
           "median of %d\n", kn_impl_name(), dt == NX_DT_F16 ? "f16" : "f32", (long long)ctx, T,
           bench_median(s, reps) * 1e3, reps);
    for (int l = 0; l < LAYERS; l++) free(k[l]), free(v[l]);
    free(q), free(out), free(scores), free(s), free(flush);
    return 0;
}
