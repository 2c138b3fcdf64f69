/* sample.h — logit processing and sampling: the internal API behind the
 * "Sampling" section of nextn.h, for the speculative decoder.
 *
 * Determinism contract (speculative decoding depends on every line of it):
 *   1. Randomness is counter-based. The number used at absolute sequence
 *      position `pos` is smp_uniform(seed, pos, stream): a pure function with
 *      no state, so verifying K positions in one batch draws exactly what plain
 *      decoding draws one position at a time.
 *   2. Processing is a pure function of (logits, history, nx_sampling). It runs
 *      in this order (the Hugging Face warper order; llama.cpp differs by
 *      applying temperature last):
 *        a. the logit bias: l[id] += bias for each entry (ids outside the
 *           vocabulary skipped; an id listed twice gets both);
 *           then penalties over the history, once per distinct token t,
 *           c its count in the output (history[n_input..)):
 *             repetition: l = l > 0 ? l / r : l * r   (t anywhere in the
 *                         history, prompt included; r == 1: off)
 *             then        l -= c * frequency + presence     (c > 0 only)
 *           (the repetition penalty as Hugging Face and vLLM apply it;
 *           presence and frequency as OpenAI defines them, over the tokens
 *           sampled so far; r <= 0 is treated as off);
 *        b. temperature <= 0, or so small that the best logit over it
 *           leaves the floats: greedy, argmax with ties to the lowest id;
 *           stop;
 *        c. x = l / temperature (NaN becomes -inf, -0 becomes +0:
 *           kn_temper_f32);
 *        d. top-k (k <= 0 or k >= vocab: off);
 *        e. softmax over what is left: weights w = kn_exp(x - max x) (the
 *           project's exp, within 1.01 ulp, on vectors; 0 for x = -inf; a
 *           finite x more than 87 below the max weighs e^-87, kn_exp's
 *           floor, so it stays a candidate of negligible mass);
 *        f. top-p: the smallest prefix, in the fixed order, whose cumulative
 *           mass is >= top_p times the softmax's whole mass (after top-k:
 *           the k weights summed in order; else kn_sum_exp_f32 of the row)
 *           (at least one token; top_p >= 1: off);
 *        g. min-p: drop tokens with p < min_p * p_max (min_p <= 0: off);
 *        h. drop tokens of probability 0 and renormalize: divide by the
 *           sum, in double, of the listed weights -- the first n & ~7 in
 *           eight lanes by position j % 8, the lanes added ((0+4) + (1+5))
 *           + ((2+6) + (3+7)), then the rest in order; for temperature
 *           alone, the sum of the whole row's weights as kn_sum_exp_f32
 *           adds them (so one token's probability needs no list).
 *   3. The order: with top-k or top-p, the fixed order -- descending
 *      processed logit x (so descending probability), ties to the lower id;
 *      top-k and top-p select in it. Without either (temperature alone, or
 *      with min-p, which is a threshold), nothing needs a rank and the
 *      candidates are listed by ascending id: sorting a 248k vocabulary
 *      cost 3.4 ms a token on the 2-core CI machine, against 0.3 ms for
 *      everything else (now 0.5 ms for temperature alone, 0.05 ms with
 *      top-k 20). smp_draw walks the candidates in this order, so
 *      which token a given u picks is part of the contract, not an
 *      implementation detail.
 *   4. nx_sample(s, p, logits, ...) at position pos is exactly
 *      smp_draw(ids, probs, n, smp_uniform(p->seed, pos, SMP_STREAM_TARGET))
 *      over smp_distribution's output, so the two can never disagree.
 *
 * Nothing here allocates after nx_sampler_new; a sampler is not thread-safe
 * (one per sequence). */
#ifndef NX_SAMPLE_SAMPLE_H
#define NX_SAMPLE_SAMPLE_H

#include <stdint.h>
#include "nextn.h"

/* Independent random streams at one position. Only TARGET is used by
 * nx_sample; the others are reserved for the speculative decoder so that its
 * extra draws never shift or reuse the target's numbers. */
typedef enum {
    SMP_STREAM_TARGET   = 0,   /* the token emitted at this position            */
    SMP_STREAM_ACCEPT   = 1,   /* rejection sampling: the acceptance coin       */
    SMP_STREAM_RESIDUAL = 2,   /* rejection sampling: the draw from the residual */
    SMP_STREAM_DRAFT    = 3    /* the drafter sampling its own token            */
} smp_stream;

/* A uniform double in [0, 1) with 53 random bits: a hash of
 * (seed, position, stream). Pure, thread-safe, cannot fail. */
double smp_uniform(uint64_t seed, int64_t position, uint32_t stream);

/* Runs the processing of the contract above on logits ([vocab], modified in
 * place: penalties, then division by the temperature) with history[0..
 * n_history) for the penalties, of which history[0..n_input) is input (the
 * prompt) that only the repetition penalty sees (ids outside [0, vocab) are
 * ignored; history may be NULL when n_history is 0). Sets *ids and *probs to n candidates in the
 * fixed order, every prob > 0, summing to 1 (within float rounding); greedy
 * gives one id with prob 1. Returns n >= 1. The arrays belong to the sampler
 * and are overwritten by its next call: copy what must outlive it. Cannot
 * fail (arguments are checked with assert). */
int smp_distribution(nx_sampler *s, const nx_sampling *p, float *logits,
                     const int32_t *history, int n_history, int n_input,
                     const int32_t **ids, const float **probs);

/* smp_distribution in two steps, for a caller that may need one token's
 * probability only (a verify that accepts the draft): smp_process applies
 * steps a-c to logits in place; then smp_prob gives P(id) where that needs
 * no list -- temperature alone: no top-k, top-p or min-p -- or -1, and
 * smp_list gives the candidates as smp_distribution would (P(id) from
 * smp_prob is the very float smp_list lists for id). Both take the row
 * smp_process last processed; smp_list ends it. */
void smp_process(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *history, int n_history,
                 int n_input);
double smp_prob(nx_sampler *s, const nx_sampling *p, const float *logits, int32_t id);
int smp_list(nx_sampler *s, const nx_sampling *p, const float *logits, const int32_t **ids, const float **probs);

/* smp_distribution of the row with every logit outside cand[0..n_cand)
 * (ascending ids, n_cand >= 1) taken as -inf, reading only those: the bias
 * and penalties go to logits in place, then the candidates' logits are
 * gathered and processed (the row is not tempered). The same candidates,
 * order and weights as the full row would give; without top-k, the sums
 * (top-p's mass, temperature alone's normalizer) run over the list instead
 * of the row (other rounding). For a screened draft: 2048 logits instead of
 * 248k. */
int smp_distribution_at(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *cand, int n_cand,
                        const int32_t *history, int n_history, int n_input, const int32_t **ids,
                        const float **probs);

/* Walks ids[0..n) in the given order and returns the first id whose
 * cumulative probability exceeds u (u in [0, 1)); if rounding leaves the total
 * at or below u, the last id. n >= 1. Pure. */
int32_t smp_draw(const int32_t *ids, const float *probs, int n, double u);

/* out = the nx_token_logprob of token id under logits ([vocab] as the model
 * gave them; only read): log p(id) = logits[id] - logsumexp(logits), with
 * the normalizer's sum in double (kn_sum_exp_f32), and the n_top
 * (0..NX_MAX_TOP_LOGPROBS) likeliest tokens in the fixed order. Overwrites
 * the arrays smp_distribution returned. */
void smp_logprobs(nx_sampler *s, const float *logits, int32_t id, int n_top, nx_token_logprob *out);

/* The vocabulary size the sampler was created for. */
int smp_vocab_size(const nx_sampler *s);
/* How many candidate lists of s sorted every token steps g and h keep (a
 * top-p nucleus about as wide as the row, or one that min-p or rounding
 * kept from reaching top_p of the mass); the other paths sort only tokens
 * that can be in the list. For tests. */
long smp_sorted_all(const nx_sampler *s);

#endif
