/* test_fixture.c — the nextn-fixture tool, run as a program (NX_FIXTURE_BIN).
 *
 * The expected tensor list below is written out again from the spec (§2.1,
 * §2.3, §2.4) rather than shared with the tool, so a wrong name or shape in
 * the tool cannot also be wrong here. Outputs go to one temp directory per
 * test program; each variant is generated once, on first use. */
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "base/fp16.h"
#include "io/safetensors.h"
#include "test.h"

/* The tiny preset (spec §1.2 names): H, I, V, Nh, Nkv, hd, Hk, Hv, Dk = Dv, Kc. */
enum { H = 128, I = 256, V = 512, NH = 4, NKV = 2, HD = 32, HK = 2, HV = 4, DK = 16, KC = 4 };
enum { KD = HK * DK, VD = HV * DK, CD = 2 * KD + VD };

static char g_root[1024];
static char g_err[512];

/* Runs the tool once per distinct `args`, into g_root/<tag>; returns the dir. */
static const char *fixture(const char *tag, const char *args) {
    static char dirs[4][1200];   /* rotating, so two results can be arguments of one call */
    static int k;
    char *dir = dirs[k = (k + 1) & 3];
    if (!g_root[0]) snprintf(g_root, sizeof g_root, "%s", nx_test_tmpdir("fixture"));
    snprintf(dir, sizeof dirs[0], "%s/%s", g_root, tag);
    if (access(dir, F_OK) != 0) {
        int rc = nx_test_system("'%s' --out '%s' %s", NX_FIXTURE_BIN, dir, args);
        CHECKF(rc == 0, "nextn-fixture %s exited %d", args, rc);
    }
    return dir;
}

static st_set *open_set(const char *dir) {
    st_set *s = NULL;
    nx_status st = st_open_dir(dir, &s, g_err, sizeof g_err);
    CHECKF(st == NX_OK, "%s", g_err);
    return s;
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = nx_test_read_file(a, &na), *y = nx_test_read_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static const char *path_in(const char *dir, const char *name) {
    static char p[2][1400];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* ---- The expected tensor list ------------------------------------------------- */

typedef struct {
    char name[160];
    nx_dtype dtype;
    int ndim;
    int64_t shape[3];
} want_t;

typedef struct {
    want_t w[256];
    int n;
    int mlx;
    nx_dtype dt;
} want_list;

/* The mlx-community name of an HF tensor (spec §2.4); mtp.* keeps its name. */
static void mlx_name(const char *hf, char *out, size_t n) {
    const char *P = "model.language_model.";
    if (strncmp(hf, P, strlen(P)) == 0) snprintf(out, n, "language_model.model.%s", hf + strlen(P));
    else if (strcmp(hf, "lm_head.weight") == 0) snprintf(out, n, "language_model.lm_head.weight");
    else snprintf(out, n, "%s", hf);
}

static void want(want_list *l, const char *hf, nx_dtype dt, int ndim, int64_t a, int64_t b, int64_t c) {
    want_t *w = &l->w[l->n++];
    if (l->mlx) mlx_name(hf, w->name, sizeof w->name);
    else snprintf(w->name, sizeof w->name, "%s", hf);
    w->dtype = dt;
    w->ndim = ndim;
    w->shape[0] = a;
    w->shape[1] = b;
    w->shape[2] = c;
}

static void want_attention_and_mlp(want_list *l, const char *pre) {
    char n[160];
    nx_dtype dt = l->dt;
#define N(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
    want(l, N("input_layernorm.weight"), dt, 1, H, 0, 0);
    want(l, N("post_attention_layernorm.weight"), dt, 1, H, 0, 0);
    want(l, N("self_attn.q_proj.weight"), dt, 2, 2 * NH * HD, H, 0);
    want(l, N("self_attn.k_proj.weight"), dt, 2, NKV * HD, H, 0);
    want(l, N("self_attn.v_proj.weight"), dt, 2, NKV * HD, H, 0);
    want(l, N("self_attn.o_proj.weight"), dt, 2, H, NH * HD, 0);
    want(l, N("self_attn.q_norm.weight"), dt, 1, HD, 0, 0);
    want(l, N("self_attn.k_norm.weight"), dt, 1, HD, 0, 0);
    want(l, N("mlp.gate_proj.weight"), dt, 2, I, H, 0);
    want(l, N("mlp.up_proj.weight"), dt, 2, I, H, 0);
    want(l, N("mlp.down_proj.weight"), dt, 2, H, I, 0);
}

static void want_tiny(want_list *l, int mlx, int tie, int mtp, nx_dtype dt) {
    char pre[64], n[160];
    l->n = 0;
    l->mlx = mlx;
    l->dt = dt;
    want(l, "model.language_model.embed_tokens.weight", dt, 2, V, H, 0);
    for (int i = 0; i < 4; i++) {
        snprintf(pre, sizeof pre, "model.language_model.layers.%d.", i);
        if (i == 3) { want_attention_and_mlp(l, pre); continue; }   /* 3:1 pattern: layer 3 is attention */
        want(l, N("input_layernorm.weight"), dt, 1, H, 0, 0);
        want(l, N("post_attention_layernorm.weight"), dt, 1, H, 0, 0);
        want(l, N("linear_attn.in_proj_qkv.weight"), dt, 2, CD, H, 0);
        want(l, N("linear_attn.in_proj_z.weight"), dt, 2, VD, H, 0);
        want(l, N("linear_attn.in_proj_b.weight"), dt, 2, HV, H, 0);
        want(l, N("linear_attn.in_proj_a.weight"), dt, 2, HV, H, 0);
        if (mlx) want(l, N("linear_attn.conv1d.weight"), dt, 3, CD, KC, 1);
        else want(l, N("linear_attn.conv1d.weight"), dt, 3, CD, 1, KC);
        want(l, N("linear_attn.dt_bias"), dt, 1, HV, 0, 0);
        want(l, N("linear_attn.A_log"), NX_DT_F32, 1, HV, 0, 0);
        want(l, N("linear_attn.norm.weight"), NX_DT_F32, 1, DK, 0, 0);
        want(l, N("linear_attn.out_proj.weight"), dt, 2, H, VD, 0);
        want(l, N("mlp.gate_proj.weight"), dt, 2, I, H, 0);
        want(l, N("mlp.up_proj.weight"), dt, 2, I, H, 0);
        want(l, N("mlp.down_proj.weight"), dt, 2, H, I, 0);
    }
#undef N
    want(l, "model.language_model.norm.weight", dt, 1, H, 0, 0);
    if (!tie) want(l, "lm_head.weight", dt, 2, V, H, 0);
    if (mtp) {
        want(l, "mtp.fc.weight", dt, 2, H, 2 * H, 0);
        want(l, "mtp.pre_fc_norm_embedding.weight", dt, 1, H, 0, 0);
        want(l, "mtp.pre_fc_norm_hidden.weight", dt, 1, H, 0, 0);
        want_attention_and_mlp(l, "mtp.layers.0.");
        want(l, "mtp.norm.weight", dt, 1, H, 0, 0);
    }
}

/* Every expected tensor is present with its dtype and shape, and nothing else. */
static void check_tensors(const st_set *s, const want_list *l, const char *what) {
    if (!s) return;
    CHECKF(st_count(s) == l->n, "%s: %d tensors, want %d", what, st_count(s), l->n);
    for (int i = 0; i < l->n; i++) {
        const want_t *w = &l->w[i];
        const st_tensor *t = st_find(s, w->name);
        CHECKF(t != NULL, "%s: missing %s", what, w->name);
        if (!t) continue;
        int ok = t->dtype == w->dtype && t->ndim == w->ndim;
        for (int d = 0; ok && d < w->ndim; d++) ok = t->shape[d] == w->shape[d];
        CHECKF(ok, "%s: %s is %s ndim %d [%lld, %lld, %lld]", what, w->name, nx_dtype_name(t->dtype), t->ndim,
               (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
               (long long)(t->ndim > 2 ? t->shape[2] : 0));
        /* the writer packs tensors without gaps: one of whole cache lines starts on one */
        CHECKF(t->nbytes % 64 || ((uintptr_t)t->data & 63) == 0, "%s: %s not 64-byte aligned", what, w->name);
        CHECKF((uintptr_t)t->data % nx_dtype_size(t->dtype) == 0, "%s: %s not aligned to its elements", what, w->name);
    }
}

static float value(const st_tensor *t, int64_t i) {
    if (t->dtype == NX_DT_F32) return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    return t->dtype == NX_DT_BF16 ? nx_bf16_to_f32(h) : nx_f16_to_f32(h);
}

static void mean_std(const st_tensor *t, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        double v = value(t, i);
        s += v;
        s2 += v * v;
    }
    *mean = s / (double)t->numel;
    *sd = sqrt(s2 / (double)t->numel - *mean * *mean);
}

/* ---- Tests ----------------------------------------------------------------------- */

static void same_seed_gives_identical_bytes_and_another_seed_differs(void) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s", fixture("seed1", "--seed 1"));
    snprintf(b, sizeof b, "%s", fixture("seed1_again", "--seed 1"));
    const char *c = fixture("seed2", "--seed 2");
    CHECK(same_file(path_in(a, "model.safetensors"), path_in(b, "model.safetensors")));
    CHECK(same_file(path_in(a, "config.json"), path_in(b, "config.json")));
    CHECK(same_file(path_in(a, "generation_config.json"), path_in(b, "generation_config.json")));
    CHECK(!same_file(path_in(a, "model.safetensors"), path_in(c, "model.safetensors")));
    CHECK(same_file(path_in(a, "config.json"), path_in(c, "config.json")));
    st_set *s1 = open_set(a), *s2 = open_set(c);
    for (int i = 0; s1 && s2 && i < st_count(s1); i++) {
        const st_tensor *t = st_at(s1, i), *u = st_find(s2, t->name);
        CHECKF(u && u->nbytes == t->nbytes && memcmp(t->data, u->data, t->nbytes) != 0, "%s same for seeds 1, 2",
               t->name);
    }
    st_close(s1);
    st_close(s2);
}

static void tiny_preset_has_every_hf_tensor_with_its_dtype_and_shape(void) {
    const char *dir = fixture("seed1", "--seed 1");
    st_set *s = open_set(dir);
    static want_list l;
    want_tiny(&l, 0, 0, 1, NX_DT_BF16);
    check_tensors(s, &l, "tiny hf");
    CHECK(s && st_metadata(s, "format") && strcmp(st_metadata(s, "format"), "pt") == 0);
    CHECK(st_file_count(s) == 1);
    st_close(s);
}

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    CHECKF(j != NULL, "%s: %s", path, e.text);
    return j;
}

static long long jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    CHECKF(json_is_integer(v), "%s is not an integer", key);
    return json_integer_value(v);
}

static void config_json_has_the_spec_fields(void) {
    const char *dir = fixture("seed1", "--seed 1");
    json_t *cfg = load_json(path_in(dir, "config.json"));
    json_t *tc = json_object_get(cfg, "text_config");
    CHECK(json_is_object(tc));
    if (!tc) { json_decref(cfg); return; }
    CHECK(strcmp(json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0)),
                 "Qwen3_5ForConditionalGeneration") == 0);
    CHECK(strcmp(json_string_value(json_object_get(cfg, "model_type")), "qwen3_5") == 0);
    CHECK(json_is_false(json_object_get(cfg, "tie_word_embeddings")));
    CHECK(strcmp(json_string_value(json_object_get(tc, "model_type")), "qwen3_5_text") == 0);
    CHECK(jint(tc, "hidden_size") == H && jint(tc, "num_hidden_layers") == 4 && jint(tc, "intermediate_size") == I);
    CHECK(jint(tc, "vocab_size") == V && jint(tc, "num_attention_heads") == NH);
    CHECK(jint(tc, "num_key_value_heads") == NKV && jint(tc, "head_dim") == HD);
    CHECK(jint(tc, "linear_num_key_heads") == HK && jint(tc, "linear_num_value_heads") == HV);
    CHECK(jint(tc, "linear_key_head_dim") == DK && jint(tc, "linear_value_head_dim") == DK);
    CHECK(jint(tc, "linear_conv_kernel_dim") == KC && jint(tc, "full_attention_interval") == 4);
    CHECK(jint(tc, "max_position_embeddings") == 262144 && jint(tc, "mtp_num_hidden_layers") == 1);
    CHECK(jint(tc, "eos_token_id") == V - 1);
    CHECK(json_is_false(json_object_get(tc, "attention_bias")));
    CHECK(json_is_true(json_object_get(tc, "attn_output_gate")));
    CHECK(json_is_false(json_object_get(tc, "tie_word_embeddings")));
    CHECK(json_is_false(json_object_get(tc, "mtp_use_dedicated_embeddings")));
    CHECK(strcmp(json_string_value(json_object_get(tc, "hidden_act")), "silu") == 0);
    CHECK(strcmp(json_string_value(json_object_get(tc, "mamba_ssm_dtype")), "float32") == 0);
    CHECK(strcmp(json_string_value(json_object_get(tc, "dtype")), "bfloat16") == 0);
    CHECK(json_real_value(json_object_get(tc, "rms_norm_eps")) == 1e-6);
    json_t *lt = json_object_get(tc, "layer_types");
    CHECK(json_array_size(lt) == 4);
    for (size_t i = 0; i < json_array_size(lt); i++)
        CHECK(strcmp(json_string_value(json_array_get(lt, i)), i == 3 ? "full_attention" : "linear_attention") == 0);
    json_t *rp = json_object_get(tc, "rope_parameters");
    CHECK(strcmp(json_string_value(json_object_get(rp, "rope_type")), "default") == 0);
    CHECK(json_real_value(json_object_get(rp, "rope_theta")) == 1e7);
    CHECK(json_real_value(json_object_get(rp, "partial_rotary_factor")) == 0.25);
    /* mRoPE's sections split the rotary pairs: HD * 0.25 / 2 = 4 here
     * ([11, 11, 10] at the real head_dim 256) */
    json_t *ms = json_object_get(rp, "mrope_section");
    CHECKF(json_array_size(ms) == 3 && json_integer_value(json_array_get(ms, 0)) == 2 &&
               json_integer_value(json_array_get(ms, 1)) == 1 && json_integer_value(json_array_get(ms, 2)) == 1,
           "mrope_section of %d rotary pairs", HD / 8);
    CHECK(json_is_true(json_object_get(rp, "mrope_interleaved")));
    CHECK(json_object_get(tc, "bos_token_id") == NULL);
    json_decref(cfg);
    json_t *gen = load_json(path_in(dir, "generation_config.json"));
    json_t *eos = json_object_get(gen, "eos_token_id");
    CHECK(json_array_size(eos) == 1 && json_integer_value(json_array_get(eos, 0)) == V - 1);
    json_decref(gen);
}

static void values_follow_their_distributions(void) {
    st_set *s = open_set(fixture("seed1", "--seed 1"));
    if (!s) return;
    double m, sd;
    const st_tensor *t = st_find(s, "model.language_model.embed_tokens.weight");
    mean_std(t, &m, &sd);
    CHECKF(fabs(m) < 0.01 && fabs(sd - 0.25) < 0.01, "embed mean %g std %g", m, sd);
    t = st_find(s, "model.language_model.layers.0.linear_attn.in_proj_qkv.weight");
    mean_std(t, &m, &sd);
    CHECKF(fabs(sd - 1.0 / sqrt(H)) < 0.005, "in_proj_qkv std %g", sd);
    t = st_find(s, "model.language_model.layers.3.self_attn.o_proj.weight");
    mean_std(t, &m, &sd);
    CHECKF(fabs(sd - 0.5 / sqrt(NH * HD)) < 0.005, "o_proj std %g", sd);
    t = st_find(s, "model.language_model.layers.0.linear_attn.norm.weight");
    mean_std(t, &m, &sd);
    CHECKF(fabs(m - 1.0) < 0.1 && sd > 0.02 && sd < 0.3, "linear_attn.norm mean %g std %g", m, sd);
    t = st_find(s, "model.language_model.norm.weight");
    mean_std(t, &m, &sd);
    CHECKF(fabs(m) < 0.05 && fabs(sd - 0.1) < 0.03, "final norm mean %g std %g", m, sd);
    for (int l = 0; l < 3; l++) {
        char n[128];
        snprintf(n, sizeof n, "model.language_model.layers.%d.linear_attn.A_log", l);
        t = st_find(s, n);
        for (int64_t i = 0; t && i < t->numel; i++)
            CHECKF(value(t, i) >= 0.0f && value(t, i) <= logf(16.0f) + 1e-6f, "%s[%lld] = %g", n, (long long)i,
                   value(t, i));
    }
    st_close(s);
}

static void sharded_output_holds_the_same_tensors_as_one_file(void) {
    st_set *one = open_set(fixture("seed1", "--seed 1"));
    const char *dir = fixture("shards3", "--seed 1 --shards 3");
    CHECK(access(path_in(dir, "model.safetensors.index.json"), F_OK) == 0);
    CHECK(access(path_in(dir, "model.safetensors"), F_OK) != 0);
    st_set *three = open_set(dir);
    if (!one || !three) { st_close(one); st_close(three); return; }
    CHECK(st_file_count(three) == 3 && st_count(three) == st_count(one));
    CHECK(strstr(st_file_path(three, 0), "model-00001-of-00003.safetensors") != NULL);
    CHECK(strstr(st_file_path(three, 2), "model-00003-of-00003.safetensors") != NULL);
    int per_file[3] = {0};
    size_t total = 0;
    for (int i = 0; i < st_count(one); i++) {
        const st_tensor *t = st_at(one, i), *u = st_find(three, t->name);
        CHECKF(u && u->dtype == t->dtype && u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0,
               "%s differs between the single file and the shards", t->name);
        for (int f = 0; u && f < 3; f++) per_file[f] += u->file == st_file_path(three, f);
        total += t->nbytes;
    }
    CHECKF(per_file[0] > 0 && per_file[1] > 0 && per_file[2] > 0, "shard sizes %d %d %d", per_file[0],
           per_file[1], per_file[2]);
    json_t *idx = load_json(path_in(dir, "model.safetensors.index.json"));
    CHECK(jint(json_object_get(idx, "metadata"), "total_size") == (long long)total);
    CHECK(json_object_size(json_object_get(idx, "weight_map")) == (size_t)st_count(one));
    json_decref(idx);
    st_close(one);
    st_close(three);
}

/* The mlx file against the hf file of the same seed: renamed keys, conv
 * [CD, Kc, 1] with the same bytes, zero-centred norms stored as 1 + w (exact in
 * f32, within bf16 rounding in bf16), and mtp.* untouched. */
static void check_mlx_against_hf(const char *hf_dir, const char *mlx_dir, nx_dtype dt) {
    st_set *hf = open_set(hf_dir), *mx = open_set(mlx_dir);
    static want_list l;
    want_tiny(&l, 1, 0, 1, dt);
    check_tensors(mx, &l, dt == NX_DT_F32 ? "mlx f32" : "mlx bf16");
    if (!hf || !mx) { st_close(hf); st_close(mx); return; }
    CHECK(st_metadata(mx, "format") && strcmp(st_metadata(mx, "format"), "mlx") == 0);
    /* bf16: |bf16(1 + w) - (1 + bf16(w))| <= half an ulp at 1..2 plus half an ulp of w */
    const float tol = dt == NX_DT_F32 ? 0.0f : 0.0040f + 0.0010f;
    int shifted = 0;
    for (int i = 0; i < st_count(hf); i++) {
        const st_tensor *t = st_at(hf, i);
        char name[200];
        const char *P = "model.language_model.";
        mlx_name(t->name, name, sizeof name);
        const st_tensor *u = st_find(mx, name);
        CHECKF(u != NULL, "mlx lacks %s", name);
        if (!u) continue;
        int zero_centred = strncmp(t->name, P, strlen(P)) == 0 &&
                           (strstr(t->name, "layernorm.weight") || strstr(t->name, "q_norm.weight") ||
                            strstr(t->name, "k_norm.weight") || strcmp(t->name + strlen(P), "norm.weight") == 0);
        if (!zero_centred) {
            CHECKF(u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0, "%s bytes differ", name);
            continue;
        }
        shifted++;
        float worst = 0;
        for (int64_t k = 0; k < t->numel; k++) {
            float d = fabsf(value(u, k) - (1.0f + value(t, k)));
            if (d > worst) worst = d;
        }
        CHECKF(worst <= tol, "%s: |mlx - (1 + hf)| up to %g", name, worst);
    }
    CHECKF(shifted == 4 * 2 + 2 + 1, "%d norms shifted, want 11", shifted);   /* 2 per layer, q/k norm, final */
    st_close(hf);
    st_close(mx);
}

static void mlx_layout_renames_keys_and_stores_one_plus_norms(void) {
    check_mlx_against_hf(fixture("seed1", "--seed 1"), fixture("mlx", "--seed 1 --layout mlx"), NX_DT_BF16);
    check_mlx_against_hf(fixture("f32", "--seed 1 --dtype f32"),
                         fixture("mlx_f32", "--seed 1 --layout mlx --dtype f32"), NX_DT_F32);
}

static void dtype_tie_and_mtp_flags_change_only_what_they_name(void) {
    static want_list l;
    st_set *f32 = open_set(fixture("f32", "--seed 1 --dtype f32"));
    st_set *f16 = open_set(fixture("f16", "--seed 1 --dtype f16"));
    st_set *bf = open_set(fixture("seed1", "--seed 1"));
    want_tiny(&l, 0, 0, 1, NX_DT_F32);
    check_tensors(f32, &l, "f32");
    want_tiny(&l, 0, 0, 1, NX_DT_F16);
    check_tensors(f16, &l, "f16");
    /* The 16-bit files are the f32 values rounded, element by element. */
    int bad = 0;
    for (int i = 0; f32 && f16 && bf && i < st_count(f32); i++) {
        const st_tensor *t = st_at(f32, i), *h = st_find(f16, t->name), *b = st_find(bf, t->name);
        if (!h || !b || t->dtype != NX_DT_F32) continue;
        if (h->dtype == NX_DT_F32) {   /* A_log and the GDN norm stay f32 in every file */
            bad += memcmp(h->data, t->data, t->nbytes) != 0 || memcmp(b->data, t->data, t->nbytes) != 0;
            continue;
        }
        const float *x = t->data;
        for (int64_t k = 0; k < t->numel; k++) {
            bad += ((const uint16_t *)h->data)[k] != nx_f32_to_f16(x[k]);
            bad += ((const uint16_t *)b->data)[k] != nx_f32_to_bf16(x[k]);
        }
    }
    CHECKF(bad == 0, "%d values are not the rounded f32 values", bad);
    st_close(f32);
    st_close(f16);
    st_close(bf);

    st_set *s = open_set(fixture("tie_nomtp", "--seed 1 --tie --no-mtp"));
    want_tiny(&l, 0, 1, 0, NX_DT_BF16);
    check_tensors(s, &l, "--tie --no-mtp");
    st_set *ref = open_set(fixture("seed1", "--seed 1"));
    const char *e = "model.language_model.embed_tokens.weight";
    CHECK(s && ref && memcmp(st_find(s, e)->data, st_find(ref, e)->data, st_find(ref, e)->nbytes) == 0);
    st_close(s);
    st_close(ref);
    json_t *cfg = load_json(path_in(fixture("tie_nomtp", ""), "config.json"));
    CHECK(json_is_true(json_object_get(cfg, "tie_word_embeddings")));
    CHECK(json_is_true(json_object_get(json_object_get(cfg, "text_config"), "tie_word_embeddings")));
    json_decref(cfg);
}

static void overrides_keep_the_three_to_one_layer_pattern(void) {
    st_set *s = open_set(fixture("override", "--vocab 1000 --hidden 64 --layers 9"));
    if (!s) return;
    const st_tensor *t = st_find(s, "model.language_model.embed_tokens.weight");
    CHECK(t && t->shape[0] == 1000 && t->shape[1] == 64);
    for (int i = 0; i < 9; i++) {
        char n[128];
        snprintf(n, sizeof n, "model.language_model.layers.%d.self_attn.q_proj.weight", i);
        int full = (i + 1) % 4 == 0;
        CHECKF((st_find(s, n) != NULL) == full, "layer %d attention: %d", i, !full);
        snprintf(n, sizeof n, "model.language_model.layers.%d.linear_attn.in_proj_qkv.weight", i);
        CHECKF((st_find(s, n) != NULL) == !full, "layer %d GDN", i);
    }
    t = st_find(s, "mtp.fc.weight");
    CHECK(t && t->shape[0] == 64 && t->shape[1] == 128);
    st_close(s);
    json_t *cfg = load_json(path_in(fixture("override", ""), "config.json"));
    json_t *tc = json_object_get(cfg, "text_config");
    CHECK(jint(tc, "vocab_size") == 1000 && jint(tc, "hidden_size") == 64 && jint(tc, "num_hidden_layers") == 9);
    CHECK(jint(tc, "eos_token_id") == 999 && json_array_size(json_object_get(tc, "layer_types")) == 9);
    json_decref(cfg);
}

/* A decoder tensor's expected shape: name after "model.language_model.layers.",
 * then its dimensions (b, c: ignored past the tensor's rank). */
typedef struct {
    const char *n;
    int64_t a, b, c;
} layer_shape;

/* Each tensor of w is in s with its shape, in bf16 (the GDN gate norm's
 * weight in f32, as the HF files keep it). */
static void check_layer_shapes(const st_set *s, const layer_shape *w, size_t count) {
    for (size_t i = 0; i < count; i++) {
        char n[160];
        snprintf(n, sizeof n, "model.language_model.layers.%s", w[i].n);
        const st_tensor *t = st_find(s, n);
        CHECKF(t && t->dtype == (strstr(n, "linear_attn.norm") ? NX_DT_F32 : NX_DT_BF16) && t->shape[0] == w[i].a &&
                   (t->ndim < 2 || t->shape[1] == w[i].b) && (t->ndim < 3 || t->shape[2] == w[i].c),
               "%s", n);
    }
}

/* A preset's geometry, as its config and tensors must show it, with the
 * flags that shrink what the test writes (few layers, a small vocabulary,
 * and for the wider presets a narrow hidden size: ~200 MB for the 0.8B,
 * ~60 MB for the others; each output is removed afterwards). */
typedef struct {
    const char *preset, *args;
    int tied, hidden, inter, heads, kv_heads, lk_heads, lv_heads;
    layer_shape w[12];
} preset_case;

static const preset_case preset_cases[] = {
    {"qwen3.5-0.8b-shape", "--layers 4 --vocab 1024", 1, 1024, 3584, 8, 2, 16, 16,
     {{"0.linear_attn.in_proj_qkv.weight", 6144, 1024, 0}, {"0.linear_attn.in_proj_z.weight", 2048, 1024, 0},
      {"0.linear_attn.in_proj_b.weight", 16, 1024, 0},     {"0.linear_attn.conv1d.weight", 6144, 1, 4},
      {"0.linear_attn.norm.weight", 128, 0, 0},            {"0.linear_attn.out_proj.weight", 1024, 2048, 0},
      {"3.self_attn.q_proj.weight", 4096, 1024, 0},        {"3.self_attn.k_proj.weight", 512, 1024, 0},
      {"3.self_attn.o_proj.weight", 1024, 2048, 0},        {"3.self_attn.q_norm.weight", 256, 0, 0},
      {"1.mlp.gate_proj.weight", 3584, 1024, 0},           {"1.mlp.down_proj.weight", 1024, 3584, 0}}},
    /* The 0.8B's heads and a wider MLP. */
    {"qwen3.5-2b-shape", "--layers 4 --vocab 1024 --hidden 128", 1, 128, 6144, 8, 2, 16, 16,
     {{"0.linear_attn.in_proj_qkv.weight", 6144, 128, 0}, {"0.linear_attn.in_proj_a.weight", 16, 128, 0},
      {"0.linear_attn.out_proj.weight", 128, 2048, 0},    {"3.self_attn.q_proj.weight", 4096, 128, 0},
      {"3.self_attn.v_proj.weight", 512, 128, 0},         {"3.self_attn.o_proj.weight", 128, 2048, 0},
      {"2.mlp.up_proj.weight", 6144, 128, 0},             {"2.mlp.down_proj.weight", 128, 6144, 0}}},
    /* Two value heads a key head, untied. */
    {"qwen3.5-4b-shape", "--layers 4 --vocab 1024 --hidden 128", 0, 128, 9216, 16, 4, 16, 32,
     {{"0.linear_attn.in_proj_qkv.weight", 8192, 128, 0}, {"0.linear_attn.in_proj_z.weight", 4096, 128, 0},
      {"0.linear_attn.in_proj_a.weight", 32, 128, 0},     {"0.linear_attn.conv1d.weight", 8192, 1, 4},
      {"0.linear_attn.out_proj.weight", 128, 4096, 0},    {"3.self_attn.q_proj.weight", 8192, 128, 0},
      {"3.self_attn.v_proj.weight", 1024, 128, 0},        {"3.self_attn.o_proj.weight", 128, 4096, 0},
      {"2.mlp.up_proj.weight", 9216, 128, 0},             {"2.mlp.down_proj.weight", 128, 9216, 0}}},
};

static void presets_have_their_geometry(void) {
    for (size_t i = 0; i < sizeof preset_cases / sizeof preset_cases[0]; i++) {
        const preset_case *pc = &preset_cases[i];
        char args[160];
        snprintf(args, sizeof args, "--preset %s %s", pc->preset, pc->args);
        const char *dir = fixture(pc->preset, args);
        st_set *s = open_set(dir);
        if (s) {
            size_t count = 0;
            while (count < sizeof pc->w / sizeof pc->w[0] && pc->w[count].n) count++;
            check_layer_shapes(s, pc->w, count);
            CHECKF((st_find(s, "lm_head.weight") == NULL) == pc->tied, "%s", pc->preset);
            CHECKF(st_find(s, "mtp.layers.0.self_attn.q_proj.weight") != NULL, "%s", pc->preset);
            st_close(s);
        }
        json_t *cfg = load_json(path_in(dir, "config.json"));
        json_t *tc = json_object_get(cfg, "text_config");
        json_t *tie = json_object_get(cfg, "tie_word_embeddings");
        CHECKF(json_is_boolean(tie) && json_is_true(tie) == pc->tied, "%s", pc->preset);
        CHECKF(jint(tc, "hidden_size") == pc->hidden && jint(tc, "intermediate_size") == pc->inter, "%s", pc->preset);
        CHECKF(jint(tc, "num_attention_heads") == pc->heads && jint(tc, "num_key_value_heads") == pc->kv_heads,
               "%s", pc->preset);
        CHECKF(jint(tc, "linear_num_key_heads") == pc->lk_heads && jint(tc, "linear_num_value_heads") == pc->lv_heads,
               "%s", pc->preset);
        json_decref(cfg);
        nx_test_system("rm -rf '%s'", dir);
    }
}

static void bad_usage_exits_2_and_help_exits_0(void) {
    if (!g_root[0]) snprintf(g_root, sizeof g_root, "%s", nx_test_tmpdir("fixture"));
    static const char *const bad[] = {
        "",  "--out",  "--out X --preset huge",  "--out X --dtype f64",  "--out X --layout gguf",
        "--out X --shards 0",  "--out X --shards 1000",  "--out X --seed abc",  "--out X --seed -1",
        "--out X --vocab 1",  "--out X --hidden 0",  "--out X --layers 0",  "--out X --layers 4x",
        "--out X --frobnicate",  "--out X --layers 513",  "--out X --seed ' 1'",  "--out X --vocab ' 64'",
        "--out X --vocab +64",  "--out X --copy-head ' 0.1'",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = nx_test_system("cd '%s' && '%s' %s 2>/dev/null", g_root, NX_FIXTURE_BIN, bad[i]);
        CHECKF(rc == 2, "'%s' exited %d, want 2", bad[i], rc);
    }
    CHECK(access(path_in(g_root, "X"), F_OK) != 0);   /* bad usage writes nothing */
    /* The error is one line. */
    int rc = nx_test_system("test $('%s' --dtype f64 2>&1 >/dev/null | wc -l) -eq 1", NX_FIXTURE_BIN);
    CHECK(rc == 0);
    CHECK(nx_test_system("'%s' --help >/dev/null", NX_FIXTURE_BIN) == 0);
    /* A run that cannot write is a failure (1), not a usage error. */
    CHECK(nx_test_write_file(path_in(g_root, "plainfile"), "x", 1) == 0);
    rc = nx_test_system("'%s' --out '%s/plainfile/sub' 2>/dev/null", NX_FIXTURE_BIN, g_root);
    CHECKF(rc == 1, "unwritable --out exited %d", rc);
}

/* ---- Where the MTP head goes (--mtp-layout) --------------------------------------- */

/* The head's tensors under prefix ("mtp.", "" or "language_model.mtp."), spec §2.3. */
static void want_head(want_list *l, const char *prefix, nx_dtype dt) {
    char n[160], pre[64];
    l->dt = dt;
#define N(s) (snprintf(n, sizeof n, "%s%s", prefix, s), n)
    want(l, N("fc.weight"), dt, 2, H, 2 * H, 0);
    want(l, N("pre_fc_norm_embedding.weight"), dt, 1, H, 0, 0);
    want(l, N("pre_fc_norm_hidden.weight"), dt, 1, H, 0, 0);
    snprintf(pre, sizeof pre, "%slayers.0.", prefix);
    want_attention_and_mlp(l, pre);
    want(l, N("norm.weight"), dt, 1, H, 0, 0);
#undef N
}

/* The zero-centred norms of the head (spec §2.4: the ones mlx-vlm's drafter
 * stores as 1 + w), by their name below the prefix. */
static int head_norm_is_shifted(const char *key) {
    static const char *const norms[] = {
        "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "layers.0.input_layernorm.weight",
        "layers.0.post_attention_layernorm.weight", "layers.0.self_attn.q_norm.weight",
        "layers.0.self_attn.k_norm.weight", "norm.weight",
    };
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
        if (strcmp(key, norms[i]) == 0) return 1;
    return 0;
}

/* The head in `got` (keys under prefix) against the raw head of the inline
 * output of the same seed: same bytes, except the seven zero-centred norms,
 * which are 1 + w when `shifted` (exact in f32, within bf16 rounding). */
static void check_head_values(const st_set *raw, const st_set *got, const char *prefix, int shifted, nx_dtype dt,
                              const char *what) {
    if (!raw || !got) return;
    const float tol = dt == NX_DT_F32 ? 0.0f : 0.0040f + 0.0010f;   /* as for the mlx target's norms */
    int n_head = 0, n_shifted = 0;
    for (int i = 0; i < st_count(raw); i++) {
        const st_tensor *t = st_at(raw, i);
        if (strncmp(t->name, "mtp.", 4) != 0) continue;
        n_head++;
        char name[200];
        snprintf(name, sizeof name, "%s%s", prefix, t->name + 4);
        const st_tensor *u = st_find(got, name);
        CHECKF(u != NULL, "%s lacks %s", what, name);
        if (!u) continue;
        if (!shifted || !head_norm_is_shifted(t->name + 4)) {
            CHECKF(u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0, "%s: %s bytes differ", what, name);
            continue;
        }
        n_shifted++;
        float worst = 0;
        for (int64_t k = 0; k < t->numel; k++) {
            float d = fabsf(value(u, k) - (1.0f + value(t, k)));
            if (d > worst) worst = d;
        }
        CHECKF(worst <= tol, "%s: %s: |got - (1 + raw)| up to %g", what, name, worst);
    }
    CHECKF(n_head == 15, "%s: the inline head has %d tensors, want 15", what, n_head);
    CHECKF(n_shifted == (shifted ? 7 : 0), "%s: %d norms shifted", what, n_shifted);
}

static void check_separate_drafter(const char *inline_dir, const char *sep_dir, nx_dtype dt) {
    static want_list l;
    const char *what = dt == NX_DT_F32 ? "separate f32" : "separate bf16";
    /* the target: everything but the head */
    st_set *target = open_set(sep_dir);
    want_tiny(&l, 0, 0, 0, dt);
    check_tensors(target, &l, what);
    CHECK(access(path_in(sep_dir, "mtp.safetensors"), F_OK) != 0);
    /* the drafter: one model.safetensors with bare keys, +1 norms */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/mtp-drafter", sep_dir);
    CHECK(access(path_in(dir, "model.safetensors"), F_OK) == 0);
    st_set *head = open_set(dir), *raw = open_set(inline_dir);
    l.n = 0;
    l.mlx = 0;
    want_head(&l, "", dt);
    check_tensors(head, &l, what);
    CHECK(head && st_file_count(head) == 1);
    CHECK(head && st_metadata(head, "format") && strcmp(st_metadata(head, "format"), "mlx") == 0);
    check_head_values(raw, head, "", 1, dt, what);
    /* config.json as MTPSplitter writes it (spec §1.4) */
    json_t *cfg = load_json(path_in(dir, "config.json"));
    json_t *tcfg = load_json(path_in(sep_dir, "config.json"));
    CHECK(cfg && json_object_size(cfg) == 4);
    CHECK(strcmp(json_string_value(json_object_get(cfg, "model_type")), "qwen3_5_mtp") == 0);
    CHECK(jint(cfg, "block_size") == 3);
    CHECK(json_is_false(json_object_get(cfg, "tie_word_embeddings")));
    CHECK(json_equal(json_object_get(cfg, "text_config"), json_object_get(tcfg, "text_config")));
    json_decref(cfg);
    json_decref(tcfg);
    st_close(target);
    st_close(head);
    st_close(raw);
}

static void separate_mtp_layout_writes_an_mlx_vlm_drafter_directory(void) {
    check_separate_drafter(fixture("seed1", "--seed 1"), fixture("sep", "--seed 1 --mtp-layout separate"), NX_DT_BF16);
    check_separate_drafter(fixture("f32", "--seed 1 --dtype f32"),
                           fixture("sep_f32", "--seed 1 --dtype f32 --mtp-layout separate"), NX_DT_F32);
    /* tied: the drafter's tie_word_embeddings follows the target */
    json_t *cfg = load_json(path_in(fixture("sep_tie", "--seed 1 --tie --mtp-layout separate"), "mtp-drafter/config.json"));
    CHECK(json_is_true(json_object_get(cfg, "tie_word_embeddings")));
    CHECK(json_is_true(json_object_get(json_object_get(cfg, "text_config"), "tie_word_embeddings")));
    json_decref(cfg);
}

static void file_and_mlx_inline_mtp_layouts_hold_the_same_head(void) {
    static want_list l;
    st_set *raw = open_set(fixture("f32", "--seed 1 --dtype f32"));
    /* file: the target without the head, mtp.safetensors with the raw keys and values */
    const char *dir = fixture("file_f32", "--seed 1 --dtype f32 --mtp-layout file");
    st_set *target = open_set(dir);
    want_tiny(&l, 0, 0, 0, NX_DT_F32);
    check_tensors(target, &l, "file target");
    st_set *file = NULL;
    nx_status st = st_open_file(path_in(dir, "mtp.safetensors"), &file, g_err, sizeof g_err);
    CHECKF(st == NX_OK, "%s", g_err);
    l.n = 0;
    l.mlx = 0;
    want_head(&l, "mtp.", NX_DT_F32);
    check_tensors(file, &l, "mtp.safetensors");
    check_head_values(raw, file, "mtp.", 0, NX_DT_F32, "mtp.safetensors");
    CHECK(access(path_in(dir, "mtp-drafter"), F_OK) != 0);
    st_close(target);
    st_close(file);
    /* mlx-inline: the mlx target plus language_model.mtp.*, norms shifted */
    st_set *mx = open_set(fixture("mlxi_f32", "--seed 1 --dtype f32 --layout mlx --mtp-layout mlx-inline"));
    want_tiny(&l, 1, 0, 0, NX_DT_F32);
    want_head(&l, "language_model.mtp.", NX_DT_F32);
    check_tensors(mx, &l, "mlx-inline");
    check_head_values(raw, mx, "language_model.mtp.", 1, NX_DT_F32, "mlx-inline");
    /* and the rest of the target is the plain mlx output, byte for byte */
    st_set *plain = open_set(fixture("mlx_f32", "--seed 1 --layout mlx --dtype f32"));
    for (int i = 0; mx && plain && i < st_count(plain); i++) {
        const st_tensor *t = st_at(plain, i), *u = st_find(mx, t->name);
        if (strncmp(t->name, "mtp.", 4) == 0) continue;
        CHECKF(u && u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0, "mlx-inline: %s differs",
               t->name);
    }
    st_close(mx);
    st_close(plain);
    st_close(raw);
}

static void mtp_layout_misuse_exits_2(void) {
    if (!g_root[0]) snprintf(g_root, sizeof g_root, "%s", nx_test_tmpdir("fixture"));
    static const char *const bad[] = {
        "--out Y --mtp-layout mlx-inline",             /* needs --layout mlx */
        "--out Y --layout hf --mtp-layout mlx-inline",
        "--out Y --no-mtp --mtp-layout separate",      /* contradict */
        "--out Y --mtp-layout inline --no-mtp",
        "--out Y --mtp-layout sideways",
        "--out Y --mtp-layout",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = nx_test_system("cd '%s' && '%s' %s 2>/dev/null", g_root, NX_FIXTURE_BIN, bad[i]);
        CHECKF(rc == 2, "'%s' exited %d, want 2", bad[i], rc);
        rc = nx_test_system("cd '%s' && test $('%s' %s 2>&1 >/dev/null | wc -l) -eq 1", g_root, NX_FIXTURE_BIN, bad[i]);
        CHECKF(rc == 0, "'%s': the error is not one line", bad[i]);
    }
    CHECK(access(path_in(g_root, "Y"), F_OK) != 0);
    CHECK(nx_test_system("'%s' --help | grep -q -- '--mtp-layout inline|separate|mlx-inline|file'", NX_FIXTURE_BIN) == 0);
}

/* ---- The copy fixture (--copy-head S, golden README "copy fixtures") ---------------- */

/* `nextn generate` on dir (the brief's command plus `extra`), its --json
 * output parsed; NULL (and a failure) when it did not run or parse. */
static json_t *generate_json(const char *dir, const char *extra) {
    char out[1400];
    snprintf(out, sizeof out, "%s.gen.json", dir);
    int rc = nx_test_system("'%s' generate -m '%s' --prompt-ids 1,2,3 -n 40 --ignore-eos --json %s > '%s'", NX_NEXTN_BIN,
                            dir, extra, out);
    CHECKF(rc == 0, "nextn generate -m %s %s exited %d", dir, extra, rc);
    if (rc != 0) return NULL;
    json_error_t e;
    json_t *j = json_load_file(out, 0, &e);
    CHECKF(j != NULL, "generate %s: %s", extra, e.text);
    return j;
}

static json_t *mtp_stats(json_t *gen, const char *what) {
    json_t *m = json_object_get(gen, "mtp");
    CHECKF(json_is_object(m) && json_is_integer(json_object_get(m, "drafted")) &&
               json_is_integer(json_object_get(m, "accepted")),
           "%s: no mtp {drafted, accepted} in the --json output", what);
    return json_is_object(m) ? m : NULL;
}

/* The head is the copy head: fc = [I | 0], pre_fc_norm_embedding 0 (1 when
 * stored +1-shifted), o_proj / down_proj zero, mtp.norm = model.norm in
 * effect; and the target's output projections are zero (S = 0). */
static void check_copy_tensors(const char *dir, const char *mtp_prefix, int shifted, const char *what) {
    st_set *s = open_set(dir);
    if (!s) return;
    char n[200];
#define T(suffix) (snprintf(n, sizeof n, "%s%s", mtp_prefix, suffix), st_find(s, n))
    const st_tensor *fc = T("fc.weight");
    int ok = fc && fc->ndim == 2 && fc->shape[0] == H && fc->shape[1] == 2 * H;
    for (int64_t i = 0; ok && i < fc->numel; i++) ok = value(fc, i) == (i % (2 * H) == i / (2 * H) ? 1.0f : 0.0f);
    CHECKF(ok, "%s: %sfc.weight is not [I | 0]", what, mtp_prefix);
    const st_tensor *pe = T("pre_fc_norm_embedding.weight");
    ok = pe != NULL;
    for (int64_t i = 0; ok && i < pe->numel; i++) ok = value(pe, i) == (shifted ? 1.0f : 0.0f);
    CHECKF(ok, "%s: pre_fc_norm_embedding is not %d", what, shifted);
    const st_tensor *z[] = {T("layers.0.self_attn.o_proj.weight"), T("layers.0.mlp.down_proj.weight"),
                            st_find(s, "model.language_model.layers.3.self_attn.o_proj.weight"),
                            st_find(s, "model.language_model.layers.0.linear_attn.out_proj.weight"),
                            st_find(s, "model.language_model.layers.1.mlp.down_proj.weight"),
                            st_find(s, "language_model.model.layers.3.self_attn.o_proj.weight"),
                            st_find(s, "language_model.model.layers.0.linear_attn.out_proj.weight")};
    for (size_t k = 0; k < sizeof z / sizeof z[0]; k++)
        for (int64_t i = 0; z[k] && i < z[k]->numel; i++)
            if (value(z[k], i) != 0.0f) { CHECKF(0, "%s: %s is not zero", what, z[k]->name); break; }
    CHECKF(z[0] && z[1] && (z[2] || z[5]), "%s: output projections missing", what);
    const st_tensor *mn = T("norm.weight"), *tn = st_find(s, "model.language_model.norm.weight");
    int target_shifted = tn == NULL;
    if (!tn) tn = st_find(s, "language_model.model.norm.weight");
    ok = mn && tn && mn->numel == H && tn->numel == H;
    for (int64_t i = 0; ok && i < H; i++)   /* effective weights equal, exactly */
        ok = value(mn, i) + (shifted ? 0.0f : 1.0f) == value(tn, i) + (target_shifted ? 0.0f : 1.0f);
    CHECKF(ok, "%s: mtp.norm is not model.norm in effect", what);
#undef T
    st_close(s);
}

static void copy_head_0_drafts_are_all_accepted(void) {
    static const struct { const char *tag, *args, *prefix; int shifted; } v[] = {
        {"copy0", "--copy-head 0", "mtp.", 0},
        {"copy0_mlx", "--copy-head 0 --layout mlx", "mtp.", 0},   /* +1 target norm, raw head norm */
        {"copy0_mlxi", "--copy-head 0 --layout mlx --mtp-layout mlx-inline", "language_model.mtp.", 1},
        {"copy0_f32_tie", "--copy-head 0 --dtype f32 --tie --seed 5", "mtp.", 0},
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        const char *dir = fixture(v[k].tag, v[k].args);
        check_copy_tensors(dir, v[k].prefix, v[k].shifted, v[k].args);
        /* the head as stored: the default 4-bit draft copy of the LM head
         * would make drafts that the exact head does not */
        json_t *gen = generate_json(dir, "--draft 2 --draft-head-bits 0");
        json_t *m = mtp_stats(gen, v[k].args);
        if (m) {
            long long drafted = jint(m, "drafted"), accepted = jint(m, "accepted");
            CHECKF(drafted > 0 && accepted == drafted, "%s: accepted %lld of %lld drafts, want all", v[k].args, accepted,
                   drafted);
        }
        json_decref(gen);
    }
}

static void copy_head_0_05_is_lossless_against_plain_decoding(void) {
    const char *dir = fixture("copy005", "--copy-head 0.05");
    json_t *spec = generate_json(dir, "--draft 2"), *plain = generate_json(dir, "--mtp off");
    json_t *m = mtp_stats(spec, "--copy-head 0.05");
    if (m) {
        long long drafted = jint(m, "drafted"), accepted = jint(m, "accepted");
        CHECKF(drafted > 0 && accepted >= 0 && accepted <= drafted, "accepted %lld of %lld", accepted, drafted);
    }
    json_t *a = json_object_get(spec, "ids"), *b = json_object_get(plain, "ids");
    CHECKF(json_array_size(a) == 40 && json_equal(a, b), "--copy-head 0.05: the ids with MTP differ from --mtp off");
    json_decref(spec);
    json_decref(plain);
    /* S scales the target's output projections and nothing else */
    st_set *s = open_set(dir), *r = open_set(fixture("seed0", "--seed 0"));
    const char *name = "model.language_model.layers.3.self_attn.o_proj.weight";
    const st_tensor *t = s ? st_find(s, name) : NULL, *u = r ? st_find(r, name) : NULL;
    double ms, ss, mr, sr;
    if (t && u) {
        mean_std(t, &ms, &ss);
        mean_std(u, &mr, &sr);
        CHECKF(fabs(ss / sr - 0.05) < 0.002, "o_proj std %g vs %g unscaled", ss, sr);
    }
    name = "model.language_model.layers.0.linear_attn.in_proj_qkv.weight";
    t = s ? st_find(s, name) : NULL;
    u = r ? st_find(r, name) : NULL;
    CHECK(t && u && t->nbytes == u->nbytes && memcmp(t->data, u->data, t->nbytes) == 0);
    st_close(s);
    st_close(r);
}

static void copy_head_misuse_exits_2(void) {
    if (!g_root[0]) snprintf(g_root, sizeof g_root, "%s", nx_test_tmpdir("fixture"));
    static const char *const bad[] = {
        "--out Z --copy-head -1", "--out Z --copy-head abc", "--out Z --copy-head nan", "--out Z --copy-head inf",
        "--out Z --copy-head 0 --no-mtp", "--out Z --copy-head",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = nx_test_system("cd '%s' && '%s' %s 2>/dev/null", g_root, NX_FIXTURE_BIN, bad[i]);
        CHECKF(rc == 2, "'%s' exited %d, want 2", bad[i], rc);
    }
    CHECK(access(path_in(g_root, "Z"), F_OK) != 0);
    CHECK(nx_test_system("'%s' --help | grep -q -- '--copy-head S'", NX_FIXTURE_BIN) == 0);
}

static const nx_test tests[] = {
    {"same_seed_gives_identical_bytes_and_another_seed_differs", "determinism from --seed",
     same_seed_gives_identical_bytes_and_another_seed_differs},
    {"tiny_preset_has_every_hf_tensor_with_its_dtype_and_shape", "the full HF tensor list, nothing extra",
     tiny_preset_has_every_hf_tensor_with_its_dtype_and_shape},
    {"config_json_has_the_spec_fields", "config.json and generation_config.json", config_json_has_the_spec_fields},
    {"values_follow_their_distributions", "std of linear, embed and norm weights; A_log range",
     values_follow_their_distributions},
    {"sharded_output_holds_the_same_tensors_as_one_file", "--shards 3 vs one file, byte for byte",
     sharded_output_holds_the_same_tensors_as_one_file},
    {"mlx_layout_renames_keys_and_stores_one_plus_norms", "--layout mlx vs hf for the same seed",
     mlx_layout_renames_keys_and_stores_one_plus_norms},
    {"dtype_tie_and_mtp_flags_change_only_what_they_name", "f16/bf16 are rounded f32; --tie; --no-mtp",
     dtype_tie_and_mtp_flags_change_only_what_they_name},
    {"overrides_keep_the_three_to_one_layer_pattern", "--vocab --hidden --layers",
     overrides_keep_the_three_to_one_layer_pattern},
    {"presets_have_their_geometry", "0.8B, 2B and 4B shapes, tying, mtp", presets_have_their_geometry},
    {"bad_usage_exits_2_and_help_exits_0", "exit codes and a one-line error", bad_usage_exits_2_and_help_exits_0},
    {"separate_mtp_layout_writes_an_mlx_vlm_drafter_directory",
     "--mtp-layout separate: target without mtp.*, mtp-drafter/ with bare keys, +1 norms, MTPSplitter config",
     separate_mtp_layout_writes_an_mlx_vlm_drafter_directory},
    {"file_and_mlx_inline_mtp_layouts_hold_the_same_head",
     "--mtp-layout file (raw mtp.safetensors) and mlx-inline (language_model.mtp.*, +1) vs inline",
     file_and_mlx_inline_mtp_layouts_hold_the_same_head},
    {"mtp_layout_misuse_exits_2", "mlx-inline without --layout mlx, --mtp-layout with --no-mtp: one line, exit 2",
     mtp_layout_misuse_exits_2},
    {"copy_head_0_drafts_are_all_accepted",
     "--copy-head 0 (hf, mlx, mlx-inline, f32 tied): the copy head's tensors, and generate --draft 2 accepts every draft",
     copy_head_0_drafts_are_all_accepted},
    {"copy_head_0_05_is_lossless_against_plain_decoding",
     "--copy-head 0.05: MTP output ids equal --mtp off; only the output projections are scaled",
     copy_head_0_05_is_lossless_against_plain_decoding},
    {"copy_head_misuse_exits_2", "--copy-head negative, nan, or with --no-mtp: exit 2; --help names it",
     copy_head_misuse_exits_2},
};

NX_TEST_MAIN(tests)
