/* gdn.c — depthwise conv and gated delta rule (see gdn.h). */
#include "kernels/gdn.h"

#include <assert.h>
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
#endif

/* A head's state rows are read once, from DRAM, in order: asking for the row
 * GDN_PREFETCH_BYTES ahead as each row starts took a plain q4 step's
 * recurrence from 84-86 to 64-77 us a layer on the avx512vnni set and from
 * 95-99 to 76-81 us on the AVX2 one (0.8B shape, 2 threads). */
#define GDN_PREFETCH_BYTES 4096

/* Rows of dk floats GDN_PREFETCH_BYTES make (at least one). */
static inline int gdn_ahead(int dk) { return dk * 4 >= GDN_PREFETCH_BYTES ? 1 : GDN_PREFETCH_BYTES / (dk * 4); }

/* Token t's vectors of tk. */
static inline const float *tok_q(const kn_delta_tokens *tk, int t) { return tk->q + (int64_t)t * tk->ld; }
static inline const float *tok_k(const kn_delta_tokens *tk, int t) { return tk->k + (int64_t)t * tk->ld; }
static inline const float *tok_v(const kn_delta_tokens *tk, int t) { return tk->v + (int64_t)t * tk->ld; }
static inline float *tok_o(const kn_delta_tokens *tk, int t) { return tk->o + (int64_t)t * tk->ldo; }

/* Per row i of S (output channel i), with S k = alpha (S_old k):
 *   m = S_old[i] . k;  delta = beta (v[i] - alpha m)
 *   S[i] = alpha S_old[i] + delta k;  o[i] = S[i] . q
 * Two passes over the row (a dot product, then the update and the read-out
 * together) rather than four (decay, dot, axpy, dot). Row by row through
 * every token (rows are independent: token t's row i reads only row i of
 * the state). No stores that stream here. */
void kn_gated_delta_steps_rows(float *S_out, const float *S_in, const kn_delta_tokens *tk, int dk, int dv, int stream) {
    (void)stream;
    const int ahead = gdn_ahead(dk);
    for (int i = 0; i < dv; i++) {
        const float *row = S_in + (int64_t)i * dk;
        float *out = S_out + (int64_t)i * dk;
        if (i + ahead < dv) kn_prefetch_bytes(row + (int64_t)ahead * dk, (size_t)dk * sizeof(float));
        for (int t = 0; t < tk->T; t++, row = out) {
            const float alpha = tk->alpha[t], m = kn_dot_f32(row, tok_k(tk, t), dk);
            const float delta = tk->beta[t] * (tok_v(tk, t)[i] - alpha * m);
            tok_o(tk, t)[i] = kn_scale_axpy_dot_f32(out, row, alpha, delta, tok_k(tk, t), tok_q(tk, t), dk);
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
 * kn_scale_axpy_dot_f32 does (a * S_old, then one FMA). What it saves: half
 * the vector operations, two calls a row, and for dk = 128 the second load of
 * the row, which stays in eight registers between the passes. One thread
 * over the 0.8B shape's 18 layers x 16 heads of 128 x 128 (18 MB): 3 tokens
 * a head 2.12 -> 1.44 ms; 1 token 0.71 -> 0.75 ms (memory bound either way).
 * Two rows side by side (q reloaded, 28 vector registers) ran 1.10x slower;
 * one body for dk = 128 and the rest (k and q loaded each row, the row's
 * first 128 elements kept in an array) 1.5-2x slower than the two below. */
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

KN_VNNI_INLINE void delta_step_avx512(float *S_out, const float *S_in, const float *q, const float *k, const float *v,
                                      float alpha, float beta, float *o, int dk, int dv, int stream) {
    assert(dk % 32 == 0);
    const __m512 av = _mm512_set1_ps(alpha);
    const int ahead = gdn_ahead(dk);
    if (dk == 128) {   /* k, q and the row in registers */
        __m512 kv[8], qv[8];
        for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_ps(k + 16 * j), qv[j] = _mm512_loadu_ps(q + 16 * j);
        for (int i = 0; i < dv; i++) {
            const float *row = S_in + (int64_t)i * 128;
            float *out = S_out + (int64_t)i * 128;
            if (i + ahead < dv) kn_prefetch_lines_avx2(row + ahead * 128, 128 * sizeof(float), 0);
            __m512 r[8], a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
            for (int j = 0; j < 8; j += 2) {
                r[j] = _mm512_loadu_ps(row + 16 * j), r[j + 1] = _mm512_loadu_ps(row + 16 * j + 16);
                a01 = _mm512_fmadd_ps(r[j], kv[j], a01);
                a23 = _mm512_fmadd_ps(r[j + 1], kv[j + 1], a23);
            }
            const float m = hsum_halves_avx512(a01, a23);
            const __m512 dlt = _mm512_set1_ps(beta * (v[i] - alpha * m));
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
        if (i + ahead < dv) kn_prefetch_lines_avx2(row + (int64_t)ahead * dk, (size_t)dk * sizeof(float), 0);
        __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
        for (int j = 0; j < dk; j += 32) {
            a01 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j), _mm512_loadu_ps(k + j), a01);
            a23 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j + 16), _mm512_loadu_ps(k + j + 16), a23);
        }
        const float m = hsum_halves_avx512(a01, a23);
        const __m512 dlt = _mm512_set1_ps(beta * (v[i] - alpha * m));
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

/* One token goes straight from S_in to S_out. Several take the state a
 * block of rows at a time (16 KB: it stays in L1), every token's step on the
 * block in turn: the first reads S_in, the last writes S_out (streaming
 * where asked and every row starts on a cache line: S_out aligned, dk a
 * multiple of 16 here), the others run on the block, whose rows are
 * independent (the single step's operations, row by row, so the same bits).
 * Against token by token over the whole head (a verify's later tokens on
 * a 64 KB head in L2, its state after the block from a scratch head),
 * bare forwards of T = 4 / 8 / 16 tokens 1.000x / 0.996x / 0.996x the
 * time, MTP sessions at K = 3 level (0.8B-shape q4 fixture, 2 threads,
 * both ways in turn in one process); it needs no scratch state, and a
 * rollback's replay takes the state through its tokens at once too. (Each
 * row through all tokens in registers, one or two rows at a time, was no
 * faster: a row's tokens are one dependency chain.) Rows of more than 4096
 * floats go token by token over the whole head; dk not a multiple of 32
 * row by row (kn_gated_delta_steps_rows, which never streams). */
KN_VNNI void kn_gated_delta_steps_avx512(float *S_out, const float *S_in, const kn_delta_tokens *tk, int dk, int dv,
                                         int stream) {
    assert(tk->T >= 0);
    if (dk % 32) {
        kn_gated_delta_steps_rows(S_out, S_in, tk, dk, dv, stream);
        return;
    }
    stream = stream && (uintptr_t)S_out % 64 == 0;
    float blk[4096] __attribute__((aligned(64)));   /* 16 KB */
    /* one token, or rows too long for a block: each token over the whole
     * head (the later ones in place on S_out) */
    const int whole = tk->T == 1 || dk > (int)(sizeof blk / sizeof *blk);
    const int rows = whole ? dv : (int)(sizeof blk / sizeof *blk) / dk;
    for (int b0 = 0; b0 < dv; b0 += rows) {
        const int nb = dv - b0 < rows ? dv - b0 : rows;
        const int64_t off = (int64_t)b0 * dk;
        for (int t = 0; t < tk->T; t++) {
            const int last = t == tk->T - 1;
            const float *in = t ? (whole ? S_out + off : blk) : S_in + off;
            float *out = last || whole ? S_out + off : blk;
            if (last && stream)
                delta_step_avx512(out, in, tok_q(tk, t), tok_k(tk, t), tok_v(tk, t) + b0, tk->alpha[t], tk->beta[t],
                                  tok_o(tk, t) + b0, dk, nb, 1);
            else
                delta_step_avx512(out, in, tok_q(tk, t), tok_k(tk, t), tok_v(tk, t) + b0, tk->alpha[t], tk->beta[t],
                                  tok_o(tk, t) + b0, dk, nb, 0);
        }
    }
}

void kn_store_fence(void) { _mm_sfence(); }
#else
void kn_store_fence(void) {}
#endif
