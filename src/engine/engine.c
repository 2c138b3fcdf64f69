/* engine.c — the serving engine (nextn.h "Engine"): a queue, `parallel` rows
 * and one scheduler thread that owns every model forward.
 *
 * A request's life:
 *
 *   QUEUED --admitted--> PREFILL --last piece emits the first token--> DECODE --stop/length--> DONE
 *      \__________________\__________cancel or error (any time)___________________________/
 *
 * PREFILL first resumes from the longest prefix-cache checkpoint that begins
 * the prompt, then reads the rest in pieces of prefill_chunk tokens, one per
 * scheduler round (nx_spec_absorb: the continuation is known, nothing is
 * sampled), stopping exactly at each cache_at boundary to leave a checkpoint
 * there; the last piece goes through nx_spec_prefill / nx_spec_extend, which
 * samples the first token. DECODE rows take their rounds together (below). At
 * the end a row leaves a checkpoint of its whole sequence and frees its
 * session.
 *
 * Batching: all decoding rows run one round per scheduler round through
 * nx_spec_step_batch -- their drafter steps as one chunk, their verify blocks
 * as one target forward -- so each weight matrix is read once per step for
 * all of them; whether the round drafts is measured (choose_drafting).
 * Prefill pieces run row by row (they are long enough to be compute-bound).
 *
 * Locks: e->mu guards the queue, the row list and the statistics; r->mu guards
 * what a request shares with its reader (output, finish, cancel, owners,
 * notify). Order: e->mu before r->mu. The scheduler never holds e->mu during
 * a forward, so submit, cancel and metrics never wait for the model. A
 * request has two owners, its caller and the engine; the last one to let go
 * frees it (owners under r->mu). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/pool.h"
#include "engine/cache.h"
#include "spec/spec.h"

#define ENG_MAX_STOP 16
#define ENG_MAX_ROWS 64

typedef enum { RQ_QUEUED, RQ_PREFILL, RQ_DECODE, RQ_DONE } rq_phase;

/* Measured speed of batch rounds of one size with drafts ([1]) and without ([0]). */
typedef struct {
    double rate[2];               /* tokens per second, EMA                     */
    int seen[2];
    int since_probe;
} eng_mode;

struct nx_request {
    /* fixed at submit */
    int32_t *prompt;
    int n_prompt, max_tokens;
    int cache_at[NX_CACHE_POINTS];  /* checkpoint boundaries, ascending; 0: none */
    nx_spec_opts so;
    int32_t stop[ENG_MAX_STOP];
    nx_logit_bias *bias;          /* so.sampling's, until the row's session copies it */
    double t_submit;

    /* the engine thread's own */
    rq_phase phase;
    nx_spec *spec;
    int fed;                      /* prompt tokens in the session               */
    int generated;
    int generated_seen;           /* of those, already in the engine's statistics */
    int32_t stop_tok;             /* the stop id that ended it, or -1           */
    nx_spec_stats seen;           /* spec statistics already added to the engine's */
    struct nx_request *next;      /* queue link                                  */

    /* shared with the reader, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *out;
    nx_token_logprob *lp;         /* [cap_out] with logprobs, else NULL          */
    nx_token_logprob *plp;        /* [n_prompt - 1] with prompt_logprobs, else NULL */
    int n_plp;                    /* of those, computed                          */
    int n_out, cap_out, n_read;
    nx_finish finish;
    int cancel;
    int owners;
    nx_request_info info;
    void (*notify)(void *ctx);    /* cleared by nx_request_free                  */
    void *notify_ctx;
};

struct nx_engine {
    const nx_model *m;
    const nx_drafter *d;
    nx_engine_opts o;
    pcache *cache;
    pthread_t thread;
    int started;

    pthread_mutex_t mu;
    pthread_cond_t wake;
    int stopping;
    nx_request *q_head, *q_tail;
    int n_queued;
    nx_request **rows;            /* [parallel] running requests, NULL = free    */
    nx_engine_stats st;

    /* the scheduler thread's round buffers */
    nx_spec_batch *batch;
    /* sessions of finished rows, renewed for the next ones (nx_spec_renew):
     * a new session's allocation took ~0.3 s of page faults at the 0.8B
     * shape (0.01-0.13 s with its states in 2 MB pages), which stalled every
     * running stream for each request that arrived */
    nx_spec *spare[ENG_MAX_ROWS];
    int n_spare;
    eng_mode modes[ENG_MAX_ROWS];  /* rounds with and without drafts, by rows */
    int32_t emitted[ENG_MAX_ROWS][NX_SPEC_MAX_DRAFT + 1];
    int n_emitted[ENG_MAX_ROWS];
    nx_status status[ENG_MAX_ROWS];
    char msgs[ENG_MAX_ROWS][512];
};

/* ---- requests: ownership and output --------------------------------------- */

static void request_destroy(nx_request *r) {
    nx_spec_free(r->spec);
    nx_free(r->bias);
    nx_free(r->prompt);
    nx_free(r->out);
    nx_free(r->lp);
    nx_free(r->plp);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    nx_free(r);
}

/* One owner lets go; the last frees. */
static void request_release(nx_request *r) {
    pthread_mutex_lock(&r->mu);
    int left = --r->owners;
    pthread_mutex_unlock(&r->mu);
    if (left == 0) request_destroy(r);
}

/* Appends output for the reader, with its logprob entries lp when the
 * request keeps them. Returns 0, or -1 when out of memory. */
static int request_push(nx_request *r, const int32_t *ids, const nx_token_logprob *lp, int n) {
    pthread_mutex_lock(&r->mu);
    int ok = 1;
    if (r->n_out + n > r->cap_out) {
        int cap = r->cap_out ? r->cap_out : 64;
        while (cap < r->n_out + n) cap *= 2;
        int32_t *p = nx_realloc(r->out, (size_t)cap * sizeof *p);
        if (p) r->out = p;
        nx_token_logprob *q = p && r->so.logprobs ? nx_realloc(r->lp, (size_t)cap * sizeof *q) : NULL;
        if (q) r->lp = q;
        ok = p && (q || !r->so.logprobs);
        if (ok) r->cap_out = cap;   /* each buffer holds at least the old capacity */
    }
    if (ok) {
        memcpy(r->out + r->n_out, ids, (size_t)n * sizeof *ids);
        if (r->so.logprobs) memcpy(r->lp + r->n_out, lp, (size_t)n * sizeof *lp);
        r->n_out += n;
        r->info.completion_tokens = r->n_out;
        if (r->info.ttft_s == 0 && n) r->info.ttft_s = nx_now_s() - r->t_submit;
        pthread_cond_broadcast(&r->cv);
        if (r->notify) r->notify(r->notify_ctx);
    }
    pthread_mutex_unlock(&r->mu);
    return ok ? 0 : -1;
}

static void request_finish(nx_request *r, nx_finish f, const char *error) {
    pthread_mutex_lock(&r->mu);
    if (r->finish == NX_FINISH_NONE) {
        r->finish = f;
        r->info.total_s = nx_now_s() - r->t_submit;
        if (r->info.ttft_s == 0) r->info.ttft_s = r->info.total_s;
        if (error) snprintf(r->info.error, sizeof r->info.error, "%s", error);
    }
    pthread_cond_broadcast(&r->cv);
    if (r->notify) r->notify(r->notify_ctx);
    pthread_mutex_unlock(&r->mu);
    r->phase = RQ_DONE;
}

int nx_request_read(nx_request *r, int32_t *ids, int cap, int timeout_ms, nx_finish *finish) {
    return nx_request_read_logprobs(r, ids, NULL, cap, timeout_ms, finish);
}

int nx_request_read_prompt_logprobs(nx_request *r, nx_token_logprob *lp, int cap) {
    pthread_mutex_lock(&r->mu);
    int n = r->n_plp < cap ? r->n_plp : cap;
    if (n > 0) memcpy(lp, r->plp, (size_t)n * sizeof *lp);
    pthread_mutex_unlock(&r->mu);
    return n > 0 ? n : 0;
}

int nx_request_read_logprobs(nx_request *r, int32_t *ids, nx_token_logprob *lp, int cap, int timeout_ms,
                             nx_finish *finish) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (r->n_read == r->n_out && r->finish == NX_FINISH_NONE && timeout_ms != 0) {
        if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
        else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0) break;
    }
    int n = r->n_out - r->n_read;
    if (n > cap) n = cap;
    if (n > 0) memcpy(ids, r->out + r->n_read, (size_t)n * sizeof *ids);
    if (n > 0 && lp && r->lp) memcpy(lp, r->lp + r->n_read, (size_t)n * sizeof *lp);
    r->n_read += n;
    *finish = r->n_read == r->n_out ? r->finish : NX_FINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void nx_request_cancel(nx_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    pthread_mutex_unlock(&r->mu);
}

void nx_request_free(nx_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    r->notify = NULL; /* the caller's context may go now */
    pthread_mutex_unlock(&r->mu);
    request_release(r);
}

void nx_request_get_info(nx_request *r, nx_request_info *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->info;
    pthread_mutex_unlock(&r->mu);
}

static int request_cancelled(nx_request *r) {
    pthread_mutex_lock(&r->mu);
    int c = r->cancel;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* ---- submit ----------------------------------------------------------------- */

nx_status nx_engine_submit(nx_engine *e, const nx_request_opts *o, nx_request **out, char *err, size_t errlen) {
    *out = NULL;
    int V = nx_model_get_info(e->m)->vocab_size;
    if (o->n_prompt < 1) return nx_fail(err, errlen, NX_EINVAL, "request: empty prompt");
    if (o->n_stop < 0 || o->n_stop > ENG_MAX_STOP)
        return nx_fail(err, errlen, NX_EINVAL, "request: %d stop ids (at most %d)", o->n_stop, ENG_MAX_STOP);
    if (o->n_prompt > e->o.max_ctx - 1) /* the prompt and one output token */
        return nx_fail(err, errlen, NX_ERANGE, "request: the prompt has %d tokens; the context holds %d (prompt + output)",
                       o->n_prompt, e->o.max_ctx);
    for (int i = 0; i < o->n_prompt; i++)
        if (o->prompt[i] < 0 || o->prompt[i] >= V)
            return nx_fail(err, errlen, NX_EINVAL, "request: prompt token %d at index %d is outside the vocabulary [0, %d)",
                           o->prompt[i], i, V);
    /* the row's session options, checked here: a session renewed with bad
     * ones would fail the request only once it runs */
    const nx_spec_opts so = {.draft = e->d ? e->o.draft : 0,
                             .accept = o->accept,
                             .draft_pick = o->draft_pick,
                             .sampling = o->sampling,
                             .stop_ids = o->stop_ids,
                             .n_stop = o->n_stop,
                             .logprobs = o->logprobs != 0,
                             .input_logprobs = o->prompt_logprobs != 0,
                             .top_logprobs = o->logprobs || o->prompt_logprobs ? o->top_logprobs : 0};
    nx_status st = nx_spec_check_opts(e->m, e->d, e->o.max_ctx, &so, err, errlen);
    if (st) {
        nx_err_prefix(err, errlen, "request");
        return st;
    }
    size_t nb = (size_t)o->sampling.n_logit_bias;
    nx_request *r = nx_calloc(1, sizeof *r);
    size_t np = o->prompt_logprobs ? (size_t)o->n_prompt - 1 : 0;
    if (!r || !(r->prompt = nx_alloc((size_t)o->n_prompt * sizeof *r->prompt)) ||
        (nb && !(r->bias = nx_alloc(nb * sizeof *r->bias))) || (np && !(r->plp = nx_alloc(np * sizeof *r->plp)))) {
        if (r) nx_free(r->prompt), nx_free(r->bias);
        nx_free(r);
        return nx_fail(err, errlen, NX_ENOMEM, "request: out of memory");
    }
    memcpy(r->prompt, o->prompt, (size_t)o->n_prompt * sizeof *r->prompt);
    r->n_prompt = o->n_prompt;
    /* the usable boundaries, ascending (a fresh session absorbs >= 2 tokens) */
    int k = 0;
    for (int i = 0; i < NX_CACHE_POINTS; i++)
        if (o->cache_at[i] >= 2 && o->cache_at[i] <= o->n_prompt) r->cache_at[k++] = o->cache_at[i];
    if (k == 2 && r->cache_at[0] > r->cache_at[1]) {
        int t = r->cache_at[0];
        r->cache_at[0] = r->cache_at[1], r->cache_at[1] = t;
    }
    r->max_tokens = o->max_tokens;
    if (o->n_stop) memcpy(r->stop, o->stop_ids, (size_t)o->n_stop * sizeof *r->stop);
    r->so = so;
    r->so.stop_ids = r->stop;
    if (nb) memcpy(r->bias, o->sampling.logit_bias, nb * sizeof *r->bias);
    r->so.sampling.logit_bias = r->bias;
    r->stop_tok = -1;
    r->owners = 2;
    r->notify = o->notify;
    r->notify_ctx = o->notify_ctx;
    r->t_submit = nx_now_s();
    r->info.prompt_tokens = o->n_prompt;
    pthread_mutex_init(&r->mu, NULL);
    /* timed waits on the monotonic clock: a wall-clock step cannot stall them */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);

    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->n_queued >= e->o.max_queue) {
        int stopping = e->stopping;
        e->st.rejected++;
        pthread_mutex_unlock(&e->mu);
        request_destroy(r);
        if (stopping) return nx_fail(err, errlen, NX_EBUSY, "request: the engine is shutting down");
        return nx_fail(err, errlen, NX_EBUSY, "request: the queue is full (%d waiting)", e->o.max_queue);
    }
    if (e->q_tail) e->q_tail->next = r;
    else e->q_head = r;
    e->q_tail = r;
    e->n_queued++;
    e->st.requests++;
    e->st.prompt_tokens += o->n_prompt;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return NX_OK;
}

/* ---- one row's work per round ------------------------------------------------ */

/* Leaves a checkpoint of the row's session under tokens[0..n). */
static void checkpoint(nx_engine *e, nx_request *r, const int32_t *tokens, int n) {
    if (!e->cache || pcache_has(e->cache, tokens, n)) return;
    void *blob;
    size_t len;
    char err[512];
    if (nx_spec_snapshot(r->spec, &blob, &len, err, sizeof err) != NX_OK) {
        nx_logf(e->o.log, e->o.log_ctx, "prefix cache: no checkpoint: %s", err);
        return;
    }
    pcache_put(e->cache, tokens, n, blob, len);
}

/* A session for r: a spare one renewed, else a new one. */
static nx_status row_session(nx_engine *e, nx_request *r, char *err, size_t errlen) {
    while (e->n_spare > 0) {
        nx_spec *s = e->spare[--e->n_spare];
        nx_status st = nx_spec_renew(s, &r->so, err, errlen);
        if (st == NX_OK) r->spec = s;
        if (st != NX_ENOMEM) {   /* (options were checked at submit) */
            if (st) e->spare[e->n_spare++] = s;
            return st;
        }
        nx_spec_free(s);   /* out of memory: without this one a new session may fit */
    }
    return nx_spec_new(e->m, e->d, e->o.max_ctx, &r->so, &r->spec, err, errlen);
}

/* A finished row's session, kept for the next row (up to one a row). */
static void spare_keep(nx_engine *e, nx_spec *s) {
    if (s && e->n_spare < e->o.parallel) e->spare[e->n_spare++] = s;
    else nx_spec_free(s);
}

/* The session, resumed from the cache when a checkpoint begins the prompt. */
static nx_status row_start(nx_engine *e, nx_request *r, char *err, size_t errlen) {
    nx_status st = row_session(e, r, err, errlen);
    if (st || !e->cache || r->so.input_logprobs) return st;   /* scoring needs every prompt row run */
    void *blob;
    size_t len;
    int got = pcache_lookup(e->cache, r->prompt, r->n_prompt, 2, &blob, &len);
    if (!got) return NX_OK;
    char why[512];
    nx_status rst = nx_spec_restore(r->spec, blob, len, why, sizeof why);
    nx_free(blob);
    if (!rst && nx_spec_length(r->spec) != got) { /* a checkpoint of other tokens than its key */
        snprintf(why, sizeof why, "it holds %d tokens, not %d", nx_spec_length(r->spec), got);
        rst = NX_EFORMAT;
    }
    if (rst) {
        /* a checkpoint that does not restore here never will (the engine's
         * model, drafter and context do not change): a miss, and dropped */
        nx_logf(e->o.log, e->o.log_ctx, "prefix cache: checkpoint of %d tokens not used and dropped: %s", got, why);
        pcache_drop(e->cache, r->prompt, got);
        if (nx_spec_length(r->spec) == 0) return NX_OK; /* still fresh */
        return nx_spec_renew(r->spec, &r->so, err, errlen);
    }
    r->fed = got;
    pthread_mutex_lock(&r->mu);
    r->info.cached_tokens = got;
    pthread_mutex_unlock(&r->mu);
    return NX_OK;
}

/* Emits ids, the tokens the row's session has just emitted (ending the row
 * at a stop id or the length limit). */
static void row_emit(nx_engine *e, nx_request *r, const int32_t *ids, int n) {
    int n_lp;
    const nx_token_logprob *lp = nx_spec_logprobs(r->spec, &n_lp);
    if (r->so.logprobs && n_lp != n) { /* the session's contract broken: never copy past its entries */
        request_finish(r, NX_FINISH_ERROR, "internal error: logprob entries do not match the tokens");
        return;
    }
    int keep = 0;
    nx_finish f = NX_FINISH_NONE;
    for (; keep < n; keep++) {
        if (spec_is_stop(r->spec, ids[keep])) {
            r->stop_tok = ids[keep];
            f = NX_FINISH_STOP;
            break;
        }
        if (r->max_tokens > 0 && r->generated + keep + 1 >= r->max_tokens) {
            keep++;
            f = NX_FINISH_LENGTH;
            break;
        }
    }
    if (keep && request_push(r, ids, lp, keep) != 0) {
        request_finish(r, NX_FINISH_ERROR, "out of memory for the output");
        return;
    }
    r->generated += keep;
    if (f == NX_FINISH_NONE && nx_spec_length(r->spec) >= e->o.max_ctx) f = NX_FINISH_LENGTH;
    if (f != NX_FINISH_NONE) request_finish(r, f, NULL);
}

/* Keeps the prompt entries the row's session computed in its last call. */
static void row_prompt_logprobs(nx_request *r) {
    int n;
    const nx_token_logprob *lp = nx_spec_input_logprobs(r->spec, &n);
    pthread_mutex_lock(&r->mu);
    if (n > r->n_prompt - 1 - r->n_plp) n = r->n_prompt - 1 - r->n_plp;
    if (n > 0) memcpy(r->plp + r->n_plp, lp, (size_t)n * sizeof *lp), r->n_plp += n;
    pthread_mutex_unlock(&r->mu);
}

static void row_prefill(nx_engine *e, nx_request *r) {
    char err[512];
    nx_status st = NX_OK;
    if (!r->spec && (st = row_start(e, r, err, sizeof err)) != NX_OK) {
        request_finish(r, NX_FINISH_ERROR, err);
        return;
    }
    int n = r->n_prompt, fed = r->fed, ca = 0;
    for (int i = 0; i < NX_CACHE_POINTS && !ca && e->cache; i++) /* the next boundary not cached yet */
        if (r->cache_at[i] > fed && !pcache_has(e->cache, r->prompt, r->cache_at[i])) ca = r->cache_at[i];
    int want_ckpt = ca > 0;
    int end = fed + e->o.prefill_chunk < n ? fed + e->o.prefill_chunk : n;
    if (want_ckpt && ca <= end) end = ca;
    if (fed == 0 && end < 2) end = n < 2 ? n : 2;   /* a fresh session absorbs at least 2 */
    if (end < n || (want_ckpt && end == ca)) {
        st = fed == 0 ? nx_spec_absorb(r->spec, r->prompt, end, err, sizeof err)
                      : nx_spec_absorb(r->spec, r->prompt + fed, end - fed, err, sizeof err);
        if (st) {
            request_finish(r, NX_FINISH_ERROR, err);
            return;
        }
        if (r->plp) row_prompt_logprobs(r);
        r->fed = end;
        if (want_ckpt && end == ca) checkpoint(e, r, r->prompt, ca);
        return;
    }
    int32_t first;
    st = fed == 0 ? nx_spec_prefill(r->spec, r->prompt, n, &first, err, sizeof err)
                  : nx_spec_extend(r->spec, r->prompt + fed, n - fed, &first, err, sizeof err);
    if (st) {
        request_finish(r, st == NX_ERANGE ? NX_FINISH_LENGTH : NX_FINISH_ERROR, err);
        return;
    }
    if (r->plp) row_prompt_logprobs(r);
    r->fed = n;
    r->phase = RQ_DECODE;
    row_emit(e, r, &first, 1);
}

/* ---- whether a batch round drafts ------------------------------------------------
 *
 * Drafts pay when verifying them costs less than the tokens they add. Alone,
 * a verify block of 3 costs 1.3-2x a step on a CPU; in a batch every draft
 * adds a row to a forward that may already be compute-bound, and the same
 * drafts can cost more than they give. So for each number of decoding rows
 * the engine keeps the measured tokens per second of rounds with drafts and
 * of rounds without (an EMA), runs the better mode, and tries the other
 * again every ENG_PROBE_EVERY rounds. Output is unaffected: greedy and
 * matched sampling emit the same tokens with or without drafts. */
#define ENG_PROBE_EVERY 16
#define ENG_EMA 0.25

/* 1 if this round of n decoding rows drafts. */
static int choose_drafting(nx_engine *e, int n) {
    if (!e->d || e->o.draft_policy == NX_DRAFTS_ALWAYS) return e->d != NULL;
    eng_mode *md = &e->modes[n - 1];
    for (int k = 1; k >= 0; k--) /* measure both first, drafting first */
        if (md->seen[k] < 2) return k;
    int best = md->rate[1] >= md->rate[0];
    if (++md->since_probe >= ENG_PROBE_EVERY) {
        md->since_probe = 0;
        return !best;
    }
    return best;
}

static void observe_drafting(nx_engine *e, int n, int drafted, int tokens, double seconds) {
    if (!e->d || seconds <= 0) return;
    eng_mode *md = &e->modes[n - 1];
    double rate = tokens / seconds;
    md->rate[drafted] = md->seen[drafted]++ ? (1 - ENG_EMA) * md->rate[drafted] + ENG_EMA * rate : rate;
}

/* One speculative round of every decoding row, their verify blocks in one
 * target forward (nx_spec_step_batch); with or without drafts as measured
 * best for this many rows. */
static void rows_decode(nx_engine *e, nx_request **rows, int n) {
    nx_spec *ss[ENG_MAX_ROWS];
    int max_emit[ENG_MAX_ROWS];
    int drafting = choose_drafting(e, n);
    for (int i = 0; i < n; i++) {
        nx_request *r = rows[i];
        int room = r->max_tokens > 0 ? r->max_tokens - r->generated : NX_SPEC_MAX_DRAFT + 1;
        const int ctx_room = e->o.max_ctx - nx_spec_length(r->spec);   /* prompt + output <= max_ctx */
        if (room > ctx_room) room = ctx_room;
        ss[i] = r->spec;
        /* one token at most: a round without drafts */
        max_emit[i] = !drafting || room < 1 ? 1 : room;
    }
    double t0 = nx_now_s();
    nx_spec_step_batch(e->batch, ss, n, max_emit, &e->emitted[0][0], e->n_emitted, e->status, &e->msgs[0][0], sizeof e->msgs[0]);
    int tokens = 0;
    for (int i = 0; i < n; i++) tokens += e->status[i] ? 0 : e->n_emitted[i];
    observe_drafting(e, n, drafting, tokens, nx_now_s() - t0);
    for (int i = 0; i < n; i++) {
        nx_request *r = rows[i];
        if (e->status[i] == NX_ERANGE) request_finish(r, NX_FINISH_LENGTH, NULL); /* the context is full */
        else if (e->status[i]) request_finish(r, NX_FINISH_ERROR, e->msgs[i]);
        else row_emit(e, r, e->emitted[i], e->n_emitted[i]);
    }
}

/* Adds what the row's session measured since last time to the engine's
 * statistics (under e->mu). */
static void row_account(nx_engine *e, nx_request *r) {
    e->st.generated_tokens += r->generated - r->generated_seen;
    r->generated_seen = r->generated;
    if (!r->spec) return;
    const nx_spec_stats *s = nx_spec_get_stats(r->spec);
    e->st.drafted += s->drafted - r->seen.drafted;
    e->st.accepted += s->accepted - r->seen.accepted;
    e->st.rounds += s->rounds - r->seen.rounds;
    for (int i = 0; i < NX_SPEC_MAX_DRAFT; i++) {
        e->st.tried[i] += s->tried[i] - r->seen.tried[i];
        e->st.hits[i] += s->hits[i] - r->seen.hits[i];
    }
    r->seen = *s;
    pthread_mutex_lock(&r->mu);
    r->info.drafted = s->drafted;
    r->info.accepted = s->accepted;
    pthread_mutex_unlock(&r->mu);
}

/* A finished row: a checkpoint of its whole sequence (prompt + output + the
 * stop id, the session's pending token), then the session goes. */
static void row_end(nx_engine *e, nx_request *r) {
    nx_finish f;
    pthread_mutex_lock(&r->mu);
    f = r->finish;
    pthread_mutex_unlock(&r->mu);
    /* (a sequence that filled the context could not be restored: no room for
     * a verify block after it) */
    if (e->cache && r->spec && (f == NX_FINISH_STOP || f == NX_FINISH_LENGTH) && r->phase == RQ_DONE &&
        nx_spec_length(r->spec) + nx_spec_max_draft(r->spec) + 1 <= e->o.max_ctx) {
        int n = r->n_prompt + r->generated + (r->stop_tok >= 0);
        int32_t *seq = nx_spec_length(r->spec) == n ? nx_alloc((size_t)n * sizeof *seq) : NULL;
        if (seq) {
            memcpy(seq, r->prompt, (size_t)r->n_prompt * sizeof *seq);
            pthread_mutex_lock(&r->mu);
            if (r->generated)   /* a stop id first: no output buffer yet (memcpy wants one) */
                memcpy(seq + r->n_prompt, r->out, (size_t)r->generated * sizeof *seq);
            pthread_mutex_unlock(&r->mu);
            if (r->stop_tok >= 0) seq[n - 1] = r->stop_tok;
            checkpoint(e, r, seq, n);
            nx_free(seq);
        }
    }
    spare_keep(e, r->spec);
    r->spec = NULL;
}

/* ---- the scheduler thread ------------------------------------------------------ */

static void publish_cache_stats(nx_engine *e) {
    if (!e->cache) return;
    pcache_stats c = pcache_get_stats(e->cache);
    e->st.cache_hits = c.hits, e->st.cache_misses = c.misses, e->st.cache_hit_tokens = c.hit_tokens;
    e->st.cache_entries = c.entries, e->st.cache_ram_bytes = c.ram_bytes, e->st.cache_disk_bytes = c.disk_bytes;
    e->st.cache_evictions = c.evictions, e->st.cache_disk_evictions = c.disk_evictions, e->st.cache_bad_files = c.bad_files;
}

/* Queued requests whose callers gave up leave the queue at once, so they
 * do not hold places that live clients are refused for (under e->mu). */
static void drop_cancelled(nx_engine *e) {
    nx_request **link = &e->q_head, *last = NULL;
    while (*link) {
        nx_request *r = *link;
        if (!request_cancelled(r)) {
            last = r;
            link = &r->next;
            continue;
        }
        *link = r->next;
        e->n_queued--;
        e->st.finished++;
        e->st.cancelled++;
        request_finish(r, NX_FINISH_CANCELLED, NULL);
        request_release(r);
    }
    e->q_tail = last;
}

/* The rows' figures (under e->mu): active and prefilling. */
static void count_rows(nx_engine *e) {
    int n = 0, prefilling = 0;
    for (int i = 0; i < e->o.parallel; i++)
        if (e->rows[i]) n++, prefilling += e->rows[i]->phase == RQ_PREFILL;
    e->st.active = n, e->st.prefilling = prefilling;
}

static void *engine_main(void *arg) {
    nx_engine *e = arg;
    int P = e->o.parallel;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        int busy = 0;
        for (int i = 0; i < P; i++) busy += e->rows[i] != NULL;
        while (!e->stopping && !busy && !e->q_head) pthread_cond_wait(&e->wake, &e->mu);
        if (e->stopping) break;
        drop_cancelled(e);
        for (int i = 0; i < P && e->q_head; i++) {   /* admit into free rows */
            if (e->rows[i]) continue;
            nx_request *r = e->q_head;
            e->q_head = r->next;
            if (!e->q_head) e->q_tail = NULL;
            e->n_queued--;
            r->next = NULL;
            r->phase = RQ_PREFILL;
            pthread_mutex_lock(&r->mu);
            r->info.queue_s = nx_now_s() - r->t_submit;
            pthread_mutex_unlock(&r->mu);
            e->rows[i] = r;
        }
        nx_request *rows[ENG_MAX_ROWS];
        int n = 0, prefilled[ENG_MAX_ROWS];   /* prefilling as the round begins */
        for (int i = 0; i < P; i++)
            if (e->rows[i]) prefilled[n] = e->rows[i]->phase == RQ_PREFILL, rows[n++] = e->rows[i];
        count_rows(e);
        e->st.queued = e->n_queued;
        pthread_mutex_unlock(&e->mu);

        /* prefilling rows read one piece each; decoding rows (those that
         * were decoding when the round began) share one verify forward */
        nx_request *dec[ENG_MAX_ROWS];
        int decoded = 0;
        for (int i = 0; i < n; i++) {
            nx_request *r = rows[i];
            if (request_cancelled(r)) request_finish(r, NX_FINISH_CANCELLED, NULL);
            else if (r->phase == RQ_PREFILL) row_prefill(e, r);
            else if (r->phase == RQ_DECODE) dec[decoded++] = r;
        }
        double t0 = nx_now_s();
        if (decoded) rows_decode(e, dec, decoded);
        double dt = nx_now_s() - t0;

        pthread_mutex_lock(&e->mu);
        if (decoded) {
            e->st.sched_rounds++;
            e->st.row_rounds += decoded;
            e->st.decode_s += dt;
        }
        for (int i = 0; i < n; i++) {
            nx_request *r = rows[i];
            row_account(e, r);
            if (r->phase != RQ_DONE) continue;
            nx_finish f;
            pthread_mutex_lock(&r->mu);
            f = r->finish;
            e->st.cached_tokens += r->info.cached_tokens;
            pthread_mutex_unlock(&r->mu);
            e->st.finished++;
            e->st.active--;   /* at once, with finished: a reader never sees a request in both */
            e->st.prefilling -= prefilled[i];
            e->st.cancelled += f == NX_FINISH_CANCELLED;
            e->st.errors += f == NX_FINISH_ERROR;
            if (f == NX_FINISH_ERROR) nx_logf(e->o.log, e->o.log_ctx, "request failed: %s", r->info.error);
            pthread_mutex_unlock(&e->mu);
            row_end(e, r);                 /* may write a cache file: not under e->mu */
            pthread_mutex_lock(&e->mu);
            for (int k = 0; k < P; k++)
                if (e->rows[k] == r) e->rows[k] = NULL;
            request_release(r);
        }
        publish_cache_stats(e);
        count_rows(e);   /* now: an engine that goes idle keeps these figures */
    }
    /* shutting down: every row and queued request ends cancelled */
    for (int i = 0; i < P; i++)
        if (e->rows[i]) {
            nx_request *r = e->rows[i];
            e->rows[i] = NULL;
            request_finish(r, NX_FINISH_CANCELLED, NULL);
            nx_spec_free(r->spec);
            r->spec = NULL;
            request_release(r);
        }
    while (e->q_head) {
        nx_request *r = e->q_head;
        e->q_head = r->next;
        request_finish(r, NX_FINISH_CANCELLED, NULL);
        request_release(r);
    }
    e->q_tail = NULL;
    e->n_queued = 0;
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- setup --------------------------------------------------------------------- */

nx_status nx_engine_new(const nx_model *m, const nx_drafter *d, const nx_engine_opts *opts, nx_engine **out,
                        char *err, size_t errlen) {
    *out = NULL;
    nx_engine_opts o = opts ? *opts : (nx_engine_opts){0};
    if (o.parallel <= 0) o.parallel = 4;
    if (o.max_ctx <= 0) o.max_ctx = 4096;
    if (o.max_queue <= 0) o.max_queue = 64;
    if (o.prefill_chunk <= 0) o.prefill_chunk = 64;
    if (o.parallel > ENG_MAX_ROWS)
        return nx_fail(err, errlen, NX_EINVAL, "engine: parallel %d (at most %d)", o.parallel, ENG_MAX_ROWS);
    if (o.prefill_chunk < 2) o.prefill_chunk = 2;
    if (d && d->target != m) return nx_fail(err, errlen, NX_EINVAL, "engine: the drafter is bound to another model");
    nx_engine *e = nx_calloc(1, sizeof *e);
    if (!e || !(e->rows = nx_calloc((size_t)o.parallel, sizeof *e->rows))) {
        nx_free(e);
        return nx_fail(err, errlen, NX_ENOMEM, "engine: out of memory");
    }
    e->m = m;
    e->d = d;
    e->o = o;
    e->o.cache_dir = NULL; /* not kept: the cache copies it */
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    /* one session made here: a context or draft length this model cannot
     * take is refused here, naming the option, not at every request */
    nx_spec *probe = NULL;
    nx_spec_opts po = {.draft = d ? o.draft : 0, .accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    nx_status st = nx_spec_new(m, d, o.max_ctx, &po, &probe, err, errlen);
    if (probe) e->spare[e->n_spare++] = probe;   /* the first row's */
    if (st) nx_err_prefix(err, errlen, "engine: context %d, draft %d", o.max_ctx, o.draft);
    if (!st) st = nx_spec_batch_new(m, o.max_ctx, &e->batch, err, errlen);
    if (!st && (o.cache_ram_bytes || o.cache_dir)) {
        /* namespaced by both identities: a checkpoint restores only into the
         * weights and head that made it */
        uint64_t ns = m->identity ^ (d ? d->identity * 0x9e3779b97f4a7c15ull + 1 : 0);
        st = pcache_new(o.cache_ram_bytes, o.cache_dir, o.cache_disk_bytes, ns, o.log, o.log_ctx, &e->cache, err, errlen);
    }
    if (!st && nx_thread_create(&e->thread, engine_main, e) != 0)   /* it runs the model's kernels */
        st = nx_fail(err, errlen, NX_ENOMEM, "engine: cannot start its thread");
    if (st) {
        e->started = 0;
        nx_engine_free(e);
        return st;
    }
    e->started = 1;
    pthread_mutex_lock(&e->mu);
    publish_cache_stats(e);
    pthread_mutex_unlock(&e->mu);
    *out = e;
    return NX_OK;
}

void nx_engine_free(nx_engine *e) {
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    pcache_free(e->cache);
    nx_spec_batch_free(e->batch);
    while (e->n_spare > 0) nx_spec_free(e->spare[--e->n_spare]);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    nx_free(e->rows);
    nx_free(e);
}

void nx_engine_get_stats(nx_engine *e, nx_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->queued = e->n_queued;
    pthread_mutex_unlock(&e->mu);
}
