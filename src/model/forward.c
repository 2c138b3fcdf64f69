/* forward.c — the Qwen3.5 target forward pass, top to bottom (spec §3).
 *
 *   x = embed(token)
 *   for each layer:  x += Mixer(rmsnorm0(x))        Mixer = Gated DeltaNet or gated attention
 *                    x += SwiGLU(rmsnorm0(x))
 *   prenorm = x;  hidden = rmsnorm0(x; final norm);  logits = lm_head(hidden)
 *
 * A call runs its tokens in chunks of up to MDL_CHUNK rows. Every row is
 * computed with the same kernels in the same order whatever the chunking
 * (matmul rows are independent dot products, attention runs per query row over
 * the cache, the GDN recurrence steps token by token), so a verify block of T
 * tokens and T single-token steps give bit-identical results (spec §6.6).
 * This file contains no SIMD and no allocation: it composes kernels, and the
 * thread pool splits their index ranges. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/gdn.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/model.h"

/* HF l2norm epsilon inside the square root (spec §3.2), independent of rms_norm_eps. */
#define GDN_L2_EPS 1e-6f

/* ---- threaded ops ------------------------------------------------------ */

typedef struct {
    const kn_mat *w;
    const float *x;
    int T;
    float *y;
} linear_job;

static void linear_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const linear_job *j = ctx;
    kn_matmul_rows(j->w, j->x, j->w->cols, j->T, j->y, j->w->rows, r0, r1);
}

/* y[T][w.rows] = x[T][w.cols] W^T */
static void linear(const nx_model *m, const kn_mat *w, const float *x, int T, float *y) {
    linear_job j = {w, x, T, y};
    nx_pool_run(m->pool, linear_rows, &j, w->rows, 16);
}

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* The context of a mixer's parallel parts: which layer, which chunk. */
typedef struct {
    const nx_model *m;
    nx_state *s;
    int layer, T;
} block_job;

/* ---- gated full attention (spec §3.5) ---------------------------------- */

/* One (token, query head) pair per index: softmax attention over positions
 * 0..pos+t, then the sigmoid output gate. */
static void attention_rows(void *ctx, int64_t i0, int64_t i1, int tid) {
    const block_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    nx_state *s = j->s;
    int hd = c->head_dim, Nh = c->n_heads, group = c->n_heads / c->n_kv_heads;
    int64_t kvd = (int64_t)c->n_kv_heads * hd, qstride = (int64_t)Nh * hd * (c->attn_output_gate ? 2 : 1);
    float *scores = s->scores + (int64_t)tid * s->max_ctx;
    for (int64_t i = i0; i < i1; i++) {
        int t = (int)(i / Nh), h = (int)(i % Nh), kvh = h / group;
        const float *q = s->proj + t * qstride + (int64_t)h * hd * (c->attn_output_gate ? 2 : 1);
        float *o = s->mix + (int64_t)t * Nh * hd + (int64_t)h * hd;
        kn_attention_head(o, q, s->k_cache[j->layer] + (int64_t)kvh * hd, s->v_cache[j->layer] + (int64_t)kvh * hd, kvd,
                          s->pos + t + 1, hd, 1.0f / sqrtf((float)hd), scores);
        if (c->attn_output_gate) {
            const float *gate = q + hd;
            for (int d = 0; d < hd; d++) o[d] *= kn_sigmoid(gate[d]);
        }
    }
}

static void attention_block(const nx_model *m, nx_state *s, int l, int T) {
    const cfg_model *c = &m->cfg;
    const mdl_layer *L = &m->layers[l];
    int hd = c->head_dim, rd = c->rotary_dim, Nh = c->n_heads, Nkv = c->n_kv_heads;
    int64_t kvd = (int64_t)Nkv * hd, qstride = (int64_t)Nh * hd * (c->attn_output_gate ? 2 : 1);
    float eps = (float)c->rms_norm_eps;

    linear(m, &L->q_proj, s->xn, T, s->proj);   /* [T][Nh * (query | gate)] */
    linear(m, &L->k_proj, s->xn, T, s->kbuf);   /* [T][Nkv*hd]              */
    linear(m, &L->v_proj, s->xn, T, s->vbuf);   /* [T][Nkv*hd]              */
    for (int t = 0; t < T; t++) {
        const float *cs = s->rope + (int64_t)t * rd;
        for (int h = 0; h < Nh; h++) {          /* q: per-head norm, then RoPE */
            float *q = s->proj + t * qstride + (int64_t)h * hd * (c->attn_output_gate ? 2 : 1);
            kn_rmsnorm(q, q, L->q_norm, hd, eps);
            kn_rope_apply(q, cs, rd);
        }
        float *kc = s->k_cache[l] + (int64_t)(s->pos + t) * kvd, *vc = s->v_cache[l] + (int64_t)(s->pos + t) * kvd;
        for (int h = 0; h < Nkv; h++) {         /* k: per-head norm, RoPE, append */
            kn_rmsnorm(kc + h * hd, s->kbuf + t * kvd + h * hd, L->k_norm, hd, eps);
            kn_rope_apply(kc + h * hd, cs, rd);
        }
        memcpy(vc, s->vbuf + t * kvd, (size_t)kvd * sizeof(float));
    }
    block_job j = {m, s, l, T};
    nx_pool_run(m->pool, attention_rows, &j, (int64_t)T * Nh, 1);
    linear(m, &L->o_proj, s->mix, T, s->out);
}

/* ---- Gated DeltaNet (spec §3.6) ---------------------------------------- */

static void conv_channels(void *ctx, int64_t c0, int64_t c1, int tid) {
    const block_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    kn_conv_silu(j->s->conv_out, j->s->window, cfg_conv_dim(c), j->T, j->m->layers[j->layer].conv_w, c->conv_kernel, c0, c1);
}

/* One index per (token, key head): q <- l2n(q)/sqrt(Dk), k <- l2n(k). */
static void qk_l2norm(void *ctx, int64_t i0, int64_t i1, int tid) {
    const block_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    int Hk = c->linear_k_heads, Dk = c->linear_k_dim;
    int64_t CD = cfg_conv_dim(c), KD = cfg_key_dim(c);
    for (int64_t i = i0; i < i1; i++) {
        float *row = j->s->conv_out + (i / Hk) * CD;
        int64_t h = i % Hk;
        kn_l2norm_scaled(row + h * Dk, Dk, GDN_L2_EPS, 1.0f / sqrtf((float)Dk));
        kn_l2norm_scaled(row + KD + h * Dk, Dk, GDN_L2_EPS, 1.0f);
    }
}

/* One index per value head: that head's recurrence over the chunk's tokens in
 * order, then the gated RMSNorm of each output. Heads are independent. */
static void delta_heads(void *ctx, int64_t j0, int64_t j1, int tid) {
    const block_job *g = ctx;
    const cfg_model *c = &g->m->cfg;
    const mdl_layer *L = &g->m->layers[g->layer];
    nx_state *s = g->s;
    int Hv = c->linear_v_heads, Dk = c->linear_k_dim, Dv = c->linear_v_dim, r = c->linear_v_heads / c->linear_k_heads;
    int64_t CD = cfg_conv_dim(c), KD = cfg_key_dim(c), VD = cfg_value_dim(c);
    float eps = (float)c->rms_norm_eps;
    for (int64_t jh = j0; jh < j1; jh++) {
        float *S = s->recurrent[g->layer] + jh * Dv * Dk;
        int64_t kh = jh / r; /* value head j reads key head j // r (HF grouped order) */
        for (int t = 0; t < g->T; t++) {
            const float *row = s->conv_out + t * CD;
            float beta = kn_sigmoid(s->bbuf[t * Hv + jh]);
            float alpha = expf(L->neg_exp_a[jh] * kn_softplus(s->abuf[t * Hv + jh] + L->dt_bias[jh]));
            float *o = s->mix + t * VD + jh * Dv;
            kn_gated_delta_step(S, row + kh * Dk, row + KD + kh * Dk, row + 2 * KD + jh * Dv, alpha, beta, o, Dk, Dv);
            kn_rmsnorm_gated(o, o, s->zbuf + t * VD + jh * Dv, L->gnorm, Dv, eps);
        }
    }
}

static void gdn_block(const nx_model *m, nx_state *s, int l, int T) {
    const cfg_model *c = &m->cfg;
    const mdl_layer *L = &m->layers[l];
    int64_t CD = cfg_conv_dim(c), keep = c->conv_kernel - 1;

    linear(m, &L->in_qkv, s->xn, T, s->proj);   /* [T][CD] pre-conv q|k|v */
    linear(m, &L->in_z, s->xn, T, s->zbuf);     /* [T][VD] output gate    */
    linear(m, &L->in_b, s->xn, T, s->bbuf);     /* [T][Hv] beta logits    */
    linear(m, &L->in_a, s->xn, T, s->abuf);     /* [T][Hv] decay logits   */

    /* Conv window = [conv state (Kc-1 rows) | this chunk's T rows]; the new
     * conv state is its last Kc-1 rows. */
    memcpy(s->window, s->conv_state[l], (size_t)(keep * CD) * sizeof(float));
    memcpy(s->window + keep * CD, s->proj, (size_t)T * (size_t)CD * sizeof(float));
    block_job j = {m, s, l, T};
    nx_pool_run(m->pool, conv_channels, &j, CD, 256);
    memcpy(s->conv_state[l], s->window + (int64_t)T * CD, (size_t)(keep * CD) * sizeof(float));

    nx_pool_run(m->pool, qk_l2norm, &j, (int64_t)T * c->linear_k_heads, 1);
    nx_pool_run(m->pool, delta_heads, &j, c->linear_v_heads, 1);
    linear(m, &L->out_proj, s->mix, T, s->out);
}

/* ---- SwiGLU MLP (spec §3.7) -------------------------------------------- */

static void mlp_block(const nx_model *m, nx_state *s, int l, int T) {
    const mdl_layer *L = &m->layers[l];
    int64_t n = (int64_t)T * m->cfg.intermediate_size;
    linear(m, &L->gate_proj, s->xn, T, s->ff1);
    linear(m, &L->up_proj, s->xn, T, s->ff2);
    for (int64_t i = 0; i < n; i++) s->ff1[i] = kn_silu(s->ff1[i]) * s->ff2[i];
    linear(m, &L->down_proj, s->ff1, T, s->out);
}

/* ---- the stack ---------------------------------------------------------- */

/* Runs T <= MDL_CHUNK tokens at positions pos..pos+T-1 and advances pos.
 * Leaves the pre-norm rows in s->x and the post-norm rows in s->hfinal. */
static void forward_chunk(const nx_model *m, nx_state *s, const int32_t *tokens, int T) {
    const cfg_model *c = &m->cfg;
    int64_t H = c->hidden_size;
    float eps = (float)c->rms_norm_eps;

    for (int t = 0; t < T; t++) {
        kn_mat_row_f32(&m->embed, tokens[t], s->x + t * H);
        kn_rope_table(s->rope + (int64_t)t * c->rotary_dim, s->pos + t, c->rotary_dim, c->rope_theta);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        for (int t = 0; t < T; t++) kn_rmsnorm(s->xn + t * H, s->x + t * H, L->input_norm, H, eps);
        if (L->is_full) attention_block(m, s, l, T);
        else gdn_block(m, s, l, T);
        add_rows(s->x, s->out, T * H);

        for (int t = 0; t < T; t++) kn_rmsnorm(s->xn + t * H, s->x + t * H, L->post_norm, H, eps);
        mlp_block(m, s, l, T);
        add_rows(s->x, s->out, T * H);
    }
    for (int t = 0; t < T; t++) kn_rmsnorm(s->hfinal + t * H, s->x + t * H, m->final_norm, H, eps);
    s->pos += T;
}

nx_status nx_forward(const nx_model *m, nx_state *s, const int32_t *tokens, int n, const nx_forward_out *out,
                     char *err, size_t errlen) {
    const cfg_model *c = &m->cfg;
    if (s->m != m) return nx_fail(err, errlen, NX_EINVAL, "forward: the state belongs to another model");
    if (n < 1) return nx_fail(err, errlen, NX_EINVAL, "forward: no tokens (n = %d)", n);
    if (n > s->max_ctx - s->pos)
        return nx_fail(err, errlen, NX_ERANGE, "forward: %d tokens at position %d exceed the context size %d", n, s->pos,
                       s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return nx_fail(err, errlen, NX_EINVAL, "forward: token %d at index %d is outside the vocabulary [0, %d)",
                           tokens[i], i, c->vocab_size);
    static const nx_forward_out none = {0};
    if (!out) out = &none;
    int64_t H = c->hidden_size, V = c->vocab_size;
    for (int done = 0; done < n;) {
        int T = n - done < MDL_CHUNK ? n - done : MDL_CHUNK;
        forward_chunk(m, s, tokens + done, T);
        int last = done + T == n;
        if (out->all_rows || last) {
            int first = out->all_rows ? 0 : T - 1, rows = T - first;
            int64_t dst = out->all_rows ? done : 0;
            if (out->prenorm) memcpy(out->prenorm + dst * H, s->x + first * H, (size_t)(rows * H) * sizeof(float));
            if (out->hidden) memcpy(out->hidden + dst * H, s->hfinal + first * H, (size_t)(rows * H) * sizeof(float));
            if (out->logits) linear(m, &m->lm_head, s->hfinal + first * H, rows, out->logits + dst * V);
        }
        done += T;
    }
    return NX_OK;
}
