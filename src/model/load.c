/* load.c — open a Qwen3.5 checkpoint, check every tensor against the config,
 * and bind read-only weight views (nx_model_load / nx_model_free).
 *
 * Two file layouts hold the same model (spec §2.4):
 *   raw Hugging Face: model.language_model.* (or model.* for text-only
 *     checkpoints), conv1d [CD, 1, Kc], zero-centered norms store w;
 *   mlx-community:    language_model.model.*, conv1d [CD, Kc, 1], the +1 of
 *     zero-centered norms already baked in.
 * The layout is decided once per checkpoint from the conv1d shape (the rule
 * mlx-lm uses), falling back to the tensor naming. The norms affected are
 * input_layernorm, post_attention_layernorm, q_norm, k_norm and the final norm;
 * the GDN gated norm (linear_attn.norm) is a plain weight in both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>

#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/err.h"
#include "kernels/fpq.h"
#include "kernels/quant.h"
#include "model/model.h"

void mdl_owned_free(mdl_owned *o) {
    for (int i = 0; i < o->n; i++) nx_free_aligned(o->blocks[i]);
    nx_free(o->blocks);
    o->blocks = NULL;
    o->n = 0;
}

/* Adds p to o; on failure frees p and returns 0. */
static int owned_add(mdl_owned *o, void *p) {
    void **grown = nx_realloc(o->blocks, (size_t)(o->n + 1) * sizeof *grown);
    if (!grown) {
        nx_free_aligned(p);
        return 0;
    }
    o->blocks = grown;
    o->blocks[o->n++] = p;
    return 1;
}

static nx_status keep_owned(mdl_binder *b, void *p) {
    if (owned_add(b->owned, p)) return NX_OK;
    return nx_fail(b->err, b->errlen, NX_ENOMEM, "out of memory while loading %s", b->dir);
}

static void pack_range(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const kn_mat *w = ctx;
    kn_lanes_pack(w, (void *)w->packed, r0, r1);   /* the block mdl_pack_mats owns */
}

nx_status mdl_pack_mats(nx_pool *pool, mdl_owned *owned, const st_set *st, kn_mat *const mats[], int n, char *err,
                        size_t errlen) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += nx_round64(kn_lanes_packed_bytes(mats[i]));
    if (total == 0) return NX_OK;
    char *buf = nx_alloc_aligned(total);
    if (!buf || !owned_add(owned, buf))
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory for %zu MB of packed codes", total >> 20);
    for (int i = 0; i < n; i++) {
        const size_t bytes = kn_lanes_packed_bytes(mats[i]);
        if (!bytes) continue;
        kn_mat *w = mats[i];
        w->packed = buf;
        nx_pool_run(pool, pack_range, w, w->rows, 256);
        buf += nx_round64(bytes);
        /* the products read only the packed rows now; the codes, scales and
         * biases as stored come back from the file if anything reads them */
        st_release(st, w->data, (size_t)(w->rows * w->cols * kn_lanes_bits(w) / 8));
        st_release(st, w->scales, (size_t)(w->rows * kn_lanes_scale_row_bytes(w)));
        if (w->biases) st_release(st, w->biases, (size_t)(w->rows * kn_lanes_bias_row_bytes(w)));
    }
    return NX_OK;
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static const st_tensor *need(mdl_binder *b, const char *name, nx_status *st) {
    const st_tensor *t = st_find(b->st, name);
    if (!t) *st = nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' is missing", b->dir, name);
    return t;
}

static nx_status check_shape(mdl_binder *b, const st_tensor *t, int ndim, const int64_t *want, const char *why) {
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (ok) return NX_OK;
    char have[96], exp[96];
    shape_str(have, sizeof have, t->shape, t->ndim);
    shape_str(exp, sizeof exp, want, ndim);
    return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' has shape %s but the config needs %s (%s)", t->file,
                   t->name, have, exp, why);
}

static int is_float_dtype(nx_dtype d) { return d == NX_DT_F32 || d == NX_DT_BF16 || d == NX_DT_F16; }

static nx_status check_float(mdl_binder *b, const st_tensor *t) {
    if (is_float_dtype(t->dtype)) return NX_OK;
    const size_t n = strlen(t->name);
    if (n > 7 && (strcmp(t->name + n - 7, ".scales") == 0 || strcmp(t->name + n - 7, ".biases") == 0))
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' has dtype %s (affine scales and biases are F32, BF16 or F16)",
                       t->file, t->name, nx_dtype_name(t->dtype));
    if (t->dtype == NX_DT_U32)
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' is U32 (MLX-quantized?) but this tensor cannot be quantized",
                       t->file, t->name);
    return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (expected F32, BF16 or F16)", t->file,
                   t->name, nx_dtype_name(t->dtype));
}

/* Points *data at t's bytes, copying them into an owned aligned block when
 * the file does not align them to `align` (safetensors does not promise it;
 * kernels need it). */
static nx_status aligned_data(mdl_binder *b, const st_tensor *t, size_t align, const void **data) {
    *data = t->data;
    if ((uintptr_t)t->data % align == 0) return NX_OK;
    void *copy = nx_alloc_aligned(t->nbytes);
    if (!copy) return nx_fail(b->err, b->errlen, NX_ENOMEM, "out of memory copying misaligned tensor '%s'", t->name);
    memcpy(copy, t->data, t->nbytes);
    *data = copy;
    return keep_owned(b, copy);
}

/* A quantized module agrees with config.json's quantization block (when the
 * binder has one): the block quantizes it, in this mode, bits and group. */
static nx_status check_config(mdl_binder *b, const st_tensor *w, const char *module, int mode, int bits, int group) {
    if (!b->quant) return NX_OK;
    int cmode, cbits, cgroup;
    if (!cfg_quant_for(b->quant, module, &cmode, &cbits, &cgroup))
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: module '%s' is quantized but config.json's quantization block %s",
                       w->file, module,
                       b->quant->has_quantization ? "marks it unquantized"
                       : b->quant->fp8_block      ? "is Hugging Face fp8 (quant_method), not MLX"
                                                  : "is missing");
    if (cmode != mode || cbits != bits || cgroup != group)
        return nx_fail(b->err, b->errlen, NX_EFORMAT,
                       "%s: module '%s' is stored as %s with bits %d, group %d but config.json's quantization says %s, bits %d, group_size %d%s",
                       w->file, module, cfg_qmode_name(mode), bits, group, cfg_qmode_name(cmode), cbits, cgroup,
                       cmode == CFG_Q_AFFINE && mode == CFG_Q_AFFINE && cfg_quant_defaulted(b->quant, module)
                           ? " (config.json names not both bits and group_size: affine's defaults fill in)"
                           : "");
    return NX_OK;
}

/* An MLX small-float module (mxfp4, nvfp4, mxfp8; kernels/fpq.h): weight U32
 * [rows, cols * bits / 32], scales U8 [rows, cols / group], no biases; the
 * mode follows from bits and group. */
static nx_status bind_mx(mdl_binder *b, const st_tensor *w, const st_tensor *sc, const char *module, int64_t rows,
                         int64_t cols, const char *why, kn_mat *out) {
    if (w->dtype != NX_DT_U32 || w->ndim != 2 || w->shape[0] != rows || sc->ndim != 2 || sc->shape[0] != rows)
        return nx_fail(b->err, b->errlen, NX_EFORMAT,
                       "%s: tensors '%s' and '%s' must be U32 [%lld, cols*bits/32] and U8 [%lld, cols/group] (%s)", w->file,
                       w->name, sc->name, (long long)rows, (long long)rows, why);
    const int64_t words = w->shape[1], ngroups = sc->shape[1];
    const int bits = words * 32 % cols == 0 ? (int)(words * 32 / cols) : 0;
    const int group = ngroups > 0 && cols % ngroups == 0 ? (int)(cols / ngroups) : 0;
    const int mode = bits == 4 && group == 32 ? CFG_Q_MXFP4 : bits == 4 && group == 16 ? CFG_Q_NVFP4
                   : bits == 8 && group == 32 ? CFG_Q_MXFP8 : -1;
    if (mode < 0)
        return nx_fail(b->err, b->errlen, NX_EFORMAT,
                       "%s: tensors '%s' [%lld, %lld] and '%s' [%lld, %lld] describe no %lld-column mxfp4 (4 bits, group 32), nvfp4 (4, 16) or mxfp8 (8, 32) matrix, and with no '%s.biases' no affine one",
                       w->file, w->name, (long long)rows, (long long)words, sc->name, (long long)rows, (long long)ngroups,
                       (long long)cols, module);
    char name[320];
    snprintf(name, sizeof name, "%s.global_scale", module);
    if (st_find(b->st, name))
        return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: tensor '%s': nvfp4 with a per-tensor global scale is not supported",
                       w->file, name);
    if (cols > KN_FP_MAX_COLS)
        return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: tensor '%s' has %lld columns (small-float rows hold at most %d)",
                       w->file, w->name, (long long)cols, KN_FP_MAX_COLS);
    nx_status st = check_config(b, w, module, mode, bits, group);
    if (st) return st;
    memset(out, 0, sizeof *out);
    out->dtype = NX_DT_U32, out->sdtype = NX_DT_U8;
    out->rows = rows, out->cols = cols;
    out->fp = mode == CFG_Q_MXFP4 ? KN_FP_MXFP4 : mode == CFG_Q_NVFP4 ? KN_FP_NVFP4 : KN_FP_MXFP8;
    out->group = group;
    out->data = w->data, out->scales = sc->data;   /* read byte by byte or with unaligned loads */
    return NX_OK;
}

/* A Hugging Face block FP8 matrix (spec §2.6.3): weight F8_E4M3 [rows, cols]
 * and its <weight>_scale_inv [ceil(rows/128), ceil(cols/128)] factors. */
static nx_status bind_fp8(mdl_binder *b, const st_tensor *w, int64_t rows, int64_t cols, const char *why, kn_mat *out) {
    char name[320];
    snprintf(name, sizeof name, "%s_scale_inv", w->name);
    nx_status st = NX_OK;
    const st_tensor *sc = need(b, name, &st);
    if (!sc) return st;
    const int64_t want[2] = {rows, cols}, blocks[2] = {(rows + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK,
                                                       (cols + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK};
    if ((st = check_shape(b, w, 2, want, why)) || (st = check_shape(b, sc, 2, blocks, "one factor a 128 x 128 block")) ||
        (st = check_float(b, sc)))
        return st;
    if (cols > KN_FP_MAX_COLS)
        return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: tensor '%s' has %lld columns (fp8 rows hold at most %d)",
                       w->file, w->name, (long long)cols, KN_FP_MAX_COLS);
    if (b->quant && !b->quant->fp8_block)
        return nx_fail(b->err, b->errlen, NX_EFORMAT,
                       "%s: tensor '%s' is block fp8 but config.json has no quantization_config with quant_method fp8",
                       w->file, w->name);
    memset(out, 0, sizeof *out);
    out->dtype = NX_DT_F8_E4M3, out->sdtype = sc->dtype;
    out->rows = rows, out->cols = cols;
    out->fp = KN_FP_FP8_BLOCK, out->group = KN_FP8_BLOCK;
    out->data = w->data;
    return aligned_data(b, sc, nx_dtype_size(sc->dtype), &out->scales);
}

/* The affine-quantized module `module` (name without ".weight"), see
 * mdl_bind_mat. */
static nx_status bind_affine(mdl_binder *b, const st_tensor *w, const char *module, int64_t rows, int64_t cols,
                             const char *why, kn_mat *out) {
    char name[320];
    nx_status st = NX_OK;
    snprintf(name, sizeof name, "%s.scales", module);
    const st_tensor *sc = need(b, name, &st);
    snprintf(name, sizeof name, "%s.biases", module);
    const st_tensor *bi = sc ? need(b, name, &st) : NULL;
    if (!bi) return st;
    if (w->dtype != NX_DT_U32 || w->ndim != 2 || w->shape[0] != rows)
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' has scales, so it must be U32 [%lld, cols*bits/32] (%s)",
                       w->file, w->name, (long long)rows, why);
    /* bits from the packed width, group from the scale count */
    int64_t words = w->shape[1], ngroups = sc->ndim == 2 ? sc->shape[1] : 0;
    int bits = words * 32 % cols == 0 ? (int)(words * 32 / cols) : 0;
    int group = ngroups > 0 && cols % ngroups == 0 ? (int)(cols / ngroups) : 0;
    if (!(bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) ||
        !(group == 32 || group == 64 || group == 128))
        return nx_fail(b->err, b->errlen, NX_EFORMAT,
                       "%s: tensors '%s' [%lld, %lld] and '%s' do not describe an affine %lld-column matrix (bits 2-8, group 32/64/128)",
                       w->file, w->name, (long long)rows, (long long)words, sc->name, (long long)cols);
    int64_t want[2] = {rows, ngroups};
    if ((st = check_shape(b, sc, 2, want, "rows x cols/group_size")) || (st = check_shape(b, bi, 2, want, "as the scales")) ||
        (st = check_float(b, sc)) || (st = check_float(b, bi)))
        return st;
    if (bi->dtype != sc->dtype)
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: '%s' is %s but '%s' is %s", bi->file, bi->name,
                       nx_dtype_name(bi->dtype), sc->name, nx_dtype_name(sc->dtype));
    if ((st = check_config(b, w, module, CFG_Q_AFFINE, bits, group))) return st;
    memset(out, 0, sizeof *out);
    out->dtype = NX_DT_U32;
    out->rows = rows, out->cols = cols;
    out->bits = bits, out->group = group;
    out->sdtype = sc->dtype;
    if ((st = aligned_data(b, w, 4, &out->data)) || (st = aligned_data(b, sc, nx_dtype_size(sc->dtype), &out->scales)) ||
        (st = aligned_data(b, bi, nx_dtype_size(bi->dtype), &out->biases)))
        return st;
    return NX_OK;
}

nx_status mdl_bind_mat(mdl_binder *b, const char *name, int64_t rows, int64_t cols, const char *why, kn_mat *out) {
    nx_status st = NX_OK;
    const st_tensor *t = need(b, name, &st);
    if (!t) return st;
    char module[300], scales[310];
    size_t len = strlen(name);
    if (len > 7 && len < sizeof module && strcmp(name + len - 7, ".weight") == 0) {
        snprintf(module, sizeof module, "%.*s", (int)(len - 7), name);
        snprintf(scales, sizeof scales, "%s.scales", module);
        const st_tensor *sc = st_find(b->st, scales);
        char biases[310];
        snprintf(biases, sizeof biases, "%s.biases", module);
        if (sc && sc->dtype == NX_DT_U8 && !st_find(b->st, biases)) return bind_mx(b, t, sc, module, rows, cols, why, out);
        if (sc) return bind_affine(b, t, module, rows, cols, why, out);
    }
    if (t->dtype == NX_DT_F8_E4M3) return bind_fp8(b, t, rows, cols, why, out);
    if (t->dtype == NX_DT_U32)
        return nx_fail(b->err, b->errlen, NX_EFORMAT, "%s: tensor '%s' is U32 (MLX-quantized) but has no matching .scales tensor",
                       t->file, t->name);
    int64_t want[2] = {rows, cols};
    if ((st = check_shape(b, t, 2, want, why)) || (st = check_float(b, t))) return st;
    memset(out, 0, sizeof *out);
    out->dtype = t->dtype;
    out->rows = rows;
    out->cols = cols;
    return aligned_data(b, t, nx_dtype_size(t->dtype), &out->data);
}

/* A vector converted to f32; plus_one adds 1 (zero-centered norm, raw HF). */
static nx_status bind_vec_shape(mdl_binder *b, const char *name, int ndim, const int64_t *shape, int64_t n, int plus_one,
                                const char *why, float **out) {
    nx_status st = NX_OK;
    const st_tensor *t = need(b, name, &st);
    if (!t) return st;
    if ((st = check_shape(b, t, ndim, shape, why)) || (st = check_float(b, t))) return st;
    float *v = nx_alloc_aligned((size_t)n * sizeof *v);
    if (!v) return nx_fail(b->err, b->errlen, NX_ENOMEM, "out of memory for '%s'", name);
    if ((st = keep_owned(b, v))) return st;
    kn_to_f32(t->dtype, t->data, v, n);
    if (plus_one)
        for (int64_t i = 0; i < n; i++) v[i] += 1.0f;
    *out = v;
    return NX_OK;
}

nx_status mdl_bind_vec(mdl_binder *b, const char *name, int64_t n, int plus_one, const char *why, float **out) {
    return bind_vec_shape(b, name, 1, &n, n, plus_one, why, out);
}

/* A tensor of a layer past num_hidden_layers: the config and the weights
 * disagree (a config edited to fewer layers would run a cut model). */
static nx_status no_extra_layers(const nx_model *m, char *err, size_t errlen) {
    char lp[200];
    const int plen = snprintf(lp, sizeof lp, "%slayers.", m->prefix);
    for (int i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        if (strncmp(t->name, lp, (size_t)plen) != 0) continue;
        char *end;
        const long layer = strtol(t->name + plen, &end, 10);
        if (end != t->name + plen && *end == '.' && layer >= m->cfg.n_layers)
            return nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s' is of layer %ld, but config.json has num_hidden_layers %d",
                           t->file, t->name, layer, m->cfg.n_layers);
    }
    return NX_OK;
}

/* Picks the name prefix of the language model's tensors. */
static const char *find_prefix(const st_set *s) {
    static const char *const prefixes[] = {"model.language_model.", "language_model.model.", "model."};
    char name[256];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (st_find(s, name)) return prefixes[i];
    }
    return NULL;
}

/* What every decoder layer has around its mixer: the two zero-centred norms
 * and the SwiGLU MLP, under <prefix>. */
static nx_status bind_norms_and_mlp(mdl_binder *b, const cfg_model *c, const char *prefix, int plus_one, mdl_layer *L) {
    int64_t H = c->hidden_size, I = c->intermediate_size;
    char n[256];
    nx_status st;
#define NAME(suffix) (snprintf(n, sizeof n, "%s" suffix, prefix), n)
    if ((st = mdl_bind_vec(b, NAME("input_layernorm.weight"), H, plus_one, "hidden_size", &L->input_norm)) ||
        (st = mdl_bind_vec(b, NAME("post_attention_layernorm.weight"), H, plus_one, "hidden_size", &L->post_norm)) ||
        (st = mdl_bind_mat(b, NAME("mlp.gate_proj.weight"), I, H, "intermediate_size x hidden_size", &L->gate_proj)) ||
        (st = mdl_bind_mat(b, NAME("mlp.up_proj.weight"), I, H, "intermediate_size x hidden_size", &L->up_proj)) ||
        (st = mdl_bind_mat(b, NAME("mlp.down_proj.weight"), H, I, "hidden_size x intermediate_size", &L->down_proj)))
        return st;
#undef NAME
    return NX_OK;
}

nx_status mdl_bind_attention_layer(mdl_binder *b, const cfg_model *c, const char *prefix, int plus_one, mdl_layer *L) {
    int64_t H = c->hidden_size, hd = c->head_dim;
    int64_t qrows = (int64_t)c->n_heads * hd * (c->attn_output_gate ? 2 : 1), kv = (int64_t)c->n_kv_heads * hd;
    char n[256];
    nx_status st;
    L->is_full = 1;
#define NAME(suffix) (snprintf(n, sizeof n, "%s" suffix, prefix), n)
    if ((st = bind_norms_and_mlp(b, c, prefix, plus_one, L)) ||
        (st = mdl_bind_mat(b, NAME("self_attn.q_proj.weight"), qrows, H, "2*num_attention_heads*head_dim x hidden_size", &L->q_proj)) ||
        (st = mdl_bind_mat(b, NAME("self_attn.k_proj.weight"), kv, H, "num_key_value_heads*head_dim x hidden_size", &L->k_proj)) ||
        (st = mdl_bind_mat(b, NAME("self_attn.v_proj.weight"), kv, H, "num_key_value_heads*head_dim x hidden_size", &L->v_proj)) ||
        (st = mdl_bind_mat(b, NAME("self_attn.o_proj.weight"), H, (int64_t)c->n_heads * hd, "hidden_size x num_attention_heads*head_dim", &L->o_proj)) ||
        (st = mdl_bind_vec(b, NAME("self_attn.q_norm.weight"), hd, plus_one, "head_dim", &L->q_norm)) ||
        (st = mdl_bind_vec(b, NAME("self_attn.k_norm.weight"), hd, plus_one, "head_dim", &L->k_norm)))
        return st;
#undef NAME
    return NX_OK;
}

static nx_status bind_gdn(mdl_binder *b, const nx_model *m, int i, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    const char *p = m->prefix;
    int64_t H = c->hidden_size, CD = cfg_conv_dim(c), VD = cfg_value_dim(c), Hv = c->linear_v_heads, Kc = c->conv_kernel;
    char n[256];
    nx_status st;
#define NAME(suffix) (snprintf(n, sizeof n, "%slayers.%d.linear_attn." suffix, p, i), n)
    if ((st = mdl_bind_mat(b, NAME("in_proj_qkv.weight"), CD, H, "2*key_dim+value_dim x hidden_size", &L->in_qkv)) ||
        (st = mdl_bind_mat(b, NAME("in_proj_z.weight"), VD, H, "value_dim x hidden_size", &L->in_z)) ||
        (st = mdl_bind_mat(b, NAME("in_proj_b.weight"), Hv, H, "linear_num_value_heads x hidden_size", &L->in_b)) ||
        (st = mdl_bind_mat(b, NAME("in_proj_a.weight"), Hv, H, "linear_num_value_heads x hidden_size", &L->in_a)) ||
        (st = mdl_bind_mat(b, NAME("out_proj.weight"), H, VD, "hidden_size x value_dim", &L->out_proj)))
        return st;
    /* conv1d: [CD, 1, Kc] (HF) and [CD, Kc, 1] (MLX) hold the same bytes. */
    int64_t conv_shape[3] = {CD, m->layout_mlx ? Kc : 1, m->layout_mlx ? 1 : Kc};
    if ((st = bind_vec_shape(b, NAME("conv1d.weight"), 3, conv_shape, CD * Kc, 0, "conv_dim x kernel", &L->conv_w)) ||
        (st = mdl_bind_vec(b, NAME("dt_bias"), Hv, 0, "linear_num_value_heads", &L->dt_bias)) ||
        (st = mdl_bind_vec(b, NAME("A_log"), Hv, 0, "linear_num_value_heads", &L->neg_exp_a)) ||
        (st = mdl_bind_vec(b, NAME("norm.weight"), c->linear_v_dim, 0, "linear_value_head_dim", &L->gnorm)))
        return st;
    /* taps to [Kc][CD], so the conv runs along channels (kernels/gdn.h) */
    float *taps = nx_alloc_aligned((size_t)(CD * Kc) * sizeof *taps);
    if (!taps) return nx_fail(b->err, b->errlen, NX_ENOMEM, "out of memory for the conv taps of layer %d", i);
    for (int64_t ch = 0; ch < CD; ch++)
        for (int64_t j = 0; j < Kc; j++) taps[j * CD + ch] = L->conv_w[ch * Kc + j];
    memcpy(L->conv_w, taps, (size_t)(CD * Kc) * sizeof *taps);
    nx_free_aligned(taps);
#undef NAME
    for (int64_t j = 0; j < Hv; j++) L->neg_exp_a[j] = -expf(L->neg_exp_a[j]);
    return NX_OK;
}

static nx_status bind_layer(mdl_binder *b, nx_model *m, int i) {
    const cfg_model *c = &m->cfg;
    mdl_layer *L = &m->layers[i];
    int plus = !m->layout_mlx;
    char n[256], prefix[160];
    snprintf(prefix, sizeof prefix, "%slayers.%d.", m->prefix, i);
#define NAME(suffix) (snprintf(n, sizeof n, "%s" suffix, prefix), n)
    if (st_find(m->st, NAME("mlp.gate.weight")) || st_find(m->st, NAME("mlp.experts.down_proj")) ||
        st_find(m->st, NAME("mlp.switch_mlp.down_proj.weight")))
        return nx_fail(b->err, b->errlen, NX_EUNSUPPORTED, "%s: layer %d has MoE experts; MoE not supported yet", m->dir, i);
#undef NAME
    if (c->layer_full[i]) return mdl_bind_attention_layer(b, c, prefix, plus, L);
    L->is_full = 0;
    nx_status st = bind_norms_and_mlp(b, c, prefix, plus, L);
    return st ? st : bind_gdn(b, m, i, L);
}

/* Raw HF vs mlx-community (see the file comment). */
static int detect_mlx_layout(const nx_model *m) {
    const cfg_model *c = &m->cfg;
    char n[256];
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_full[i]) continue;
        snprintf(n, sizeof n, "%slayers.%d.linear_attn.conv1d.weight", m->prefix, i);
        const st_tensor *t = st_find(m->st, n);
        if (t && t->ndim == 3 && c->conv_kernel > 1) return t->shape[2] == 1;
        break;
    }
    return strncmp(m->prefix, "language_model.", 15) == 0;
}

/* The artifact identity checkpoints are namespaced by: the parsed config and,
 * for every tensor, its name, dtype, shape, size and first bytes. It tells
 * different checkpoints apart without reading gigabytes at load. */
static uint64_t model_identity(const nx_model *m) {
    XXH64_state_t *h = XXH64_createState();
    if (!h) return 0;
    XXH64_reset(h, 0x6e657874746172ull); /* "nexttar" */
    XXH64_update(h, &m->cfg, sizeof m->cfg);
    /* The activation arithmetic of quantized weights changes results
     * (kernels/quant.h), so their states saved under one mode are not valid
     * under the other; dense models are the same in both. */
    if (m->cfg.has_quantization) XXH64_update(h, &m->f32_activations, sizeof m->f32_activations);
    /* So does a KV cache of halves; f32's identity is what it always was. */
    if (m->kv_dtype != NX_DT_F32) XXH64_update(h, "kv-f16", 6);
    for (int i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        XXH64_update(h, t->name, strlen(t->name) + 1);
        XXH64_update(h, &t->dtype, sizeof t->dtype);
        XXH64_update(h, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        XXH64_update(h, &t->nbytes, sizeof t->nbytes);
        XXH64_update(h, t->data, t->nbytes < 64 ? t->nbytes : 64);
    }
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

/* 1 if t is an lm_head a tied checkpoint stores anyway: the load reads the
 * embedding in its place, so it is no weight the model reads. */
static int unused_head(const nx_model *m, const st_tensor *t) {
    const char *head = strncmp(m->prefix, "language_model.", 15) == 0 ? "language_model.lm_head." : "lm_head.";
    return m->cfg.tie_word_embeddings && strncmp(t->name, head, strlen(head)) == 0;
}

/* nx_model_info.decode_bytes, from the tensors as stored (so a quantized
 * matrix counts with its scales and biases): every main-stack tensor once,
 * the LM head or the tied embedding included, except that an untied
 * embedding counts one row (a lookup reads one). The MTP head and a vision
 * tower are left out; norm vectors are in but weigh kilobytes. */
static int64_t decode_bytes(const nx_model *m) {
    char embed[160];
    int elen = snprintf(embed, sizeof embed, "%sembed_tokens.", m->prefix);
    int64_t n = 0;
    for (int i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        if (strncmp(t->name, "mtp.", 4) == 0 || strstr(t->name, ".mtp.") || strstr(t->name, "visual") ||
            strncmp(t->name, "vision_tower", 12) == 0 || unused_head(m, t))
            continue;
        int64_t bytes = (int64_t)t->nbytes;
        if (strncmp(t->name, embed, (size_t)elen) == 0 && t->ndim >= 1 && t->shape[0] > 0)
            bytes = (m->cfg.tie_word_embeddings ? bytes : 0) + bytes / t->shape[0];
        n += bytes;
    }
    return n;
}

/* Parameters a tensor stands for: its elements, except that an affine
 * matrix (U32 codes) counts 32 / bits per word and its scales and biases
 * count none. */
static int64_t tensor_params(const nx_model *m, const st_tensor *t) {
    size_t len = strlen(t->name);
    char module[300];
    if (len < 7 || len >= sizeof module) return t->numel;
    snprintf(module, sizeof module, "%.*s", (int)(len - 7), t->name);
    if (t->dtype == NX_DT_U32 && strcmp(t->name + len - 7, ".weight") == 0) {
        int mode, bits, group;
        return cfg_quant_for(&m->cfg, module, &mode, &bits, &group) ? t->numel * 32 / bits : t->numel;
    }
    if (len > 16 && strcmp(t->name + len - 16, "weight_scale_inv") == 0) return 0;   /* block fp8 factors */
    if (strcmp(t->name + len - 7, ".scales") == 0 || strcmp(t->name + len - 7, ".biases") == 0) {
        char w[310];
        snprintf(w, sizeof w, "%s.weight", module);
        const st_tensor *wt = st_find(m->st, w);
        if (wt && wt->dtype == NX_DT_U32) return 0;
    }
    return t->numel;
}

/* "BF16", "AFFINE-Q4", ...: the stored format of w. */
static void format_name(const kn_mat *w, char *out, size_t n) {
    if (w->bits) snprintf(out, n, "AFFINE-Q%d", w->bits);
    else if (w->fp == KN_FP_FP8_BLOCK) snprintf(out, n, "FP8-BLOCK128");
    else if (w->fp) snprintf(out, n, "%s", w->fp == KN_FP_MXFP4 ? "MXFP4" : w->fp == KN_FP_NVFP4 ? "NVFP4" : "MXFP8");
    else snprintf(out, n, "%s", nx_dtype_name(w->dtype));
}

/* Bytes per format over a model's matrices (describe_formats). */
enum { MAX_FORMATS = 12 };   /* F32, F16, BF16 and six affine widths fit */
typedef struct {
    int n;
    char name[MAX_FORMATS][16];
    double bytes[MAX_FORMATS];
} format_tally;

static void tally(format_tally *ft, const kn_mat *w) {
    if (!w->data || w->rows * w->cols == 0) return;   /* the other mixer kind's empty slots */
    char name[16];
    format_name(w, name, sizeof name);
    int f = 0;
    while (f < ft->n && strcmp(ft->name[f], name) != 0) f++;
    if (f == ft->n) {
        if (ft->n == MAX_FORMATS) return;
        snprintf(ft->name[ft->n++], sizeof ft->name[0], "%s", name);
    }
    ft->bytes[f] += kn_mat_bytes(w);
}

/* nx_model_info.weight_dtype: the format holding most of the bytes of the
 * embedding, the decoder layers' matrices and the LM head, with the other
 * formats found named after it ("AFFINE-Q4 (+AFFINE-Q8 BF16)"), so that a
 * mixed-precision checkpoint does not pass for its embedding's format. */
static void describe_formats(nx_model *m) {
    format_tally ft = {0};
    tally(&ft, &m->embed);
    if (!m->cfg.tie_word_embeddings) tally(&ft, &m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const kn_mat *mats[MDL_LAYER_MATS];
        mdl_layer_mats(&m->layers[l], mats);
        for (int i = 0; i < MDL_LAYER_MATS; i++) tally(&ft, mats[i]);
    }
    int top = 0;
    for (int f = 1; f < ft.n; f++)
        if (ft.bytes[f] > ft.bytes[top]) top = f;
    size_t cap = sizeof m->weight_dtype;
    int len = snprintf(m->weight_dtype, cap, "%s", ft.n ? ft.name[top] : "?");
    for (int f = 0, first = 1; f < ft.n && len < (int)cap; f++)
        if (f != top) {
            len += snprintf(m->weight_dtype + len, cap - (size_t)len, "%s%s", first ? " (+" : " ", ft.name[f]);
            first = 0;
        }
    if (ft.n > 1 && len < (int)cap) snprintf(m->weight_dtype + len, cap - (size_t)len, ")");
}

static void fill_info(nx_model *m) {
    const cfg_model *c = &m->cfg;
    nx_model_info *in = &m->info;
    in->dir = m->dir;
    in->model_type = c->model_type;
    in->layout = m->layout_mlx ? "mlx" : "hf";
    describe_formats(m);
    in->weight_dtype = m->weight_dtype;
    in->vocab_size = c->vocab_size;
    in->hidden_size = c->hidden_size;
    in->n_layers = c->n_layers;
    in->intermediate_size = c->intermediate_size;
    in->n_heads = c->n_heads;
    in->n_kv_heads = c->n_kv_heads;
    in->head_dim = c->head_dim;
    in->rotary_dim = c->rotary_dim;
    in->linear_k_heads = c->linear_k_heads;
    in->linear_v_heads = c->linear_v_heads;
    in->linear_k_dim = c->linear_k_dim;
    in->linear_v_dim = c->linear_v_dim;
    in->conv_kernel = c->conv_kernel;
    for (int i = 0; i < c->n_layers; i++) {
        m->layer_pattern[i] = c->layer_full[i] ? 'A' : 'L';
        if (c->layer_full[i]) in->n_full_attention++;
        else in->n_linear_attention++;
    }
    m->layer_pattern[c->n_layers] = 0;
    in->layer_pattern = m->layer_pattern;
    in->rope_theta = c->rope_theta;
    in->rms_norm_eps = c->rms_norm_eps;
    in->max_position_embeddings = c->max_position_embeddings;
    in->tie_word_embeddings = c->tie_word_embeddings;
    in->n_eos = c->n_eos;
    in->eos_ids = c->eos_ids;
    in->n_files = st_file_count(m->st);
    in->n_tensors = st_count(m->st);
    for (int i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        in->weight_bytes += (int64_t)t->nbytes;
        int is_mtp = strncmp(t->name, "mtp.", 4) == 0 || strstr(t->name, ".mtp.") != NULL;
        int is_visual = strstr(t->name, "visual") != NULL || strncmp(t->name, "vision_tower", 12) == 0;
        if (is_mtp) m->n_mtp_tensors++;
        else if (!is_visual && !unused_head(m, t)) in->n_params += tensor_params(m, t);
    }
    /* some conversions keep the head in an mtp.safetensors beside the weights */
    char path[4096];
    snprintf(path, sizeof path, "%s/mtp.safetensors", m->dir);
    in->has_mtp = m->n_mtp_tensors > 0 || access(path, R_OK) == 0;
    in->n_mtp_tensors = m->n_mtp_tensors;
    in->n_threads = nx_pool_size(m->pool);
    in->kernels = kn_impl_name();
    in->kv_cache = m->kv_dtype == NX_DT_F16 ? "f16" : "f32";
    in->quantization = "none";
    if (c->has_quantization) {
        snprintf(m->quant_desc, sizeof m->quant_desc, "mlx %s, %d bits, group %d%s", cfg_qmode_name(c->q_mode), c->q_bits,
                 c->q_group, c->n_q_overrides ? ", with per-module entries" : "");
        in->quantization = m->quant_desc;
    } else if (c->fp8_block) {
        in->quantization = "fp8 e4m3, 128 x 128 blocks";
    }
    in->decode_bytes = decode_bytes(m);
    /* the state a decode step moves too: 18 GDN layers of 1 MiB of
     * recurrent state at the 0.8B shape, read and written every token, are
     * a tenth of a 4-bit model's weight bytes */
    const int64_t recurrent = (int64_t)c->linear_v_heads * c->linear_v_dim * c->linear_k_dim,
                  conv = (int64_t)(c->conv_kernel - 1) * cfg_conv_dim(c);
    in->state_bytes = (int64_t)in->n_linear_attention * 2 * (recurrent + conv) * (int64_t)sizeof(float);
    in->kv_bytes_per_pos =
        (int64_t)in->n_full_attention * 2 * c->n_kv_heads * c->head_dim * (int64_t)nx_dtype_size(m->kv_dtype);
}

static const char *const kernel_names[] = {[NX_KERNELS_AUTO] = "auto", [NX_KERNELS_SCALAR] = "scalar",
                                           [NX_KERNELS_AVX2] = "avx2", [NX_KERNELS_AVX512VNNI] = "avx512vnni",
                                           [NX_KERNELS_AVXVNNI] = "avxvnni"};

nx_status mdl_kernels_isa(nx_kernels k, kn_isa *isa) {
    static const kn_isa isa_of[] = {[NX_KERNELS_AUTO] = KN_ISA_BEST, [NX_KERNELS_SCALAR] = KN_ISA_SCALAR,
                                    [NX_KERNELS_AVX2] = KN_ISA_AVX2, [NX_KERNELS_AVX512VNNI] = KN_ISA_AVX512VNNI,
                                    [NX_KERNELS_AVXVNNI] = KN_ISA_AVXVNNI};
    if ((unsigned)k >= sizeof isa_of / sizeof *isa_of) return NX_EINVAL;
    *isa = isa_of[k];
    return NX_OK;
}

nx_status nx_kernels_parse(const char *name, nx_kernels *out) {
    for (size_t k = 0; name && k < sizeof kernel_names / sizeof *kernel_names; k++)
        if (strcmp(name, kernel_names[k]) == 0) {
            *out = (nx_kernels)k;
            return NX_OK;
        }
    return NX_EINVAL;
}

nx_status nx_kv_cache_parse(const char *name, nx_kv_cache *out) {
    if (name && strcmp(name, "f32") == 0) *out = NX_KV_F32;
    else if (name && strcmp(name, "f16") == 0) *out = NX_KV_F16;
    else return NX_EINVAL;
    return NX_OK;
}

nx_status nx_model_load(const char *dir, const nx_load_opts *opts, nx_model **out, char *err, size_t errlen) {
    *out = NULL;
    nx_load_opts defaults = {0};
    if (!opts) opts = &defaults;
    kn_isa isa;
    if (mdl_kernels_isa(opts->kernels, &isa))
        return nx_fail(err, errlen, NX_EINVAL, "loading %s: unknown kernel set %d", dir, (int)opts->kernels);
    if (opts->kv_cache != NX_KV_F32 && opts->kv_cache != NX_KV_F16)
        return nx_fail(err, errlen, NX_EINVAL, "loading %s: unknown KV cache layout %d", dir, (int)opts->kv_cache);
    nx_model *m = nx_calloc(1, sizeof *m);
    if (!m || !(m->dir = nx_strdup(dir))) {
        nx_free(m);
        return nx_fail(err, errlen, NX_ENOMEM, "out of memory loading %s", dir);
    }
    mdl_binder b = {NULL, dir, &m->owned, err, errlen, &m->cfg};
    const cfg_model *c = &m->cfg;
    nx_status st;
    if ((st = cfg_load_dir(dir, &m->cfg, err, errlen))) goto fail;
    if ((st = st_open_dir(dir, &m->st, err, errlen))) goto fail;
    b.st = m->st;
    if (!(m->prefix = find_prefix(m->st))) {
        st = nx_fail(err, errlen, NX_EFORMAT,
                     "%s: no embed_tokens.weight under model.language_model., language_model.model. or model. — not a Qwen3.5 checkpoint?",
                     dir);
        goto fail;
    }
    m->layout_mlx = detect_mlx_layout(m);
    m->f32_activations = opts->f32_activations != 0;
    m->kv_dtype = opts->kv_cache == NX_KV_F16 ? NX_DT_F16 : NX_DT_F32;
    m->layers = nx_calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) { st = nx_fail(err, errlen, NX_ENOMEM, "out of memory"); goto fail; }

    char n[256];
    int64_t V = c->vocab_size, H = c->hidden_size;
    snprintf(n, sizeof n, "%sembed_tokens.weight", m->prefix);
    if ((st = mdl_bind_mat(&b, n, V, H, "vocab_size x hidden_size", &m->embed))) goto fail;
    snprintf(n, sizeof n, "%snorm.weight", m->prefix);
    if ((st = mdl_bind_vec(&b, n, H, !m->layout_mlx, "hidden_size", &m->final_norm))) goto fail;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
    } else {
        const char *head = strncmp(m->prefix, "language_model.", 15) == 0 ? "language_model.lm_head.weight" : "lm_head.weight";
        if ((st = mdl_bind_mat(&b, head, V, H, "vocab_size x hidden_size", &m->lm_head))) goto fail;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((st = bind_layer(&b, m, i))) goto fail;
    if ((st = no_extra_layers(m, err, errlen))) goto fail;
    if ((st = nx_pool_new(opts->n_threads, &m->pool, err, errlen))) goto fail;
    /* only the SIMD int8 products read packed rows: not for the scalar set,
     * asked for or all this CPU runs, nor for f32 activations */
    m->pack_lanes = !opts->force_reference && kn_isa_available(isa) != KN_ISA_SCALAR && !m->f32_activations;
    if (m->pack_lanes) {
        kn_mat *mats[MDL_LAYER_MATS * CFG_MAX_LAYERS + 1];
        int nm = 0;
        for (int i = 0; i < c->n_layers; i++) nm += mdl_layer_mats_mut(&m->layers[i], mats + nm);
        mats[nm++] = &m->lm_head;
        /* an optimisation: without the memory for it, the products read the
         * codes as stored (mdl_pack_mats packs nothing when it fails) */
        (void)mdl_pack_mats(m->pool, &m->owned, m->st, mats, nm, err, errlen);
    }
    /* only a load that succeeds changes the process's kernels (nothing above
     * runs one) */
    kn_select(opts->force_reference ? KN_ISA_SCALAR : isa);
    fill_info(m);
    m->identity = model_identity(m);
    *out = m;
    return NX_OK;
fail:
    nx_model_free(m);
    return st;
}

void nx_model_free(nx_model *m) {
    if (!m) return;
    nx_pool_free(m->pool);
    mdl_owned_free(&m->owned);
    nx_free(m->layers);
    st_close(m->st);
    nx_free(m->dir);
    nx_free(m);
}

const nx_model_info *nx_model_get_info(const nx_model *m) { return &m->info; }
