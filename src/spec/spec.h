/* spec.h — the speculative decoding session (internal; the protocol and its
 * state diagram are in nextn.h and spec.c). */
#ifndef NX_SPEC_SPEC_H
#define NX_SPEC_SPEC_H

#include "spec/mtp.h"

#define SPEC_MAX_STOP 16
#define SPEC_PREFILL_PIECE 256   /* prompt rows per target call during prefill     */
#define SPEC_MAX_DEFER 64        /* drafter entries held back while plain decoding */
#define SPEC_INPUT_LP_PIECE 16   /* prompt rows per target call with input logprobs
                                    (each row's logits: 16 MB at a 248k vocab)    */

typedef enum { SPEC_FRESH, SPEC_READY, SPEC_DRAFTED, SPEC_VERIFIED, SPEC_ERROR, SPEC_CLOSED } spec_state;

/* Adaptive draft length (spec_auto.c): what has been measured so far. */
typedef struct {
    double alpha[NX_SPEC_MAX_DRAFT];      /* P(draft i accepted | drafts < i accepted)      */
    int seen[NX_SPEC_MAX_DRAFT];          /* rounds that reached draft i                    */
    double cost[NX_SPEC_MAX_DRAFT + 1];   /* seconds per round with k drafts                */
    int measured[NX_SPEC_MAX_DRAFT + 1];  /* rounds timed with k drafts                     */
    int timed_at[NX_SPEC_MAX_DRAFT + 1];  /* the round k was last timed in                  */
    int rounds;                           /* rounds observed (the first one is not timed)   */
    int since_probe;                      /* plain rounds since the last drafted round      */
    int probe_every;                      /* plain rounds between probes (grows)            */
    int since_check;                      /* drafted rounds since a neighbour was re-timed  */
    int check_side;                       /* the next neighbour: +1 or -1                   */
} spec_auto;

struct nx_spec {
    const nx_model *m;
    const nx_drafter *d;          /* NULL: plain decoding                       */
    nx_spec_opts opts;
    int32_t stop[SPEC_MAX_STOP];
    nx_logit_bias *bias;          /* the session's copy of opts.sampling's      */
    int32_t *lift;                /* ids a positive bias raises (lift_init), in
                                     bias's block                               */
    int n_lift;
    int max_ctx;
    int k_max;                    /* drafts per round at most                   */
    int k_fixed;                  /* drafts per round when not adaptive         */
    int auto_k;
    spec_auto au;
    spec_state state;
    nx_status sticky;             /* the error of the ERROR state               */
    char sticky_msg[600];

    nx_state *target;             /* target caches, rollback record             */
    mtp_rows rows;                /* the drafter's entries                      */
    int mtp_committed;            /* rows.n at the last commit (drafting adds
                                     provisional entries after it)             */
    nx_sampler *smp;
    int32_t *hist;                /* [max_ctx + K + 1]: x_0..x_{n-1}, b, drafts  */
    int n;                        /* tokens in the target caches                */
    int n_input;                  /* hist[0..n_input) is input: the presence and
                                     frequency penalties count hist[n_input..)  */
    int32_t d1;                   /* the head's draft for position n+1          */
    int32_t defer_tok[SPEC_MAX_DEFER];
    float *defer_h;               /* [SPEC_MAX_DEFER][H] hiddens of deferred entries */
    int n_defer;
    int plain_round;              /* this round decodes without drafting         */

    int k;                        /* drafts in the current round                */
    int32_t drafts[NX_SPEC_MAX_DRAFT];
    float *vlogits;               /* [K+1][V] verify logits (also prefill)      */
    float *vhidden;               /* [K+1][H] verify hiddens V_0..V_K            */
    float *hbuf;                  /* [SPEC_PREFILL_PIECE][H] prefill hiddens     */
    float *resid;                 /* [V] residual distribution scratch          */
    int sample_drafts;            /* drafts drawn from the head's distribution Q */
    int draft_processed;          /* argmax drafts of the logits after the logit
                                     bias and penalties, as the target's greedy
                                     choice sees them                          */
    int32_t *q_ids;               /* [k_max][V] Q of draft j: ids in the fixed   */
    float *q_probs;               /*   order and their probabilities (with     */
    int q_n[NX_SPEC_MAX_DRAFT];   /*   sample_drafts), q_n[j] of them; 0: the
                                       draft was the argmax (Q one-hot)         */
    float *q_dense;               /* [V] all zero between verifies: Q by id (rejection) */
    int accepted;                 /* a: drafts accepted by the last verify      */
    int32_t bonus;                /* c: the target's token after them           */
    float *lp_row;                /* [V] the raw logits row being sampled (logprobs
                                     on), or NULL: the sampler processes in place */
    nx_token_logprob *lp;         /* [K+1] the round's entries (logprobs on)    */
    int n_lp;                     /* entries the last emitting call emitted     */
    float *ilp_logits;            /* [SPEC_INPUT_LP_PIECE][V] with input logprobs */
    nx_token_logprob *ilp;        /* [cap_ilp] the last input call's entries     */
    int n_ilp, cap_ilp;
    int block_cap;                /* rows the [K+1]-sized buffers and the rollback
                                     record were allocated for (nx_spec_renew)  */
    nx_spec_stats stats;
};

/* 1 if t ends the output: one of the session's stop ids or the model's eos. */
int spec_is_stop(const nx_spec *s, int32_t t);
/* The draft for position n+1+j from the head's output s->rows.m: its argmax
 * (after the logit bias and penalties where the session has them:
 * draft_processed), or drawn from its distribution (sample_drafts); for
 * both, hist[n+1..n+j] must hold drafts 0..j-1, the history the target's
 * distribution there sees. */
int32_t spec_head_draft(nx_spec *s, int j);

void spec_auto_init(spec_auto *au);
/* Draft length for the next round, 0 (plain) .. k_max; k_start until a
 * round has been timed. */
int spec_auto_choose(spec_auto *au, int k_max, int k_start);
/* A finished round: k drafts, a accepted, seconds it took. */
void spec_auto_observe(spec_auto *au, int k, int a, double seconds);

#endif
