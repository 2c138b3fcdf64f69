/* test_config.c — config.json parsing: both layouts, every derived field,
 * and a clear error naming the field for each kind of bad input. */
#include "test.h"

#include "io/config.h"

static const char *nested =
    "{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,\"text_config\":{"
    "\"model_type\":\"qwen3_5_text\",\"vocab_size\":1000,\"hidden_size\":64,\"num_hidden_layers\":8,"
    "\"intermediate_size\":128,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
    "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,\"linear_value_head_dim\":8,"
    "\"linear_conv_kernel_dim\":4,\"rms_norm_eps\":1e-6,\"full_attention_interval\":4,\"eos_token_id\":999,"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,\"partial_rotary_factor\":0.25,"
    "\"mrope_section\":[11,11,10],\"mrope_interleaved\":true},\"mtp_num_hidden_layers\":1}}";

static nx_status parse(const char *text, cfg_model *c, char *err) {
    return cfg_parse(text, strlen(text), "config.json", c, err, 512);
}

/* nested with one substitution applied: replaces the first occurrence of
 * `from` with `to` */
static char *edited(const char *from, const char *to) {
    static char buf[4096];
    const char *p = strstr(nested, from);
    if (!p) { fprintf(stderr, "test bug: '%s' not in config\n", from); abort(); }
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - nested), nested, to, p + strlen(from));
    return buf;
}

static void nested_layout_parses_every_field(void) {
    cfg_model c;
    char err[512];
    CHECKF(parse(nested, &c, err) == NX_OK, "%s", err);
    CHECK(c.vocab_size == 1000 && c.hidden_size == 64 && c.n_layers == 8 && c.intermediate_size == 128);
    CHECK(c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32 && c.attn_output_gate == 1);
    CHECK(c.linear_k_heads == 2 && c.linear_v_heads == 4 && c.linear_k_dim == 16 && c.linear_v_dim == 8);
    CHECK(cfg_key_dim(&c) == 32 && cfg_value_dim(&c) == 32 && cfg_conv_dim(&c) == 96 && c.conv_kernel == 4);
    CHECK(c.rope_theta == 1e7 && c.partial_rotary_factor == 0.25 && c.rotary_dim == 8);
    CHECK(c.tie_word_embeddings == 1 && c.mtp_num_hidden_layers == 1 && c.rms_norm_eps == 1e-6);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 999);
    static const uint8_t want[8] = {0, 0, 0, 1, 0, 0, 0, 1};
    CHECK(memcmp(c.layer_full, want, 8) == 0);
}

static void flat_layout_equals_nested(void) {
    const char *flat =
        "{\"model_type\":\"qwen3_5_text\",\"tie_word_embeddings\":true,\"vocab_size\":1000,\"hidden_size\":64,"
        "\"num_hidden_layers\":8,\"intermediate_size\":128,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":32,\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
        "\"linear_value_head_dim\":8,\"eos_token_id\":[999],\"rope_theta\":10000000,\"partial_rotary_factor\":0.25,"
        "\"mtp_num_hidden_layers\":1}";
    cfg_model a, b;
    char err[512];
    CHECKF(parse(nested, &a, err) == NX_OK, "%s", err);
    CHECKF(parse(flat, &b, err) == NX_OK, "%s", err);
    memcpy(b.model_type, a.model_type, sizeof a.model_type); /* the only field that differs */
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

static void layer_types_override_the_interval(void) {
    cfg_model c;
    char err[512];
    const char *t = edited("\"full_attention_interval\":4",
                           "\"layer_types\":[\"full_attention\",\"linear_attention\",\"linear_attention\",\"linear_attention\","
                           "\"linear_attention\",\"full_attention\",\"linear_attention\",\"linear_attention\"]");
    CHECKF(parse(t, &c, err) == NX_OK, "%s", err);
    CHECK(c.layer_full[0] == 1 && c.layer_full[3] == 0 && c.layer_full[5] == 1);
    t = edited("\"full_attention_interval\":4", "\"layer_types\":[\"full_attention\"]");
    CHECK(parse(t, &c, err) == NX_EFORMAT && strstr(err, "layer_types"));
    t = edited("\"full_attention_interval\":4", "\"full_attention_interval\":2");
    CHECK(parse(t, &c, err) == NX_OK && c.layer_full[1] && !c.layer_full[2]);
}

static void legacy_rope_fields_are_read(void) {
    cfg_model c;
    char err[512];
    const char *t = edited("\"rope_parameters\"", "\"rope_scaling\"");
    CHECKF(parse(t, &c, err) == NX_OK, "%s", err);
    CHECK(c.rope_theta == 1e7);
    t = edited("\"rope_theta\":10000000", "\"rope_theta\":5000");
    CHECK(parse(t, &c, err) == NX_OK && c.rope_theta == 5000);
    t = edited("\"rope_type\":\"default\"", "\"rope_type\":\"yarn\"");
    CHECK(parse(t, &c, err) == NX_EUNSUPPORTED && strstr(err, "yarn"));
    /* rope_parameters: null does not hide a legacy rope_scaling */
    t = edited("\"rope_parameters\":{\"rope_type\":\"default\"", "\"rope_parameters\":null,\"rope_scaling\":{\"rope_type\":\"yarn\"");
    CHECKF(parse(t, &c, err) == NX_EUNSUPPORTED && strstr(err, "rope_scaling") && strstr(err, "yarn"), "%s", err);
}

/* Fields left out take Hugging Face Qwen3_5TextConfig's defaults:
 * num_key_value_heads 4, head_dim 256 (not hidden / heads). */
static void missing_fields_take_hf_defaults(void) {
    cfg_model c;
    char err[512];
    char text[4096];
    snprintf(text, sizeof text, "%s", edited("\"num_key_value_heads\":2,\"head_dim\":32,", ""));
    CHECKF(parse(text, &c, err) == NX_OK, "%s", err);
    CHECKF(c.n_kv_heads == 4 && c.head_dim == 256, "kv heads %d, head_dim %d", c.n_kv_heads, c.head_dim);
}

static void moe_and_unknown_models_are_rejected_by_name(void) {
    cfg_model c;
    char err[512];
    CHECK(parse(edited("\"model_type\":\"qwen3_5\"", "\"model_type\":\"qwen3_5_moe\""), &c, err) == NX_EUNSUPPORTED);
    CHECKF(strstr(err, "MoE not supported yet"), "%s", err);
    CHECK(parse(edited("\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"num_experts\":256"), &c, err) == NX_EUNSUPPORTED);
    CHECKF(strstr(err, "MoE not supported yet") && strstr(err, "256"), "%s", err);
    CHECK(parse(edited("\"model_type\":\"qwen3_5\"", "\"model_type\":\"llama\""), &c, err) == NX_EUNSUPPORTED);
    CHECKF(strstr(err, "llama"), "%s", err);
}

static void bad_values_name_the_field(void) {
    static const struct { const char *from, *to, *needle; } cases[] = {
        {"\"hidden_size\":64", "\"hidden_size\":\"64\"", "text_config.hidden_size must be an integer"},
        {"\"hidden_size\":64", "\"hidden_size\":64.5", "text_config.hidden_size must be an integer"},
        {"\"hidden_size\":64,", "", "text_config.hidden_size is missing"},
        {"\"vocab_size\":1000", "\"vocab_size\":-3", "text_config.vocab_size = -3"},
        {"\"num_key_value_heads\":2", "\"num_key_value_heads\":3", "num_key_value_heads"},
        {"\"linear_num_value_heads\":4", "\"linear_num_value_heads\":3", "linear_num_value_heads"},
        {"\"eos_token_id\":999", "\"eos_token_id\":5000", "eos_token_id"},
        {"\"eos_token_id\":999", "\"eos_token_id\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32]", "eos_token_id: more than 32 end-of-sequence ids"},
        {"\"rms_norm_eps\":1e-6", "\"rms_norm_eps\":true", "rms_norm_eps must be a number"},
        {"\"partial_rotary_factor\":0.25", "\"partial_rotary_factor\":0.1", "rotary dim"},
        {"\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"hidden_act\":\"gelu\"", "gelu"},
        {"\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"attention_bias\":true", "attention_bias"},
        {"\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"output_gate_type\":\"sigmoid\"", "output_gate_type"},
        {"\"rope_theta\":10000000", "\"rope_theta\":0", "rope_theta must be positive"},
        {"\"rope_theta\":10000000", "\"rope_theta\":-10000", "rope_theta must be positive"},
        {"\"rms_norm_eps\":1e-6", "\"rms_norm_eps\":0", "rms_norm_eps 0 must be in (0, 1]"},
        {"\"rms_norm_eps\":1e-6", "\"rms_norm_eps\":1.5", "rms_norm_eps 1.5 must be in (0, 1]"},
        {"\"full_attention_interval\":4", "\"full_attention_interval\":0", "text_config.full_attention_interval = 0"},
        {"\"full_attention_interval\":4",
         "\"layer_types\":[\"full_attention\",\"linear_attention\",\"sliding_attention\",\"linear_attention\","
         "\"linear_attention\",\"full_attention\",\"linear_attention\",\"linear_attention\"]",
         "text_config.layer_types[2] = 'sliding_attention'"},
        {"\"full_attention_interval\":4", "\"layer_types\":[0,1,2,3,4,5,6,7]", "layer_types[0] = '(not a string)'"},
        /* a GDN state of 4 x 65536 x 65536 floats is a malformed config, refused before any allocation */
        {"\"linear_key_head_dim\":16,\"linear_value_head_dim\":8", "\"linear_key_head_dim\":65536,\"linear_value_head_dim\":65536",
         "linear_key_head_dim = 17179869184 is too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cfg_model c;
        char err[512] = "";
        nx_status st = parse(edited(cases[i].from, cases[i].to), &c, err);
        CHECKF(st != NX_OK && strstr(err, cases[i].needle) && strstr(err, "config.json"), "case %zu: status %d, '%s'", i, st, err);
    }
    cfg_model c;
    char err[512];
    CHECK(parse("{\"model_type\": ", &c, err) == NX_EFORMAT && strstr(err, "invalid JSON"));
    CHECK(parse("[1,2]", &c, err) == NX_EFORMAT && strstr(err, "not a JSON object"));
    CHECK(parse("{}", &c, err) == NX_EFORMAT && strstr(err, "model_type is missing"));
    CHECK(parse("{\"model_type\":\"qwen3_5\",\"text_config\":[1]}", &c, err) == NX_EFORMAT &&
          strstr(err, "text_config must be an object"));
}

/* config.h's documented defaults and limits at their edges: a config that
 * leaves rope_theta out (Qwen3.5 uses 1e7 throughout), full rotary
 * (factor 1: rotary dim == head_dim) and exactly CFG_MAX_EOS eos ids. */
static void rope_and_eos_limits_are_inclusive(void) {
    cfg_model c;
    char err[512];
    CHECKF(parse(edited("\"rope_theta\":10000000,", ""), &c, err) == NX_OK, "%s", err);
    CHECKF(c.rope_theta == 1e7, "rope_theta %g", c.rope_theta);
    CHECKF(parse(edited("\"partial_rotary_factor\":0.25", "\"partial_rotary_factor\":1.0"), &c, err) == NX_OK, "%s", err);
    CHECKF(c.partial_rotary_factor == 1.0 && c.rotary_dim == c.head_dim, "rotary dim %d", c.rotary_dim);
    CHECK(parse(edited("\"partial_rotary_factor\":0.25", "\"partial_rotary_factor\":1.5"), &c, err) == NX_EFORMAT &&
          strstr(err, "partial_rotary_factor"));
    char list[256];
    int len = snprintf(list, sizeof list, "\"eos_token_id\":[");
    for (int i = 0; i < CFG_MAX_EOS; i++) len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", i ? "," : "", 900 + i);
    snprintf(list + len, sizeof list - (size_t)len, "]");
    CHECKF(parse(edited("\"eos_token_id\":999", list), &c, err) == NX_OK, "%s", err);
    CHECKF(c.n_eos == CFG_MAX_EOS && c.eos_ids[CFG_MAX_EOS - 1] == 900 + CFG_MAX_EOS - 1, "%d eos ids", c.n_eos);
}

/* A VLM config may set tie_word_embeddings in both places; text_config's
 * value is the language model's, whichever way the two disagree. */
static void text_config_tie_word_embeddings_wins(void) {
    cfg_model c;
    char err[512];
    char text[4096];
    snprintf(text, sizeof text, "%s", edited("\"tie_word_embeddings\":true", "\"tie_word_embeddings\":false"));
    const char *inner = "\"mtp_num_hidden_layers\":1";
    char *p = strstr(text, inner);
    CHECK(p != NULL);
    if (!p) return;
    char both[4096];
    snprintf(both, sizeof both, "%.*s%s,\"tie_word_embeddings\":true%s", (int)(p - text), text, inner, p + strlen(inner));
    CHECKF(parse(both, &c, err) == NX_OK && c.tie_word_embeddings == 1, "%s", err);
    CHECKF(parse(edited(inner, "\"mtp_num_hidden_layers\":1,\"tie_word_embeddings\":false"), &c, err) == NX_OK &&
               c.tie_word_embeddings == 0, "%s", err);
    CHECKF(parse(edited(inner, "\"mtp_num_hidden_layers\":1,\"tie_word_embeddings\":1"), &c, err) == NX_EFORMAT &&
               strstr(err, "text_config.tie_word_embeddings"), "%s", err);
}

static void generation_config_adds_eos_ids(void) {
    const char *dir = nx_test_tmpdir("cfg-gen");
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    nx_test_write_file(path, nested, strlen(nested));
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    const char *gen = "{\"eos_token_id\":[998,999]}";
    nx_test_write_file(path, gen, strlen(gen));
    cfg_model c;
    char err[512];
    CHECKF(cfg_load_dir(dir, &c, err, sizeof err) == NX_OK, "%s", err);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 999 && c.eos_ids[1] == 998);
    nx_test_write_file(path, "{oops", 5);
    CHECK(cfg_load_dir(dir, &c, err, sizeof err) == NX_EFORMAT && strstr(err, "generation_config.json"));
    nx_test_write_file(path, "[998]", 5);
    CHECKF(cfg_load_dir(dir, &c, err, sizeof err) == NX_EFORMAT && strstr(err, "generation_config.json: not a JSON object"),
           "%s", err);
    CHECK(cfg_load_dir("/nonexistent", &c, err, sizeof err) == NX_EIO && strstr(err, "/nonexistent/config.json"));
}

/* nested plus a quantization block with n per-module entries
 * "model.layers.<i>.mlp.down_proj": {"bits": 8 (odd i) or false (even i)};
 * caller frees. */
static char *with_overrides(int n) {
    size_t cap = strlen(nested) + 64 + (size_t)n * 64;
    char *buf = malloc(cap);
    size_t len = (size_t)snprintf(buf, cap, "%.*s,\"quantization\":{\"bits\":4,\"group_size\":64", (int)strlen(nested) - 1, nested);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, ",\"model.layers.%d.mlp.down_proj\":%s", i,
                                i % 2 ? "{\"bits\":8}" : "false");
    snprintf(buf + len, cap - len, "}}");
    return buf;
}

static void quantization_block_takes_a_thousand_module_entries(void) {
    char err[512];
    cfg_model *c = malloc(sizeof *c);
    char *text = with_overrides(CFG_MAX_QOVERRIDES);
    CHECKF(parse(text, c, err) == NX_OK, "%s", err);
    int mode = -1, bits = 0, group = 0;
    char name[64];
    snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj", CFG_MAX_QOVERRIDES - 1);
    CHECK(c->n_q_overrides == CFG_MAX_QOVERRIDES && cfg_quant_for(c, name, &mode, &bits, &group) == 1 && bits == 8 && group == 64);
    CHECK(cfg_quant_for(c, "model.layers.0.mlp.down_proj", &mode, &bits, &group) == 0);
    CHECK(cfg_quant_for(c, "model.layers.0.mlp.up_proj", &mode, &bits, &group) == 1 && bits == 4);
    free(text);
    text = with_overrides(CFG_MAX_QOVERRIDES + 1);
    CHECK(parse(text, c, err) == NX_EUNSUPPORTED && strstr(err, "per-module entries") && strstr(err, "quantization"));
    free(text);
    free(c);
}

/* nested plus `block` as its "quantization" (or whichever key the block
 * text names); a static buffer */
static const char *with_block(const char *block) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%.*s,%s}", (int)strlen(nested) - 1, nested, block);
    return buf;
}

/* The small-float modes and block FP8: each mode's defaults, an override
 * without a mode is affine with affine's defaults (mlx's to_quantized), an
 * override may name its own mode; a mode's other sizes, unknown modes and
 * methods, and fp8 blocks other than 128 x 128 are refused by name. */
static void quantization_modes_and_block_fp8(void) {
    char err[512];
    cfg_model *c = malloc(sizeof *c);
    int mode, bits, group;
    CHECKF(parse(with_block("\"quantization\":{\"mode\":\"mxfp4\",\"model.a\":{\"bits\":8},"
                            "\"model.b\":{\"mode\":\"nvfp4\"},\"model.c\":{\"mode\":\"mxfp8\",\"group_size\":32}}"),
                 c, err) == NX_OK, "%s", err);
    CHECK(c->has_quantization && c->q_mode == CFG_Q_MXFP4 && c->q_bits == 4 && c->q_group == 32 && !c->fp8_block);
    CHECK(cfg_quant_for(c, "model.x", &mode, &bits, &group) && mode == CFG_Q_MXFP4 && bits == 4 && group == 32);
    CHECK(cfg_quant_for(c, "model.a", &mode, &bits, &group) && mode == CFG_Q_AFFINE && bits == 8 && group == 64);
    CHECK(cfg_quant_for(c, "model.b", &mode, &bits, &group) && mode == CFG_Q_NVFP4 && bits == 4 && group == 16);
    CHECK(cfg_quant_for(c, "model.c", &mode, &bits, &group) && mode == CFG_Q_MXFP8 && bits == 8 && group == 32);
    CHECK(strcmp(cfg_qmode_name(CFG_Q_NVFP4), "nvfp4") == 0);
    CHECKF(parse(with_block("\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"activation_scheme\":"
                            "\"dynamic\",\"weight_block_size\":[128,128]}"),
                 c, err) == NX_OK, "%s", err);
    CHECK(c->fp8_block && !c->has_quantization && !cfg_quant_for(c, "model.x", &mode, &bits, &group));
    /* a block under text_config (some conversions leave it there) is read, and named there */
    char text[4096];
    snprintf(text, sizeof text, "%s", edited("\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"quantization\":{\"bits\":4,\"group_size\":32}"));
    CHECKF(parse(text, c, err) == NX_OK && c->has_quantization && c->q_bits == 4 && c->q_group == 32, "%s", err);
    snprintf(text, sizeof text, "%s", edited("\"mtp_num_hidden_layers\":1", "\"mtp_num_hidden_layers\":1,\"quantization_config\":{\"bits\":99}"));
    CHECKF(parse(text, c, err) == NX_EFORMAT && strstr(err, "text_config.quantization_config.bits = 99"), "%s", err);
    static const struct { const char *block, *want; } bad[] = {
        {"\"quantization\":{\"mode\":\"mxfp4\",\"group_size\":64}", "mode mxfp4 takes bits 4, group_size 32"},
        {"\"quantization\":{\"mode\":\"nvfp4\",\"bits\":8}", "mode nvfp4 takes bits 4, group_size 16"},
        {"\"quantization\":{\"mode\":\"int4\"}", "mode 'int4' is not supported"},
        {"\"quantization\":{\"bits\":4,\"m.x\":{\"mode\":\"mxfp8\",\"bits\":4}}", "m.x: bits 4, group_size 32 (mode mxfp8"},
        {"\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[64,64]}", "weight_block_size"},
        {"\"quantization_config\":{\"quant_method\":\"fp8\"}", "weight_block_size"},
        {"\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\",\"weight_block_size\":[128,128]}", "fmt 'e5m2'"},
        {"\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}", "quant_method 'gptq'"},
        /* each message names the field where it is: the block's own, or the entry's */
        {"\"quantization\":{\"mode\":\"foo\"}", "quantization.mode 'foo'"},
        {"\"quantization\":{\"bits\":4,\"m.x\":{\"mode\":\"foo\"}}", "quantization.m.x.mode 'foo'"},
        {"\"quantization\":{\"bits\":7}", "quantization: bits 7, group_size 64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(parse(with_block(bad[i].block), c, err) == NX_EUNSUPPORTED && strstr(err, bad[i].want), "%s: %s", bad[i].block,
               err);
    static const struct { const char *block, *want; } malformed[] = {
        {"\"quantization\":{\"bits\":4,\"m.x\":{\"bits\":\"8\"}}", "quantization.m.x.bits must be an integer"},
        {"\"quantization\":{\"group_size\":\"64\"}", "quantization.group_size must be an integer"},
        {"\"quantization_config\":{\"bits\":99}", "quantization_config.bits = 99 is out of range"},
    };
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        CHECKF(parse(with_block(malformed[i].block), c, err) == NX_EFORMAT && strstr(err, malformed[i].want), "%s: %s",
               malformed[i].block, err);
    /* sizes left to the mode's defaults are known as such: the block's, an
     * entry's, not an entry that names both */
    CHECKF(parse(with_block("\"quantization\":{\"bits\":8,\"m.a\":{\"bits\":4,\"group_size\":32},\"m.b\":{\"bits\":4},"
                            "\"m.c\":false}"),
                 c, err) == NX_OK, "%s", err);
    CHECK(cfg_quant_defaulted(c, "m.x") && !cfg_quant_defaulted(c, "m.a") && cfg_quant_defaulted(c, "m.b") &&
          !cfg_quant_defaulted(c, "m.c"));
    CHECKF(parse(with_block("\"quantization\":{\"bits\":8,\"group_size\":32}"), c, err) == NX_OK, "%s", err);
    CHECK(!cfg_quant_defaulted(c, "m.x"));
    /* a module path fills cfg_quant_override.path to its last byte; one more is refused */
    char longest[sizeof c->q_overrides[0].path + 1], block[512];
    memset(longest, 'm', sizeof longest - 2);
    longest[sizeof longest - 2] = 0;
    snprintf(block, sizeof block, "\"quantization\":{\"bits\":4,\"%s\":{\"bits\":8}}", longest);
    CHECKF(parse(with_block(block), c, err) == NX_OK, "%s", err);
    CHECK(cfg_quant_for(c, longest, &mode, &bits, &group) && bits == 8);
    longest[sizeof longest - 2] = 'm', longest[sizeof longest - 1] = 0;
    snprintf(block, sizeof block, "\"quantization\":{\"bits\":4,\"%s\":{\"bits\":8}}", longest);
    CHECKF(parse(with_block(block), c, err) == NX_EFORMAT && strstr(err, "quantization: module path 'mmm") &&
               strstr(err, "...' is too long"),
           "%s", err);
    free(c);
}

static const nx_test tests[] = {
    {"quantization_modes_and_block_fp8",
     "mxfp4/nvfp4/mxfp8 defaults and per-module modes, block fp8; wrong sizes, modes, methods and block sizes named",
     quantization_modes_and_block_fp8},
    {"quantization_block_takes_a_thousand_module_entries",
     "CFG_MAX_QOVERRIDES per-module entries (bits or false) parse and are found; one more is a clear error",
     quantization_block_takes_a_thousand_module_entries},
    {"nested_layout_parses_every_field", "text_config layout: every field and derived size", nested_layout_parses_every_field},
    {"flat_layout_equals_nested", "the flat layout parses to the same config", flat_layout_equals_nested},
    {"layer_types_override_the_interval", "layer_types wins over full_attention_interval; length checked", layer_types_override_the_interval},
    {"legacy_rope_fields_are_read", "rope_scaling (also beside rope_parameters: null) and top-level rope fields; scaled rope refused",
     legacy_rope_fields_are_read},
    {"missing_fields_take_hf_defaults", "no num_key_value_heads / head_dim: 4 and 256, as HF", missing_fields_take_hf_defaults},
    {"moe_and_unknown_models_are_rejected_by_name", "MoE and unknown model types: clear unsupported errors", moe_and_unknown_models_are_rejected_by_name},
    {"bad_values_name_the_field", "wrong types, missing fields and bad values name the field", bad_values_name_the_field},
    {"rope_and_eos_limits_are_inclusive", "rope_theta defaults to 1e7; partial_rotary_factor 1 and 32 eos ids load",
     rope_and_eos_limits_are_inclusive},
    {"text_config_tie_word_embeddings_wins", "text_config.tie_word_embeddings overrides the top level either way",
     text_config_tie_word_embeddings_wins},
    {"generation_config_adds_eos_ids", "generation_config.json eos ids merge; bad file is named", generation_config_adds_eos_ids},
};

NX_TEST_MAIN(tests)
