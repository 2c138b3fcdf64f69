/* attention.c — a block of query rows of one KV head against the cache (see
 * attention.h), and the twins of the value sum. */
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

/* Positions per call of the score pass of a block of several tokens. A
 * run's K rows (12 KB of f32, 6 KB of f16) stay in L1 while the block's tokens pass over them, in
 * tiles of rows (kn_matmul_rows: one tile group a run). The K rows are read
 * in order, each head's rows one run of memory (model.h's mdl_kv).
 *
 * One token's step takes all its rows in one call, whose tiles prefetch the
 * next group of rows. On the Zen 5 VM, bench-attention, one thread, 3000
 * positions, against runs of KN_ATTN_KRUN rows (which get no prefetch) and
 * f32 rows one by one (the older kn_matmul_rows_stream, which relied on the
 * hardware prefetcher): the AVX-512 set 3.97 -> 3.67-3.79 ms with f32 rows
 * and 3.13-3.17 -> 1.85 ms with f16 ones (8000 positions 9.5-9.8 -> 4.9-5.6
 * ms), 600 positions f32 0.76-0.85 -> 0.68-0.71 ms; the AVX2 set 2.93-2.97
 * -> 3.09-3.10 ms with f32 rows, f16 level (2.50 / 2.44-2.48).
 *
 * A block of several tokens spends more time on each row, and there the
 * rows come from DRAM at a fraction of the bandwidth: on this 2-core VM one
 * thread streams 30-47 GB/s with plain loads but 14-16 GB/s when every
 * loaded vector feeds FMAs and L1 loads, and software prefetch a few dozen
 * rows ahead does not change that. So a block first reads KN_ATTN_TOUCH rows
 * of K, and each run of V, one load a cache line (independent loads: many
 * lines in flight), then computes on them from cache. In the pipeline the
 * attention jobs of MTP rounds took 0.79-0.84x the time of prefetching rows
 * ahead (q4 and q8, 512-token prompts, 6 runs of alternating blocks of
 * rounds); one token's step, touched first, ran 0.93-1.02x (left as it is). */
#define KN_ATTN_KRUN KN_TILE_GROUP
#define KN_ATTN_TOUCH 64
_Static_assert(KN_ATTN_TOUCH >= KN_ATTN_KRUN, "a touch covers at least the run it is made for");

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

void kn_attn_store_row(void *dst, nx_dtype dt, const float *x, int64_t n) {
    assert(dt == NX_DT_F32 || dt == NX_DT_F16);
    if (dt == NX_DT_F32) {
        memcpy(dst, x, (size_t)n * sizeof *x);
        return;
    }
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (v > 65504.0f) v = 65504.0f;   /* NaN fails both tests and stays NaN */
        else if (v < -65504.0f) v = -65504.0f;
        h[i] = nx_f32_to_f16(v);
    }
}

void kn_attention(const kn_attn_block *b, float *scores) {
    assert(b->T >= 1 && b->G >= 1 && b->hd >= 1 && b->n0 >= 0);
    assert(b->kv_dtype == NX_DT_F32 || b->kv_dtype == NX_DT_F16);
    const int64_t n_all = b->n0 + b->T, G = b->G;   /* rows the block's last token sees */
    /* scores row (j, h) at scores + (j * G + h) * n_all = q_(j,h) . k_t for
     * t <= n0 + j: the cache rows as one strided matrix against each token's
     * G queries, in a block a run of rows at a time so that the run is loaded
     * once for the whole block (kn_matmul_rows sums each product exactly as
     * kn_dot_f32 does, whatever rows a call covers; f16 rows as the dense
     * f16 weights they are to it) */
    const kn_mat kh = {.data = b->k, .dtype = b->kv_dtype, .rows = n_all, .cols = b->hd, .ld = b->kv_stride};
    if (b->T == 1) kn_matmul_rows(&kh, b->q, b->ldq, (int)G, scores, n_all, 0, n_all);   /* one call (above) */
    int64_t touched = 0;   /* K rows [0, touched) read ahead */
    for (int64_t t0 = 0; b->T > 1 && t0 < n_all; t0 += KN_ATTN_KRUN) {
        const int64_t t1 = min64(t0 + KN_ATTN_KRUN, n_all);
        if (touched < t1) {
            const int64_t e = min64(touched + KN_ATTN_TOUCH, n_all);
            touch_rows(b->k, b->kv_dtype, b->kv_stride, touched, e, b->hd);
            touched = e;
        }
        for (int j = 0; j < b->T; j++) {
            const int64_t e = min64(t1, b->n0 + j + 1);
            if (e <= t0) continue;
            const float *qj = b->q + j * b->ldq_t;
            float *sj = scores + j * G * n_all;
            kn_matmul_rows(&kh, qj, b->ldq, (int)G, sj, n_all, t0, e);
        }
    }
    for (int j = 0; j < b->T; j++)
        for (int64_t h = 0; h < G; h++) kn_softmax_f32(scores + (j * G + h) * n_all, b->n0 + j + 1, b->scale);
    kn_attn_values(b->out, b->ldo, b->ldo_t, scores, n_all, b->G, b->T, b->n0, b->v, b->kv_dtype, b->kv_stride,
                   b->hd);
}

/* Adds p_t v_t for t in [t0, t1) to G rows of n columns (zeroed first when
 * t0 is 0): kn_axpy_f32_ref on each row v_t, f16 rows widened first. */
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
                kn_axpy_f32_ref(o, a, kv_at(v, dt, t * kv_stride), n);
                continue;
            }
            const uint16_t *vt = kv_at(v, dt, t * kv_stride);
            for (int64_t i0 = 0; i0 < n; i0 += PIECE) {
                const int64_t m = min64(PIECE, n - i0);
                for (int64_t i = 0; i < m; i++) wide[i] = nx_f16_to_f32(vt[i0 + i]);
                kn_axpy_f32_ref(o + i0, a, wide, m);
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
/* Columns in blocks of 16 (two vectors) for up to 4 heads at a time: the 8
 * sums stay in registers while the positions [t0, t1) of a run pass, and
 * each v_t block is loaded once for the heads; between runs the sums wait in
 * out (exact: they are f32 either way). While below pf_end (a one-token
 * step; a block reads each run first, see KN_ATTN_TOUCH), each step also
 * prefetches its block (one cache line) of the row KN_ATTN_VRUN ahead: the
 * next run's, spread one line a step over the whole pass. (Asking for all of
 * a row's lines at once in the first block's pass, 1024 requests in a few
 * hundred cycles, left most of them undone: bench-attention 3000 with the
 * cache head by head, 9.6-11.4 -> 6.6 ms.) The columns past the last whole
 * block go to the scalar twin. */
KN_AVX2_INLINE void values_heads_avx2(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const void *v,
                                      nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1, int64_t hd,
                                      int64_t pf_end) {
    const int64_t h16 = hd & ~(int64_t)15;
    for (int64_t d = 0; d < h16; d += 16) {
        __m256 acc[4][2];
        for (int h = 0; h < G; h++) {
            float *o = out + (int64_t)h * ldo + d;
            acc[h][0] = t0 ? _mm256_loadu_ps(o) : _mm256_setzero_ps();
            acc[h][1] = t0 ? _mm256_loadu_ps(o + 8) : _mm256_setzero_ps();
        }
        for (int64_t t = t0; t < t1; t++) {
            const void *vt = kv_at(v, dt, t * kv_stride + d);
            if (t + KN_ATTN_VRUN < pf_end)
                _mm_prefetch((const char *)kv_at(vt, dt, KN_ATTN_VRUN * kv_stride), _MM_HINT_T1);
            const __m256 v0 = kn_load8_avx2(vt, dt, 0), v1 = kn_load8_avx2(vt, dt, 8);
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
    if (h16 < hd) values_cols_ref(out + h16, ldo, p, ldp, G, kv_at(v, dt, h16), dt, kv_stride, t0, t1, hd - h16);
}

/* 16 elements of a cache row of dt from v, widened to f32 (exact). */
KN_VNNI_INLINE __m512 kv_load16_avx512(const void *v, nx_dtype dt) {
    if (dt == NX_DT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
    return _mm512_loadu_ps((const float *)v);
}

/* The AVX2 steps on 16-lane vectors (the avx512vnni set): one vector of 16
 * columns a head instead of two, the same mul and add per element, so the
 * same bits, in half the operations. At T = 4 the value sums were as much
 * of a step as the scores; bench-attention, one thread, T = 4: 600
 * positions 1.84 -> 1.75 ms, 3000 positions 9.3-9.8 -> 8.8-9.0 ms. */
KN_VNNI_INLINE void values_heads_avx512(float *out, int64_t ldo, const float *p, int64_t ldp, int G, const void *v,
                                        nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1, int64_t hd,
                                        int64_t pf_end) {
    const int64_t h16 = hd & ~(int64_t)15;
    for (int64_t d = 0; d < h16; d += 16) {
        __m512 acc[4];
        for (int h = 0; h < G; h++) acc[h] = t0 ? _mm512_loadu_ps(out + (int64_t)h * ldo + d) : _mm512_setzero_ps();
        for (int64_t t = t0; t < t1; t++) {
            const void *vt = kv_at(v, dt, t * kv_stride + d);
            if (t + KN_ATTN_VRUN < pf_end)
                _mm_prefetch((const char *)kv_at(vt, dt, KN_ATTN_VRUN * kv_stride), _MM_HINT_T1);
            const __m512 v0 = kv_load16_avx512(vt, dt);
            for (int h = 0; h < G; h++)
                acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_set1_ps(p[(int64_t)h * ldp + t]), v0));
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
 * * ldo; each sees the same mul and add per element, in order of t, as on
 * its own. */
KN_VNNI_INLINE void values_tokens_avx512(float *out, int64_t ldo, int64_t ldo_t, const float *p, int64_t ldp, int ntok,
                                         const void *v, nx_dtype dt, int64_t kv_stride, int64_t t0, int64_t t1,
                                         int64_t hd) {
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
            const __m512 v0 = kv_load16_avx512(kv_at(v, dt, t * kv_stride + d), dt);
            const float *w = pt[t - t0];
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_set1_ps(w[r]), v0));
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
            if (T > 1) touch_rows(v, DT, kv_stride, t0, t1, hd);   /* a block's run read first (above) */          \
            for (int j = 0; j < T; j++) {                                                                           \
                const int64_t e = min64(t1, n0 + j + 1);                                                            \
                if (e <= t0) continue;                                                                              \
                const float *pj = p + (int64_t)j * G * ldp;                                                         \
                float *oj = out + j * ldo_t;                                                                        \
                int64_t pf = T == 1 ? n_all : 0; /* a step's first heads fetch the next run */                     \
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
        touch_rows(v, dt, kv_stride, t0, t1, hd);   /* a block's run read first (KN_ATTN_TOUCH) */
        for (int j0 = 0; j0 < T; j0 += 4) {
            const int ntok = T - j0 < 4 ? T - j0 : 4;
            /* [t0, shared): the run's positions every token of the group sees */
            const int64_t shared = n0 + j0 + 1 < t0 ? t0 : min64(t1, n0 + j0 + 1);
            float *oj = out + j0 * ldo_t;
            const float *pj = p + (int64_t)j0 * 4 * ldp;
            switch (shared > t0 ? ntok : 0) {
            case 4: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 4, v, dt, kv_stride, t0, shared, hd); break;
            case 3: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 3, v, dt, kv_stride, t0, shared, hd); break;
            case 2: values_tokens_avx512(oj, ldo, ldo_t, pj, ldp, 2, v, dt, kv_stride, t0, shared, hd); break;
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
#endif
