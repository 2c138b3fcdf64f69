/* spec.c — speculative decoding with the native MTP head (spec §6-§7).
 *
 * State machine (nextn.h draws it; each arrow is one function):
 *
 *   FRESH --nx_spec_prefill--> READY --nx_spec_draft--> DRAFTED --nx_spec_verify--> VERIFIED
 *     ^                          |  \______________nx_spec_verify (K = 0)___________/   |
 *     |                          +<------------------nx_spec_commit---------------------+
 *   any failure inside verify/commit --> ERROR (sticky); nx_spec_close --> CLOSED
 *
 * Invariants in READY (checked by spec_invariants under assert):
 *   1. the target caches hold tokens hist[0..n) and pos == n; hist[n] is the
 *      pending token b, already emitted but not yet run through the target;
 *   2. the drafter holds committed entries for positions 0..n-1 (entry p
 *      from hist[p+1] and the target hidden of position p), except the ones
 *      still deferred and the ones dropped while plain decoding (only the
 *      newest SPEC_MAX_DEFER are kept then: the head's attention context
 *      skips the rest, which can only cost acceptance, never correctness);
 *      d1 is the head's draft for position n+1 when nothing is deferred;
 *   3. the target's state advances only on verified tokens: a verify block
 *      is always committed (rolled back to the accepted prefix) before the
 *      next round.
 *
 * Greedy output is bit-identical to plain decoding because the verify block's
 * rows are computed exactly like single steps (model/layer.c), and sampled
 * tokens use the (seed, position) streams of the sampler. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "sample/sample.h"
#include "spec/spec.h"

/* ---- errors and state checks -------------------------------------------- */

static const char *state_name(spec_state st) {
    static const char *const names[] = {"fresh", "ready", "drafted", "verified", "error", "closed"};
    return names[st];
}

static nx_status wrong_state(nx_spec *s, const char *call, char *err, size_t errlen) {
    if (s->state == SPEC_ERROR) return nx_fail(err, errlen, s->sticky, "%s", s->sticky_msg);
    return nx_fail(err, errlen, NX_ESTATE, "%s: not allowed in state %s%s", call, state_name(s->state),
                   s->state == SPEC_FRESH     ? " (prefill first)"
                   : s->state == SPEC_DRAFTED ? " (the drafted round must be verified and committed first)"
                   : s->state == SPEC_VERIFIED ? " (the verified round must be committed first)"
                   : s->state == SPEC_CLOSED  ? " (the session was closed)"
                                              : "");
}

/* Moves to the sticky error state; returns st. */
static nx_status fail_sticky(nx_spec *s, nx_status st, const char *msg, char *err, size_t errlen) {
    s->state = SPEC_ERROR;
    s->sticky = st;
    snprintf(s->sticky_msg, sizeof s->sticky_msg, "speculative session failed earlier: %s", msg);
    return nx_fail(err, errlen, st, "%s", msg);
}

#ifndef NDEBUG
static int spec_invariants(const nx_spec *s) {
    if (s->state != SPEC_READY) return 1;
    return s->target->pos == s->n && s->target->rb.T == 0 &&
           (!s->d || (s->rows.n == s->mtp_committed && s->rows.n + s->n_defer <= s->n));
}
#endif

/* ---- setup ------------------------------------------------------------- */

/* NX_ACCEPT_DEFAULT as a session runs it: greedy at temperature 0, rejection
 * otherwise. */
static nx_accept_mode resolve_accept(nx_accept_mode accept, const nx_sampling *sp) {
    if (accept != NX_ACCEPT_DEFAULT) return accept;
    return sp->temperature > 0 ? NX_ACCEPT_REJECTION : NX_ACCEPT_GREEDY;
}

static int cmp_id(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* s->lift: the ids a positive logit bias raises, ascending and distinct,
 * held after the bias entries (one block). The head scores them beside a
 * screen's candidates and past a draft vocabulary (mtp_chooser's lift), so
 * that a token the bias makes the target's choice can be drafted. */
static void lift_init(nx_spec *s) {
    const int nb = s->opts.sampling.n_logit_bias;
    s->lift = s->bias ? (int32_t *)(s->bias + nb) : NULL;
    s->n_lift = 0;
    for (int i = 0; i < nb; i++)
        if (s->bias[i].bias > 0) s->lift[s->n_lift++] = s->bias[i].id;
    if (!s->n_lift) return;
    qsort(s->lift, (size_t)s->n_lift, sizeof *s->lift, cmp_id);
    int n = 1;
    for (int i = 1; i < s->n_lift; i++)
        if (s->lift[i] != s->lift[n - 1]) s->lift[n++] = s->lift[i];
    s->n_lift = n;
}

/* Drafts per round that opts ask of drafter d (0: plain; NX_DRAFT_AUTO's value
 * is its own). */
static int draft_k(const nx_spec_opts *o, const nx_drafter *d) {
    return o->draft == 0 ? (d ? d->block_size - 1 : 0) : o->draft;
}

nx_status nx_spec_check_opts(const nx_model *m, const nx_drafter *d, int max_ctx, const nx_spec_opts *opts, char *err,
                             size_t errlen) {
    if (d && d->target != m) return nx_fail(err, errlen, NX_EINVAL, "the drafter is bound to another model");
    if (max_ctx < 2) return nx_fail(err, errlen, NX_EINVAL, "context size %d is too small", max_ctx);
    if (!opts) return NX_OK;   /* the defaults */
    const nx_spec_opts o = *opts;
    const int k = draft_k(&o, d);
    if ((unsigned)o.accept > NX_ACCEPT_REJECTION)
        return nx_fail(err, errlen, NX_EINVAL, "acceptance mode %d is not an nx_accept_mode", (int)o.accept);
    if ((unsigned)o.draft_pick > NX_DRAFT_PICK_SAMPLE)
        return nx_fail(err, errlen, NX_EINVAL, "draft pick %d is not an nx_draft_pick", (int)o.draft_pick);
    if (o.draft != NX_DRAFT_AUTO && (k < 0 || k > NX_SPEC_MAX_DRAFT))
        return nx_fail(err, errlen, NX_EINVAL, "draft length %d must be 1..%d or auto", k, NX_SPEC_MAX_DRAFT);
    if (o.n_stop < 0 || o.n_stop > SPEC_MAX_STOP)
        return nx_fail(err, errlen, NX_EINVAL, "%d stop ids (at most %d)", o.n_stop, SPEC_MAX_STOP);
    if ((o.logprobs || o.input_logprobs) && (o.top_logprobs < 0 || o.top_logprobs > NX_MAX_TOP_LOGPROBS))
        return nx_fail(err, errlen, NX_EINVAL, "top_logprobs %d must be 0..%d", o.top_logprobs, NX_MAX_TOP_LOGPROBS);
    return nx_sampling_check(&o.sampling, m->cfg.vocab_size, err, errlen);
}

/* The fields of s (zeroed) that opts and the session's model, drafter and
 * context decide, as nx_spec_new sets them, after checking opts; the only
 * allocation is the logit bias copy (and its lift ids). On failure s holds nothing. */
static nx_status spec_configure(nx_spec *s, const nx_model *m, const nx_drafter *d, int max_ctx,
                                const nx_spec_opts *opts, char *err, size_t errlen) {
    nx_status st = nx_spec_check_opts(m, d, max_ctx, opts, err, errlen);
    if (st) {
        nx_err_prefix(err, errlen, "spec");
        return st;
    }
    nx_spec_opts o = opts ? *opts : (nx_spec_opts){0};
    if (!opts) o.sampling = nx_sampling_default();
    int k = draft_k(&o, d);
    size_t nb = (size_t)o.sampling.n_logit_bias;   /* bias, then lift, in one block */
    if (nb && !(s->bias = nx_alloc(nb * (sizeof *s->bias + sizeof *s->lift))))
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the speculative session");
    s->m = m;
    s->d = d;
    s->opts = o;
    if (o.n_stop) memcpy(s->stop, o.stop_ids, (size_t)o.n_stop * sizeof *s->stop);
    s->opts.stop_ids = s->stop;
    if (nb) memcpy(s->bias, o.sampling.logit_bias, nb * sizeof *s->bias);
    s->opts.sampling.logit_bias = s->bias;
    lift_init(s);
    s->auto_k = o.draft == NX_DRAFT_AUTO;
    s->k_max = !d ? 0 : s->auto_k ? (d->block_size - 1 > 4 ? d->block_size - 1 : 4) : k;
    if (s->k_max > NX_SPEC_MAX_DRAFT) s->k_max = NX_SPEC_MAX_DRAFT; /* stats and drafts are sized by it */
    s->k_fixed = d ? (s->auto_k ? 1 : k) : 0;
    s->max_ctx = max_ctx;
    s->opts.accept = resolve_accept(s->opts.accept, &s->opts.sampling);
    /* greedy acceptance takes the likeliest token everywhere, the first
     * token of a prefill or an extend too (it was sampled at the given
     * temperature, the rest argmax) */
    if (s->opts.accept == NX_ACCEPT_GREEDY) s->opts.sampling.temperature = 0.0f;
    s->sample_drafts = d && o.draft_pick != NX_DRAFT_PICK_ARGMAX && nx_spec_drafts_shape_output(o.accept, &o.sampling);
    s->draft_processed = d && !s->sample_drafts && nx_sampling_changes_logits(&s->opts.sampling);
    spec_auto_init(&s->au);
    s->state = SPEC_FRESH;
    return NX_OK;
}

/* 1 if s drafts under rejection sampling: its verify needs q_dense. */
static int needs_q_dense(const nx_spec *s) { return s->d && s->opts.accept == NX_ACCEPT_REJECTION; }

/* The buffers of a configured s (k_max, logprobs and input logprobs as
 * configured). On failure nx_spec_close frees what was allocated. */
static nx_status spec_alloc(nx_spec *s, char *err, size_t errlen) {
    const nx_model *m = s->m;
    const cfg_model *c = &m->cfg;
    const nx_spec_opts *o = &s->opts;
    size_t V = (size_t)c->vocab_size, H = (size_t)c->hidden_size, B = (size_t)s->k_max + 1;
    s->block_cap = (int)B;
    nx_status st = nx_state_new(m, s->max_ctx, &s->target, err, errlen);
    /* a session that never drafts never rolls back: no record to hold */
    if (!st && s->k_max > 0) st = mdl_state_enable_rollback(s->target, (int)B, err, errlen);
    if (!st) st = nx_sampler_new(c->vocab_size, &s->smp, err, errlen);
    if (!st && s->d) st = mtp_rows_init(&s->rows, s->d, s->max_ctx, err, errlen);
    if (!st) {
        int ok = (s->hist = nx_alloc(((size_t)s->max_ctx + B + 1) * sizeof *s->hist)) &&
                 (s->vlogits = nx_alloc_aligned(B * V * sizeof(float))) &&
                 (s->vhidden = nx_alloc_aligned(B * H * sizeof(float))) &&
                 (s->hbuf = nx_alloc_aligned((size_t)SPEC_PREFILL_PIECE * H * sizeof(float))) &&
                 (s->defer_h = nx_alloc_aligned((size_t)SPEC_MAX_DEFER * H * sizeof(float))) &&
                 (s->resid = nx_alloc(V * sizeof(float))) &&
                 (!needs_q_dense(s) || (s->q_dense = nx_alloc_aligned(V * sizeof(float)))) &&
                 (!s->sample_drafts || ((s->q_ids = nx_alloc((B - 1) * V * sizeof *s->q_ids)) &&
                                        (s->q_probs = nx_alloc((B - 1) * V * sizeof *s->q_probs)))) &&
                 (!o->logprobs ||
                  ((s->lp_row = nx_alloc(V * sizeof(float))) && (s->lp = nx_alloc(B * sizeof *s->lp)))) &&
                 (!o->input_logprobs || (s->ilp_logits = nx_alloc_aligned(SPEC_INPUT_LP_PIECE * V * sizeof(float))));
        if (!ok) st = nx_fail(err, errlen, NX_ENOMEM, "out of memory for the speculative session");
    }
    return st;
}

nx_status nx_spec_new(const nx_model *m, const nx_drafter *d, int max_ctx, const nx_spec_opts *opts, nx_spec **out,
                      char *err, size_t errlen) {
    *out = NULL;
    nx_spec *s = nx_calloc(1, sizeof *s);
    if (!s) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the speculative session");
    nx_status st = spec_configure(s, m, d, max_ctx, opts, err, errlen);
    if (!st) st = spec_alloc(s, err, errlen);
    if (st) {
        nx_spec_free(s);
        return st;
    }
    *out = s;
    return NX_OK;
}

/* Moves the buffers nx_spec_close frees (and the capacities they were
 * allocated with) from one session struct to another. */
static void spec_move_buffers(nx_spec *to, nx_spec *from) {
    to->target = from->target, to->rows = from->rows, to->smp = from->smp, to->hist = from->hist;
    to->defer_h = from->defer_h, to->vlogits = from->vlogits, to->vhidden = from->vhidden, to->hbuf = from->hbuf;
    to->resid = from->resid, to->lp_row = from->lp_row, to->lp = from->lp, to->ilp_logits = from->ilp_logits;
    to->q_ids = from->q_ids, to->q_probs = from->q_probs, to->q_dense = from->q_dense;
    to->ilp = from->ilp, to->cap_ilp = from->cap_ilp, to->block_cap = from->block_cap;
}

/* *s = *t, the struct moved: its pointer into itself re-aimed. */
static void spec_assign(nx_spec *s, const nx_spec *t) {
    *s = *t;
    s->opts.stop_ids = s->stop;
}

nx_status nx_spec_renew(nx_spec *s, const nx_spec_opts *opts, char *err, size_t errlen) {
    if (s->state == SPEC_CLOSED) return nx_fail(err, errlen, NX_ESTATE, "renew: the session is closed");
    nx_spec t;
    memset(&t, 0, sizeof t);
    nx_status st = spec_configure(&t, s->m, s->d, s->max_ctx, opts, err, errlen);
    if (st) return st;
    /* the old buffers serve when they hold the new block and logprob rows */
    const int fits = t.k_max + 1 <= s->block_cap && (!t.opts.logprobs || s->lp_row) &&
                     (!t.opts.input_logprobs || s->ilp_logits) && (!t.sample_drafts || s->q_ids) &&
                     (!needs_q_dense(&t) || s->q_dense);
    if (!fits) {
        if ((st = spec_alloc(&t, err, errlen))) {
            nx_spec_close(&t);
            return st;
        }
        nx_spec_close(s);
        spec_assign(s, &t);
        return NX_OK;
    }
    nx_free(s->bias);
    spec_move_buffers(&t, s);
    /* logprob buffers the new options do not want go: their presence is
     * what turns the work on */
    if (!t.opts.logprobs) nx_free(t.lp_row), nx_free(t.lp), t.lp_row = NULL, t.lp = NULL;
    if (!t.opts.input_logprobs) {
        nx_free_aligned(t.ilp_logits), nx_free(t.ilp);
        t.ilp_logits = NULL, t.ilp = NULL, t.cap_ilp = 0;
    }
    nx_state_reset(t.target);
    t.rows.n = 0;   /* the head's KV rows past n are never read */
    spec_assign(s, &t);
    return NX_OK;
}

void nx_spec_close(nx_spec *s) {
    if (!s || s->state == SPEC_CLOSED) return;
    nx_state_free(s->target);
    nx_sampler_free(s->smp);
    if (s->rows.d) mtp_rows_free(&s->rows);
    nx_free(s->hist);
    nx_free_aligned(s->vlogits);
    nx_free_aligned(s->vhidden);
    nx_free_aligned(s->hbuf);
    nx_free_aligned(s->defer_h);
    nx_free(s->resid);
    nx_free(s->q_ids);
    nx_free(s->q_probs);
    nx_free_aligned(s->q_dense);
    nx_free(s->lp_row);
    nx_free(s->lp);
    nx_free_aligned(s->ilp_logits);
    nx_free(s->ilp);
    nx_free(s->bias);
    s->bias = NULL;
    s->opts.sampling.logit_bias = NULL;
    s->opts.sampling.n_logit_bias = 0;
    s->target = NULL;
    s->smp = NULL;
    s->hist = NULL;
    s->vlogits = s->vhidden = s->hbuf = s->defer_h = s->resid = s->lp_row = s->q_probs = s->q_dense = NULL;
    s->q_ids = NULL;
    s->lp = s->ilp = NULL;
    s->ilp_logits = NULL;
    s->n_lp = s->n_ilp = s->cap_ilp = 0;
    s->state = SPEC_CLOSED;
}

void nx_spec_free(nx_spec *s) {
    if (!s) return;
    nx_spec_close(s);
    nx_free(s);
}

const nx_spec_stats *nx_spec_get_stats(const nx_spec *s) { return &s->stats; }
int nx_spec_max_draft(const nx_spec *s) { return s->k_max; }

int nx_spec_drafts_shape_output(nx_accept_mode accept, const nx_sampling *sp) {
    return resolve_accept(accept, sp) == NX_ACCEPT_REJECTION && sp->temperature > 0 && sp->top_k != 1;
}
int nx_spec_length(const nx_spec *s) { return s->state == SPEC_FRESH || s->state == SPEC_CLOSED ? 0 : s->n + 1; }

const nx_token_logprob *nx_spec_logprobs(const nx_spec *s, int *n) {
    *n = s->lp && s->state != SPEC_CLOSED ? s->n_lp : 0;
    return *n ? s->lp : NULL;
}

const nx_token_logprob *nx_spec_input_logprobs(const nx_spec *s, int *n) {
    *n = s->ilp && s->state != SPEC_CLOSED ? s->n_ilp : 0;
    return *n ? s->ilp : NULL;
}

int spec_is_stop(const nx_spec *s, int32_t t) {
    for (int i = 0; i < s->opts.n_stop; i++)
        if (s->stop[i] == t) return 1;
    for (int i = 0; i < s->m->cfg.n_eos; i++)
        if (s->m->cfg.eos_ids[i] == t) return 1;
    return 0;
}

/* ---- log-probabilities ------------------------------------------------------
 * The sampler processes a logits row in place (bias, penalties, temperature),
 * and the token is known only after it ran: with logprobs on, lp_keep copies
 * the raw row first and lp_take reads the copy once the token is chosen.
 * Every public call starts with lp_clear: the entries a getter returns are
 * always the last call's. */

static void lp_clear(nx_spec *s) { s->n_lp = s->n_ilp = 0; }

static void lp_keep(nx_spec *s, const float *row) {
    if (s->lp_row) memcpy(s->lp_row, row, (size_t)s->m->cfg.vocab_size * sizeof *row);
}

static void lp_take(nx_spec *s, int slot, int32_t tok) {
    if (s->lp_row) smp_logprobs(s->smp, s->lp_row, tok, s->opts.top_logprobs, &s->lp[slot]);
}

/* The target rows the head reads: post-final-norm (default) or pre-norm. */
static void hidden_out(const nx_spec *s, nx_forward_out *fo, float *rows) {
    if (s->d && s->d->hidden_prenorm) fo->prenorm = rows;
    else fo->hidden = rows;
}

/* ---- drafts ------------------------------------------------------------------ */

/* Draft j (position n+1+j) drawn from the head's draft logits ([V], processed
 * in place; with a screen, only those at its candidates cand[0..n_cand) are
 * read) under the session's sampling, with the history the target's
 * distribution at that position sees (hist[0..n+1+j): the sequence, b and
 * drafts 0..j-1), so that where the head matches the target Q = P and
 * every draft is accepted. Q is kept for the verify (spec §7.2). */
/* The distribution under sp of draft j's logits (processed in place; with
 * a screen, of its candidates cand[0..n_cand) only), with the history the
 * target's distribution at that position sees: hist[0..n+1+j). */
static int draft_list(nx_spec *s, const nx_sampling *sp, int j, float *logits, const int32_t *cand, int n_cand,
                      const int32_t **ids, const float **probs) {
    const int pos = s->n + 1 + j;
    return cand ? smp_distribution_at(s->smp, sp, logits, cand, n_cand, s->hist, pos, s->n_input, ids, probs)
                : smp_distribution(s->smp, sp, logits, s->hist, pos, s->n_input, ids, probs);
}

static int32_t sample_draft(nx_spec *s, int j, float *logits, const int32_t *cand, int n_cand) {
    const nx_sampling *sp = &s->opts.sampling;
    const int64_t pos = s->n + 1 + j, V = s->m->cfg.vocab_size;
    const int32_t *ids;
    const float *probs;
    const int n = draft_list(s, sp, j, logits, cand, n_cand, &ids, &probs);
    memcpy(s->q_ids + j * V, ids, (size_t)n * sizeof *ids);
    memcpy(s->q_probs + j * V, probs, (size_t)n * sizeof *probs);
    s->q_n[j] = n;
    return smp_draw(ids, probs, n, smp_uniform(sp->seed, pos, SMP_STREAM_DRAFT));
}

/* Draft j as the argmax of the head's draft logits after the session's
 * logit bias and penalties (processed in place; with a screen, among its
 * candidates only), with the history sample_draft uses: the token the
 * target's greedy choice would make from the head's logits. Without it a
 * bias or a penalty that moves the target's choice would reject the raw
 * argmax's draft every time (a +100 bias: 0 of 183 drafts accepted). */
static int32_t processed_argmax(nx_spec *s, int j, float *logits, const int32_t *cand, int n_cand) {
    nx_sampling greedy = s->opts.sampling;
    greedy.temperature = 0.0f;
    const int32_t *ids;
    const float *probs;
    draft_list(s, &greedy, j, logits, cand, n_cand, &ids, &probs);
    return ids[0];
}

/* The chooser (mtp_pick_fn) of drafts j of sessions who[]: a draw where the
 * session samples drafts, the processed argmax where it has a bias or
 * penalties, else the head's argmax (-1: mtp's own). */
typedef struct {
    nx_spec *const *who;
    int j;
} draft_pick;

static int32_t pick_for(void *ctx, int t, float *logits, const int32_t *cand, int n) {
    const draft_pick *c = ctx;
    nx_spec *s = c->who[t];
    return s->sample_drafts     ? sample_draft(s, c->j, logits, cand, n)
           : s->draft_processed ? processed_argmax(s, c->j, logits, cand, n)
                                : -1;
}

/* mtp_lift_fn: the ids session who[t]'s positive bias raises. */
static int lift_for(void *ctx, int t, const int32_t **ids) {
    const draft_pick *c = ctx;
    *ids = c->who[t]->lift;
    return c->who[t]->n_lift;
}

int32_t spec_head_draft(nx_spec *s, int j) {
    mtp_rows *r = &s->rows;
    int32_t draft;
    draft_pick c = {&s, j};
    const mtp_chooser ch = {pick_for, lift_for, &c};
    mtp_head_drafts(r->d, &r->sc, r->head_work, r->m, 1, r->logits, &draft, &ch);
    return draft;
}

/* Before a provisional entry: the committed entries' m is kept for
 * drop_provisional (the first provisional entry overwrites it). */
static void before_provisional(nx_spec *s) {
    if (s->rows.n == s->mtp_committed) mtp_rows_keep_m(&s->rows);
}

/* Drops the provisional entries of a round that is not committed (refused,
 * or past the context), m included: the next round drafts as if they had
 * never run. */
static void drop_provisional(nx_spec *s) {
    if (s->d) mtp_rows_drop_to(&s->rows, s->mtp_committed);
}

/* A recursive step (spec §5.4): draft j from draft j-1 and the head's own
 * output m. Its entry is provisional, dropped at commit. */
static void draft_next(nx_spec *s, int j) {
    s->hist[s->n + j] = s->drafts[j - 1];
    before_provisional(s);
    mtp_rows_append_m(&s->rows, &s->drafts[j - 1], s->rows.m, 1);
    s->drafts[j] = spec_head_draft(s, j);
}

/* ---- drafter rows --------------------------------------------------------- */

/* Runs the deferred (token, hidden) entries, leaving d1 = the head's draft
 * after the last of them. */
static void flush_deferred(nx_spec *s) {
    if (s->n_defer == 0) return;
    mtp_rows_append_m(&s->rows, s->defer_tok, s->defer_h, s->n_defer);
    s->d1 = spec_head_draft(s, 0);
    s->n_defer = 0;
    s->mtp_committed = s->rows.n;
}

/* Adds the entries of committed tokens toks[0..n) with target hiddens
 * h[0..n): now (computing the next d1), or deferred while plain decoding.
 * The deferred buffer keeps the newest SPEC_MAX_DEFER entries and drops the
 * oldest, so plain decoding never pays for the head (invariant 2). */
static void add_entries(nx_spec *s, const int32_t *toks, const float *h, int n, int defer, int head_later) {
    int64_t H = s->m->cfg.hidden_size;
    if (defer && n <= SPEC_MAX_DEFER) {
        int drop = s->n_defer + n - SPEC_MAX_DEFER;
        if (drop > 0) {
            /* drop the older half at once: one memmove per SPEC_MAX_DEFER/2
             * tokens instead of one per token */
            if (drop < SPEC_MAX_DEFER / 2) drop = SPEC_MAX_DEFER / 2;
            if (drop > s->n_defer) drop = s->n_defer;
            memmove(s->defer_tok, s->defer_tok + drop, (size_t)(s->n_defer - drop) * sizeof *toks);
            memmove(s->defer_h, s->defer_h + drop * H, (size_t)((s->n_defer - drop) * H) * sizeof(float));
            s->n_defer -= drop;
        }
        memcpy(s->defer_tok + s->n_defer, toks, (size_t)n * sizeof *toks);
        memcpy(s->defer_h + s->n_defer * H, h, (size_t)(n * H) * sizeof(float));
        s->n_defer += n;
        return;
    }
    flush_deferred(s);
    mtp_rows_append_m(&s->rows, toks, h, n);
    /* a batch scores every session's m with one pass over the head */
    s->d1 = head_later ? -1 : spec_head_draft(s, 0);
    s->mtp_committed = s->rows.n;
}

/* ---- prefill ------------------------------------------------------------- */

/* Runs hist[n .. n+count) through the target from position n, adds the
 * drafter entries whose next token is known, takes the token after them --
 * `next` when the caller knows it (>= 0), else sampled and emitted -- and
 * completes the last entry with it (spec §6.2). On failure nothing changed. */
static nx_status feed(nx_spec *s, int count, int32_t next, int32_t *first, char *err, size_t errlen) {
    int64_t H = s->m->cfg.hidden_size, V = s->m->cfg.vocab_size;
    int start = s->n, rows_before = s->d ? s->rows.n : 0;
    const int32_t *seq = s->hist + start;
    /* with input logprobs, every row's logits: smaller pieces, and an entry
     * for each row's next token -- seq[1..count), then `next` if known */
    const int piece = s->ilp_logits ? SPEC_INPUT_LP_PIECE : SPEC_PREFILL_PIECE;
    s->n_ilp = 0;
    if (s->ilp_logits && count > s->cap_ilp) {
        nx_token_logprob *p = nx_realloc(s->ilp, (size_t)count * sizeof *p);
        if (!p) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for %d input logprobs", count);
        s->ilp = p, s->cap_ilp = count;
    }
    int T = 0;
    for (int a = 0; a < count; a += T) {
        T = count - a < piece ? count - a : piece;
        nx_forward_out fo = {.logits = s->vlogits, .all_hidden = 1};
        if (s->ilp_logits) fo = (nx_forward_out){.logits = s->ilp_logits, .all_rows = 1};
        hidden_out(s, &fo, s->hbuf);
        char msg[512];
        nx_status st = nx_forward(s->m, s->target, seq + a, T, &fo, msg, sizeof msg);
        if (st) {
            s->n_ilp = 0;
            if (s->d) s->rows.n = s->mtp_committed = rows_before;
            if (start > 0) return fail_sticky(s, st, msg, err, errlen); /* earlier pieces cannot be undone */
            nx_state_reset(s->target);                                  /* a prefill simply starts over */
            return nx_fail(err, errlen, st, "%s", msg);
        }
        /* entry p pairs hidden p with token p+1: the piece's last row waits
         * for the next piece, or for the sampled token */
        int rows = a + T == count ? T - 1 : T;
        if (s->d && rows > 0) mtp_rows_append(&s->rows, seq + a + 1, s->hbuf, rows, NULL);
        for (int r = 0; s->ilp_logits && r < T; r++) {
            int32_t tok = a + r + 1 < count ? seq[a + r + 1] : next;
            if (tok >= 0) smp_logprobs(s->smp, s->ilp_logits + r * V, tok, s->opts.top_logprobs, &s->ilp[s->n_ilp++]);
            else memcpy(s->vlogits, s->ilp_logits + r * V, (size_t)V * sizeof(float)); /* the row to sample from */
        }
    }
    if (s->d) s->mtp_committed = s->rows.n;
    int n = start + count;
    s->n = n;
    s->n_input = next >= 0 ? n + 1 : n;   /* the output starts after the fed tokens */
    if (next < 0) lp_keep(s, s->vlogits);
    int32_t b = next >= 0 ? next : nx_sample(s->smp, &s->opts.sampling, s->vlogits, s->hist, n, s->n_input, n);
    if (next < 0) lp_take(s, 0, b);
    s->n_lp = next < 0;
    s->hist[n] = b;
    if (s->d) add_entries(s, &b, s->hbuf + (int64_t)(T - 1) * H, 1, 0, 0);   /* the last piece's last row */
    s->stats.emitted += next < 0;
    s->stats.target_forwards++;
    if (first) *first = b;
    return NX_OK;
}

/* Token ids are checked before anything moves: a bad id is a plain error,
 * not a broken session. */
static nx_status check_tokens(const nx_spec *s, const char *call, const int32_t *tokens, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab_size)
            return nx_fail(err, errlen, NX_EINVAL, "%s: token %d at index %d is outside the vocabulary [0, %d)", call, tokens[i], i,
                           s->m->cfg.vocab_size);
    return NX_OK;
}

nx_status nx_spec_prefill(nx_spec *s, const int32_t *prompt, int n, int32_t *first, char *err, size_t errlen) {
    lp_clear(s);
    if (s->state != SPEC_FRESH) return wrong_state(s, "prefill", err, errlen);
    if (n < 1) return nx_fail(err, errlen, NX_EINVAL, "prefill: empty prompt");
    if (n + 1 > s->max_ctx)
        return nx_fail(err, errlen, NX_ERANGE, "prefill: %d prompt tokens leave no room in a context of %d", n, s->max_ctx);
    nx_status st = check_tokens(s, "prefill", prompt, n, err, errlen);   /* the index in the whole prompt */
    if (st) return st;
    double t0 = nx_now_s();
    memcpy(s->hist, prompt, (size_t)n * sizeof *s->hist);
    s->n = 0;
    if ((st = feed(s, n, -1, first, err, errlen))) return st;
    s->stats.prefill_s += nx_now_s() - t0;
    s->state = SPEC_READY;
    assert(spec_invariants(s));
    return NX_OK;
}

/* Shared by extend and absorb: the pending token, then tokens[0..n) with
 * the last of them held back as the new pending token when next_known. */
static nx_status extend(nx_spec *s, const char *call, const int32_t *tokens, int n, int next_known, int32_t *first,
                        char *err, size_t errlen) {
    lp_clear(s);
    if (s->state != SPEC_READY) return wrong_state(s, call, err, errlen);
    if (n < (next_known ? 1 : 0)) return nx_fail(err, errlen, NX_EINVAL, "%s: %d tokens", call, n);
    /* the token after them (the pending one) must have a position left:
     * s->n + n + 1 (extend's sampled token) or s->n + n (absorb's last) */
    if (n > s->max_ctx - s->n - (next_known ? 1 : 2))
        return nx_fail(err, errlen, NX_ERANGE, "%s: %d more tokens exceed the context of %d (%d held)", call, n, s->max_ctx,
                       s->n + 1);
    nx_status st = check_tokens(s, call, tokens, n, err, errlen);
    if (st) return st;
    double t0 = nx_now_s();
    if (s->d) flush_deferred(s);
    if (n) memcpy(s->hist + s->n + 1, tokens, (size_t)n * sizeof *tokens); /* after the pending token */
    st = next_known ? feed(s, n, tokens[n - 1], NULL, err, errlen) : feed(s, n + 1, -1, first, err, errlen);
    if (st) return st;
    s->stats.prefill_s += nx_now_s() - t0;
    assert(spec_invariants(s));
    return NX_OK;
}

nx_status nx_spec_extend(nx_spec *s, const int32_t *tokens, int n, int32_t *first, char *err, size_t errlen) {
    return extend(s, "extend", tokens, n, 0, first, err, errlen);
}

nx_status nx_spec_absorb(nx_spec *s, const int32_t *tokens, int n, char *err, size_t errlen) {
    lp_clear(s);
    if (s->state != SPEC_FRESH) return extend(s, "absorb", tokens, n, 1, NULL, err, errlen);
    if (n < 2) return nx_fail(err, errlen, NX_EINVAL, "absorb: a fresh session needs at least 2 tokens (got %d)", n);
    if (n > s->max_ctx)   /* the last of them is pending, at position n - 1 */
        return nx_fail(err, errlen, NX_ERANGE, "absorb: %d tokens exceed a context of %d", n, s->max_ctx);
    nx_status st = check_tokens(s, "absorb", tokens, n, err, errlen);
    if (st) return st;
    double t0 = nx_now_s();
    memcpy(s->hist, tokens, (size_t)n * sizeof *s->hist);
    s->n = 0;
    st = feed(s, n - 1, tokens[n - 1], NULL, err, errlen);
    if (st) return st;
    s->stats.prefill_s += nx_now_s() - t0;
    s->state = SPEC_READY;
    assert(spec_invariants(s));
    return NX_OK;
}

/* ---- one round ------------------------------------------------------------ */

/* The drafts a round of s can have when k are asked for: at most k_max, and
 * the verify block must fit the context. */
static int draft_len(const nx_spec *s, int k) {
    if (k > s->k_max) k = s->k_max;
    if (k > s->max_ctx - s->n - 1) k = s->max_ctx - s->n - 1;
    return k > 0 ? k : 0;
}

/* The first draft is the head's d1; the rest come from the recursion. */
static void draft_start(nx_spec *s, int k) {
    flush_deferred(s);
    s->drafts[0] = s->d1;
    s->k = k;
}

static void draft_done(nx_spec *s, double t0) {
    s->state = SPEC_DRAFTED;
    s->stats.draft_s += nx_now_s() - t0;
}

nx_status nx_spec_draft(nx_spec *s, int k, int32_t *drafts, int *n_drafts, char *err, size_t errlen) {
    *n_drafts = 0;
    lp_clear(s);
    if (s->state != SPEC_READY) return wrong_state(s, "draft", err, errlen);
    if (k <= 0) return NX_OK;
    if (!s->d) return nx_fail(err, errlen, NX_ESTATE, "draft: this session has no drafter");
    if ((k = draft_len(s, k)) == 0) return NX_OK;
    double t0 = nx_now_s();
    draft_start(s, k);
    for (int j = 1; j < k; j++) draft_next(s, j);
    memcpy(drafts, s->drafts, (size_t)k * sizeof *drafts);
    *n_drafts = k;
    draft_done(s, t0);
    return NX_OK;
}

/* Chooses the target's token at verify index j and decides the draft there
 * (spec §7). Returns 1 if drafts[j] is accepted, else 0 with *c the token. */
static int accept_at(nx_spec *s, float *vlogits, int j, int32_t *c) {
    const nx_sampling *sp = &s->opts.sampling;
    int V = s->m->cfg.vocab_size;
    float *logits = vlogits + (size_t)j * (size_t)V;
    int64_t pos = s->n + j + 1;           /* absolute position of the token chosen here */
    int hist_n = s->n + j + 1;            /* history: committed tokens, b, drafts 1..j */
    int has_draft = j < s->k;
    if (s->opts.accept != NX_ACCEPT_REJECTION || !has_draft) {   /* greedy: the session's temperature is 0 */
        *c = nx_sample(s->smp, sp, logits, s->hist, hist_n, s->n_input, pos);
        return has_draft && *c == s->drafts[j];
    }
    /* rejection sampling (spec §7.2): accept d with probability
     * min(1, P(d)/Q(d)), else draw from the residual max(0, P - Q). Q is
     * the head's distribution d was drawn from, or one-hot at d for an
     * argmax draft (accept with probability P(d), else draw from P with d
     * removed). q_dense holds Q by id while the residual is computed. P's
     * list is made only when P(d) needs it, or for the residual. */
    const int32_t *ids = NULL;
    const float *probs = NULL;
    const int32_t d = s->drafts[j];
    int n = 0;
    smp_process(s->smp, sp, logits, s->hist, hist_n, s->n_input);
    double pd = smp_prob(s->smp, sp, logits, d);   /* -1: only the list tells */
    if (pd < 0) {
        n = smp_list(s->smp, sp, logits, &ids, &probs);
        pd = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] == d) pd = probs[i];
    }
    const float one = 1.0f;
    const int nq = s->q_n[j] ? s->q_n[j] : 1;
    const int32_t *q_ids = s->q_n[j] ? s->q_ids + (size_t)j * V : &d;
    const float *q_probs = s->q_n[j] ? s->q_probs + (size_t)j * V : &one;
    double qd = 0, total = 0;
    for (int i = 0; i < nq; i++)
        if (q_ids[i] == d) qd = q_probs[i];
    if (smp_uniform(sp->seed, pos, SMP_STREAM_ACCEPT) * qd < pd) return 1;
    if (!ids) n = smp_list(s->smp, sp, logits, &ids, &probs);
    for (int i = 0; i < nq; i++) s->q_dense[q_ids[i]] = q_probs[i];
    for (int i = 0; i < n; i++) {
        const float r = probs[i] - s->q_dense[ids[i]];
        total += s->resid[i] = r > 0 ? r : 0.0f;
    }
    for (int i = 0; i < nq; i++) s->q_dense[q_ids[i]] = 0;
    if (total <= 0) { /* P <= Q everywhere: the coin can only fail by rounding: emit d */
        *c = d;
        return 0;
    }
    for (int i = 0; i < n; i++) s->resid[i] = (float)(s->resid[i] / total);
    *c = smp_draw(ids, s->resid, n, smp_uniform(sp->seed, pos, SMP_STREAM_RESIDUAL));
    return 0;
}

/* The checks of a verify and its block [b, d_1..d_K] in hist; nothing runs.
 * On a full context the provisional drafts are dropped and the session is
 * READY again (a plain error, not a broken session). */
static nx_status verify_begin(nx_spec *s, char *err, size_t errlen) {
    lp_clear(s);
    if (s->state == SPEC_READY) s->k = 0;
    else if (s->state != SPEC_DRAFTED) return wrong_state(s, "verify", err, errlen);
    int K = s->k;
    if (s->n + K + 1 > s->max_ctx) {
        drop_provisional(s);
        s->state = SPEC_READY;
        return nx_fail(err, errlen, NX_ERANGE, "verify: the context of %d tokens is full", s->max_ctx);
    }
    memcpy(s->hist + s->n + 1, s->drafts, (size_t)K * sizeof *s->hist);
    return NX_OK;
}

/* Decides the round from the target's logits of the block ([K+1][V],
 * processed in place) once the forward has run. */
static void verify_decide(nx_spec *s, float *vlogits) {
    int K = s->k, a = 0;
    int64_t V = s->m->cfg.vocab_size;
    int32_t c = 0;
    lp_clear(s);                              /* nothing emitted until the commit */
    for (;; a++) {                            /* to the first rejection, or to index K */
        lp_keep(s, vlogits + a * V);
        int ok = accept_at(s, vlogits, a, &c);
        lp_take(s, a, ok ? s->drafts[a] : c);
        if (!ok) break;
    }
    for (int i = 0; i < K && i <= a; i++) {   /* draft i was checked; accepted if i < a */
        s->stats.tried[i]++;
        s->stats.hits[i] += i < a;
    }
    /* statistics count what the target accepted, even past a stop token */
    s->stats.drafted += K;
    s->stats.accepted += a;
    /* a stop token among the accepted drafts ends the round there */
    for (int i = 0; i < a; i++)
        if (spec_is_stop(s, s->drafts[i])) {
            c = s->drafts[i];
            a = i;
            break;
        }
    s->stats.rounds++;
    s->stats.target_forwards++;
    s->accepted = a;
    s->bonus = c;
    s->state = SPEC_VERIFIED;
}

nx_status nx_spec_verify(nx_spec *s, char *err, size_t errlen) {
    nx_status st = verify_begin(s, err, errlen);
    if (st) return st;
    double t0 = nx_now_s();
    int K = s->k;
    int32_t *block = s->hist + s->n; /* [b, d_1, ..., d_K] */
    nx_forward_out fo = {.logits = s->vlogits, .all_rows = 1};
    hidden_out(s, &fo, s->vhidden);
    char msg[512];
    /* a plain round has nothing to roll back: no record needed */
    st = K ? mdl_forward_verify(s->m, s->target, block, K + 1, &fo, msg, sizeof msg)
           : nx_forward(s->m, s->target, block, 1, &fo, msg, sizeof msg);
    if (st) return fail_sticky(s, st, msg, err, errlen);
    verify_decide(s, s->vlogits);
    s->stats.verify_s += nx_now_s() - t0;
    return NX_OK;
}

/* nx_spec_commit; head_later: the first draft of the next round (d1) is left
 * for the caller to score (d1 = -1). */
static nx_status commit(nx_spec *s, int32_t *emitted, int *n_emitted, int head_later, char *err, size_t errlen) {
    *n_emitted = 0;
    lp_clear(s);   /* verify_decide's entries stay in s->lp; counted once the commit succeeds */
    if (s->state != SPEC_VERIFIED) return wrong_state(s, "commit", err, errlen);
    double t0 = nx_now_s();
    int a = s->accepted, K = s->k;
    char msg[512];
    nx_status st = K ? mdl_rollback_to(s->target, a + 1, msg, sizeof msg) : NX_OK;
    if (st) return fail_sticky(s, st, msg, err, errlen);
    /* emitted: d_1..d_a, c; the sequence gains them after b */
    int32_t *out = s->hist + s->n + 1;
    out[a] = s->bonus;
    s->n += a + 1;                /* before the next d1, whose history ends with c */
    if (s->d) {
        /* drop the provisional entries, then the entries of b, d_1..d_a from
         * the target's verified hiddens V_0..V_a (spec §6.3 step 5) */
        s->rows.n = s->mtp_committed;
        add_entries(s, out, s->vhidden, a + 1, K == 0 && s->plain_round, head_later);
    }
    memcpy(emitted, out, (size_t)(a + 1) * sizeof *emitted);
    *n_emitted = a + 1;
    s->n_lp = s->lp ? a + 1 : 0;  /* verify_decide kept entries 0..a (a stop cut at i keeps i's) */
    s->stats.emitted += a + 1;
    s->state = SPEC_READY;
    s->stats.commit_s += nx_now_s() - t0;
    assert(spec_invariants(s));
    return NX_OK;
}

nx_status nx_spec_commit(nx_spec *s, int32_t *emitted, int *n_emitted, char *err, size_t errlen) {
    return commit(s, emitted, n_emitted, 0, err, errlen);
}

/* The adaptive draft length: none without a drafter; the drafter's own
 * block size to start with. */
static int auto_k(nx_spec *s) {
    if (!s->d) return 0;
    const int start = s->d->block_size - 1 < s->k_max ? s->d->block_size - 1 : s->k_max;
    return spec_auto_choose(&s->au, s->k_max, start);
}

/* The draft length of the next round of s, at most max_emit - 1. */
static int round_k(nx_spec *s, int max_emit) {
    /* capped to one token (the last one, or a caller's round without
     * drafts): no draft, and no auto-K probe spent on it */
    int k = max_emit <= 1 ? 0 : s->auto_k ? auto_k(s) : s->k_fixed;
    if (k > max_emit - 1) k = max_emit - 1; /* the round emits at most k + 1 */
    /* a round without drafts defers the drafter's entries: nothing reads
     * them until drafting resumes (auto K, or a caller capping max_emit) */
    s->plain_round = s->d && k == 0;
    return k;
}

nx_status nx_spec_step(nx_spec *s, int max_emit, int32_t *emitted, int *n_emitted, char *err, size_t errlen) {
    *n_emitted = 0;
    lp_clear(s);
    if (s->state != SPEC_READY) return wrong_state(s, "step", err, errlen);
    if (max_emit < 1) return nx_fail(err, errlen, NX_EINVAL, "step: max_emit %d must be >= 1", max_emit);
    int k = round_k(s, max_emit);
    int32_t drafts[NX_SPEC_MAX_DRAFT];
    int nd;
    double t0 = nx_now_s();
    nx_status st = nx_spec_draft(s, k, drafts, &nd, err, errlen);
    if (!st) st = nx_spec_verify(s, err, errlen);
    if (!st) st = nx_spec_commit(s, emitted, n_emitted, err, errlen);
    if (!st && s->auto_k) spec_auto_observe(&s->au, nd, s->accepted, nx_now_s() - t0);
    return st;
}

/* ---- many sessions, one forward ---------------------------------------------- */

struct nx_spec_batch {
    const nx_model *m;
    int max_ctx;                  /* the head's scratch covers sessions up to this */
    float *logits;                /* [MDL_CHUNK][V] the forward's or the head's logits */
    float *hidden;                /* [MDL_CHUNK][H] verify hiddens; head outputs m    */
    float *u;                     /* [MDL_CHUNK][2H] the head's fc inputs             */
    void *head_work;              /* mtp_head_rows' scratch (mtp_head_work_bytes)     */
    mdl_scratch sc;               /* the head's batched entries                       */
};

nx_status nx_spec_batch_new(const nx_model *m, int max_ctx, nx_spec_batch **out, char *err, size_t errlen) {
    *out = NULL;
    if (max_ctx < 2) return nx_fail(err, errlen, NX_EINVAL, "batch: context size %d is too small", max_ctx);
    nx_spec_batch *b = nx_calloc(1, sizeof *b);
    size_t V = (size_t)m->cfg.vocab_size, H = (size_t)m->cfg.hidden_size;
    if (!b || !(b->logits = nx_alloc_aligned((size_t)MDL_CHUNK * V * sizeof(float))) ||
        !(b->hidden = nx_alloc_aligned((size_t)MDL_CHUNK * H * sizeof(float))) ||
        !(b->u = nx_alloc_aligned((size_t)MDL_CHUNK * 2 * H * sizeof(float))) ||
        !(b->head_work = nx_alloc_aligned(mtp_head_work_bytes(m))) || mdl_scratch_init(&b->sc, m, max_ctx) != NX_OK) {
        nx_spec_batch_free(b);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for a batch of %d rows", MDL_CHUNK);
    }
    b->m = m;
    b->max_ctx = max_ctx;
    *out = b;
    return NX_OK;
}

void nx_spec_batch_free(nx_spec_batch *b) {
    if (!b) return;
    nx_free_aligned(b->logits);
    nx_free_aligned(b->hidden);
    nx_free_aligned(b->u);
    nx_free_aligned(b->head_work);
    if (b->max_ctx) mdl_scratch_free(&b->sc);
    nx_free(b);
}

/* 1 if the head work of s can join the batch's: the batch's drafter d and
 * a context its scratch covers. */
static int joins(const nx_spec_batch *b, const nx_spec *s, const nx_drafter *d) {
    return s->d && s->d == d && s->max_ctx <= b->max_ctx;
}

/* Drafts j of sessions who[0..c) (one drafter) from their head outputs
 * m_rows ([c][H]), the head read once for all: each session's pick_for (its
 * argmax, processed where it has a bias or penalties, or its draw). */
static void head_drafts(nx_spec_batch *b, nx_spec *const *who, int c, int j, const float *m_rows, int32_t *ids) {
    draft_pick ctx = {who, j};
    const mtp_chooser ch = {pick_for, lift_for, &ctx};
    mtp_head_drafts(who[0]->d, &b->sc, b->head_work, m_rows, c, b->logits, ids, &ch);
}

/* The recursive drafts of sessions ss[0..n) (each past draft_start, its
 * length in s->k): step j runs the j-th entry of every session still
 * drafting as one chunk, and scores them with one pass over the head. */
static void draft_rest(nx_spec_batch *b, nx_spec *const *ss, int n) {
    const nx_drafter *d = n ? ss[0]->d : NULL;
    for (int j = 1;; j++) {
        mtp_rows *rs[MDL_CHUNK];
        int32_t tok[MDL_CHUNK];
        const float *h[MDL_CHUNK];
        nx_spec *who[MDL_CHUNK];
        int c = 0, more = 0;
        for (int i = 0; i <= n; i++) {
            nx_spec *s = i < n ? ss[i] : NULL;
            if (s && s->k <= j) continue;
            more |= s != NULL;
            if (s && !joins(b, s, d)) { /* on its own, as nx_spec_draft does */
                draft_next(s, j);
                continue;
            }
            if (s) {
                s->hist[s->n + j] = s->drafts[j - 1];   /* as draft_next */
                before_provisional(s);
                rs[c] = &s->rows, tok[c] = s->drafts[j - 1], h[c] = s->rows.m, who[c++] = s;
            }
            if (c && (c == MDL_CHUNK || !s)) {
                mtp_step_batch(rs, c, tok, h, &b->sc, b->u, b->hidden);
                int32_t ids[MDL_CHUNK];
                head_drafts(b, who, c, j, b->hidden, ids);
                for (int k = 0; k < c; k++) who[k]->drafts[j] = ids[k];
                c = 0;
            }
        }
        if (!more) return;
    }
}

/* The first drafts of the next round (d1 = -1 after commit with head_later):
 * every joining session's m scored with one pass over the head. */
static void score_d1(nx_spec_batch *b, nx_spec *const *ss, int n) {
    int c = 0;
    int64_t H = b->m->cfg.hidden_size;
    const nx_drafter *d = NULL;
    nx_spec *who[MDL_CHUNK];
    for (int i = 0; i <= n; i++) {
        nx_spec *s = i < n ? ss[i] : NULL;
        if (s && s->d1 >= 0) continue;
        if (s && !d) d = s->d;
        if (s && !joins(b, s, d)) {
            s->d1 = spec_head_draft(s, 0);
            continue;
        }
        if (s) {
            memcpy(b->hidden + c * H, s->rows.m, (size_t)H * sizeof(float));
            who[c++] = s;
        }
        if (c && (c == MDL_CHUNK || !s)) {
            int32_t ids[MDL_CHUNK];
            head_drafts(b, who, c, 0, b->hidden, ids);
            for (int k = 0; k < c; k++) who[k]->d1 = ids[k];
            c = 0;
        }
    }
}

/* Verifies sessions ss[idx[0..n)] (each past verify_begin) in one target
 * forward and decides each round. mdl_forward_batch checks everything before
 * it runs anything, so a refused forward leaves each session READY. */
static void verify_group(nx_spec_batch *b, nx_spec *const *ss, const int *idx, int n, nx_status *st, char *msgs,
                         size_t msglen) {
    mdl_batch_item items[MDL_CHUNK];
    for (int i = 0; i < n; i++) {
        nx_spec *s = ss[idx[i]];
        items[i] = (mdl_batch_item){s->target, s->hist + s->n, s->k + 1, s->k > 0, s->d && s->d->hidden_prenorm};
    }
    char fmsg[512];
    double t0 = nx_now_s();
    nx_status fst = mdl_forward_batch(b->m, items, n, b->logits, b->hidden, fmsg, sizeof fmsg);
    double dt = nx_now_s() - t0;
    int64_t V = b->m->cfg.vocab_size, H = b->m->cfg.hidden_size, row = 0;
    for (int i = 0; i < n; i++) {
        nx_spec *s = ss[idx[i]];
        if (fst) { /* refused before anything ran: the round is undone, not broken */
            drop_provisional(s);
            s->state = SPEC_READY;
            st[idx[i]] = nx_fail(msgs + (size_t)idx[i] * msglen, msglen, fst, "%s", fmsg);
            continue;
        }
        memcpy(s->vhidden, b->hidden + row * H, (size_t)((s->k + 1) * H) * sizeof(float));
        verify_decide(s, b->logits + row * V);
        s->stats.verify_s += dt;
        row += s->k + 1;
    }
}

nx_status nx_spec_step_batch(nx_spec_batch *b, nx_spec *const *ss, int n, const int *max_emit, int32_t *emitted,
                             int *n_emitted, nx_status *st, char *msgs, size_t msglen) {
    nx_spec *drafting[64];
    int nd = 0;
    if (n > 64) return NX_EINVAL; /* the round's lists below hold 64 */
    /* 1. draft: each session its own length; the recursive steps together */
    double t0 = nx_now_s();
    for (int i = 0; i < n; i++) {
        nx_spec *s = ss[i];
        char *msg = msgs + (size_t)i * msglen;
        n_emitted[i] = 0;
        lp_clear(s);
        st[i] = NX_OK;
        for (int k = 0; k < i && !st[i]; k++) /* first: the earlier entry has moved its state on */
            if (ss[k] == s) st[i] = nx_fail(msg, msglen, NX_EINVAL, "step: session %d is also session %d of the batch", i, k);
        if (st[i]) continue;
        if (s->m != b->m) st[i] = nx_fail(msg, msglen, NX_EINVAL, "step: the session belongs to another model");
        else if (s->state != SPEC_READY) st[i] = wrong_state(s, "step", msg, msglen);
        else if (max_emit[i] < 1) st[i] = nx_fail(msg, msglen, NX_EINVAL, "step: max_emit %d must be >= 1", max_emit[i]);
        if (st[i]) continue;
        int k = s->d ? draft_len(s, round_k(s, max_emit[i])) : 0;
        if (k) {
            draft_start(s, k);
            drafting[nd++] = s;
        }
    }
    draft_rest(b, drafting, nd);
    for (int i = 0; i < nd; i++) draft_done(drafting[i], t0);

    /* 2. verify: all blocks in as few forwards as fit */
    int idx[MDL_CHUNK] = {0}, ng = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        nx_spec *s = ss[i];
        if (st[i] || (st[i] = verify_begin(s, msgs + (size_t)i * msglen, msglen))) continue;
        if (ng && rows + s->k + 1 > MDL_CHUNK) { /* the chunk is full: verify what it holds */
            verify_group(b, ss, idx, ng, st, msgs, msglen);
            ng = rows = 0;
        }
        idx[ng++] = i;
        rows += s->k + 1;
    }
    if (ng) verify_group(b, ss, idx, ng, st, msgs, msglen);

    /* 3. commit each, then the next round's first drafts in one head pass */
    double dt = nx_now_s() - t0;
    nx_spec *scored[64];
    int nsc = 0, total_rows = 0;
    for (int i = 0; i < n; i++) total_rows += !st[i] && ss[i]->state == SPEC_VERIFIED ? ss[i]->k + 1 : 0;
    for (int i = 0; i < n; i++) {
        nx_spec *s = ss[i];
        if (st[i] || s->state != SPEC_VERIFIED) continue;
        st[i] = commit(s, emitted + (size_t)i * (NX_SPEC_MAX_DRAFT + 1), &n_emitted[i], 1, msgs + (size_t)i * msglen, msglen);
        if (st[i]) continue;
        if (s->d && s->d1 < 0) scored[nsc++] = s;
        /* the adaptive draft length is charged its rows' share of the round */
        if (s->auto_k) spec_auto_observe(&s->au, s->k, s->accepted, dt * (s->k + 1) / total_rows);
    }
    score_d1(b, scored, nsc);
    return NX_OK;
}
