/* gdn.h — Gated DeltaNet primitives (spec §3.6): the causal depthwise
 * convolution over a window, and one step of the gated delta rule.
 *
 * State layout: the recurrent state of one value head is S[Dv][Dk] f32 (the
 * transpose of HF's [Dk, Dv]): each output channel v owns a contiguous row,
 * so the whole step is row dot products and axpys over Dk. */
#ifndef NX_KERNELS_GDN_H
#define NX_KERNELS_GDN_H

#include <stdint.h>

/* Causal depthwise conv + SiLU for channels [c0, c1) of T tokens.
 * rows[r], r < (kc-1) + T: the window, row by row -- the kc-1 previous
 * pre-conv rows (the conv state) followed by this chunk's T pre-conv rows --
 * each [ld] floats, channels contiguous (a list, so that the state and the
 * new rows are read where they lie instead of copied together first).
 * w: [kc][ld] taps (tap kc-1 on the current token), channels contiguous so
 * that the sum runs along them. out: [T][ld].
 * out[t][c] = silu(sum_j w[j][c] * rows[t + j][c]), the sum in order of j
 * (tap 0's product, then a multiply and an add per further tap), then
 * kn_silu_mul_f32's SiLU. Works through blocks of 64 channels, every token
 * and tap of a block at once, so each row and tap streams once. */
void kn_conv_silu(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                  int64_t c1);

/* One token of the gated delta rule for one value head:
 *   S <- alpha * S;  m = S k;  delta = beta * (v - m);  S <- S + delta k^T;  o = S q
 * computed as m = alpha * (S_old k) and S = alpha S_old + delta k^T in one pass
 * with o (equal in exact arithmetic; see gdn.c).
 * S_old is read from S_in and S written to S_out: the same array (in place),
 * or one that does not overlap it (a verify's first token keeps the state
 * from before the block for a rollback without copying it).
 * S_in, S_out: [dv][dk]; k, q: [dk] (already L2-normalised, q scaled); v, o: [dv].
 * q is read for o alone: the new state's bits never depend on it
 * (tests/kernels/test_gdn.c). */
void kn_gated_delta_step(float *S_out, const float *S_in, const float *q, const float *k, const float *v, float alpha,
                         float beta, float *o, int dk, int dv);
/* The tokens of kn_gated_delta_steps: token t's q, k and v start t * ld
 * floats after the first's, its output t * ldo after o (ldo 0: every token
 * writes the same o), its gates are alpha[t] and beta[t]. delta, where not
 * NULL, records each token's delta = beta (v - alpha (S_old k)), the [dv]
 * floats of token t at delta + t * ldd: what kn_gated_delta_replay needs to
 * redo the step's state update without its dot products. The AVX-512 set
 * writes each 64-byte aligned 16 of them past the caches (non-temporal: a
 * verify's record is read at a rollback, if at all; with plain stores a
 * verify of 4 took ~1% longer than one recording v instead, with these
 * 0.999-1.000x): call kn_store_fence before another thread reads them. */
typedef struct {
    int T;
    const float *q, *k, *v;
    int64_t ld;
    const float *alpha, *beta;
    float *o;
    int64_t ldo;
    float *delta;
    int64_t ldd;
} kn_delta_tokens;

/* T >= 0 steps in order, the same bits as T kn_gated_delta_step calls (the
 * first from S_in to S_out, the rest in place on S_out; S_in and S_out the
 * same array or not overlapping), taking the state a part at a time through
 * every token: S_in read once and S_out written once, where T calls pass
 * over the whole state T times. stream: S_out is nobody's to read soon (a
 * verify's state after its block, which the next forward reads from DRAM
 * anyway), so it is written past the caches with non-temporal stores that
 * skip reading each line first (the same bits) where the set can: the
 * avx512vnni set, dk a multiple of 32, S_out 64-byte aligned. Call
 * kn_store_fence before another thread reads it. S_next: the [dv][dk] state
 * the caller steps next, or NULL: its first rows are prefetched while this
 * one's last rows run (a hint alone: it is neither read nor written). */
void kn_gated_delta_steps(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk, int dk, int dv,
                          int stream);
/* Orders the non-temporal stores above before any later store (sfence). */
void kn_store_fence(void);

/* The state updates of T recorded steps, in place on S ([dv][dk]): for t < T,
 *   S <- alpha[t] S + delta_t k_t^T
 * element by element as the step rounds it, fmaf(delta_t[i], k_t[j], alpha[t]
 * * S[i][j]), with delta_t the delta kn_delta_tokens recorded for that step:
 * the state bits of the steps themselves (from the same S), without their
 * dot products (S k and S q) and the sums across a row they need. k_t starts
 * t * ld floats after k, delta_t t * ld after delta. A rollback's replay of
 * a verify's kept tokens (tests/kernels/test_gdn.c). S_next: the state the
 * caller replays next, or NULL: its first rows are prefetched (a hint). */
void kn_gated_delta_replay(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                           const float *alpha, int dk, int dv);

/* The twins behind kn_conv_silu: the same C compiled for the baseline and
 * for AVX2, and an AVX-512 one summing each output in a register; no FMA
 * contraction in any, so the same bits. */
void kn_conv_silu_ref(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                      int64_t c1);
#if defined(__x86_64__) || defined(__i386__)
void kn_conv_silu_avx2(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                       int64_t c1);
void kn_conv_silu_avx512(float *out, const float *const rows[], int64_t ld, int T, const float *w, int kc, int64_t c0,
                         int64_t c1);
#endif

/* The twins behind kn_gated_delta_steps, and so kn_gated_delta_step (one
 * token) too (matmul.c's kn_select picks one set): row by row through
 * kn_dot_f32 and kn_scale_axpy_dot_f32 (the scalar and AVX2 sets), and the
 * same bits as the AVX2 set on 16-lane vectors. */
void kn_gated_delta_steps_rows(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk, int dk,
                               int dv, int stream);
#if defined(__x86_64__) || defined(__i386__)
void kn_gated_delta_steps_avx512(float *S_out, const float *S_in, const float *S_next, const kn_delta_tokens *tk,
                                 int dk, int dv, int stream);
#endif

/* The twins behind kn_gated_delta_replay: scalar, 8 and 16 lanes (the same
 * fused multiply-add per element, so the same bits). */
void kn_gated_delta_replay_ref(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                               const float *alpha, int dk, int dv);
#if defined(__x86_64__) || defined(__i386__)
void kn_gated_delta_replay_avx2(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                                const float *alpha, int dk, int dv);
void kn_gated_delta_replay_avx512(float *S, const float *S_next, int T, const float *k, const float *delta, int64_t ld,
                                  const float *alpha, int dk, int dv);
#endif

#endif
