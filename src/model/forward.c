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
#include <string.h>

#include "base/err.h"
#include "kernels/norm.h"
#include "model/model.h"

/* Runs T <= MDL_CHUNK tokens at positions pos..pos+T-1 and advances pos.
 * Leaves the pre-norm rows in sc->x and the post-norm rows in sc->hfinal.
 * record: keep the rollback record of this block. */
static void forward_chunk(const nx_model *m, nx_state *s, const int32_t *tokens, int T, int record) {
    const cfg_model *c = &m->cfg;
    mdl_scratch *sc = &s->sc;
    int64_t H = c->hidden_size;

    for (int t = 0; t < T; t++) kn_mat_row_f32(&m->embed, tokens[t], sc->x + t * H);
    mdl_rope_rows(m, sc, s->pos, T);
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        if (L->is_full)
            mdl_attention_layer(m, L, sc, s->k_cache[l], s->v_cache[l], s->pos, T);
        else
            mdl_gdn_layer(m, L, sc, s->conv_state[l], s->recurrent[l], T, record ? s->rb.recurrent[l] : NULL,
                          record ? s->rb.window[l] : NULL);
    }
    for (int t = 0; t < T; t++) kn_rmsnorm(sc->hfinal + t * H, sc->x + t * H, m->final_norm, H, (float)c->rms_norm_eps);
    s->pos += T;
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
        forward_chunk(m, s, tokens + done, T, record);
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

nx_status mdl_rollback_to(nx_state *s, int keep, char *err, size_t errlen) {
    mdl_rollback *rb = &s->rb;
    if (rb->T == 0) return nx_fail(err, errlen, NX_ESTATE, "rollback: no verify block recorded");
    if (keep < 1 || keep > rb->T)
        return nx_fail(err, errlen, NX_EINVAL, "rollback: keep %d of a %d-token block (must be 1..%d)", keep, rb->T, rb->T);
    const cfg_model *c = &s->m->cfg;
    if (keep < rb->T) {
        size_t head = (size_t)c->linear_v_dim * (size_t)c->linear_k_dim, state = (size_t)c->linear_v_heads * head;
        size_t CD = (size_t)cfg_conv_dim(c), conv = (size_t)(c->conv_kernel - 1) * CD;
        for (int l = 0; l < c->n_layers; l++) {
            if (c->layer_full[l]) continue; /* KV rows past pos are simply never read */
            memcpy(s->recurrent[l], rb->recurrent[l] + (size_t)(keep - 1) * state, state * sizeof(float));
            /* conv state after token keep-1 = window rows keep .. keep+Kc-2 */
            memcpy(s->conv_state[l], rb->window[l] + (size_t)keep * CD, conv * sizeof(float));
        }
    }
    s->pos = rb->pos + keep;
    rb->T = 0;
    return NX_OK;
}
