/* state.c — per-sequence state: caches, recurrent state, chunk scratch and
 * the rollback record (nx_state_new / nx_state_free / nx_state_reset).
 * Everything a forward call touches is allocated here, once, so decoding
 * never allocates. */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "kernels/quant.h"
#include "model/model.h"

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

nx_status mdl_scratch_init(mdl_scratch *sc, const nx_model *m, int max_ctx) {
    const cfg_model *c = &m->cfg;
    memset(sc, 0, sizeof *sc);
    sc->max_ctx = max_ctx;
    size_t C = MDL_CHUNK, F = sizeof(float);
    size_t H = (size_t)c->hidden_size, kvd = (size_t)c->n_kv_heads * c->head_dim, CD = (size_t)cfg_conv_dim(c);
    size_t VD = (size_t)cfg_value_dim(c), Hv = (size_t)c->linear_v_heads, I = (size_t)c->intermediate_size;
    size_t qrows = (size_t)c->n_heads * c->head_dim * 2;
    /* The widest input of any linear: hidden (2 hidden for the MTP fc), the
     * MLP's intermediate, the attention or GDN output. */
    size_t in_max = max_z(max_z(2 * H, I), max_z((size_t)c->n_heads * c->head_dim, VD));
    int ok = (sc->x = nx_alloc_aligned(C * H * F)) && (sc->xn = nx_alloc_aligned(C * H * F)) &&
             (sc->proj = nx_alloc_aligned(C * max_z(qrows, CD) * F)) && (sc->kbuf = nx_alloc_aligned(C * kvd * F)) &&
             (sc->vbuf = nx_alloc_aligned(C * kvd * F)) && (sc->zbuf = nx_alloc_aligned(C * VD * F)) &&
             (sc->bbuf = nx_alloc_aligned(C * Hv * F)) && (sc->abuf = nx_alloc_aligned(C * Hv * F)) &&
             (sc->conv_out = nx_alloc_aligned(C * CD * F)) &&
             (sc->mix = nx_alloc_aligned(C * max_z((size_t)c->n_heads * c->head_dim, VD) * F)) &&
             (sc->ff1 = nx_alloc_aligned(C * I * F)) && (sc->ff2 = nx_alloc_aligned(C * I * F)) &&
             (sc->out = nx_alloc_aligned(C * H * F)) && (sc->hfinal = nx_alloc_aligned(C * H * F)) &&
             (sc->rope = nx_alloc_aligned(C * (size_t)c->rotary_dim * F)) &&
             (sc->scores = nx_alloc_aligned((size_t)nx_pool_size(m->pool) * MDL_ATTN_TOKENS *
                                            (size_t)(c->n_heads / c->n_kv_heads) * (size_t)max_ctx * F)) &&
             (sc->qx = nx_alloc_aligned(kn_qx_bytes((int)C, (int64_t)in_max)));
    if (!ok) {
        mdl_scratch_free(sc);
        return NX_ENOMEM;
    }
    return NX_OK;
}

void mdl_scratch_free(mdl_scratch *sc) {
    float *all[] = {sc->x, sc->xn, sc->proj, sc->kbuf, sc->vbuf, sc->zbuf, sc->bbuf, sc->abuf, sc->conv_out,
                    sc->mix, sc->ff1, sc->ff2, sc->out, sc->hfinal, sc->rope, sc->scores};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nx_free_aligned(all[i]);
    nx_free_aligned(sc->qx);
    memset(sc, 0, sizeof *sc);
}

/* Bytes of one GDN layer's recurrent state and of its conv state (Kc-1 rows). */
static size_t recurrent_bytes(const cfg_model *c) {
    return (size_t)c->linear_v_heads * c->linear_v_dim * c->linear_k_dim * sizeof(float);
}
static size_t conv_bytes(const cfg_model *c) {
    return (size_t)(c->conv_kernel - 1) * (size_t)cfg_conv_dim(c) * sizeof(float);
}

/* Every per-layer buffer of s carved from base in layer order, each part on
 * a cache line (with base NULL only counted); returns the bytes. One block
 * for all of them: from 8 MB up it lies in 2 MB pages (nx_alloc_aligned),
 * which a 1 MB layer state alone never got. Against a block a layer on the
 * 2-core VM: nx_spec_new of a 2048-token session 50 against ~360 ms (first
 * touches), MTP rounds 0.98x the time (TLB misses of the recurrence and the
 * KV reads). */
static size_t state_layout(nx_state *s, char *base) {
    const cfg_model *c = &s->m->cfg;
    const size_t kv_row = (size_t)c->n_kv_heads * c->head_dim * nx_dtype_size(s->m->kv_dtype);
    const size_t kv = nx_round64((size_t)mdl_kv_cap(s->max_ctx) * kv_row);
    const size_t conv = nx_round64(conv_bytes(c)), rec = nx_round64(recurrent_bytes(c));
    size_t at = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) {
            if (base) s->k_cache[l] = base + at, s->v_cache[l] = base + at + kv;
            at += 2 * kv;
        } else {
            if (base) {
                s->conv_state[l] = s->conv_home[l] = (float *)(void *)(base + at);
                s->recurrent[l] = (float *)(void *)(base + at + conv);
            }
            at += conv + rec;
        }
    }
    return at;
}

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
    int L = c->n_layers;
    int ok = (s->k_cache = nx_calloc((size_t)L, sizeof(void *))) &&
             (s->v_cache = nx_calloc((size_t)L, sizeof(void *))) &&
             (s->conv_state = nx_calloc((size_t)L, sizeof(float *))) &&
             (s->conv_home = nx_calloc((size_t)L, sizeof(float *))) &&
             (s->recurrent = nx_calloc((size_t)L, sizeof(float *))) &&
             (s->block = nx_alloc_aligned(state_layout(s, NULL)));
    if (ok) state_layout(s, s->block);
    if (!ok || mdl_scratch_init(&s->sc, m, max_ctx) != NX_OK) {
        nx_state_free(s);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for a sequence state of %d positions", max_ctx);
    }
    *out = s;
    return NX_OK;
}

static void free_rollback(nx_state *s) {
    mdl_rollback *rb = &s->rb;
    nx_free_aligned(rb->block);
    nx_free(rb->prior);
    nx_free(rb->replay);
    nx_free(rb->kept);
    nx_free(rb->conv_log);
    memset(rb, 0, sizeof *rb);
}

/* The rollback record's per-layer buffers carved from base as state_layout
 * does (one block: 2 MB pages for the 18 MB of prior states). */
static size_t rollback_layout(nx_state *s, char *base) {
    const cfg_model *c = &s->m->cfg;
    mdl_rollback *rb = &s->rb;
    const size_t rec = nx_round64(recurrent_bytes(c));
    const size_t log = nx_round64((size_t)rb->log_rows * (size_t)cfg_conv_dim(c) * sizeof(float));
    const size_t replay = nx_round64((size_t)rb->max_block * (size_t)mdl_replay_row(c) * sizeof(float));
    size_t at = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) continue;
        if (base) {
            rb->prior[l] = (float *)(void *)(base + at);
            rb->replay[l] = (float *)(void *)(base + at + rec);
            rb->kept[l] = (float *)(void *)(base + at + rec + replay);
            rb->conv_log[l] = (float *)(void *)(base + at + rec + 2 * replay);
        }
        at += rec + 2 * replay + log;
    }
    return at;
}

/* Before the record's block goes: a layer whose current state a verify
 * left there (the verify swaps recurrent[l] with rb.prior[l]) gets it
 * copied into its other buffer, the one in the state's own block, and the
 * conv state leaves the log for its home rows. */
static void states_home(nx_state *s) {
    mdl_rollback *rb = &s->rb;
    if (!rb->block) return;
    const cfg_model *c = &s->m->cfg;
    const uintptr_t lo = (uintptr_t)rb->block, hi = lo + rollback_layout(s, NULL);
    const size_t rec = recurrent_bytes(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) continue;
        if (s->conv_state[l] != s->conv_home[l]) memcpy(s->conv_home[l], s->conv_state[l], conv_bytes(c));
        s->conv_state[l] = s->conv_home[l];
        const uintptr_t at = (uintptr_t)s->recurrent[l];
        if (at < lo || at >= hi) continue;
        memcpy(rb->prior[l], s->recurrent[l], rec);
        float *own = rb->prior[l];
        rb->prior[l] = s->recurrent[l];
        s->recurrent[l] = own;
    }
}

nx_status mdl_state_enable_rollback(nx_state *s, int max_block, char *err, size_t errlen) {
    if (max_block < 1 || max_block > MDL_CHUNK)
        return nx_fail(err, errlen, NX_EINVAL, "verify block of %d tokens: must be 1..%d", max_block, MDL_CHUNK);
    if (s->rb.max_block >= max_block) return NX_OK;
    if (s->rb.T > 0)
        return nx_fail(err, errlen, NX_ESTATE, "rollback record: a verify of %d tokens is pending (roll back first)",
                       s->rb.T);
    mdl_state_settle(s);   /* before the kept records go */
    states_home(s);
    free_rollback(s);
    const cfg_model *c = &s->m->cfg;
    mdl_rollback *rb = &s->rb;
    rb->max_block = max_block;
    rb->log_rows = 2 * (c->conv_kernel - 1 + max_block);   /* room for blocks and steps between moves */
    int ok = (rb->prior = nx_calloc((size_t)c->n_layers, sizeof(float *))) &&
             (rb->replay = nx_calloc((size_t)c->n_layers, sizeof(float *))) &&
             (rb->kept = nx_calloc((size_t)c->n_layers, sizeof(float *))) &&
             (rb->conv_log = nx_calloc((size_t)c->n_layers, sizeof(float *))) &&
             (rb->block = nx_alloc_aligned(rollback_layout(s, NULL)));
    if (!ok) {
        free_rollback(s);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the rollback record of %d tokens", max_block);
    }
    rollback_layout(s, rb->block);
    for (int l = 0; l < c->n_layers; l++) {   /* the conv state into its log */
        if (c->layer_full[l]) continue;
        memcpy(rb->conv_log[l], s->conv_state[l], conv_bytes(c));
        s->conv_state[l] = rb->conv_log[l];
    }
    return NX_OK;
}

void nx_state_free(nx_state *s) {
    if (!s) return;
    /* the verify swaps layers' states between the two blocks: each block is
     * freed whole, whichever layer points where */
    nx_free_aligned(s->block);
    nx_free(s->k_cache);
    nx_free(s->v_cache);
    nx_free(s->conv_state);
    nx_free(s->conv_home);
    nx_free(s->recurrent);
    free_rollback(s);
    mdl_scratch_free(&s->sc);
    nx_free(s);
}

void nx_state_reset(nx_state *s) {
    const cfg_model *c = &s->m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) continue; /* KV rows past pos are never read */
        memset(s->conv_state[l], 0, conv_bytes(c));
        memset(s->recurrent[l], 0, recurrent_bytes(c));
    }
    s->pos = 0;
    s->rb.T = 0;
    s->rb.pending = 0;   /* the zeroed state is whole */
}

int nx_state_pos(const nx_state *s) { return s->pos; }
int nx_state_max_ctx(const nx_state *s) { return s->max_ctx; }
