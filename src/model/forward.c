/* forward.c — the Qwen3.5 target forward pass, top to bottom (spec §3), and
 * the verify / rollback pair the speculative decoder builds on (spec §4).
 *
 *   x = embed(token)
 *   for each layer:  x += Mixer(rmsnorm0(x))        Mixer = Gated DeltaNet or gated attention
 *                    x += SwiGLU(rmsnorm0(x))       (layer.c)
 *   prenorm = x;  hidden = rmsnorm0(x; final norm);  logits = lm_head(hidden)
 *
 * A call runs its tokens in chunks of up to MDL_CHUNK rows. Any split of a
 * sequence into calls gives bit-identical rows (layer.c says why). */
#include <assert.h>
#include <string.h>

#include "base/err.h"
#include "kernels/norm.h"
#include "model/model.h"

/* One sequence's rows in a forward chunk. */
typedef struct {
    nx_state *s;
    const int32_t *tokens;
    int T;
    int record;                   /* keep the rollback record of these rows */
} chunk_part;

/* Where layer l of s takes the conv rows of a forward of T tokens (mdl_seg's
 * conv_log): after its state's rows while the log has room, else from the
 * log's start, or NULL (in place) without a log or for a chunk longer than
 * the log holds (a prefill piece, which is never recorded). */
static float *conv_log_at(const nx_state *s, int l, int T) {
    const mdl_rollback *rb = &s->rb;
    if (!rb->conv_log) return NULL;
    const cfg_model *c = &s->m->cfg;
    const int64_t CD = cfg_conv_dim(c), need = c->conv_kernel - 1 + T;
    float *log = rb->conv_log[l], *st = s->conv_state[l];
    if ((st - log) / CD + need <= rb->log_rows) return st;
    return need <= rb->log_rows ? log : NULL;
}

/* Runs the parts' tokens as one chunk of sum(T) <= MDL_CHUNK rows, part i's
 * at its state's positions pos..pos+T-1, and advances each pos. Every matrix
 * is read once for all rows; attention and the GDN recurrence run per part
 * on its own state (mdl_seg). Leaves the pre-norm rows in sc->x and the
 * post-norm rows in sc->hfinal. */
static void forward_chunk(const nx_model *m, mdl_scratch *sc, const chunk_part *parts, int np) {
    const cfg_model *c = &m->cfg;
    int64_t H = c->hidden_size;
    mdl_seg segs[MDL_CHUNK];
    int T = 0;
    for (int i = 0; i < np; i++) {
        const chunk_part *p = &parts[i];
        for (int t = 0; t < p->T; t++) kn_mat_row_f32(&m->embed, p->tokens[t], sc->x + (T + t) * H);
        mdl_rope_rows(m, sc, T, p->s->pos, p->T);
        segs[i] = (mdl_seg){.row0 = T, .T = p->T, .pos = p->s->pos};
        T += p->T;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        for (int i = 0; i < np; i++) { /* this layer's state of each sequence */
            nx_state *s = parts[i].s;
            int rec = parts[i].record;
            segs[i].kv = L->is_full ? (mdl_kv){s->k_cache[l], s->v_cache[l], mdl_kv_cap(s->max_ctx), m->kv_dtype}
                                    : (mdl_kv){0};
            segs[i].conv_state = L->is_full ? NULL : s->conv_state[l];
            segs[i].conv_log = L->is_full ? NULL : conv_log_at(s, l, parts[i].T);
            segs[i].recurrent = L->is_full ? NULL : s->recurrent[l];
            segs[i].recurrent_out = !L->is_full && rec ? s->rb.prior[l] : NULL;
            segs[i].replay = !L->is_full && rec ? s->rb.replay[l] : NULL;
            segs[i].n_kept = L->is_full ? 0 : s->rb.pending;   /* a rollback's kept updates, not yet applied */
            segs[i].kept = segs[i].n_kept ? s->rb.kept[l] : NULL;
            assert(L->is_full || !rec || segs[i].conv_log);   /* T <= max_block always fits the log */
        }
        if (L->is_full) {
            mdl_attention_segs(m, L, sc, segs, np);
            continue;
        }
        mdl_gdn_segs(m, L, sc, segs, np);
        for (int i = 0; i < np; i++) {
            nx_state *s = parts[i].s;
            if (segs[i].conv_log) /* the new conv state: the log's last Kc-1 rows */
                s->conv_state[l] = segs[i].conv_log + (size_t)parts[i].T * (size_t)cfg_conv_dim(c);
            if (!parts[i].record) continue;
            /* a record: the state after the block in place, the one before in prior */
            s->rb.prior[l] = s->recurrent[l];
            s->recurrent[l] = segs[i].recurrent_out;
        }
    }
    for (int t = 0; t < T; t++) kn_rmsnorm(sc->hfinal + t * H, sc->x + t * H, m->final_norm, H, (float)c->rms_norm_eps);
    for (int i = 0; i < np; i++) {
        parts[i].s->pos += parts[i].T;
        parts[i].s->rb.pending = 0;   /* every GDN layer applied them */
    }
}

static nx_status check_call(const nx_model *m, const nx_state *s, const int32_t *tokens, int n, char *err, size_t errlen) {
    if (s->m != m) return nx_fail(err, errlen, NX_EINVAL, "forward: the state belongs to another model");
    if (n < 1) return nx_fail(err, errlen, NX_EINVAL, "forward: no tokens (n = %d)", n);
    if (n > s->max_ctx - s->pos)
        return nx_fail(err, errlen, NX_ERANGE, "forward: %d tokens at position %d exceed the context size %d", n, s->pos,
                       s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return nx_fail(err, errlen, NX_EINVAL, "forward: token %d at index %d is outside the vocabulary [0, %d)",
                           tokens[i], i, m->cfg.vocab_size);
    return NX_OK;
}

static void run(const nx_model *m, nx_state *s, const int32_t *tokens, int n, const nx_forward_out *out, int record) {
    static const nx_forward_out none = {0};
    if (!out) out = &none;
    mdl_scratch *sc = &s->sc;
    int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    s->rb.T = 0; /* any forward consumes the rollback record */
    int start = s->pos;
    for (int done = 0; done < n;) {
        int T = n - done < MDL_CHUNK ? n - done : MDL_CHUNK;
        chunk_part part = {s, tokens + done, T, record};
        forward_chunk(m, sc, &part, 1);
        int last = done + T == n;
        /* hidden rows: all of them when asked, else the last */
        if (out->all_rows || out->all_hidden || last) {
            int first = (out->all_rows || out->all_hidden) ? 0 : T - 1, rows = T - first;
            int64_t dst = (out->all_rows || out->all_hidden) ? done : 0;
            if (out->prenorm) memcpy(out->prenorm + dst * H, sc->x + first * H, (size_t)(rows * H) * sizeof(float));
            if (out->hidden) memcpy(out->hidden + dst * H, sc->hfinal + first * H, (size_t)(rows * H) * sizeof(float));
        }
        if (out->logits && (out->all_rows || last)) {
            int first = out->all_rows ? 0 : T - 1;
            mdl_linear(m, sc, &m->lm_head, sc->hfinal + first * H, T - first, out->logits + (out->all_rows ? done : 0) * V);
        }
        done += T;
    }
    if (record) {
        s->rb.T = n;
        s->rb.pos = start;
    }
}

nx_status nx_forward(const nx_model *m, nx_state *s, const int32_t *tokens, int n, const nx_forward_out *out,
                     char *err, size_t errlen) {
    nx_status st = check_call(m, s, tokens, n, err, errlen);
    if (st) return st;
    run(m, s, tokens, n, out, 0);
    return NX_OK;
}

nx_status mdl_forward_verify(const nx_model *m, nx_state *s, const int32_t *tokens, int T, const nx_forward_out *out,
                             char *err, size_t errlen) {
    nx_status st = check_call(m, s, tokens, T, err, errlen);
    if (st) return st;
    if (T > s->rb.max_block)
        return nx_fail(err, errlen, NX_EINVAL, "verify: block of %d tokens exceeds the rollback capacity %d", T, s->rb.max_block);
    run(m, s, tokens, T, out, 1);
    return NX_OK;
}

nx_status mdl_forward_batch(const nx_model *m, const mdl_batch_item *items, int n, float *logits, float *hidden, char *err,
                            size_t errlen) {
    if (n < 1 || n > MDL_CHUNK) return nx_fail(err, errlen, NX_EINVAL, "batch: %d sequences (1..%d)", n, MDL_CHUNK);
    chunk_part parts[MDL_CHUNK];
    int rows = 0;
    mdl_scratch *sc = NULL;
    for (int i = 0; i < n; i++) {
        const mdl_batch_item *it = &items[i];
        nx_status st = check_call(m, it->s, it->tokens, it->n, err, errlen);
        if (st) {
            nx_err_prefix(err, errlen, "batch item %d", i);
            return st;
        }
        if (it->record && it->n > it->s->rb.max_block)
            return nx_fail(err, errlen, NX_EINVAL, "batch item %d: block of %d tokens exceeds the rollback capacity %d", i, it->n,
                           it->s->rb.max_block);
        for (int k = 0; k < i; k++)
            if (items[k].s == it->s) return nx_fail(err, errlen, NX_EINVAL, "batch items %d and %d share a state", k, i);
        rows += it->n;
        /* the scratch whose attention scores cover the longest context */
        if (!sc || it->s->sc.max_ctx > sc->max_ctx) sc = &it->s->sc;
        parts[i] = (chunk_part){it->s, it->tokens, it->n, it->record};
    }
    if (rows > MDL_CHUNK) return nx_fail(err, errlen, NX_ERANGE, "batch: %d rows (at most %d)", rows, MDL_CHUNK);
    for (int i = 0; i < n; i++) {
        nx_state *s = items[i].s;
        s->rb.T = 0; /* any forward consumes the rollback record */
        if (items[i].record) s->rb.T = items[i].n, s->rb.pos = s->pos;
    }
    forward_chunk(m, sc, parts, n);
    int64_t H = m->cfg.hidden_size;
    for (int i = 0, row = 0; hidden && i < n; row += items[i++].n)
        memcpy(hidden + row * H, (items[i].prenorm ? sc->x : sc->hfinal) + row * H, (size_t)(items[i].n * H) * sizeof(float));
    if (logits) mdl_linear(m, sc, &m->lm_head, sc->hfinal, rows, logits);
    return NX_OK;
}

void mdl_state_settle(nx_state *s) {
    if (s->rb.pending == 0) return;
    mdl_gdn_replay(s->m, s, s->rb.pending);
    s->rb.pending = 0;
}

nx_status mdl_rollback_to(nx_state *s, int keep, char *err, size_t errlen) {
    mdl_rollback *rb = &s->rb;
    if (rb->T == 0) return nx_fail(err, errlen, NX_ESTATE, "rollback: no verify block recorded");
    if (keep < 1 || keep > rb->T)
        return nx_fail(err, errlen, NX_EINVAL, "rollback: keep %d of a %d-token block (must be 1..%d)", keep, rb->T, rb->T);
    const cfg_model *c = &s->m->cfg;
    if (keep < rb->T) {
        const size_t CD = (size_t)cfg_conv_dim(c);
        for (int l = 0; l < c->n_layers; l++) {
            if (c->layer_full[l]) continue; /* KV rows past pos are simply never read */
            float *before = rb->prior[l];   /* the state before the block, exchanged back */
            rb->prior[l] = s->recurrent[l];
            s->recurrent[l] = before;
            /* conv state after token keep-1: T - keep rows down the block's log */
            s->conv_state[l] -= (size_t)(rb->T - keep) * CD;
        }
        /* the recurrent state after token keep - 1: the kept tokens' updates
         * wait for the next forward's recurrence, which reads and writes
         * each head's state anyway (mdl_rollback); the next verify records
         * into the other half */
        float **kept = rb->kept;
        rb->kept = rb->replay;
        rb->replay = kept;
        rb->pending = keep;
    }
    s->pos = rb->pos + keep;
    rb->T = 0;
    return NX_OK;
}
