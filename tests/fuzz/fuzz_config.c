/* fuzz_config.c — the config.json parser (src/io/config.h).
 *
 * Input: config.json text, given to cfg_parse with its length and no NUL
 * after it (the parser must honour the length). If the text contains
 * "\n@@GEN@@\n", what comes before is config.json and what comes after is
 * generation_config.json, both written to a scratch directory and read by
 * cfg_load_dir as well (the generation config's eos ids are merged).
 *
 * Checked: a failure has a documented status and a message naming the file;
 * a success gives a config inside the limits the header promises (layer count
 * up to CFG_MAX_LAYERS, heads that divide, an even rotary dimension within
 * the head, eos ids below the vocabulary, terminated strings) for which
 * cfg_quant_for answers every override path, a default module and a name too
 * long for any table. A config.json that parses alone also loads from the
 * directory, unless the generation config is what the message blames. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/config.h"

#define GEN_SEP "\n@@GEN@@\n"

static void check_quant(const cfg_model *c, const char *path) {
    int mode, bits, group;
    if (cfg_quant_for(c, path, &mode, &bits, &group))
        CHECKF(bits >= 2 && bits <= 8 && (group >= 32 || (mode == CFG_Q_NVFP4 && group == 16)), "%s: %s, %d bits, group %d",
               path, cfg_qmode_name(mode), bits, group);
}

static void check_config(const cfg_model *c) {
    CHECKF(c->n_layers >= 1 && c->n_layers <= CFG_MAX_LAYERS, "n_layers %d", c->n_layers);
    CHECK(c->vocab_size >= 1 && c->hidden_size >= 1 && c->n_heads >= 1 && c->n_kv_heads >= 1 && c->head_dim >= 1);
    CHECK(c->n_heads % c->n_kv_heads == 0);
    CHECK(c->linear_k_heads >= 1 && c->linear_v_heads % c->linear_k_heads == 0);
    CHECKF(c->conv_kernel >= 1 && c->conv_kernel <= CFG_MAX_CONV_KERNEL, "conv_kernel %d", c->conv_kernel);
    CHECKF(c->rotary_dim >= 2 && c->rotary_dim % 2 == 0 && c->rotary_dim <= c->head_dim, "rotary_dim %d, head_dim %d",
           c->rotary_dim, c->head_dim);
    CHECK(c->rms_norm_eps > 0 && c->rope_theta > 0);
    CHECK(c->n_eos >= 0 && c->n_eos <= CFG_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++) CHECKF(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab_size, "eos id %d", c->eos_ids[i]);
    for (int i = 0; i < c->n_layers; i++) CHECK(c->layer_full[i] <= 1);
    CHECK(memchr(c->model_type, 0, sizeof c->model_type) != NULL);
    CHECK(c->n_q_overrides >= 0 && c->n_q_overrides <= CFG_MAX_QOVERRIDES);
    for (int i = 0; i < c->n_q_overrides; i++) {
        CHECK(memchr(c->q_overrides[i].path, 0, sizeof c->q_overrides[i].path) != NULL);
        check_quant(c, c->q_overrides[i].path);
    }
    check_quant(c, "model.layers.0.mlp.up_proj");
    static char longname[4096];
    memset(longname, 'x', sizeof longname - 1);
    check_quant(c, longname);
}

static void check_failure(nx_status st, const char *err, const char *name) {
    CHECKF(st == NX_EFORMAT || st == NX_EUNSUPPORTED || st == NX_EIO || st == NX_ENOMEM, "status %d: %s", st, err);
    CHECK(err[0] != 0);
    CHECKF(st == NX_ENOMEM || strstr(err, name) != NULL, "the message does not name %s: %s", name, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cfg_model cfg;   /* large (per-layer tables): not on the stack */
    const char *name = "fuzz/config.json";
    const uint8_t *sep = memmem(data, size, GEN_SEP, sizeof GEN_SEP - 1);
    size_t config_len = sep ? (size_t)(sep - data) : size;
    char *text = fuzz_copy(data, config_len);
    char err[512] = "";
    nx_status st = cfg_parse(text, config_len, name, &cfg, err, sizeof err);
    free(text);
    if (st == NX_OK) check_config(&cfg);
    else check_failure(st, err, name);
    if (!sep) return 0;

    const char *dir = fuzz_tmpdir("fuzz_config");
    char path[PATH_MAX];
    fuzz_write_file(fuzz_path(path, dir, "config.json"), data, config_len);
    const uint8_t *gen = sep + sizeof GEN_SEP - 1;
    fuzz_write_file(fuzz_path(path, dir, "generation_config.json"), gen, size - (size_t)(gen - data));
    err[0] = 0;
    nx_status st_dir = cfg_load_dir(dir, &cfg, err, sizeof err);
    if (st_dir == NX_OK) check_config(&cfg);
    else check_failure(st_dir, err, dir);
    CHECKF(st != NX_OK || st_dir == NX_OK || strstr(err, "generation_config.json"),
           "config.json parses alone but not from the directory: %s", err);
    return 0;
}
