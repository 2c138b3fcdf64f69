/* gdn.c — depthwise conv and gated delta rule (see gdn.h). */
#include "kernels/gdn.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/act.h"
#include "kernels/avx2.h"
#include "kernels/matmul.h"

/* Channels per block of kn_conv_silu: 64 channels of kc taps and kc - 1 +
 * T rows stay in L1. Against the whole range tap by tap (after copying the
 * window together), a GDN layer's conv at the 0.8B shape (6144 channels, 2
 * threads, a q4 decode) took 17 us against 23-26 (bench/RESULTS.md). */
#define CONV_BLOCK 64

/* kn_conv_silu's body; silu: the set's kn_silu_mul_f32 twin. */
static inline __attribute__((always_inline)) void conv_silu_blocks(float *out, const float *const rows[], int64_t ld, int T,
                                                                   const float *w, int kc, int64_t c0, int64_t c1,
                                                                   void (*silu)(float *, const float *, const float *,
                                                                                int64_t)) {
    assert(kc >= 1 && T >= 0);
    for (int64_t b0 = c0; b0 < c1; b0 += CONV_BLOCK) {
        const int64_t b1 = b0 + CONV_BLOCK < c1 ? b0 + CONV_BLOCK : c1;
        for (int t = 0; t < T; t++) {
            float *o = out + (int64_t)t * ld;
            /* tap by tap over the block's channels (loops the compiler
             * vectorizes) */
            const float *x0 = rows[t];
            for (int64_t c = b0; c < b1; c++) o[c] = w[c] * x0[c];
            for (int j = 1; j < kc; j++) {
                const float *wj = w + (int64_t)j * ld, *xj = rows[t + j];
                for (int64_t c = b0; c < b1; c++) o[c] += wj[c] * xj[c];
            }
            silu(o + b0, o + b0, NULL, b1 - b0);
        }
    }
}

void kn_conv_silu_ref(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                      int64_t c1) {
    conv_silu_blocks(out, rows, ld, T, w, kc, c0, c1, kn_silu_mul_f32_ref);
}

#if KN_HAVE_X86
KN_AVX2 void kn_conv_silu_avx2(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                               int64_t c1) {
    conv_silu_blocks(out, rows, ld, T, w, kc, c0, c1, kn_silu_mul_f32_avx2);
}

/* AVX-512: 16 channels a vector, the taps loaded once for every token and
 * each output summed in a register (the same multiplies and adds in the
 * same order as the blocks above, no FMA: the same bits), then the SiLU row
 * by row. Against the blocks (whose taps each load and store the outputs
 * again): 3072 channels in cache, kc = 4, T = 4 / 1 14.5 / 3.9 -> 8.6 / 3.5
 * us; in the q4 0.8B fixture's forwards (one process, both ways in turn
 * per forward, 512 positions) a verify of 4 took 0.12-0.30 ms less (of ~18). */
KN_VNNI void kn_conv_silu_avx512(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc,
                                 int64_t c0, int64_t c1) {
    assert(kc >= 1 && T >= 0);
    enum { TAPS = 8 };   /* taps kept in registers; more are loaded per token */
    for (int64_t c = c0; c < c1; c += 16) {
        const __mmask16 m = c1 - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c1 - c)) - 1);
        __m512 wv[TAPS];
        for (int j = 0; j < kc && j < TAPS; j++) wv[j] = _mm512_maskz_loadu_ps(m, w + (int64_t)j * ld + c);
        for (int t = 0; t < T; t++) {
            __m512 acc = _mm512_mul_ps(wv[0], _mm512_maskz_loadu_ps(m, rows[t] + c));
            for (int j = 1; j < kc; j++) {
                const __m512 wj = j < TAPS ? wv[j] : _mm512_maskz_loadu_ps(m, w + (int64_t)j * ld + c);
                acc = _mm512_add_ps(acc, _mm512_mul_ps(wj, _mm512_maskz_loadu_ps(m, rows[t + j] + c)));
            }
            _mm512_mask_storeu_ps(out + (int64_t)t * ld + c, m, acc);
        }
    }
    for (int t = 0; t < T; t++)
        kn_silu_mul_f32_avx512(out + (int64_t)t * ld + c0, out + (int64_t)t * ld + c0, NULL, c1 - c0);
}
#endif

/* A head's state rows are read once, from DRAM, in order: asking for the row
 * GDN_PREFETCH_BYTES ahead as each row starts took a plain q4 step's
 * recurrence from 84-86 to 64-77 us a layer on the avx512vnni set and from
 * 95-99 to 76-81 us on the AVX2 one (0.8B shape, 2 threads). */
#define GDN_PREFETCH_BYTES 4096

/* Rows of dk floats GDN_PREFETCH_BYTES make (at least one). */
static inline int gdn_ahead(int dk) { return dk * 4 >= GDN_PREFETCH_BYTES ? 1 : GDN_PREFETCH_BYTES / (dk * 4); }

/* Row r of the rows a thread runs through: S_in's dv, then S_next's (NULL:
 * none, or past both). */
static inline const float *ahead_row(const float *S_in, const float *S_next, int r, int dk, int dv) {
    if (r < dv) return S_in + (int64_t)r * dk;
    return S_next && r < 2 * dv ? S_next + (int64_t)(r - dv) * dk : NULL;
}

/* Token t's vectors of tk. */
static inline const float *tok_q(const kn_delta_tokens *tk, int t) { return tk->q + (int64_t)t * tk->ld; }
static inline const float *tok_k(const kn_delta_tokens *tk, int t) { return tk->k + (int64_t)t * tk->ld; }
static inline const float *tok_v(const kn_delta_tokens *tk, int t) { return tk->v + (int64_t)t * tk->ld; }
static inline float *tok_o(const kn_delta_tokens *tk, int t) { return tk->o + (int64_t)t * tk->ldo; }
/* Token t's delta record (where tk->delta is set). */
static inline float *tok_delta(const kn_delta_tokens *tk, int t) { return tk->delta + (int64_t)t * tk->ldd; }

/* Per row i of S (output channel i), with S k = alpha (S_old k):
 *   m = S_old[i] . k;  delta = beta (v[i] - alpha m)
 *   S[i] = alpha S_old[i] + delta k;  o[i] = S[i] . q
 * Two passes over the row (a dot product, then the update and the read-out
 * together) rather than four (decay, dot, axpy, dot). Row by row through
 * every token (rows are independent: token t's row i reads only row i of
 * the state). No stores that stream here. */
void kn_gated_delta_steps_rows(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk, int dk,
                               int dv, int stream) {
    (void)stream;
    const int ahead = gdn_ahead(dk);
    for (int i = 0; i < dv; i++) {
        const float *row = S_in + (int64_t)i * dk;
        float *out = S_out + (int64_t)i * dk;
        const float *later = ahead_row(S_in, S_next, i + ahead, dk, dv);
        if (later) kn_prefetch_bytes(later, (size_t)dk * sizeof(float));
        for (int t = 0; t < tk->T; t++, row = out) {
            const float alpha = tk->alpha[t], m = kn_dot_f32(row, tok_k(tk, t), dk);
            const float delta = tk->beta[t] * (tok_v(tk, t)[i] - alpha * m);
            if (tk->delta) tok_delta(tk, t)[i] = delta;
            tok_o(tk, t)[i] = kn_scale_axpy_dot_f32(out, row, alpha, delta, tok_k(tk, t), tok_q(tk, t), dk);
        }
    }
}

/* kn_gated_delta_replay, row by row: every token's update of a row in turn
 * (rows are independent, and each element sees the tokens in order, as
 * the steps gave them), the row GDN_PREFETCH_BYTES ahead asked for as each
 * row starts (the rows of a replay stream from DRAM, as a step's do). */
void kn_gated_delta_replay_ref(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                               const float *alpha, int dk, int dv) {
    const int ahead = gdn_ahead(dk);
    for (int i = 0; i < dv; i++) {
        float *row = S + (int64_t)i * dk;
        const float *later = ahead_row(S, S_next, i + ahead, dk, dv);
        if (later) kn_prefetch_bytes(later, (size_t)dk * sizeof(float));
        for (int t = 0; t < T; t++) {
            const float a = alpha[t], d = delta[(int64_t)t * ld + i], *kt = k + (int64_t)t * ld;
            for (int j = 0; j < dk; j++) row[j] = fmaf(d, kt[j], a * row[j]);
        }
    }
}

#if KN_HAVE_X86
/* The step of kn_gated_delta_steps_rows on the AVX2 set, on 16-lane vectors,
 * for dk a multiple of 32 (the model's 128). Same bits: the dot products
 * keep matmul.c's "Dot product layout", 8-lane accumulator k of element i
 * being (i / 8) % 4 -- here the halves of two 16-lane accumulators, [acc0 |
 * acc1] over elements 32j .. 32j+15 and [acc2 | acc3] over 32j+16 .. 32j+31,
 * which see the same FMAs in the same order -- and the horizontal sum
 * combines the four 8-lane halves as kn_hsum_avx2 does. The update rounds as
 * kn_scale_axpy_dot_f32 does (a * S_old, then one FMA). What the row-by-row
 * step (delta_rows_avx512) saves: half the vector operations, two calls a
 * row, and for dk = 128 the second load of the row, which stays in eight
 * registers between the passes. One thread
 * over the 0.8B shape's 18 layers x 16 heads of 128 x 128 (18 MB): 3 tokens
 * a head 2.12 -> 1.44 ms; 1 token 0.71 -> 0.75 ms (memory bound either way).
 * Two rows side by side (q reloaded, 28 vector registers) ran 1.10x slower;
 * one body for dk = 128 and the rest (k and q loaded each row, the row's
 * first 128 elements kept in an array) 1.5-2x slower than its two bodies.
 * Blocks of several tokens take 16 rows at a time (delta_group16_avx512). */
KN_VNNI_INLINE float hsum_halves_avx512(__m512 acc01, __m512 acc23) {
    const __m256 acc[4] = {_mm512_castps512_ps256(acc01), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc01), 1)),
                           _mm512_castps512_ps256(acc23), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc23), 1))};
    return _mm_cvtss_f32(kn_hsum_avx2(acc, 4));
}

/* A row's 16 new values: past the caches (a non-temporal store; out
 * 64-byte aligned) or as usual. */
KN_VNNI_INLINE void store16_avx512(float *out, __m512 v, int stream) {
    if (stream) _mm512_stream_ps(out, v);
    else _mm512_storeu_ps(out, v);
}

/* One token's step on dv rows, one row after another (the whole-head path,
 * and a block's rows past its last group of 16). */
KN_VNNI_INLINE void delta_rows_avx512(float *S_out, const float *S_in, const float *S_next, const float *q,
                                      const float *k, const float *v, float alpha, float beta, float *o, float *rec,
                                      int dk, int dv, int stream) {
    assert(dk % 32 == 0);
    const __m512 av = _mm512_set1_ps(alpha);
    const int ahead = gdn_ahead(dk);
    if (dk == 128) {   /* k, q and the row in registers */
        __m512 kv[8], qv[8];
        for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_ps(k + 16 * j), qv[j] = _mm512_loadu_ps(q + 16 * j);
        for (int i = 0; i < dv; i++) {
            const float *row = S_in + (int64_t)i * 128;
            float *out = S_out + (int64_t)i * 128;
            const float *later = ahead_row(S_in, S_next, i + ahead, 128, dv);
            if (later) kn_prefetch_lines_avx2(later, 128 * sizeof(float), 0);
            __m512 r[8], a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
            for (int j = 0; j < 8; j += 2) {
                r[j] = _mm512_loadu_ps(row + 16 * j), r[j + 1] = _mm512_loadu_ps(row + 16 * j + 16);
                a01 = _mm512_fmadd_ps(r[j], kv[j], a01);
                a23 = _mm512_fmadd_ps(r[j + 1], kv[j + 1], a23);
            }
            const float m = hsum_halves_avx512(a01, a23);
            const float d = beta * (v[i] - alpha * m);
            if (rec) rec[i] = d;
            const __m512 dlt = _mm512_set1_ps(d);
            a01 = a23 = _mm512_setzero_ps();
            for (int j = 0; j < 8; j += 2) {
                const __m512 n0 = _mm512_fmadd_ps(dlt, kv[j], _mm512_mul_ps(av, r[j]));
                const __m512 n1 = _mm512_fmadd_ps(dlt, kv[j + 1], _mm512_mul_ps(av, r[j + 1]));
                store16_avx512(out + 16 * j, n0, stream);
                store16_avx512(out + 16 * j + 16, n1, stream);
                a01 = _mm512_fmadd_ps(n0, qv[j], a01);
                a23 = _mm512_fmadd_ps(n1, qv[j + 1], a23);
            }
            o[i] = hsum_halves_avx512(a01, a23);
        }
        return;
    }
    for (int i = 0; i < dv; i++) {
        const float *row = S_in + (int64_t)i * dk;
        float *out = S_out + (int64_t)i * dk;
        const float *later = ahead_row(S_in, S_next, i + ahead, dk, dv);
        if (later) kn_prefetch_lines_avx2(later, (size_t)dk * sizeof(float), 0);
        __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
        for (int j = 0; j < dk; j += 32) {
            a01 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j), _mm512_loadu_ps(k + j), a01);
            a23 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j + 16), _mm512_loadu_ps(k + j + 16), a23);
        }
        const float m = hsum_halves_avx512(a01, a23);
        const float d = beta * (v[i] - alpha * m);
        if (rec) rec[i] = d;
        const __m512 dlt = _mm512_set1_ps(d);
        a01 = a23 = _mm512_setzero_ps();
        for (int j = 0; j < dk; j += 32) {
            const __m512 n0 = _mm512_fmadd_ps(dlt, _mm512_loadu_ps(k + j), _mm512_mul_ps(av, _mm512_loadu_ps(row + j)));
            const __m512 n1 =
                _mm512_fmadd_ps(dlt, _mm512_loadu_ps(k + j + 16), _mm512_mul_ps(av, _mm512_loadu_ps(row + j + 16)));
            store16_avx512(out + j, n0, stream);
            store16_avx512(out + j + 16, n1, stream);
            a01 = _mm512_fmadd_ps(n0, _mm512_loadu_ps(q + j), a01);
            a23 = _mm512_fmadd_ps(n1, _mm512_loadu_ps(q + j + 16), a23);
        }
        o[i] = hsum_halves_avx512(a01, a23);
    }
}

/* The dot products of 16 rows, each as two accumulators x (8-lane
 * accumulators 0 | 1 of kn_dot_f32's layout) and y (2 | 3), reduced
 * together: for every row the additions hsum_halves_avx512 makes, the same
 * pairs in the same order, so the same bits, in 77 vector operations for
 * the 16 rows (one row alone: 11, a chain of some 23 cycles).
 *   pair:  (acc0 + acc1) + (acc2 + acc3) of rows a and b, 8 lanes each
 *   quad:  lanes 0-3 + 4-7 of 4 rows (kn_hsum_avx2's 128-bit halves)
 *   oct:   lanes 0, 1 + lanes 2, 3 of 8 rows (its movehl)
 *   last:  lane 0 + lane 1 of 16 rows (its movehdup).
 * Z[p] = pair(row p % 2 * 8 + p / 2, that row + 4) (group16_row): quad(Z0,
 * Z1) holds rows 0, 4, 8, 12, quad(Z2, Z3) rows 1, 5, 9, 13, and so on,
 * which leaves row i in lane i. */
KN_VNNI_INLINE __m512 fold_pair_avx512(__m512 xa, __m512 ya, __m512 xb, __m512 yb) {
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(xa, xb, 0x44), _mm512_shuffle_f32x4(xa, xb, 0xEE));
    const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(ya, yb, 0x44), _mm512_shuffle_f32x4(ya, yb, 0xEE));
    return _mm512_add_ps(u, w);
}

KN_VNNI_INLINE __m512 fold16_avx512(const __m512 Z[8]) {
    __m512 W[4], G[2];
    for (int i = 0; i < 4; i++)   /* 128-bit chunks 0 and 2 of each, plus chunks 1 and 3 */
        W[i] = _mm512_add_ps(_mm512_shuffle_f32x4(Z[2 * i], Z[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(Z[2 * i], Z[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) {
        const __m512d a = _mm512_castps_pd(W[2 * i]), b = _mm512_castps_pd(W[2 * i + 1]);
        G[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(G[0], G[1], 0x88), _mm512_shuffle_ps(G[0], G[1], 0xDD));
}

/* Row p % 2 * 8 + p / 2 + 4h of a group of 16, pair p (fold16_avx512's order). */
static inline int group16_row(int p, int h) { return p % 2 * 8 + p / 2 + 4 * h; }

/* Rows 0..15 of a step, delta_rows_avx512's arithmetic (the same bits) in
 * three passes: the 16 dot products S_old k, reduced together; the 16
 * deltas as one vector; each row's update and read-out, whose dot products
 * are reduced together too. A row's chain (dot, horizontal sum, delta,
 * update, dot, horizontal sum) no longer waits on the row before it. For
 * dk = 128 (a constant after inlining) k and q stay in registers; other dk
 * read them from memory. The first pass prefetches row r of pf_rows for
 * r < pf.
 * Measured on the 2-core Zen 5 VM, one thread, 128 x 128 heads, the old
 * row-by-row steps and these in turn (best of 30): a head in L2 9.4-11.6 ->
 * 7.0-8.0 ns a row and token (T = 2-4); the 0.8B shape's 288 heads (18 MB)
 * from DRAM, T = 2 / 3 / 4, streamed out (a verify) 0.84 / 1.24 / 1.54 ->
 * 0.79 / 1.03 / 1.26 ms, in place (a replay) 0.77 / 1.13 / 1.47 -> 0.61 /
 * 0.84 / 1.09 ms. */
KN_VNNI_INLINE void delta_group16_avx512(float *S_out, const float *S_in, const float *q, const float *k,
                                         const float *v, float alpha, float beta, float *o, float *rec, int dk,
                                         int stream, const float *pf_rows, int pf) {
    const int reg = dk == 128;
    __m512 Z[8], kr[8], qr[8];
    if (reg)
        for (int j = 0; j < dk / 16; j++) kr[j] = _mm512_loadu_ps(k + 16 * j), qr[j] = _mm512_loadu_ps(q + 16 * j);
#define GDN_K(j) (reg ? kr[(j) / 16] : _mm512_loadu_ps(k + (j)))
#define GDN_Q(j) (reg ? qr[(j) / 16] : _mm512_loadu_ps(q + (j)))
    for (int p = 0; p < 8; p++) {
        __m512 acc[2][2];
        for (int h = 0; h < 2; h++) {
            const int i = group16_row(p, h);
            const float *row = S_in + (int64_t)i * dk;
            if (i < pf) kn_prefetch_lines_avx2(pf_rows + (int64_t)i * dk, (size_t)dk * sizeof(float), 0);
            acc[h][0] = acc[h][1] = _mm512_setzero_ps();
            for (int j = 0; j < dk; j += 32) {
                acc[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(row + j), GDN_K(j), acc[h][0]);
                acc[h][1] = _mm512_fmadd_ps(_mm512_loadu_ps(row + j + 16), GDN_K(j + 16), acc[h][1]);
            }
        }
        Z[p] = fold_pair_avx512(acc[0][0], acc[0][1], acc[1][0], acc[1][1]);
    }
    /* delta = beta (v - alpha m), row i in lane i */
    const __m512 av = _mm512_set1_ps(alpha);
    const __m512 m = fold16_avx512(Z);
    const __m512 delta = _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_sub_ps(_mm512_loadu_ps(v), _mm512_mul_ps(av, m)));
    if (rec && (uintptr_t)rec % 64 == 0) _mm512_stream_ps(rec, delta);   /* read at a rollback, if ever */
    else if (rec) _mm512_storeu_ps(rec, delta);
    for (int p = 0; p < 8; p++) {
        __m512 acc[2][2];
        for (int h = 0; h < 2; h++) {
            const int i = group16_row(p, h);
            const float *row = S_in + (int64_t)i * dk;
            float *out = S_out + (int64_t)i * dk;
            const __m512 dlt = _mm512_permutexvar_ps(_mm512_set1_epi32(i), delta);
            acc[h][0] = acc[h][1] = _mm512_setzero_ps();
            for (int j = 0; j < dk; j += 32) {
                const __m512 n0 = _mm512_fmadd_ps(dlt, GDN_K(j), _mm512_mul_ps(av, _mm512_loadu_ps(row + j)));
                const __m512 n1 = _mm512_fmadd_ps(dlt, GDN_K(j + 16), _mm512_mul_ps(av, _mm512_loadu_ps(row + j + 16)));
                store16_avx512(out + j, n0, stream);
                store16_avx512(out + j + 16, n1, stream);
                acc[h][0] = _mm512_fmadd_ps(n0, GDN_Q(j), acc[h][0]);
                acc[h][1] = _mm512_fmadd_ps(n1, GDN_Q(j + 16), acc[h][1]);
            }
        }
        Z[p] = fold_pair_avx512(acc[0][0], acc[0][1], acc[1][0], acc[1][1]);
    }
    _mm512_storeu_ps(o, fold16_avx512(Z));
#undef GDN_K
#undef GDN_Q
}

/* One token's step on a block's nb rows: groups of 16, then the rest row by
 * row. The groups prefetch pf rows from pf_rows between them (a share of
 * the block that comes next; see kn_gated_delta_steps_avx512). */
KN_VNNI_INLINE void delta_block_avx512(float *S_out, const float *S_in, const float *q, const float *k, const float *v,
                                       float alpha, float beta, float *o, float *rec, int dk, int nb, int stream,
                                       const float *pf_rows, int pf) {
    assert(dk % 32 == 0);
    const int per = nb >= 16 ? (pf + nb / 16 - 1) / (nb / 16) : 0;   /* rows a group prefetches */
    int i = 0;
    for (; i + 16 <= nb; i += 16) {
        const int lo = i / 16 * per, rest = pf - lo, n = rest < 0 ? 0 : rest < per ? rest : per;
        const float *rows = n ? pf_rows + (int64_t)lo * dk : NULL;
        float *r = rec ? rec + i : NULL;
        if (dk == 128)
            delta_group16_avx512(S_out + (int64_t)i * dk, S_in + (int64_t)i * dk, q, k, v + i, alpha, beta, o + i, r,
                                 128, stream, rows, n);
        else delta_group16_avx512(S_out + (int64_t)i * dk, S_in + (int64_t)i * dk, q, k, v + i, alpha, beta, o + i, r,
                                  dk, stream, rows, n);
    }
    if (i < nb)
        delta_rows_avx512(S_out + (int64_t)i * dk, S_in + (int64_t)i * dk, NULL, q, k, v + i, alpha, beta, o + i,
                          rec ? rec + i : NULL, dk, nb - i, stream);
}

/* Rows a block of several tokens takes (kn_gated_delta_steps_avx512): one
 * group of delta_group16_avx512. Against 32 rows (16 KB at dk = 128), on
 * the Zen 5 VM (`bench-gdn`: the 0.8B shape's 16 heads of 128 x 128 a layer
 * on 2 threads, each layer's state from DRAM after 16 MB of other reads;
 * the two builds in turn twice, us a layer): a verify of 4 streamed out
 * 77.0 / 75.3 -> 66.2 / 69.2, of 3 72.0 / 72.0 -> 59.4 / 62.2, of 2 66.6 /
 * 65.6 -> 58.1 / 60.6, a replay of 2 in place 49.8 / 49.1 -> 46.6 / 47.9.
 * In whole forwards of the q4 fixture (both in turn per forward, 800
 * pairs, paired medians of the time) a verify of 4 with a rollback that
 * keeps 2: 0.993x, keeps 3 0.989x, no rollback 0.996x. Presumably the
 * smaller block leaves L1 room for the block being read, the block after
 * it that the passes prefetch, and the scratch rows (16 + 16 + 16 KB of a
 * 48 KB L1 before). */
#define GDN_BLOCK_ROWS 16

/* One token goes straight from S_in to S_out. Several take the state a
 * block of GDN_BLOCK_ROWS rows at a time (8 KB at dk = 128; in L1), every
 * token's step on the block in turn: the first reads S_in, the last writes
 * S_out (streaming where asked and every row starts on a cache line: S_out
 * aligned, dk a multiple of 32 here), the others run on the block, whose
 * rows are independent (the single step's operations, 16 rows at a time:
 * delta_block_avx512, the same bits; the whole-head path row by row).
 * Against token by token over the whole head (a verify's later tokens on
 * a 64 KB head in L2, its state after the block from a scratch head),
 * bare forwards of T = 4 / 8 / 16 tokens 1.000x / 0.996x / 0.996x the
 * time, MTP sessions at K = 3 level (0.8B-shape q4 fixture, 2 threads,
 * both ways in turn in one process); it needs no scratch state, and a
 * rollback's replay takes the state through its tokens at once too. (Each
 * row through all tokens in registers, one or two rows at a time, was no
 * faster: a row's tokens are one dependency chain.) Every token's pass
 * over a block prefetches its share of the block that comes next (the
 * head's, or S_next's first), so that the next block's rows arrive while
 * the T passes run instead of when the first reads them. Against the
 * first pass alone prefetching 16 rows ahead within the head, the 0.8B
 * shape's recurrence (18 layers x 16 heads of 128 x 128 from DRAM, 2
 * threads, each through its heads in turn; the two builds in turn five
 * times, medians) streamed out at T = 4 took 90.0 -> 69.5 us a layer, in
 * place at T = 3 (a replay) 56.2 -> 48.3 us, T = 1 level; two MTP sessions
 * in one process (q4 fixture, K = 3, rounds alternating): verify 0.984x /
 * 0.989x the time. Rows of more than 4096
 * floats go token by token over the whole head; dk not a multiple of 32
 * row by row (kn_gated_delta_steps_rows, which never streams). */
KN_VNNI void kn_gated_delta_steps_avx512(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk,
                                         int dk, int dv, int stream) {
    assert(tk->T >= 0);
    if (dk % 32) {
        kn_gated_delta_steps_rows(S_out, S_in, S_next, tk, dk, dv, stream);
        return;
    }
    stream = stream && (uintptr_t)S_out % 64 == 0;
    float blk[4096] __attribute__((aligned(64)));   /* 16 KB: a block of rows up to this long */
    const int cap = (int)(sizeof blk / sizeof *blk);
    /* one token, or rows too long for a block: each token over the whole
     * head (the later ones in place on S_out) */
    const int whole = tk->T == 1 || dk > cap;
    const int rows = whole ? dv : dk * GDN_BLOCK_ROWS <= cap ? GDN_BLOCK_ROWS : cap / dk;
    for (int b0 = 0; b0 < dv; b0 += rows) {
        const int nb = dv - b0 < rows ? dv - b0 : rows;
        const int64_t off = (int64_t)b0 * dk;
        /* the block after this one: the head's next, or S_next's first */
        const int more = dv - b0 - nb, avail = more ? more : S_next ? dv : 0;
        const float *fol = more ? S_in + off + (int64_t)nb * dk : S_next;
        const int nfol = avail < rows ? avail : rows;
        for (int t = 0; t < tk->T; t++) {
            const int last = t == tk->T - 1;
            const float *in = t ? (whole ? S_out + off : blk) : S_in + off;
            float *out = last || whole ? S_out + off : blk;
            const float *q = tok_q(tk, t), *k = tok_k(tk, t), *v = tok_v(tk, t) + b0;
            float *o = tok_o(tk, t) + b0, *rec = tk->delta ? tok_delta(tk, t) + b0 : NULL;   /* this token's deltas */
            const float *next = last ? S_next : NULL;   /* the whole head's path */
            const int f0 = nfol * t / tk->T, nf = nfol * (t + 1) / tk->T - f0;   /* this token's share */
            const float *pf_rows = nf ? fol + (int64_t)f0 * dk : NULL;
            const float al = tk->alpha[t], be = tk->beta[t];
            if (whole && last && stream) delta_rows_avx512(out, in, next, q, k, v, al, be, o, rec, dk, nb, 1);
            else if (whole) delta_rows_avx512(out, in, next, q, k, v, al, be, o, rec, dk, nb, 0);
            else if (last && stream) delta_block_avx512(out, in, q, k, v, al, be, o, rec, dk, nb, 1, pf_rows, nf);
            else delta_block_avx512(out, in, q, k, v, al, be, o, rec, dk, nb, 0, pf_rows, nf);
        }
    }
}

/* kn_gated_delta_replay_ref on 8 lanes (the tail element by element), one
 * fused multiply-add per element and token either way: the same bits. */
KN_AVX2 void kn_gated_delta_replay_avx2(float *S, const float *S_next, int T, const float *k, const float *delta,
                                        int64_t ld, const float *alpha, int dk, int dv) {
    const int ahead = gdn_ahead(dk), d8 = dk & ~7;
    for (int i = 0; i < dv; i++) {
        float *row = S + (int64_t)i * dk;
        const float *later = ahead_row(S, S_next, i + ahead, dk, dv);
        if (later) kn_prefetch_lines_avx2(later, (size_t)dk * sizeof(float), 0);
        for (int t = 0; t < T; t++) {
            const float a = alpha[t], d = delta[(int64_t)t * ld + i], *kt = k + (int64_t)t * ld;
            const __m256 av = _mm256_set1_ps(a), dl = _mm256_set1_ps(d);
            int j = 0;
            for (; j < d8; j += 8)
                _mm256_storeu_ps(row + j, _mm256_fmadd_ps(dl, _mm256_loadu_ps(kt + j),
                                                          _mm256_mul_ps(av, _mm256_loadu_ps(row + j))));
            for (; j < dk; j++) row[j] = fmaf(d, kt[j], a * row[j]);
        }
    }
}

/* The same on 16 lanes (a masked tail); for dk = 128 the row stays in eight
 * registers through every token and is stored once (bench-gdn, against the
 * masked loop alone, three runs in turn, us a layer: replay 3 35.4 / 26.0 /
 * 36.2 against 40.1 / 37.2 / 39.2; replay 1 level). */
KN_VNNI void kn_gated_delta_replay_avx512(float *S, const float *S_next, int T, const float *k, const float *delta,
                                          int64_t ld, const float *alpha, int dk, int dv) {
    const int ahead = gdn_ahead(dk);
    for (int i = 0; i < dv; i++) {
        float *row = S + (int64_t)i * dk;
        const float *later = ahead_row(S, S_next, i + ahead, dk, dv);
        if (later) kn_prefetch_lines_avx2(later, (size_t)dk * sizeof(float), 0);
        if (dk == 128) {
            __m512 r[8];
            for (int j = 0; j < 8; j++) r[j] = _mm512_loadu_ps(row + 16 * j);
            for (int t = 0; t < T; t++) {
                const __m512 av = _mm512_set1_ps(alpha[t]), dl = _mm512_set1_ps(delta[(int64_t)t * ld + i]);
                const float *kt = k + (int64_t)t * ld;
                for (int j = 0; j < 8; j++)
                    r[j] = _mm512_fmadd_ps(dl, _mm512_loadu_ps(kt + 16 * j), _mm512_mul_ps(av, r[j]));
            }
            for (int j = 0; j < 8; j++) _mm512_storeu_ps(row + 16 * j, r[j]);
            continue;
        }
        for (int t = 0; t < T; t++) {
            const __m512 av = _mm512_set1_ps(alpha[t]), dl = _mm512_set1_ps(delta[(int64_t)t * ld + i]);
            const float *kt = k + (int64_t)t * ld;
            for (int j = 0; j < dk; j += 16) {
                const __mmask16 m = dk - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dk - j)) - 1);
                const __m512 x = _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, row + j));
                _mm512_mask_storeu_ps(row + j, m, _mm512_fmadd_ps(dl, _mm512_maskz_loadu_ps(m, kt + j), x));
            }
        }
    }
}

void kn_store_fence(void) { _mm_sfence(); }
#else
void kn_store_fence(void) {}
#endif
