/* state.c — per-sequence state: caches, recurrent state and chunk scratch
 * (nx_state_new / nx_state_free / nx_state_reset). Everything a forward call
 * touches is allocated here, once, so decoding never allocates. */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/model.h"

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

nx_status nx_state_new(const nx_model *m, int max_ctx, nx_state **out, char *err, size_t errlen) {
    *out = NULL;
    const cfg_model *c = &m->cfg;
    if (max_ctx < 1 || max_ctx > c->max_position_embeddings)
        return nx_fail(err, errlen, NX_EINVAL, "context size %d must be in [1, %d] (max_position_embeddings)", max_ctx,
                       c->max_position_embeddings);
    nx_state *s = nx_calloc(1, sizeof *s);
    if (!s) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the sequence state");
    s->m = m;
    s->max_ctx = max_ctx;
    int L = c->n_layers, C = MDL_CHUNK;
    size_t H = (size_t)c->hidden_size, kvd = (size_t)c->n_kv_heads * c->head_dim, CD = (size_t)cfg_conv_dim(c);
    size_t VD = (size_t)cfg_value_dim(c), Hv = (size_t)c->linear_v_heads, I = (size_t)c->intermediate_size;
    size_t qrows = (size_t)c->n_heads * c->head_dim * 2;
    int ok = (s->k_cache = nx_calloc((size_t)L, sizeof(float *))) && (s->v_cache = nx_calloc((size_t)L, sizeof(float *))) &&
             (s->conv_state = nx_calloc((size_t)L, sizeof(float *))) && (s->recurrent = nx_calloc((size_t)L, sizeof(float *)));
    for (int l = 0; ok && l < L; l++) {
        if (c->layer_full[l]) {
            ok = (s->k_cache[l] = nx_alloc_aligned((size_t)max_ctx * kvd * sizeof(float))) &&
                 (s->v_cache[l] = nx_alloc_aligned((size_t)max_ctx * kvd * sizeof(float)));
        } else {
            ok = (s->conv_state[l] = nx_alloc_aligned((size_t)(c->conv_kernel - 1) * CD * sizeof(float))) &&
                 (s->recurrent[l] = nx_alloc_aligned(Hv * (size_t)c->linear_v_dim * (size_t)c->linear_k_dim * sizeof(float)));
        }
    }
    size_t F = sizeof(float);
    ok = ok && (s->x = nx_alloc_aligned(C * H * F)) && (s->xn = nx_alloc_aligned(C * H * F)) &&
         (s->proj = nx_alloc_aligned(C * max_z(qrows, CD) * F)) && (s->kbuf = nx_alloc_aligned(C * kvd * F)) &&
         (s->vbuf = nx_alloc_aligned(C * kvd * F)) && (s->zbuf = nx_alloc_aligned(C * VD * F)) &&
         (s->bbuf = nx_alloc_aligned(C * Hv * F)) && (s->abuf = nx_alloc_aligned(C * Hv * F)) &&
         (s->window = nx_alloc_aligned((size_t)(c->conv_kernel - 1 + C) * CD * F)) &&
         (s->conv_out = nx_alloc_aligned(C * CD * F)) &&
         (s->mix = nx_alloc_aligned(C * max_z((size_t)c->n_heads * c->head_dim, VD) * F)) &&
         (s->ff1 = nx_alloc_aligned(C * I * F)) && (s->ff2 = nx_alloc_aligned(C * I * F)) &&
         (s->out = nx_alloc_aligned(C * H * F)) && (s->hfinal = nx_alloc_aligned(C * H * F)) &&
         (s->rope = nx_alloc_aligned(C * (size_t)c->rotary_dim * F)) &&
         (s->scores = nx_alloc_aligned((size_t)nx_pool_size(m->pool) * (size_t)max_ctx * F));
    if (!ok) {
        nx_state_free(s);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for a sequence state of %d positions", max_ctx);
    }
    *out = s;
    return NX_OK;
}

void nx_state_free(nx_state *s) {
    if (!s) return;
    int L = s->m->cfg.n_layers;
    for (int l = 0; l < L; l++) {
        if (s->k_cache) nx_free_aligned(s->k_cache[l]);
        if (s->v_cache) nx_free_aligned(s->v_cache[l]);
        if (s->conv_state) nx_free_aligned(s->conv_state[l]);
        if (s->recurrent) nx_free_aligned(s->recurrent[l]);
    }
    nx_free(s->k_cache);
    nx_free(s->v_cache);
    nx_free(s->conv_state);
    nx_free(s->recurrent);
    float *scratch[] = {s->x, s->xn, s->proj, s->kbuf, s->vbuf, s->zbuf, s->bbuf, s->abuf, s->window,
                        s->conv_out, s->mix, s->ff1, s->ff2, s->out, s->hfinal, s->rope, s->scores};
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++) nx_free_aligned(scratch[i]);
    nx_free(s);
}

void nx_state_reset(nx_state *s) {
    const cfg_model *c = &s->m->cfg;
    size_t CD = (size_t)cfg_conv_dim(c);
    size_t rec = (size_t)c->linear_v_heads * (size_t)c->linear_v_dim * (size_t)c->linear_k_dim;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) continue; /* KV rows past pos are never read */
        memset(s->conv_state[l], 0, (size_t)(c->conv_kernel - 1) * CD * sizeof(float));
        memset(s->recurrent[l], 0, rec * sizeof(float));
    }
    s->pos = 0;
}

int nx_state_pos(const nx_state *s) { return s->pos; }
int nx_state_max_ctx(const nx_state *s) { return s->max_ctx; }
