/* mtp.c — load the MTP head, and run its entries (see mtp.h).
 *
 * Three sources, one code path after loading (spec §2.3-§2.4):
 *   - the target checkpoint's own mtp.* tensors (raw HF: zero-centred norms
 *     store w, so 1 + w is applied);
 *   - a separate drafter directory (config.json model_type qwen3_5_mtp, keys
 *     without the mtp. prefix, norms already +1-shifted);
 *   - language_model.mtp.* inside an MLX target (shifted like the rest of
 *     that file).
 * mlx-vlm's rule (#1554) is the same: only keys that still carry the raw
 * "mtp." prefix get the +1. */
#include "spec/mtp.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/err.h"
#include "kernels/fpq.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

/* ---- loading ------------------------------------------------------------ */

nx_status mtp_bind_head(nx_drafter *d, mdl_binder *b, const char *prefix, int plus_one) {
    const cfg_model *c = &d->target->cfg;
    int64_t H = c->hidden_size;
    char n[256], layer[200];
    nx_status st;
#define NAME(suffix) (snprintf(n, sizeof n, "%s" suffix, prefix), n)
    if ((st = mdl_bind_mat(b, NAME("fc.weight"), H, 2 * H, "hidden_size x 2*hidden_size", &d->fc)) ||
        (st = mdl_bind_vec(b, NAME("pre_fc_norm_embedding.weight"), H, plus_one, "hidden_size", &d->norm_embed)) ||
        (st = mdl_bind_vec(b, NAME("pre_fc_norm_hidden.weight"), H, plus_one, "hidden_size", &d->norm_hidden)) ||
        (st = mdl_bind_vec(b, NAME("norm.weight"), H, plus_one, "hidden_size", &d->norm_out)))
        return st;
#undef NAME
    snprintf(layer, sizeof layer, "%slayers.0.", prefix);
    snprintf(n, sizeof n, "%smlp.gate.weight", layer);
    if (st_find(b->st, n)) return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: the MTP layer is MoE; MoE not supported yet", b->dir);
    return mdl_bind_attention_layer(b, c, layer, plus_one, &d->layer);
}

/* Identity of the artifact: the target's dims and the names, dtypes, shapes
 * and byte sizes of every tensor the head reads. Cheap (no weight bytes
 * hashed) yet distinct for differently split, converted or quantized heads. */
uint64_t mtp_head_identity(const nx_drafter *d, const st_set *st, const char *prefix) {
    XXH64_state_t *h = XXH64_createState();
    if (!h) return 0;
    XXH64_reset(h, 0x6e6578746e6d7470ull); /* "nextnmtp" */
    const cfg_model *c = &d->target->cfg;
    int dims[] = {c->hidden_size, c->vocab_size, c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate_size, d->hidden_prenorm};
    XXH64_update(h, dims, sizeof dims);
    size_t plen = strlen(prefix);
    for (int i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        if (strncmp(t->name, prefix, plen) != 0) continue;
        XXH64_update(h, t->name, strlen(t->name) + 1);
        XXH64_update(h, &t->dtype, sizeof t->dtype);
        XXH64_update(h, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        XXH64_update(h, &t->nbytes, sizeof t->nbytes);
    }
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

nx_status mtp_load_from_target(nx_drafter *d, char *err, size_t errlen) {
    const nx_model *m = d->target;
    /* checked before looking anywhere for the head, so every source refuses it */
    if (m->cfg.mtp_use_dedicated_embeddings)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: mtp_use_dedicated_embeddings = true is not supported", m->dir);
    const char *prefix = st_find(m->st, "mtp.fc.weight")                  ? "mtp."
                         : st_find(m->st, "language_model.mtp.fc.weight") ? "language_model.mtp."
                                                                           : NULL;
    if (!prefix) {
        /* some conversions keep the head in an mtp.safetensors beside the weights */
        char path[4096];
        snprintf(path, sizeof path, "%s/mtp.safetensors", m->dir);
        st_set *set = NULL;
        if (access(path, R_OK) == 0) {
            nx_status st = st_open_file(path, &set, err, errlen);
            return st ? st : mtp_bind_set(d, set, path, err, errlen);
        }
        return nx_fail(err, errlen, NX_EFORMAT, "%s: the checkpoint has no MTP head (no mtp.fc.weight); give a drafter directory",
                       m->dir);
    }
    mdl_binder b = {m->st, m->dir, &d->owned, err, errlen, &m->cfg};
    nx_status st = mtp_bind_head(d, &b, prefix, strcmp(prefix, "mtp.") == 0);
    if (st) return st;
    snprintf(d->source, sizeof d->source, "%s (%s*)", m->dir, prefix);
    d->identity = mtp_head_identity(d, m->st, prefix);
    return NX_OK;
}

void nx_drafter_free(nx_drafter *d) {
    if (!d) return;
    mdl_owned_free(&d->owned);
    st_close(d->own);
    nx_free_aligned(d->head_copy);
    nx_free_aligned(d->screen_buf);
    nx_free(d);
}

int nx_drafter_block_size(const nx_drafter *d) { return d->block_size; }

int nx_drafter_head_bits(const nx_drafter *d) { return d->head_copy_bits; }

int mtp_auto_head_bits(const kn_mat *head) {
    const int stored_bits = head->bits ? head->bits : head->fp ? kn_fp_bits((kn_fp_mode)head->fp) : 8 * (int)nx_dtype_size(head->dtype);
    return stored_bits > 4 && head->cols % 32 == 0 && kn_mat_bytes(head) >= MTP_AUTO_HEAD_BYTES ? 4 : 0;
}

/* ---- one parallel pass over the draft head's rows, as f32 -------------------
 * The lower-bit copy and the screen (below) are both made at load from every
 * row of the head dequantized to f32: one pool run over the rows, each thread
 * with its own row buffer, and any row the maker refuses reported by index. */

typedef int (*head_row_fn)(void *ctx, int64_t r, const float *row);   /* 0: row r refused */

typedef struct {
    const kn_mat *head;
    head_row_fn fn;
    void *ctx;
    float *rows;               /* [n_threads][cols] a dequantized head row each */
    int64_t bad_row;           /* a refused row (any one will do for the message), or -1 */
} head_rows_job;

static void head_rows_range(void *ctx, int64_t r0, int64_t r1, int tid) {
    head_rows_job *j = ctx;
    float *row = j->rows + (size_t)tid * (size_t)j->head->cols;
    for (int64_t r = r0; r < r1; r++) {
        kn_mat_row_f32(j->head, r, row);
        if (!j->fn(j->ctx, r, row)) __atomic_store_n(&j->bad_row, r, __ATOMIC_RELAXED);
    }
}

/* Calls fn(ctx, r, row r as f32) for every row r of d->head, in parallel.
 * Returns a row fn refused, -1 if none, or -2 when the row buffers cannot be
 * allocated (fn then never ran). */
static int64_t each_head_row(const nx_drafter *d, head_row_fn fn, void *ctx) {
    const int nt = nx_pool_size(d->target->pool);
    head_rows_job j = {&d->head, fn, ctx, nx_alloc_aligned((size_t)nt * (size_t)d->head.cols * sizeof(float)), -1};
    if (!j.rows) return -2;
    nx_pool_run(d->target->pool, head_rows_range, &j, d->head.rows, 256);
    nx_free_aligned(j.rows);
    return j.bad_row;
}

/* ---- a lower-bit copy of the draft head (nx_drafter_opts.draft_head_bits) ---- */

/* Quantizes one row of the head into the copy (ctx). */
static int quantize_head_row(void *ctx, int64_t r, const float *row) {
    const kn_mat *q = ctx;
    const int64_t cols = q->cols, words = kn_affine_row_words(cols, q->bits), groups = cols / q->group;
    for (int64_t c = 0; c < cols; c++)
        if (!(fabsf(row[c]) <= 1e30f)) return 0;   /* also refuses NaN */
    kn_affine_quantize_row(row, cols, q->bits, q->group, NX_DT_BF16, (uint32_t *)q->data + r * words,
                           (uint16_t *)q->scales + r * groups, (uint16_t *)q->biases + r * groups);
    return 1;
}

/* Replaces d->head (a view of the target's) by a copy quantized to `bits`,
 * unless that would not be smaller. */
static nx_status quantize_draft_head(nx_drafter *d, int bits, char *err, size_t errlen) {
    const kn_mat *h = &d->head;
    if (bits < 2 || bits > 8 || bits == 7)
        return nx_fail(err, errlen, NX_EINVAL, "draft_head_bits %d: must be 2, 3, 4, 5, 6 or 8 (0: as stored, -1: auto)",
                       bits);
    /* group 64 as mlx quantizes by default, 32 where the hidden size needs it */
    const int group = h->cols % 64 == 0 ? 64 : 32;
    if (h->cols % group)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "draft_head_bits: hidden size %lld is not a multiple of 32",
                       (long long)h->cols);
    const int64_t rows = h->rows, cols = h->cols, groups = cols / group;
    kn_mat q = {.dtype = NX_DT_U32, .rows = rows, .cols = cols, .bits = bits, .group = group,
                .sdtype = NX_DT_BF16};
    if (kn_mat_bytes(&q) >= kn_mat_bytes(h)) return NX_OK;   /* no smaller than the head as stored */
    const size_t code_bytes = (size_t)(rows * kn_affine_row_words(cols, bits)) * 4, sd_bytes = (size_t)(rows * groups) * 2;
    char *buf = nx_alloc_aligned(code_bytes + 2 * sd_bytes);
    q.data = buf, q.scales = buf + code_bytes, q.biases = buf + code_bytes + sd_bytes;
    const int64_t bad = buf ? each_head_row(d, quantize_head_row, &q) : -2;
    if (bad != -1) {
        nx_free_aligned(buf);
        if (bad == -2)
            return nx_fail(err, errlen, NX_ENOMEM, "out of memory for a %d-bit draft head (%zu MB)", bits,
                           (code_bytes + 2 * sd_bytes) >> 20);
        return nx_fail(err, errlen, NX_EFORMAT, "%s: lm_head row %lld has a weight that is not finite or beyond 1e30; "
                       "draft_head_bits cannot quantize it", d->target->dir, (long long)bad);
    }
    d->head = q;
    d->head_copy = buf;
    d->head_copy_bits = bits;
    return NX_OK;
}

/* ---- a screened draft head (nx_drafter_opts.draft_screen) ----------------
 * A draft scores one row against the whole head, so on a small model it costs
 * the head's bytes from DRAM (143 MB at 4 bits on the 0.8B shape, against
 * 12 ms for a whole plain step). Ranked by a one-bit sign sketch of the rows
 * (kernels/sketch.h: 32 MB there), only the screen_k best rows are scored with
 * the head itself. The draft is the head's own argmax whenever that row ranks
 * among the k; otherwise the best of the k. Verification never sees the
 * sketch, so output stays exact. */

static int sketch_head_row(void *ctx, int64_t r, const float *row) { return kn_sketch_row(ctx, r, row); }

int mtp_auto_screen_k(const kn_mat *head) {
    return head->cols % 64 == 0 && head->cols <= KN_SKETCH_MAX_COLS && head->rows > MTP_SCREEN_K &&
                   kn_mat_bytes(head) >= MTP_AUTO_HEAD_BYTES
               ? MTP_SCREEN_K
               : 0;
}

/* Sketches d->head for drafts that score its k best rows; none when k would
 * take every row anyway. */
static nx_status build_screen(nx_drafter *d, int k, char *err, size_t errlen) {
    const kn_mat *h = &d->head;
    if (k < 0) return nx_fail(err, errlen, NX_EINVAL, "draft_screen %d: must be >= 0 (-1: auto)", k);
    if (k == 0 || k >= h->rows) return NX_OK;
    if (h->cols % 64 || h->cols > KN_SKETCH_MAX_COLS)
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "draft_screen: hidden size %lld is not a multiple of 64 up to %lld",
                       (long long)h->cols, (long long)KN_SKETCH_MAX_COLS);
    const size_t bytes = kn_sketch_bytes(h->rows, h->cols);
    void *buf = nx_alloc_aligned(bytes);
    if (buf) kn_sketch_bind(&d->screen, buf, h->rows, h->cols, kn_sketch_layout_preferred());
    const int64_t bad = buf ? each_head_row(d, sketch_head_row, &d->screen) : -2;
    if (bad != -1) {
        nx_free_aligned(buf);
        memset(&d->screen, 0, sizeof d->screen);
        if (bad == -2) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the draft screen (%zu MB)", bytes >> 20);
        return nx_fail(err, errlen, NX_EFORMAT, "%s: lm_head row %lld has a weight that is not finite or too large "
                       "for f32 sums; draft_screen cannot sketch it", d->target->dir, (long long)bad);
    }
    d->screen_buf = buf;
    d->screen_k = k;
    return NX_OK;
}

int nx_drafter_screen_k(const nx_drafter *d) { return d->screen_k; }

int nx_drafter_draft_vocab(const nx_drafter *d) {
    return d->head.rows < d->target->cfg.vocab_size ? (int)d->head.rows : 0;
}

nx_status nx_drafter_load(const nx_model *target, const char *dir, const nx_drafter_opts *opts, nx_drafter **out, char *err,
                          size_t errlen) {
    *out = NULL;
    nx_drafter *d = nx_calloc(1, sizeof *d);
    if (!d) return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the drafter");
    d->target = target;
    d->hidden_prenorm = opts ? opts->hidden_prenorm : 0;
    /* block_size counts the whole verify block: 1 pending + drafts, default
     * mtp_num_hidden_layers + 2 (spec §1.4); Qwen3.5 has one MTP layer, also
     * when a config omits the field */
    int layers = target->cfg.mtp_num_hidden_layers ? target->cfg.mtp_num_hidden_layers : 1;
    if (layers > 1) {
        nx_drafter_free(d);
        return nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: mtp_num_hidden_layers = %d; only one MTP layer is supported", target->dir,
                       layers);
    }
    d->block_size = layers + 2;
    nx_status st = dir ? mtp_load_from_dir(d, dir, err, errlen) : mtp_load_from_target(d, err, errlen);
    if (st) {
        nx_drafter_free(d);
        return st;
    }
    /* a reduced draft vocabulary is a view of lm_head's first rows (rows are
     * contiguous in every weight format) */
    d->head = target->lm_head;
    if (opts && opts->draft_vocab < 0) {
        nx_drafter_free(d);
        return nx_fail(err, errlen, NX_EINVAL, "draft_vocab %d must be >= 0", opts->draft_vocab);
    }
    if (opts && opts->draft_vocab > 0 && opts->draft_vocab < d->head.rows) d->head.rows = opts->draft_vocab;
    /* autos are optimisations nobody asked for by name: where one cannot be
     * made (memory, a weight the sketch or the quantizer refuses), draft with
     * the head as stored rather than fail (d->head and d->screen change only
     * on success) */
    int screen_k = opts ? opts->draft_screen : 0, auto_screen = screen_k == NX_DRAFT_SCREEN_AUTO;
    if (auto_screen) screen_k = mtp_auto_screen_k(&d->head);
    if ((st = build_screen(d, screen_k, err, errlen)) && auto_screen) st = NX_OK;
    /* behind a screen a draft reads only k rows of the head, and the head as
     * stored drafts best (0.8B shape, 300-400 tokens: q8 screen + stored
     * 0.93x the wall time of screen + 4-bit copy, bf16 0.87x) */
    int head_bits = opts ? opts->draft_head_bits : 0, auto_bits = head_bits == NX_DRAFT_HEAD_AUTO;
    if (auto_bits) head_bits = d->screen_k ? 0 : mtp_auto_head_bits(&d->head);
    if (!st && head_bits && (st = quantize_draft_head(d, head_bits, err, errlen)) && auto_bits) st = NX_OK;
    if (!st && target->pack_lanes) {   /* as the target's (a view of its head is packed already) */
        kn_mat *mats[MDL_LAYER_MATS + 2];
        int n = mdl_layer_mats_mut(&d->layer, mats);
        mats[n++] = &d->fc;
        if (!d->head.packed) mats[n++] = &d->head;
        /* as for the target: without the memory, drafts read the codes as stored */
        (void)mdl_pack_mats(target->pool, &d->owned, d->own ? d->own : target->st, mats, n, err, errlen);
    }
    if (st) {
        nx_drafter_free(d);
        return st;
    }
    *out = d;
    return NX_OK;
}

/* ---- running entries ----------------------------------------------------- */

static mdl_kv mtp_rows_kv(const mtp_rows *r) {
    return (mdl_kv){r->k_cache, r->v_cache, mdl_kv_cap(r->max_ctx), r->d->target->kv_dtype};
}

nx_status mtp_rows_init(mtp_rows *r, const nx_drafter *d, int max_ctx, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    const cfg_model *c = &d->target->cfg;
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim * nx_dtype_size(d->target->kv_dtype);
    size_t H = (size_t)c->hidden_size;
    r->d = d;
    r->max_ctx = max_ctx;
    int ok = (r->k_cache = nx_alloc_aligned((size_t)mdl_kv_cap(max_ctx) * kv_row)) &&
             (r->v_cache = nx_alloc_aligned((size_t)mdl_kv_cap(max_ctx) * kv_row)) &&
             (r->u = nx_alloc_aligned((size_t)MDL_CHUNK * 2 * H * sizeof(float))) &&
             (r->m = nx_alloc_aligned(H * sizeof(float))) && (r->m_kept = nx_alloc_aligned(H * sizeof(float))) &&
             (r->logits = nx_alloc_aligned((size_t)c->vocab_size * sizeof(float))) &&
             (!d->screen_k || (r->head_work = nx_alloc_aligned(mtp_head_work_bytes(d->target)))) &&
             mdl_scratch_init(&r->sc, d->target, max_ctx) == NX_OK;
    if (!ok) {
        mtp_rows_free(r);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for the drafter state of %d positions", max_ctx);
    }
    return NX_OK;
}

void mtp_rows_free(mtp_rows *r) {
    nx_free_aligned(r->k_cache);
    nx_free_aligned(r->v_cache);
    nx_free_aligned(r->u);
    nx_free_aligned(r->m);
    nx_free_aligned(r->m_kept);
    nx_free_aligned(r->logits);
    nx_free_aligned(r->head_work);
    mdl_scratch_free(&r->sc);
    memset(r, 0, sizeof *r);
}

/* The MTP forward over T <= MDL_CHUNK entries, in math order (spec §5.1).
 * Only the last n_full rows run the whole layer (their outputs m land in
 * sc->hfinal rows 0..n_full-1); the rows before them only write their
 * attention K/V, which is all later entries read of them. */
static void mtp_chunk(mtp_rows *r, const int32_t *tokens, const float *hidden, int T, int n_full) {
    const nx_drafter *d = r->d;
    const nx_model *m = d->target;
    int64_t H = m->cfg.hidden_size;
    float eps = (float)m->cfg.rms_norm_eps;
    mdl_scratch *sc = &r->sc;
    for (int t = 0; t < T; t++) {
        float *u = r->u + t * 2 * H;   /* [ normed embedding | normed hidden ] */
        kn_mat_row_f32(&m->embed, tokens[t], u);
        kn_rmsnorm(u, u, d->norm_embed, H, eps);
        kn_rmsnorm(u + H, hidden + t * H, d->norm_hidden, H, eps);
    }
    mdl_linear(m, sc, &d->fc, r->u, T, sc->x);                  /* x = fc u            */
    int n_kv = T - n_full;
    if (n_kv > 0) {
        mdl_rope_rows(m, sc, 0, r->n, n_kv);
        mdl_attention_kv(m, &d->layer, sc, mtp_rows_kv(r), r->n, n_kv);
    }
    if (n_full > 0) {
        if (n_kv > 0) memmove(sc->x, sc->x + n_kv * H, (size_t)(n_full * H) * sizeof(float));
        mdl_rope_rows(m, sc, 0, r->n + n_kv, n_full);
        mdl_attention_layer(m, &d->layer, sc, mtp_rows_kv(r), r->n + n_kv, n_full);
        for (int t = 0; t < n_full; t++) kn_rmsnorm(sc->hfinal + t * H, sc->x + t * H, d->norm_out, H, eps); /* m */
    }
    r->n += T;
}

/* mtp_head_rows' scratch (head_work_layout lays it out over work, which may
 * be NULL to only size it, and returns its bytes): int8 rows xq with their
 * nibble tables [MDL_CHUNK][ldq] (rows on cache lines), their scales and sums,
 * kn_top_k_f32's work, and the selected ids. */
typedef struct {
    int8_t *xq;
    int64_t ldq;
    float *d;
    int32_t *sum;
    void *top_work;
    int32_t *idx;
} head_work;

static size_t head_work_layout(const nx_model *m, void *work, head_work *w) {
    const int64_t V = m->cfg.vocab_size;
    const size_t ldq = nx_round64(kn_sketch_x_bytes(m->cfg.hidden_size)), o_d = MDL_CHUNK * ldq,
                 o_top = o_d + nx_round64(MDL_CHUNK * (sizeof(float) + sizeof(int32_t))),
                 o_idx = o_top + nx_round64(kn_top_k_work_bytes(V));
    const uintptr_t p = (uintptr_t)work;   /* integers: work may be NULL */
    *w = (head_work){(int8_t *)p, (int64_t)ldq, (float *)(p + o_d), (int32_t *)(p + o_d + MDL_CHUNK * sizeof(float)),
                     (void *)(p + o_top), (int32_t *)(p + o_idx)};
    return o_idx + (size_t)V * sizeof(int32_t);
}

size_t mtp_head_work_bytes(const nx_model *m) {
    head_work unused;
    return head_work_layout(m, NULL, &unused);
}

/* Sketch scores of T rows at once: each block of SCREEN_BLOCK sketch rows
 * comes from DRAM once and is scored against every activation row while it
 * sits in L1 (32 KB at 1024 columns), so a batch of sessions reads the
 * sketch once, as a batch reads the head once without a screen. */
#define SCREEN_BLOCK 256

typedef struct {
    const kn_sketch *s;
    int T;
    const int8_t *xq;     /* [T][ldq] */
    int64_t ldq;
    const float *d;       /* [T] */
    const int32_t *sum;   /* [T] */
    float *const *y;      /* T rows of scores */
} screen_job;

static void screen_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const screen_job *j = ctx;
    /* one activation row reuses nothing across rows: the whole range in one
     * call, which sets up the row's activations (the 512-bit kernel's
     * look-up tables) once instead of once a block */
    const int64_t step = j->T == 1 ? r1 - r0 : SCREEN_BLOCK;
    for (int64_t b0 = r0; b0 < r1; b0 += step) {
        const int64_t b1 = b0 + step < r1 ? b0 + step : r1;
        for (int t = 0; t < j->T; t++) kn_sketch_scores(j->s, j->xq + t * j->ldq, j->d[t], j->sum[t], j->y[t], b0, b1);
    }
}

/* Logits of n rows x ([n][H]) over the whole draft head into logits
 * ([n][V]), -inf beyond its rows. */
static void whole_head_rows(const nx_drafter *d, mdl_scratch *sc, const float *x, int n, float *logits) {
    const nx_model *m = d->target;
    int64_t V = m->cfg.vocab_size, N = d->head.rows;
    mdl_linear(m, sc, &d->head, x, n, logits);
    if (N == V) return;
    /* rows of N were written back to back: spread them to the [V] stride,
     * last first (row t moves up from t*N to t*V, past no row still unmoved) */
    for (int t = n - 1; t >= 0; t--) {
        float *row = logits + (int64_t)t * V;
        memmove(row, logits + (int64_t)t * N, (size_t)N * sizeof(float));
        for (int64_t v = N; v < V; v++) row[v] = -INFINITY;
    }
}

/* kn_top_k_f32_split's runner: the pool's threads. */
static void pool_ranges(void *pool, nx_range_fn fn, void *ctx, int64_t n) { nx_pool_run(pool, fn, ctx, n, 1); }

/* Row t's draft: the chooser's, or where it has none (NULL, or -1) the argmax
 * of the row's V logits -- of those at the candidates cand[0..k) when a
 * screen ranked the row (cand not NULL). */
static int32_t pick_draft(const mtp_chooser *ch, int t, float *logits, const int32_t *cand, int k, int V) {
    const int32_t id = ch && ch->pick ? ch->pick(ch->ctx, t, logits, cand, cand ? k : V) : -1;
    if (id >= 0) return id;
    return cand ? (int32_t)kn_argmax_at_f32(logits, cand, k, V) : mtp_argmax(logits, V);
}

/* Row t's lift ids (mtp_chooser): their count, the ids in *ids. */
static int lift_ids(const mtp_chooser *ch, int t, const int32_t **ids) {
    *ids = NULL;
    return ch && ch->lift ? ch->lift(ch->ctx, t, ids) : 0;
}

/* Where the ids at or past the draft vocabulary start in ascending ids[0..k). */
static int64_t past_vocab(const nx_drafter *d, const int32_t *ids, int64_t k) {
    while (k > 0 && ids[k - 1] >= d->head.rows) k--;
    return k;
}

/* y[ids[j]] for ascending ids[0..k): from the drafter's head within its
 * draft vocabulary, from the target's lm_head past it. */
static void score_at(const nx_drafter *d, mdl_scratch *sc, const float *x, const int32_t *ids, int64_t k, float *y) {
    const int64_t lo = past_vocab(d, ids, k);
    if (lo) mdl_linear_at(d->target, sc, &d->head, x, ids, lo, y);
    if (lo < k) mdl_linear_at(d->target, sc, &d->target->lm_head, x, ids + lo, k - lo, y);
}

/* idx[0..k) joined by ids[0..e) in place (both ascending and distinct, so is
 * the result; idx has room for it). Returns the count. */
static int64_t join_ids(int32_t *idx, int64_t k, const int32_t *ids, int64_t e) {
    int64_t both = 0;
    for (int64_t i = 0, j = 0; i < k && j < e;)
        if (idx[i] < ids[j]) i++;
        else if (idx[i] > ids[j]) j++;
        else both++, i++, j++;
    const int64_t n = k + e - both;
    for (int64_t i = k - 1, j = e - 1, o = n - 1; j >= 0;) {   /* from the top: no unread id is overwritten */
        if (i >= 0 && idx[i] > ids[j]) idx[o--] = idx[i--];
        else {
            if (i >= 0 && idx[i] == ids[j]) i--;
            idx[o--] = ids[j--];
        }
    }
    return n;
}

/* A whole row's draft (x: [H], row: its logits over the whole head): its
 * lift ids past the draft vocabulary scored too, then picked. */
static int32_t whole_row_draft(const nx_drafter *d, mdl_scratch *sc, const float *x, float *row,
                               const mtp_chooser *ch, int t) {
    const int32_t *lift;
    const int e = lift_ids(ch, t, &lift);
    const int64_t lo = past_vocab(d, lift, e);   /* those below are in the row already */
    if (lo < e) mdl_linear_at(d->target, sc, &d->target->lm_head, x, lift + lo, e - lo, row);
    return pick_draft(ch, t, row, NULL, 0, d->target->cfg.vocab_size);
}

/* Draft logits of n rows through the screen (above), or with drafts, each
 * row's draft (pick_draft: the chooser's, or the argmax) without the -inf
 * fill: logits then hold sketch scores beyond the candidates, which take in
 * the row's lift ids. A row the sketch cannot rank (a value that
 * is not finite) is scored over the whole head on its own, so that no row's
 * draft depends on the others in the call. The candidates' pass over the
 * sketch scores runs on the pool too, each thread over the scores it has
 * just written, mostly: two MTP sessions in one process, rounds alternating
 * (q4 fixture, K = 3, five runs of 400-600 rounds), against the calling
 * thread's one pass, drafts took 0.964-0.987x the time, commits (which
 * draft d1) 0.973-1.016x. */
static void screened_rows(const nx_drafter *d, mdl_scratch *sc, void *work, const float *x, int n, float *logits,
                          int32_t *drafts, const mtp_chooser *ch) {
    const nx_model *m = d->target;
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, N = d->head.rows;
    head_work w;
    head_work_layout(m, work, &w);
    float *y[MDL_CHUNK];
    int row_of[MDL_CHUNK], g = 0;   /* the rows the sketch ranks: [0, g) */
    for (int t = 0; t < n; t++) {
        if (kn_sketch_quantize_x(x + t * H, H, w.xq + g * w.ldq, &w.d[g], &w.sum[g])) {
            y[g] = logits + t * V, row_of[g++] = t;
            continue;
        }
        whole_head_rows(d, sc, x + t * H, 1, logits + t * V);
        if (drafts) drafts[t] = whole_row_draft(d, sc, x + t * H, logits + t * V, ch, t);
    }
    screen_job j = {&d->screen, g, w.xq, w.ldq, w.d, w.sum, y};
    nx_pool_run(m->pool, screen_rows, &j, g ? N : 0, SCREEN_BLOCK);   /* sketch scores in y[i][0, N) */
    for (int i = 0; i < g; i++) {
        const int t = row_of[i];
        int64_t k = kn_top_k_f32_split(y[i], N, d->screen_k, w.idx, w.top_work, pool_ranges, m->pool);
        if (!drafts) {
            for (int64_t v = 0; v < V; v++) y[i][v] = -INFINITY;
            mdl_linear_at(m, sc, &d->head, x + t * H, w.idx, k, y[i]);
            continue;
        }
        const int32_t *lift;
        const int e = lift_ids(ch, t, &lift);
        if (e) k = join_ids(w.idx, k, lift, e);
        score_at(d, sc, x + t * H, w.idx, k, y[i]);
        drafts[t] = pick_draft(ch, t, y[i], w.idx, (int)k, (int)V);
    }
}

void mtp_head_rows(const nx_drafter *d, mdl_scratch *sc, void *work, const float *m_rows, int n, float *logits) {
    assert(n <= MDL_CHUNK);
    if (d->screen_k) screened_rows(d, sc, work, m_rows, n, logits, NULL, NULL);
    else whole_head_rows(d, sc, m_rows, n, logits);
}

void mtp_head_drafts(const nx_drafter *d, mdl_scratch *sc, void *work, const float *m_rows, int n, float *logits,
                     int32_t *drafts, const mtp_chooser *ch) {
    assert(n <= MDL_CHUNK);
    if (d->screen_k) {
        screened_rows(d, sc, work, m_rows, n, logits, drafts, ch);
        return;
    }
    const int64_t H = d->target->cfg.hidden_size, V = d->target->cfg.vocab_size;
    whole_head_rows(d, sc, m_rows, n, logits);
    for (int t = 0; t < n; t++) drafts[t] = whole_row_draft(d, sc, m_rows + t * H, logits + t * V, ch, t);
}

/* Appends T entries; their outputs: every row's logits (logits_out), or the
 * last row's m (want_m), or none. */
static void append(mtp_rows *r, const int32_t *tokens, const float *hidden, int T, float *logits_out, int want_m) {
    const nx_model *m = r->d->target;
    int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    for (int done = 0; done < T;) {
        int n = T - done < MDL_CHUNK ? T - done : MDL_CHUNK;
        int last_chunk = done + n == T;
        /* which rows' outputs are read: all (teacher forcing), the very last
         * (drafting from it), or none (prefill entries) */
        int n_full = logits_out ? n : want_m && last_chunk ? 1 : 0;
        mtp_chunk(r, tokens + done, hidden + done * H, n, n_full);
        if (logits_out) mtp_head_rows(r->d, &r->sc, r->head_work, r->sc.hfinal, n, logits_out + done * V);
        done += n;
        if (last_chunk && n_full) memcpy(r->m, r->sc.hfinal + (int64_t)(n_full - 1) * H, (size_t)H * sizeof(float));
    }
}

void mtp_rows_append(mtp_rows *r, const int32_t *tokens, const float *hidden, int T, float *logits_out) {
    append(r, tokens, hidden, T, logits_out, 0);
}

void mtp_rows_append_m(mtp_rows *r, const int32_t *tokens, const float *hidden, int T) {
    append(r, tokens, hidden, T, NULL, 1);
}

void mtp_rows_keep_m(mtp_rows *r) {
    memcpy(r->m_kept, r->m, (size_t)r->d->target->cfg.hidden_size * sizeof(float));
}

void mtp_rows_drop_to(mtp_rows *r, int n) {
    if (r->n <= n) return;
    r->n = n;
    memcpy(r->m, r->m_kept, (size_t)r->d->target->cfg.hidden_size * sizeof(float));
}

void mtp_step_batch(mtp_rows *const *rs, int n, const int32_t *tokens, const float *const *hidden, mdl_scratch *sc,
                    float *u, float *m_out) {
    const nx_drafter *d = rs[0]->d;
    const nx_model *m = d->target;
    int64_t H = m->cfg.hidden_size;
    float eps = (float)m->cfg.rms_norm_eps;
    mdl_seg segs[MDL_CHUNK];
    /* as mtp_chunk with one full row per sequence, each row its own segment */
    for (int i = 0; i < n; i++) {
        float *ui = u + i * 2 * H;
        kn_mat_row_f32(&m->embed, tokens[i], ui);
        kn_rmsnorm(ui, ui, d->norm_embed, H, eps);
        kn_rmsnorm(ui + H, hidden[i], d->norm_hidden, H, eps);
        segs[i] = (mdl_seg){.row0 = i, .T = 1, .pos = rs[i]->n, .kv = mtp_rows_kv(rs[i])};
        mdl_rope_rows(m, sc, i, rs[i]->n, 1);
    }
    mdl_linear(m, sc, &d->fc, u, n, sc->x);
    mdl_attention_segs(m, &d->layer, sc, segs, n);
    for (int i = 0; i < n; i++) {
        kn_rmsnorm(m_out + i * H, sc->x + i * H, d->norm_out, H, eps);
        memcpy(rs[i]->m, m_out + i * H, (size_t)H * sizeof(float));
        rs[i]->n++;
    }
}

int32_t mtp_argmax(const float *logits, int n) { return (int32_t)kn_argmax_f32(logits, n); }

int nx_drafter_hidden_prenorm(const nx_drafter *d) { return d->hidden_prenorm; }

nx_status nx_drafter_teacher_forced(const nx_drafter *d, const int32_t *tokens, int n, float *logits, float *hidden,
                                    char *err, size_t errlen) {
    if (n < 2) return nx_fail(err, errlen, NX_EINVAL, "teacher-forced drafter logits need at least 2 tokens (got %d)", n);
    const nx_model *m = d->target;
    int64_t H = m->cfg.hidden_size;
    nx_state *s = NULL;
    mtp_rows r;
    float *h = nx_alloc((size_t)n * (size_t)H * sizeof(float));
    nx_status st = h ? nx_state_new(m, n, &s, err, errlen) : nx_fail(err, errlen, NX_ENOMEM, "out of memory");
    if (!st) st = mtp_rows_init(&r, d, n, err, errlen);
    else r.d = NULL;
    if (!st) {
        nx_forward_out fo = {.all_hidden = 1};
        if (d->hidden_prenorm) fo.prenorm = h;
        else fo.hidden = h;
        st = nx_forward(m, s, tokens, n, &fo, err, errlen);
    }
    if (!st) {
        /* entry p: token p+1 with hidden row p */
        int64_t V = m->cfg.vocab_size;
        for (int p = 0; p < n - 1; p += MDL_CHUNK) {
            int T = n - 1 - p < MDL_CHUNK ? n - 1 - p : MDL_CHUNK;
            mtp_rows_append(&r, tokens + p + 1, h + (int64_t)p * H, T, logits + (int64_t)p * V);
            if (hidden) memcpy(hidden + (int64_t)p * H, r.sc.hfinal, (size_t)(T * H) * sizeof(float));
        }
    }
    if (r.d) mtp_rows_free(&r);
    nx_state_free(s);
    nx_free(h);
    return st;
}
