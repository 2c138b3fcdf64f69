/* attention.c — a block of query rows of one KV head against the cache (see
 * attention.h), and the twins of the score pass and of the value sum. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"

#include "kernels/act.h"
#include "kernels/avx2.h"
#include "kernels/matmul.h"

/* Positions per run of the value sums: a run's V rows (64 KB at hd 256) stay
 * in L2 while every row of the block passes over them. */
#define KN_ATTN_VRUN 64

/* The value sums of a block of several tokens first read the block's first
 * run of V (KN_ATTN_VRUN rows), one load a cache line (independent loads:
 * many lines in flight), then compute on it from cache; the first token's
 * pass over each run fetches the next run into L2 in address order, a line
 * a step (vrun_fetch), as a one-token pass does. Before, every run was read
 * first so: on an earlier 2-core VM one thread streamed 30-47 GB/s with
 * plain loads but 14-16 GB/s when every loaded vector fed FMAs and L1
 * loads, and prefetching rows ahead (each step its own line of a row ahead,
 * not in address order) lost to it (MTP rounds' attention 0.79-0.84x the
 * time with it). Against that, on the Xeon VM with the cache from DRAM
 * (bench-attention's flush past the L3, one thread, 12 heads; the value
 * sums already one fused multiply-add a step): T = 4 at 576 positions
 * 1.14-1.15 -> 0.74-0.75 ms, at 4096 7.17-7.19 -> 4.86-4.89 ms; T = 2 0.90-0.94
 * -> 0.64-0.70, T = 8 1.63-1.85 -> 1.29, T = 32 4.9-5.2 -> 4.6-4.9; the AVX2
 * set (token by token) T = 4 1.44 -> 1.22 ms and 9.8-10.8 -> 8.8-8.9 ms.
 *
 * The score pass feeds each loaded vector of K to a fused multiply-add of
 * every row of the block, and there prefetching KN_ATTN_PF_TILES tiles ahead,
 * a line a step, beats reading first (one KV head, T = 4, 2048 positions, one
 * thread: 315-349 -> 261-274 us with the cache in L3, 589-663 -> 407-526 us
 * from DRAM, 12 heads in turn; whole q4 0.8B forwards, 2 threads, after
 * 2048 positions, the two in turn in one process: 4 tokens 0.956-0.967x the
 * time, 2 tokens 0.959x, 8 tokens 0.967x; after 512, 4 tokens 0.984x). */
#define KN_ATTN_PF_TILES 2

/* Query rows per batch of the score pass, and elements of d per pass of a
 * batch over the tiles: the batch's queries, transposed (qt[d][row]) so that
 * each step broadcasts its rows' q[d] from one base, fill 32 KB. Passes of
 * 512 elements for batches of up to 16 rows (hd 256 in one pass, not two)
 * were slower with the cache warm, one KV head, one thread: T = 1 at 2048
 * positions 122-131 -> 148-159 us, T = 4 270-326 -> 306-323 (the half
 * tiles of a pass and their prefetches fit L1 better). */
#define KN_ATTN_QROWS 64
#define KN_ATTN_QD 128

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Bytes of one cache element: nx_dtype_size for the two cache types, but
 * inline, so that with dt a constant in the value sums' inner loops (one
 * kv_at a position) it folds to a constant rather than a call a position. */
static size_t kv_bytes(nx_dtype dt) { return dt == NX_DT_F16 ? 2 : 4; }

/* Element i of a cache of dt (f32 or f16) from c. */
static const void *kv_at(const void *c, nx_dtype dt, int64_t i) { return (const char *)c + (size_t)i * kv_bytes(dt); }

/* Reads one byte of every cache line of the rows [t0, t1) of a cache (hd
 * elements each): a hint with no effect on any result (volatile, so that
 * the compiler keeps the loads). */
static void touch_rows(const void *c, nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1, int64_t hd) {
    const int64_t line = 64 / (int64_t)kv_bytes(dt);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t i = 0; i < hd; i += line) (void)*(const volatile char *)kv_at(c, dt, t * kv_stride + i);
}

/* x as a cache element of f16: nearest even, saturated (kn_attn_store_row). */
static uint16_t f16_saturated(float v) {
    if (v > 65504.0f) v = 65504.0f;   /* NaN fails both tests and stays NaN */
    else if (v < -65504.0f) v = -65504.0f;
    return nx_f32_to_f16(v);
}

void kn_attn_store_row(void *dst, nx_dtype dt, const float *x, int64_t n) {
    assert(dt == NX_DT_F32 || dt == NX_DT_F16);
    if (dt == NX_DT_F32) {
        memcpy(dst, x, (size_t)n * sizeof *x);
        return;
    }
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f16_saturated(x[i]);
}

void kn_attn_store_k(void *k, nx_dtype dt, int64_t t, const float *x, int64_t hd) {
    assert(dt == NX_DT_F32 || dt == NX_DT_F16);
    for (int64_t d = 0; d < hd; d++) {
        const int64_t i = kn_k_elem(t, d, hd);
        if (dt == NX_DT_F32) ((float *)k)[i] = x[d];
        else ((uint16_t *)k)[i] = f16_saturated(x[d]);
    }
}

/* Element i of K tiles of dt, widened to f32 (exact). */
static float k_elem(const void *k, nx_dtype dt, int64_t i) {
    return dt == NX_DT_F32 ? ((const float *)k)[i] : nx_f16_to_f32(((const uint16_t *)k)[i]);
}

void kn_attn_scores_ref(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,
                        const void *k, nx_dtype kdt, int64_t hd) {
    for (int j = 0; j < T; j++)
        for (int h = 0; h < G; h++) {
            const float *qr = q + j * ldq_t + h * ldq;
            float *sr = s + ((int64_t)j * G + h) * lds;
            for (int64_t t = 0; t <= n0 + j; t++) {
                float sum = 0.0f;
                for (int64_t d = 0; d < hd; d++) sum = fmaf(qr[d], k_elem(k, kdt, kn_k_elem(t, d, hd)), sum);
                sr[t] = sum;
            }
        }
}

void kn_attention(const kn_attn_block *b, float *scores) {
    assert(b->T >= 1 && b->G >= 1 && b->hd >= 1 && b->n0 >= 0);
    assert(b->kv_dtype == NX_DT_F32 || b->kv_dtype == NX_DT_F16);
    const int64_t n_all = b->n0 + b->T;   /* rows the block's last token sees */
    kn_attn_scores(scores, n_all, b->q, b->ldq, b->ldq_t, b->G, b->T, b->n0, b->k, b->kv_dtype, b->hd);
    for (int j = 0; j < b->T; j++)
        for (int64_t h = 0; h < b->G; h++) kn_softmax_f32(scores + (j * b->G + h) * n_all, b->n0 + j + 1, b->scale);
    kn_attn_values(b->out, b->ldo, b->ldo_t, scores, n_all, b->G, b->T, b->n0, b->v, b->kv_dtype, b->kv_stride,
                   b->hd);
}

/* o[i] = fmaf(a, x[i], o[i]) for i < n: the value sums' one operation. */
static void fma_row(float *o, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = fmaf(a, x[i], o[i]);
}

/* Adds p_t v_t for t in [t0, t1) to G rows of n columns (zeroed first when
 * t0 is 0): fma_row on each row v_t, f16 rows widened first. */
static void values_cols_ref(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const void *v, nx_dtype dt,
                            int64_t kv_stride, int64_t t0, int64_t t1, int64_t n) {
    enum { PIECE = 64 };
    float wide[PIECE];
    for (int h = 0; h < G; h++) {
        float *o = out + (int64_t)h * ldo;
        if (t0 == 0) memset(o, 0, (size_t)n * sizeof *o);
        for (int64_t t = t0; t < t1; t++) {
            const float a = p[(int64_t)h * ldp + t];
            if (dt == NX_DT_F32) {
                fma_row(o, a, kv_at(v, dt, t * kv_stride), n);
                continue;
            }
            const uint16_t *vt = kv_at(v, dt, t * kv_stride);
            for (int64_t i0 = 0; i0 < n; i0 += PIECE) {
                const int64_t m = min64(PIECE, n - i0);
                for (int64_t i = 0; i < m; i++) wide[i] = nx_f16_to_f32(vt[i0 + i]);
                fma_row(o + i0, a, wide, m);
            }
        }
    }
}

void kn_attn_values_ref(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T, int64_t n0,
                        const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd) {
    for (int j = 0; j < T; j++)
        values_cols_ref(out + j * ldo_t, ldo, p + (int64_t)j * G * ldp, ldp, G, v, vdt, kv_stride, 0, n0 + j + 1, hd);
}

#if KN_HAVE_X86
/* A one-token value pass's fetch of the runs ahead (values_heads_*): the V
 * rows from the run after [t0, ...) up to pf_end, a line a step in address
 * order, into L2; none where pf_end is 0. At f32 a pass over a run of hd
 * columns takes as many steps as the next run has lines. Against each step
 * fetching its own block (line) of the row KN_ATTN_VRUN ahead, the next
 * run's lines in the order the pass reads them (1 KB apart): with the cache
 * from DRAM (bench-attention's flush past the L3, one thread, the Xeon VM)
 * the value sums of 12 heads took 0.58-0.60 against 0.64-0.67 ms at 576
 * positions and 3.84-3.97 against 4.33-4.50 ms at 4096; whole steps after a
 * 4096-token prompt, both ways in turn in one process: q4 0.983x the time
 * (twice), q8 0.988x; after 512 level (1.001x). Two runs ahead ran as the
 * old way. (Asking for all of a row's lines at once in the first block's
 * pass, 1024 requests in a few hundred cycles, had left most of them
 * undone: bench-attention 3000, 9.6-11.4 -> 6.6 ms, an earlier VM.) A
 * block of tokens fetches the same way (above KN_ATTN_PF_TILES). */
typedef struct {
    const char *at, *end;
} vrun_fetch;

static vrun_fetch vrun_fetch_from(const void *v, nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t pf_end) {
    const int64_t from = t0 + KN_ATTN_VRUN < pf_end ? t0 + KN_ATTN_VRUN : pf_end;
    vrun_fetch f = {NULL, NULL};
    if (pf_end) f.at = kv_at(v, dt, from * kv_stride), f.end = kv_at(v, dt, pf_end * kv_stride);
    return f;
}

KN_AVX2_INLINE void vrun_fetch_step(vrun_fetch *f) {
    if (f->at < f->end) {
        _mm_prefetch(f->at, _MM_HINT_T1);
        f->at += 64;
    }
}

/* Columns in blocks of 16 (two vectors) for up to 4 heads at a time: the 8
 * sums stay in registers while the positions [t0, t1) of a run pass, and
 * each v_t block is loaded once for the heads; between runs the sums wait in
 * out (exact: they are f32 either way). While below pf_end (a step's first
 * heads, or a block's first token's), each step also fetches a line of the
 * runs ahead (vrun_fetch). The columns past the last whole block go to the
 * scalar twin. */
KN_AVX2_INLINE void values_heads_avx2(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const void *v,
                                      nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1, int64_t hd,
                                      int64_t pf_end) {
    const int64_t h16 = hd & ~(int64_t)15;
    vrun_fetch ahead = vrun_fetch_from(v, dt, kv_stride, t0, pf_end);
    for (int64_t d = 0; d < h16; d += 16) {
        __m256 acc[4][2];
        for (int h = 0; h < G; h++) {
            float *o = out + (int64_t)h * ldo + d;
            acc[h][0] = t0 ? _mm256_loadu_ps(o) : _mm256_setzero_ps();
            acc[h][1] = t0 ? _mm256_loadu_ps(o + 8) : _mm256_setzero_ps();
        }
        for (int64_t t = t0; t < t1; t++) {
            const void *vt = kv_at(v, dt, t * kv_stride + d);
            vrun_fetch_step(&ahead);
            const __m256 v0 = kn_load8_avx2(vt, dt, 0), v1 = kn_load8_avx2(vt, dt, 8);
            for (int h = 0; h < G; h++) {
                const __m256 a = _mm256_broadcast_ss(p + (int64_t)h * ldp + t);
                acc[h][0] = _mm256_fmadd_ps(a, v0, acc[h][0]);
                acc[h][1] = _mm256_fmadd_ps(a, v1, acc[h][1]);
            }
        }
        for (int h = 0; h < G; h++) {
            _mm256_storeu_ps(out + (int64_t)h * ldo + d, acc[h][0]);
            _mm256_storeu_ps(out + (int64_t)h * ldo + d + 8, acc[h][1]);
        }
    }
    if (h16 < hd) values_cols_ref(out + h16, ldo, p, ldp, G, kv_at(v, dt, h16), dt, kv_stride, t0, t1, hd - h16);
}

/* 16 elements of a cache row of dt from v, widened to f32 (exact). */
KN_VNNI_INLINE __m512 kv_load16_avx512(const void *v, nx_dtype dt) {
    if (dt == NX_DT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
    return _mm512_loadu_ps((const float *)v);
}

/* The AVX2 steps on 16-lane vectors (the avx512vnni set): one vector of 16
 * columns a head instead of two, the same fused multiply-add per element, so the
 * same bits, in half the operations. At T = 4 the value sums were as much
 * of a step as the scores; bench-attention, one thread, T = 4: 600
 * positions 1.84 -> 1.75 ms, 3000 positions 9.3-9.8 -> 8.8-9.0 ms. */
KN_VNNI_INLINE void values_heads_avx512(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const void *v,
                                        nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1, int64_t hd,
                                        int64_t pf_end) {
    const int64_t h16 = hd & ~(int64_t)15;
    vrun_fetch ahead = vrun_fetch_from(v, dt, kv_stride, t0, pf_end);
    for (int64_t d = 0; d < h16; d += 16) {
        __m512 acc[4];
        for (int h = 0; h < G; h++) acc[h] = t0 ? _mm512_loadu_ps(out + (int64_t)h * ldo + d) : _mm512_setzero_ps();
        for (int64_t t = t0; t < t1; t++) {
            const void *vt = kv_at(v, dt, t * kv_stride + d);
            vrun_fetch_step(&ahead);
            const __m512 v0 = kv_load16_avx512(vt, dt);
            for (int h = 0; h < G; h++)
                acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(p[(int64_t)h * ldp + t]), v0, acc[h]);
        }
        for (int h = 0; h < G; h++) _mm512_storeu_ps(out + (int64_t)h * ldo + d, acc[h]);
    }
    if (h16 < hd) values_cols_ref(out + h16, ldo, p, ldp, G, kv_at(v, dt, h16), dt, kv_stride, t0, t1, hd - h16);
}

/* values_heads_avx512 for the 4 heads of ntok (2-4, a constant after
 * inlining) tokens at once, over positions [t0, t1) (at most KN_ATTN_VRUN)
 * that every one of them sees: each v_t block is loaded once for the 4 *
 * ntok rows, whose sums stay in registers, and the rows' weights p_t are
 * first gathered position by position (pt) so that the loop reads them from
 * one base. Row (j, h) is p + (j * 4 + h) * ldp against out + j * ldo_t + h
 * * ldo; each sees the same fused multiply-add per element, in order of t, as on
 * its own. */
KN_VNNI_INLINE void values_tokens_avx512(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int ntok,
                                         const void *v, nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1,
                                         int64_t hd, int64_t pf_end) {
    vrun_fetch ahead = vrun_fetch_from(v, dt, kv_stride, t0, pf_end);
    const int R = 4 * ntok;
    float pt[KN_ATTN_VRUN][16];
    assert(t1 - t0 <= KN_ATTN_VRUN);
    for (int r = 0; r < R; r++)
        for (int64_t t = t0; t < t1; t++) pt[t - t0][r] = p[(int64_t)r * ldp + t];
    const int64_t h16 = hd & ~(int64_t)15;
    for (int64_t d = 0; d < h16; d += 16) {
        __m512 acc[16];
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {
            const float *o = out + r / 4 * ldo_t + r % 4 * ldo + d;
            acc[r] = t0 ? _mm512_loadu_ps(o) : _mm512_setzero_ps();
        }
        for (int64_t t = t0; t < t1; t++) {
            vrun_fetch_step(&ahead);
            const __m512 v0 = kv_load16_avx512(kv_at(v, dt, t * kv_stride + d), dt);
            const float *w = pt[t - t0];
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r]), v0, acc[r]);
        }
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
            _mm512_storeu_ps(out + r / 4 * ldo_t + r % 4 * ldo + d, acc[r]);
    }
    if (h16 < hd)
        for (int j = 0; j < ntok; j++)
            values_cols_ref(out + j * ldo_t + h16, ldo, p + (int64_t)j * 4 * ldp, ldp, 4, kv_at(v, dt, h16), dt,
                            kv_stride, t0, t1, hd - h16);
}

/* Run by run, every row of the block over the run's positions it sees, up
 * to 4 heads a call of HEADS (each head count its own inlined copy), the
 * cache's element type DT a constant in each. */
#define KN_ATTN_VALUES_RUNS(HEADS, DT)                                                                              \
    do {                                                                                                            \
        const int64_t n_all = n0 + T;                                                                               \
        for (int64_t t0 = 0; t0 < n_all; t0 += KN_ATTN_VRUN) {                                                      \
            const int64_t t1 = min64(t0 + KN_ATTN_VRUN, n_all);                                                     \
            if (T > 1 && t0 == 0) touch_rows(v, DT, kv_stride, t0, t1, hd); /* a block's first run read first */    \
            for (int j = 0; j < T; j++) {                                                                           \
                const int64_t e = min64(t1, n0 + j + 1);                                                            \
                if (e <= t0) continue;                                                                              \
                const float *pj = p + (int64_t)j * G * ldp;                                                         \
                float *oj = out + j * ldo_t;                                                                        \
                int64_t pf = j == 0 ? n_all : 0; /* the first token's first heads fetch the next run */            \
                int h = 0;                                                                                          \
                for (; h + 4 <= G; h += 4, pf = 0)                                                                  \
                    HEADS(oj + h * ldo, ldo, pj + h * ldp, ldp, 4, v, DT, kv_stride, t0, e, hd, pf);                \
                switch (G - h) {                                                                                    \
                case 3: HEADS(oj + h * ldo, ldo, pj + h * ldp, ldp, 3, v, DT, kv_stride, t0, e, hd, pf); break;     \
                case 2: HEADS(oj + h * ldo, ldo, pj + h * ldp, ldp, 2, v, DT, kv_stride, t0, e, hd, pf); break;     \
                case 1: HEADS(oj + h * ldo, ldo, pj + h * ldp, ldp, 1, v, DT, kv_stride, t0, e, hd, pf); break;     \
                default: break;                                                                                     \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)

KN_AVX2 void kn_attn_values_avx2(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T,
                                 int64_t n0, const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd) {
    if (vdt == NX_DT_F16) KN_ATTN_VALUES_RUNS(values_heads_avx2, NX_DT_F16);
    else KN_ATTN_VALUES_RUNS(values_heads_avx2, NX_DT_F32);
}

/* 4 heads a KV head (the 0.8B shape's) and a block of tokens: up to 4
 * tokens' rows at once (values_tokens_avx512) over the positions all of them
 * see, then each token on its own over the rest of the run it sees. Against
 * a token at a time (bench-attention, one thread, T = 4, the two in turn,
 * 10 pairs on the Sapphire Rapids VM): 640 positions 4.0-6.0 ms against
 * 4.6-6.9, 4000 positions 24.6-35.0 against 28.5-40.3; 8 of the 10 pairs
 * faster, by 10-20% in most. dt is a constant after inlining. */
KN_VNNI_INLINE void values_avx512(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T,
                                  int64_t n0, const void *v, nx_dtype dt, int64_t kv_stride, int64_t hd) {
    if (G != 4 || T == 1) {
        KN_ATTN_VALUES_RUNS(values_heads_avx512, dt);
        return;
    }
    const int64_t n_all = n0 + T;
    for (int64_t t0 = 0; t0 < n_all; t0 += KN_ATTN_VRUN) {
        const int64_t t1 = min64(t0 + KN_ATTN_VRUN, n_all);
        if (t0 == 0) touch_rows(v, dt, kv_stride, t0, t1, hd);   /* a block's first run read first (above) */
        for (int j0 = 0; j0 < T; j0 += 4) {
            const int ntok = T - j0 < 4 ? T - j0 : 4;
            /* [t0, shared): the run's positions every token of the group sees */
            const int64_t shared = n0 + j0 + 1 < t0 ? t0 : min64(t1, n0 + j0 + 1);
            float *oj = out + j0 * ldo_t;
            const float *pj = p + (int64_t)j0 * 4 * ldp;
            const int64_t pf = j0 == 0 ? n_all : 0;   /* the first group's pass fetches the next run */
            switch (shared > t0 ? ntok : 0) {
            case 4: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 4, v, dt, kv_stride, t0, shared, hd, pf); break;
            case 3: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 3, v, dt, kv_stride, t0, shared, hd, pf); break;
            case 2: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 2, v, dt, kv_stride, t0, shared, hd, pf); break;
            case 1: values_heads_avx512(oj, ldo, pj, ldp, 4, v, dt, kv_stride, t0, shared, hd, 0); break;
            default: break;   /* none of the group sees this run's positions */
            }
            for (int j = j0 + 1; j < j0 + ntok; j++) {   /* token j also sees positions up to n0 + j */
                const int64_t e = min64(t1, n0 + j + 1);
                if (e > shared)
                    values_heads_avx512(out + j * ldo_t, ldo, p + (int64_t)j * 4 * ldp, ldp, 4, v, dt, kv_stride,
                                        shared, e, hd, 0);
            }
        }
    }
}

KN_VNNI void kn_attn_values_avx512(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int G, int T,
                                   int64_t n0, const void *v, nx_dtype vdt, int64_t kv_stride, int64_t hd) {
    if (vdt == NX_DT_F16) values_avx512(out, ldo, ldo_t, p, ldp, G, T, n0, v, NX_DT_F16, kv_stride, hd);
    else values_avx512(out, ldo, ldo_t, p, ldp, G, T, n0, v, NX_DT_F32, kv_stride, hd);
}
#undef KN_ATTN_VALUES_RUNS

/* The score pass of a SIMD set. Against the K rows it replaced (a run of
 * rows at a time through kn_matmul_rows: a sum across a vector for every
 * score), one KV head of the 0.8B shape (4 heads, hd 256) with its cache
 * warm, one thread, the Zen 5 VM: T = 4 at 2048 positions 445-474 -> 283-290
 * us, at 512 97-130 -> 73 us, T = 8 at 512 159-165 -> 124-126 us, T = 1 at
 * 2048 105-135 -> 94 us (the AVX2 set: T = 4 at 2048 591-602 -> 507-511 us;
 * T = 1, with both halves of a tile at once, 187-202 -> 116-139 us in a
 * slower phase). The block's query rows (row r is token r /
 * G's head r % G) go in batches of KN_ATTN_QROWS, each over the tiles its
 * last row sees, in passes of KN_ATTN_QD elements of d: a pass transposes
 * the batch's queries into qt, and a later pass resumes each sum from s
 * (exact: it is f32 either way). ROWS(s, lds, qt, r0, nr, G, n0, t0, kt,
 * tile, n_end, DT, nd, pf, resume) adds the products of the tile at kt
 * (tile elements a tile), and maybe of the next one, for the batch's rows
 * r0 .. r0 + nr - 1, s at row r0, and returns the tiles it took,
 * prefetching pf elements ahead; DT is a constant in each copy. */
#define KN_ATTN_SCORES_TILES(ROWS, DT)                                                                              \
    do {                                                                                                            \
        float qt[KN_ATTN_QD * KN_ATTN_QROWS];                                                                       \
        const int rows = G * T;                                                                                     \
        for (int r0 = 0; r0 < rows; r0 += KN_ATTN_QROWS) {                                                          \
            const int nr = rows - r0 < KN_ATTN_QROWS ? rows - r0 : KN_ATTN_QROWS;                                   \
            const int64_t n_end = n0 + (r0 + nr - 1) / G + 1; /* positions the batch's last row sees */            \
            for (int64_t d0 = 0; d0 < hd; d0 += KN_ATTN_QD) {                                                       \
                const int64_t nd = min64(KN_ATTN_QD, hd - d0);                                                      \
                for (int r = 0; r < nr; r++) {                                                                      \
                    const float *qr = q + (r0 + r) / G * ldq_t + (r0 + r) % G * ldq + d0;                           \
                    for (int64_t d = 0; d < nd; d++) qt[d * KN_ATTN_QROWS + r] = qr[d];                             \
                }                                                                                                   \
                for (int64_t t0 = 0; t0 < n_end;)                                                                   \
                    t0 += KN_KTILE * ROWS(s + (int64_t)r0 * lds, lds, qt, r0, nr, G, n0, t0,                        \
                                          kv_at(k, DT, t0 * hd + d0 * KN_KTILE), hd * KN_KTILE, n_end, DT, nd,       \
                                          KN_ATTN_PF_TILES * hd * KN_KTILE, d0 > 0);                                \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)

/* A set's kn_attn_scores, ATTR its target attribute, ROWS its tile's rows. */
#define KN_ATTN_SCORES_FN(NAME, ATTR, ROWS)                                                                         \
    ATTR void NAME(float *s, int64_t lds, const float *q, int64_t ldq, int64_t ldq_t, int G, int T, int64_t n0,      \
                   const void *k, nx_dtype kdt, int64_t hd) {                                                       \
        if (kdt == NX_DT_F16) KN_ATTN_SCORES_TILES(ROWS, NX_DT_F16);                                                \
        else KN_ATTN_SCORES_TILES(ROWS, NX_DT_F32);                                                                 \
    }

/* Lanes of a tile from t0 that row r (token r / G) sees, 0 .. width. */
static int lanes_seen(int64_t n0, int64_t r, int G, int64_t t0, int width) {
    const int64_t n = n0 + r / G + 1 - t0;
    return n <= 0 ? 0 : n >= width ? width : (int)n;
}

/* NH (1 or 2) halves of a tile, 8 lanes each from kt (element d of the tile
 * at d * KN_KTILE), for R rows from r_abs (NH and R constants after
 * inlining, R * NH <= 12): the sums in registers, each step one load of K a
 * half and a broadcast fused multiply-add a row. Both halves at once give a
 * step of few rows (a decode step's 4) twice the independent sums, so that
 * the FMA latency does not bind. */
KN_AVX2_INLINE void scores_rows8_avx2(float *s, int64_t lds, const float *qt, int R, int NH, int64_t r_abs, int G,
                                      int64_t n0, int64_t t0, const void *kt, nx_dtype dt, int64_t nd, int64_t pf,
                                      int resume) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 acc[12];
    __m256i m[12];
    for (int b = 0; b < NH; b++)
        for (int r = 0; r < R; r++) {
            const int i = b * R + r;
            m[i] = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes_seen(n0, r_abs + r, G, t0 + 8 * b, 8)), iota);
            acc[i] = resume ? _mm256_maskload_ps(s + r * lds + t0 + 8 * b, m[i]) : _mm256_setzero_ps();
        }
    for (int64_t d = 0; d < nd; d++) {
        const void *kd = kv_at(kt, dt, d * KN_KTILE);
        if (pf) _mm_prefetch((const char *)kv_at(kd, dt, pf), _MM_HINT_T0);
        const float *qd = qt + d * KN_ATTN_QROWS;
        for (int b = 0; b < NH; b++) {
            const __m256 kv = kn_load8_avx2(kd, dt, 8 * b);
            for (int r = 0; r < R; r++)
                acc[b * R + r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qd + r), kv, acc[b * R + r]);
        }
    }
    for (int b = 0; b < NH; b++)
        for (int r = 0; r < R; r++) _mm256_maskstore_ps(s + r * lds + t0 + 8 * b, m[b * R + r], acc[b * R + r]);
}

/* The AVX2 set's rows of one tile: up to 6 rows, both halves at once; else
 * each half (8 lanes) for groups of up to 8 rows, those no row of which
 * sees the half skipped. */
KN_AVX2_INLINE int scores_tile_avx2(float *s, int64_t lds, const float *qt, int r0, int nr, int G, int64_t n0,
                                    int64_t t0, const void *kt, int64_t tile, int64_t n_end, nx_dtype dt, int64_t nd,
                                    int64_t pf, int resume) {
    (void)tile, (void)n_end;
    if (nr <= 6) {
        float *sg = s;
        const float *qg = qt;
        const void *kh = kt;
        const int g = 0;
        const int64_t th = t0, hpf = pf;
#define KN_SCORES_AVX2(n, nh) \
    case n: scores_rows8_avx2(sg, lds, qg, n, nh, r0 + g, G, n0, th, kh, dt, nd, hpf, resume); break;
        switch (nr) {
            KN_SCORES_AVX2(1, 2) KN_SCORES_AVX2(2, 2) KN_SCORES_AVX2(3, 2) KN_SCORES_AVX2(4, 2)
            KN_SCORES_AVX2(5, 2) default: KN_SCORES_AVX2(6, 2)
        }
        return 1;
    }
    for (int half = 0; half < 2; half++)
        for (int g = 0; g < nr; g += 8) {
            const int R = nr - g < 8 ? nr - g : 8;
            const int64_t th = t0 + 8 * half;
            if (!lanes_seen(n0, r0 + g + R - 1, G, th, 8)) continue;
            float *sg = s + (int64_t)g * lds;
            const float *qg = qt + g;
            const void *kh = kv_at(kt, dt, 8 * half);
            const int64_t hpf = half ? 0 : pf;   /* the first half's steps fetch the whole tile ahead */
            switch (R) {
                KN_SCORES_AVX2(1, 1) KN_SCORES_AVX2(2, 1) KN_SCORES_AVX2(3, 1) KN_SCORES_AVX2(4, 1)
                KN_SCORES_AVX2(5, 1) KN_SCORES_AVX2(6, 1) KN_SCORES_AVX2(7, 1) default: KN_SCORES_AVX2(8, 1)
            }
        }
#undef KN_SCORES_AVX2
    return 1;
}

KN_ATTN_SCORES_FN(kn_attn_scores_avx2, KN_AVX2, scores_tile_avx2)

/* scores_rows8_avx2 on whole tiles (16 lanes), up to 16 rows of NT tiles
 * (NT 1 or 2 and R constants after inlining, R * NT <= 16), the next tile
 * tile elements on: a step's broadcast folds into its fused multiply-adds.
 * Two tiles at once give a step of few rows (a decode step's 4) twice the
 * independent sums, so that the FMA latency (4 cycles) does not bind. */
KN_VNNI_INLINE void scores_rows16_avx512(float *s, int64_t lds, const float *qt, int R, int NT, int64_t r_abs, int G,
                                         int64_t n0, int64_t t0, const void *kt, int64_t tile, nx_dtype dt,
                                         int64_t nd, int64_t pf, int resume) {
    __m512 acc[16];
    __mmask16 m[16];
    for (int b = 0; b < NT; b++)
        for (int r = 0; r < R; r++) {
            const int64_t tb = t0 + b * KN_KTILE;
            m[b * R + r] = (__mmask16)((1u << lanes_seen(n0, r_abs + r, G, tb, 16)) - 1);
            acc[b * R + r] = resume ? _mm512_maskz_loadu_ps(m[b * R + r], s + r * lds + tb) : _mm512_setzero_ps();
        }
    for (int64_t d = 0; d < nd; d++) {
        const float *qd = qt + d * KN_ATTN_QROWS;
        for (int b = 0; b < NT; b++) {
            const void *kd = kv_at(kt, dt, b * tile + d * KN_KTILE);
            _mm_prefetch((const char *)kv_at(kd, dt, pf), _MM_HINT_T0);
            const __m512 kv = kv_load16_avx512(kd, dt);
            for (int r = 0; r < R; r++)
                acc[b * R + r] = _mm512_fmadd_ps(_mm512_set1_ps(qd[r]), kv, acc[b * R + r]);
        }
    }
    for (int b = 0; b < NT; b++)
        for (int r = 0; r < R; r++)
            _mm512_mask_storeu_ps(s + r * lds + t0 + b * KN_KTILE, m[b * R + r], acc[b * R + r]);
}

/* The AVX-512 set's rows of a tile: up to 8 rows and another tile to go,
 * both tiles at once; else the tile for groups of up to 16 rows, those no
 * row of which sees it skipped. Either way the steps fetch the tiles the
 * next call takes: pf (KN_ATTN_PF_TILES) ahead of a pair, one tile ahead
 * of a single tile. One tile ahead for a verify's 16 rows (4 tokens x 4
 * heads) against two, the cache from DRAM (bench-attention's flush past
 * the L3, one thread, 12 heads, the Xeon VM): scores of 4 tokens 0.82 /
 * 0.82 against 0.89 / 0.96 ms at 576 positions, 5.2 / 5.4 against 5.6 /
 * 5.9 ms at 4096; for a step's pairs one tile ahead ran 1.06x slower
 * (0.56 against 0.53 ms). The AVX2 set's 4 tokens ran alike both ways
 * (1.27-1.34 ms: their arithmetic bounds them), and keep two. */
KN_VNNI_INLINE int scores_tile_avx512(float *s, int64_t lds, const float *qt, int r0, int nr, int G, int64_t n0,
                                      int64_t t0, const void *kt, int64_t tile, int64_t n_end, nx_dtype dt,
                                      int64_t nd, int64_t pf, int resume) {
#define KN_SCORES_AVX512(n, nt) \
    case n:                                                                                                         \
        scores_rows16_avx512(sg, lds, qg, n, nt, r0 + g, G, n0, t0, kt, tile, dt, nd, nt == 2 ? pf : tile, resume); \
        break;
    if (nr <= 8 && t0 + KN_KTILE < n_end) {
        float *sg = s;
        const float *qg = qt;
        const int g = 0;
        switch (nr) {
            KN_SCORES_AVX512(1, 2) KN_SCORES_AVX512(2, 2) KN_SCORES_AVX512(3, 2) KN_SCORES_AVX512(4, 2)
            KN_SCORES_AVX512(5, 2) KN_SCORES_AVX512(6, 2) KN_SCORES_AVX512(7, 2) default: KN_SCORES_AVX512(8, 2)
        }
        return 2;
    }
    for (int g = 0; g < nr; g += 16) {
        const int R = nr - g < 16 ? nr - g : 16;
        if (!lanes_seen(n0, r0 + g + R - 1, G, t0, 16)) continue;
        float *sg = s + (int64_t)g * lds;
        const float *qg = qt + g;
        switch (R) {
            KN_SCORES_AVX512(1, 1) KN_SCORES_AVX512(2, 1) KN_SCORES_AVX512(3, 1) KN_SCORES_AVX512(4, 1)
            KN_SCORES_AVX512(5, 1) KN_SCORES_AVX512(6, 1) KN_SCORES_AVX512(7, 1) KN_SCORES_AVX512(8, 1)
            KN_SCORES_AVX512(9, 1) KN_SCORES_AVX512(10, 1) KN_SCORES_AVX512(11, 1) KN_SCORES_AVX512(12, 1)
            KN_SCORES_AVX512(13, 1) KN_SCORES_AVX512(14, 1) KN_SCORES_AVX512(15, 1) default: KN_SCORES_AVX512(16, 1)
        }
    }
#undef KN_SCORES_AVX512
    return 1;
}

KN_ATTN_SCORES_FN(kn_attn_scores_avx512, KN_VNNI, scores_tile_avx512)
#undef KN_ATTN_SCORES_FN
#undef KN_ATTN_SCORES_TILES
#endif
