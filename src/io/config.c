/* config.c — parse and validate a Qwen3.5 config.json (see config.h). */
#include "io/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

/* Dimensions above this are rejected as malformed: it keeps every derived
 * product (e.g. 2*Nh*hd*H) far from int64 overflow. */
#define CFG_MAX_DIM (1 << 20)
#define CFG_MAX_VOCAB (1 << 24)

typedef struct {
    const char *file;    /* for messages */
    const char *scope;   /* "text_config." or "" */
    char *err;
    size_t errlen;
} cfg_ctx;

/* Reads an optional integer field: returns 1 and sets *out if present, 0 if
 * absent (or null), -1 (error written) if present with the wrong type or out
 * of [lo, hi]. */
static int get_int(cfg_ctx *c, json_t *obj, const char *key, long long lo, long long hi, long long *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s must be an integer", c->file, c->scope, key);
        return -1;
    }
    if (x < lo || x > hi) {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s = %lld is out of range [%lld, %lld]", c->file, c->scope, key, x, lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_real(cfg_ctx *c, json_t *obj, const char *key, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s must be a number", c->file, c->scope, key);
        return -1;
    }
    *out = json_number_value(v);
    if (!isfinite(*out)) {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s is not finite", c->file, c->scope, key);
        return -1;
    }
    return 1;
}

static int get_bool(cfg_ctx *c, json_t *obj, const char *key, int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s must be true or false", c->file, c->scope, key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* Required positive dimension. */
static int need_dim(cfg_ctx *c, json_t *obj, const char *key, long long hi, int *out) {
    long long x;
    int r = get_int(c, obj, key, 1, hi, &x);
    if (r == 0) {
        nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s is missing", c->file, c->scope, key);
        return -1;
    }
    if (r < 0) return -1;
    *out = (int)x;
    return 0;
}

static int opt_dim(cfg_ctx *c, json_t *obj, const char *key, long long lo, long long hi, int dflt, int *out) {
    long long x;
    int r = get_int(c, obj, key, lo, hi, &x);
    if (r < 0) return -1;
    *out = r ? (int)x : dflt;
    return 0;
}

/* eos_token_id: an integer or a list of integers; merged into out (dedup). */
static int add_eos(cfg_ctx *c, json_t *v, const char *key, cfg_model *out) {
    if (!v || json_is_null(v)) return 0;
    json_t *one = v;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        if (json_is_array(v)) one = json_array_get(v, i);
        if (!json_is_integer(one) || json_integer_value(one) < 0 || json_integer_value(one) >= out->vocab_size) {
            nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s must be token ids below vocab_size %d", c->file, c->scope,
                    key, out->vocab_size);
            return -1;
        }
        int32_t id = (int32_t)json_integer_value(one);
        int dup = 0;
        for (int k = 0; k < out->n_eos; k++) dup |= out->eos_ids[k] == id;
        if (!dup && out->n_eos == CFG_MAX_EOS) { /* not dropped: generation would run past them */
            nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s: more than %d end-of-sequence ids", c->file, c->scope, key,
                    CFG_MAX_EOS);
            return -1;
        }
        if (!dup) out->eos_ids[out->n_eos++] = id;
    }
    return 0;
}

static nx_status parse_rope(cfg_ctx *c, json_t *tc, cfg_model *out) {
    out->rope_theta = 1e7;            /* every Qwen3.5 checkpoint */
    out->partial_rotary_factor = 0.25;
    if (get_real(c, tc, "rope_theta", &out->rope_theta) < 0) return NX_EFORMAT;
    if (get_real(c, tc, "partial_rotary_factor", &out->partial_rotary_factor) < 0) return NX_EFORMAT;
    json_t *given = json_object_get(tc, "rope_parameters");
    const char *rp_key = given && !json_is_null(given) ? "rope_parameters" : "rope_scaling";
    json_t *rp = json_object_get(tc, rp_key);
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp))
            return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %s%s must be an object", c->file, c->scope, rp_key);
        cfg_ctx sub = *c;
        char scope[64];
        snprintf(scope, sizeof scope, "%s%s.", c->scope, rp_key);
        sub.scope = scope;
        if (get_real(&sub, rp, "rope_theta", &out->rope_theta) < 0) return NX_EFORMAT;
        if (get_real(&sub, rp, "partial_rotary_factor", &out->partial_rotary_factor) < 0) return NX_EFORMAT;
        json_t *type = json_object_get(rp, "rope_type");
        if (!type) type = json_object_get(rp, "type");
        if (type && !json_is_null(type)) {
            const char *t = json_string_value(type);
            /* mRoPE with text-only positions (t = h = w = p) is plain partial
             * RoPE, so "default" with an mrope_section is fine; scaled
             * variants (yarn, linear, dynamic) change the frequencies. */
            if (!t || (strcmp(t, "default") != 0 && strcmp(t, "mrope") != 0))
                return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: %srope_type '%s' is not supported yet (only default)",
                               c->file, scope, t ? t : "?");
        }
    }
    if (out->rope_theta <= 0)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: rope_theta must be positive", c->file);
    if (out->partial_rotary_factor <= 0 || out->partial_rotary_factor > 1)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: partial_rotary_factor %g must be in (0, 1]", c->file,
                       out->partial_rotary_factor);
    out->rotary_dim = (int)(out->head_dim * out->partial_rotary_factor);
    if (out->rotary_dim < 2 || out->rotary_dim % 2)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: head_dim %d x partial_rotary_factor %g gives rotary dim %d (must be even, >= 2)",
                       c->file, out->head_dim, out->partial_rotary_factor, out->rotary_dim);
    return NX_OK;
}

static nx_status parse_layer_types(cfg_ctx *c, json_t *tc, cfg_model *out) {
    json_t *lt = json_object_get(tc, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)out->n_layers)
            return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %slayer_types must be a list of num_hidden_layers (%d) strings",
                           c->file, c->scope, out->n_layers);
        for (int i = 0; i < out->n_layers; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (t && strcmp(t, "full_attention") == 0) out->layer_full[i] = 1;
            else if (t && strcmp(t, "linear_attention") == 0) out->layer_full[i] = 0;
            else
                return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: %slayer_types[%d] = '%s' (expected full_attention or linear_attention)",
                               c->file, c->scope, i, t ? t : "(not a string)");
        }
        return NX_OK;
    }
    int interval;
    if (opt_dim(c, tc, "full_attention_interval", 1, CFG_MAX_LAYERS, 4, &interval) < 0) return NX_EFORMAT;
    for (int i = 0; i < out->n_layers; i++) out->layer_full[i] = (i + 1) % interval == 0;
    return NX_OK;
}

static nx_status parse_text(cfg_ctx *c, json_t *root, json_t *tc, cfg_model *out) {
    if (need_dim(c, tc, "vocab_size", CFG_MAX_VOCAB, &out->vocab_size) || need_dim(c, tc, "hidden_size", CFG_MAX_DIM, &out->hidden_size) ||
        need_dim(c, tc, "num_hidden_layers", CFG_MAX_LAYERS, &out->n_layers) ||
        need_dim(c, tc, "intermediate_size", CFG_MAX_DIM, &out->intermediate_size) ||
        need_dim(c, tc, "num_attention_heads", 4096, &out->n_heads) ||
        need_dim(c, tc, "linear_num_key_heads", 4096, &out->linear_k_heads) ||
        need_dim(c, tc, "linear_num_value_heads", 4096, &out->linear_v_heads) ||
        need_dim(c, tc, "linear_key_head_dim", 65536, &out->linear_k_dim) ||
        need_dim(c, tc, "linear_value_head_dim", 65536, &out->linear_v_dim))
        return NX_EFORMAT;
    /* HF Qwen3_5TextConfig's defaults (not hidden / heads, as other families) */
    if (opt_dim(c, tc, "num_key_value_heads", 1, 4096, 4, &out->n_kv_heads) ||
        opt_dim(c, tc, "head_dim", 1, 65536, 256, &out->head_dim) ||
        opt_dim(c, tc, "linear_conv_kernel_dim", 1, CFG_MAX_CONV_KERNEL, 4, &out->conv_kernel) ||
        opt_dim(c, tc, "max_position_embeddings", 1, 1 << 30, 262144, &out->max_position_embeddings) ||
        opt_dim(c, tc, "mtp_num_hidden_layers", 0, 16, 0, &out->mtp_num_hidden_layers))
        return NX_EFORMAT;
    if (out->n_heads % out->n_kv_heads)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       c->file, out->n_heads, out->n_kv_heads);
    /* one GDN layer's recurrent state is Hv*Dv*Dk floats; the largest Qwen3.5
     * has 64*128*128. Far larger is a malformed config, refused before any
     * allocation. */
    if ((long long)out->linear_v_heads * out->linear_v_dim * out->linear_k_dim > (1LL << 28))
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: linear_num_value_heads x linear_value_head_dim x linear_key_head_dim = %lld is too large",
                       c->file, (long long)out->linear_v_heads * out->linear_v_dim * out->linear_k_dim);
    if (out->linear_v_heads % out->linear_k_heads)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                       c->file, out->linear_v_heads, out->linear_k_heads);

    long long experts = 0;
    if (get_int(c, tc, "num_experts", 0, 1 << 20, &experts) < 0) return NX_EFORMAT;
    if (experts > 0)
        return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: MoE not supported yet (num_experts = %lld)", c->file, experts);

    int b;
    out->attn_output_gate = 1;
    if (get_bool(c, tc, "attn_output_gate", &out->attn_output_gate) < 0) return NX_EFORMAT;
    b = 0;
    if (get_bool(c, tc, "attention_bias", &b) < 0) return NX_EFORMAT;
    if (b) return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: attention_bias = true is not supported", c->file);
    json_t *act = json_object_get(tc, "hidden_act");
    if (act && !json_is_null(act) && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: hidden_act '%s' is not supported (only silu)", c->file,
                       json_is_string(act) ? json_string_value(act) : "?");

    /* the GDN output gate (SGLang's output_gate_type; absent in official
     * configs, where it is silu) */
    json_t *gate = json_object_get(tc, "output_gate_type");
    if (gate && !json_is_null(gate) &&
        (!json_is_string(gate) || (strcmp(json_string_value(gate), "silu") != 0 && strcmp(json_string_value(gate), "swish") != 0)))
        return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: %soutput_gate_type '%s' is not supported (only silu/swish)",
                       c->file, c->scope, json_is_string(gate) ? json_string_value(gate) : "?");

    out->rms_norm_eps = 1e-6;
    if (get_real(c, tc, "rms_norm_eps", &out->rms_norm_eps) < 0) return NX_EFORMAT;
    if (out->rms_norm_eps <= 0 || out->rms_norm_eps > 1)
        return nx_fail(c->err, c->errlen, NX_EFORMAT, "%s: rms_norm_eps %g must be in (0, 1]", c->file, out->rms_norm_eps);

    nx_status st = parse_rope(c, tc, out);
    if (st) return st;
    st = parse_layer_types(c, tc, out);
    if (st) return st;

    /* tie_word_embeddings: text_config wins, top level is the fallback. */
    out->tie_word_embeddings = 0;
    cfg_ctx top = *c;
    top.scope = "";
    if (get_bool(&top, root, "tie_word_embeddings", &out->tie_word_embeddings) < 0) return NX_EFORMAT;
    if (tc != root && get_bool(c, tc, "tie_word_embeddings", &out->tie_word_embeddings) < 0) return NX_EFORMAT;
    out->mtp_use_dedicated_embeddings = 0;
    if (get_bool(c, tc, "mtp_use_dedicated_embeddings", &out->mtp_use_dedicated_embeddings) < 0) return NX_EFORMAT;

    out->n_eos = 0;
    if (add_eos(c, json_object_get(tc, "eos_token_id"), "eos_token_id", out)) return NX_EFORMAT;
    if (tc != root && add_eos(&top, json_object_get(root, "eos_token_id"), "eos_token_id", out)) return NX_EFORMAT;
    return NX_OK;
}

static int affine_bits_ok(long long b) { return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }
static int affine_group_ok(long long g) { return g == 32 || g == 64 || g == 128; }

/* MLX's modes and their (group_size, bits) defaults, which the small-float
 * modes also require. */
static const struct { const char *name; int group, bits; } qmodes[] = {
    [CFG_Q_AFFINE] = {"affine", 64, 4}, [CFG_Q_MXFP4] = {"mxfp4", 32, 4},
    [CFG_Q_NVFP4] = {"nvfp4", 16, 4},   [CFG_Q_MXFP8] = {"mxfp8", 32, 8},
};

const char *cfg_qmode_name(int mode) {
    return mode >= 0 && mode < (int)(sizeof qmodes / sizeof *qmodes) ? qmodes[mode].name : "?";
}

/* mode, bits and group_size of one quantization object (the block or an
 * override), named `name` in messages ("quantization", or
 * "quantization.<module path>"): an absent mode is *mode, absent sizes take
 * that mode's defaults (mlx's nn.quantize and to_quantized(**entry)).
 * *explicit: 1 where the object gives both sizes. */
static nx_status quant_params(const cfg_ctx *top, json_t *obj, const char *name, int *mode, int *bits, int *group,
                              int *explicit) {
    char scope[sizeof ((cfg_quant_override *)0)->path + 32];
    snprintf(scope, sizeof scope, "%s.", name);
    cfg_ctx c = *top;
    c.scope = scope;   /* get_int's messages: quantization.<module>.bits */
    json_t *m = json_object_get(obj, "mode");
    if (m && !json_is_null(m)) {
        int found = -1;
        for (int i = 0; json_is_string(m) && i < (int)(sizeof qmodes / sizeof *qmodes); i++)
            if (strcmp(json_string_value(m), qmodes[i].name) == 0) found = i;
        if (found < 0)
            return nx_fail(c.err, c.errlen, NX_EUNSUPPORTED,
                           "%s: %smode '%s' is not supported (affine, mxfp4, nvfp4 or mxfp8)", c.file, scope,
                           json_is_string(m) ? json_string_value(m) : "?");
        *mode = found;
    }
    long long b = qmodes[*mode].bits, g = qmodes[*mode].group;
    int has_b = get_int(&c, obj, "bits", 1, 64, &b), has_g = get_int(&c, obj, "group_size", 1, 1 << 20, &g);
    if (has_b < 0 || has_g < 0) return NX_EFORMAT;
    if (*mode == CFG_Q_AFFINE && (!affine_bits_ok(b) || !affine_group_ok(g)))
        return nx_fail(c.err, c.errlen, NX_EUNSUPPORTED,
                       "%s: %s: bits %lld, group_size %lld (affine quantization takes bits 2, 3, 4, 5, 6 or 8 and group_size 32, 64 or 128)",
                       c.file, name, b, g);
    if (*mode != CFG_Q_AFFINE && (b != qmodes[*mode].bits || g != qmodes[*mode].group))
        return nx_fail(c.err, c.errlen, NX_EUNSUPPORTED,
                       "%s: %s: bits %lld, group_size %lld (mode %s takes bits %d, group_size %d)",
                       c.file, name, b, g, qmodes[*mode].name, qmodes[*mode].bits, qmodes[*mode].group);
    *bits = (int)b, *group = (int)g;
    if (explicit) *explicit = has_b && has_g;
    return NX_OK;
}

/* A Hugging Face quantization_config with quant_method "fp8" (spec §2.6.3):
 * E4M3 weights in 128 x 128 blocks, the only layout read. */
static nx_status parse_fp8(cfg_ctx *c, json_t *q, cfg_model *out) {
    json_t *fmt = json_object_get(q, "fmt"), *bs = json_object_get(q, "weight_block_size");
    if (fmt && !json_is_null(fmt) && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "e4m3") != 0))
        return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED, "%s: %sfmt '%s' is not supported (fp8 weights must be e4m3)",
                       c->file,
                       c->scope, json_is_string(fmt) ? json_string_value(fmt) : "?");
    if (!json_is_array(bs) || json_array_size(bs) != 2 || json_integer_value(json_array_get(bs, 0)) != 128 ||
        json_integer_value(json_array_get(bs, 1)) != 128)
        return nx_fail(c->err, c->errlen, NX_EUNSUPPORTED,
                       "%s: %sweight_block_size must be [128, 128] (per-tensor and per-channel fp8 are not supported)",
                       c->file,
                       c->scope);
    out->fp8_block = 1;
    return NX_OK;
}

/* The quantization block (see config.h): "quantization", else
 * "quantization_config", at the top level, else under text_config (where
 * some conversions leave it; mlx-lm copies it up). */
static nx_status parse_quantization(cfg_ctx *top, json_t *root, json_t *tc, cfg_model *out) {
    static const struct {
        int nested;
        const char *key, *name;
    } where[] = {{0, "quantization", "quantization"},
                 {0, "quantization_config", "quantization_config"},
                 {1, "quantization", "text_config.quantization"},
                 {1, "quantization_config", "text_config.quantization_config"}};
    json_t *q = NULL;
    const char *key = NULL;
    for (int i = 0; i < 4 && !q; i++) {
        if (where[i].nested && tc == root) break;   /* the flat layout has no text_config */
        q = json_object_get(where[i].nested ? tc : root, where[i].key);
        if (json_is_null(q)) q = NULL;
        key = where[i].name;
    }
    if (!q) return NX_OK;
    char scope[64];
    snprintf(scope, sizeof scope, "%s.", key);
    cfg_ctx c = *top;
    c.scope = scope;
    if (!json_is_object(q)) return nx_fail(c.err, c.errlen, NX_EFORMAT, "%s: %s must be an object", c.file, key);
    json_t *method = json_object_get(q, "quant_method");
    if (method && json_is_string(method) && strcmp(json_string_value(method), "fp8") == 0) return parse_fp8(&c, q, out);
    if (method && !json_is_null(method))
        return nx_fail(c.err, c.errlen, NX_EUNSUPPORTED,
                       "%s: %squant_method '%s' is not supported (nextn reads MLX quantization and block fp8)", c.file,
                       scope,
                       json_is_string(method) ? json_string_value(method) : "?");
    out->has_quantization = 1;
    out->q_mode = CFG_Q_AFFINE;
    nx_status st = quant_params(&c, q, key, &out->q_mode, &out->q_bits, &out->q_group, &out->q_sizes_given);
    if (st) return st;
    const char *k;
    json_t *v;
    json_object_foreach(q, k, v) {
        if (!json_is_object(v) && !json_is_false(v)) continue;   /* the block's own fields */
        if (out->n_q_overrides == CFG_MAX_QOVERRIDES)
            return nx_fail(c.err, c.errlen, NX_EUNSUPPORTED, "%s: %s has more than %d per-module entries", c.file, key,
                           CFG_MAX_QOVERRIDES);
        cfg_quant_override *o = &out->q_overrides[out->n_q_overrides++];
        if (strlen(k) >= sizeof o->path)
            return nx_fail(c.err, c.errlen, NX_EFORMAT, "%s: %s: module path '%.60s...' is too long", c.file, key, k);
        snprintf(o->path, sizeof o->path, "%s", k);
        o->mode = CFG_Q_AFFINE, o->bits = o->group = 0;
        char name[sizeof o->path + 32];
        snprintf(name, sizeof name, "%s.%s", key, k);
        if (json_is_object(v) && (st = quant_params(&c, v, name, &o->mode, &o->bits, &o->group, &o->sizes_given)))
            return st;
    }
    return NX_OK;
}

/* The block's per-module entry for module, or NULL. */
static const cfg_quant_override *override_of(const cfg_model *c, const char *module) {
    for (int i = 0; i < c->n_q_overrides; i++)
        if (strcmp(c->q_overrides[i].path, module) == 0) return &c->q_overrides[i];
    return NULL;
}

int cfg_quant_for(const cfg_model *c, const char *module, int *mode, int *bits, int *group) {
    if (!c->has_quantization) return 0;
    const cfg_quant_override *o = override_of(c, module);
    if (o) {
        *mode = o->mode, *bits = o->bits, *group = o->group;
        return *bits != 0;
    }
    *mode = c->q_mode, *bits = c->q_bits, *group = c->q_group;
    return 1;
}

int cfg_quant_defaulted(const cfg_model *c, const char *module) {
    const cfg_quant_override *o = override_of(c, module);
    return o ? o->bits && !o->sizes_given : c->has_quantization && !c->q_sizes_given;
}

nx_status cfg_parse(const char *text, size_t len, const char *name, cfg_model *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: invalid JSON at line %d column %d: %s", name, je.line, je.column, je.text);
    nx_status st = NX_OK;
    cfg_ctx c = {name, "", err, errlen};
    if (!json_is_object(root)) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: not a JSON object", name);
        goto done;
    }
    json_t *mt = json_object_get(root, "model_type");
    json_t *tc = json_object_get(root, "text_config");
    const char *type = json_string_value(mt);
    if (!type && tc) type = json_string_value(json_object_get(tc, "model_type"));
    if (!type) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: model_type is missing", name);
        goto done;
    }
    snprintf(out->model_type, sizeof out->model_type, "%s", type);
    if (strcmp(type, "qwen3_5_moe") == 0 || strcmp(type, "qwen3_5_moe_text") == 0) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: MoE not supported yet (model_type %s)", name, type);
        goto done;
    }
    if (strcmp(type, "qwen3_5") != 0 && strcmp(type, "qwen3_5_text") != 0) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: unknown model_type '%s' (nextn runs qwen3_5 and qwen3_5_text)", name, type);
        goto done;
    }
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) {
            st = nx_fail(err, errlen, NX_EFORMAT, "%s: text_config must be an object", name);
            goto done;
        }
        c.scope = "text_config.";
    } else {
        tc = root; /* flat layout */
    }
    st = parse_text(&c, root, tc, out);
    if (st) goto done;
    c.scope = "";
    st = parse_quantization(&c, root, tc, out);
done:
    json_decref(root);
    return st;
}

/* The whole file at path, NUL-terminated, into *out (the caller frees it):
 * NX_OK, NX_EIO when it cannot be read (or is 64 MiB or more), NX_ENOMEM. */
static nx_status read_text(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NX_EIO;
    nx_status st = NX_EIO;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
            char *buf = nx_alloc((size_t)n + 1);
            if (!buf) st = NX_ENOMEM;
            else if (fread(buf, 1, (size_t)n, f) != (size_t)n) nx_free(buf);
            else buf[n] = 0, *len = (size_t)n, *out = buf, st = NX_OK;
        }
    }
    fclose(f);
    return st;
}

nx_status cfg_load_dir(const char *dir, cfg_model *out, char *err, size_t errlen) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    const nx_status rs = read_text(path, &text, &len);
    if (rs == NX_ENOMEM) return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory reading it", path);
    if (rs) return nx_fail(err, errlen, NX_EIO, "%s: cannot read (is %s a checkpoint directory?)", path, dir);
    nx_status st = cfg_parse(text, len, path, out, err, errlen);
    nx_free(text);
    if (st) return st;

    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    const nx_status gs = read_text(path, &text, &len);
    if (gs == NX_ENOMEM) return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory reading it", path);
    if (gs) return NX_OK; /* optional */
    json_error_t je;
    json_t *g = json_loadb(text, len, 0, &je);
    nx_free(text);
    if (!g || !json_is_object(g)) {
        nx_status st = g ? nx_fail(err, errlen, NX_EFORMAT, "%s: not a JSON object", path)
                         : nx_fail(err, errlen, NX_EFORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
        json_decref(g);
        return st;
    }
    cfg_ctx c = {path, "", err, errlen};
    int r = add_eos(&c, json_object_get(g, "eos_token_id"), "eos_token_id", out);
    json_decref(g);
    return r ? NX_EFORMAT : NX_OK;
}
