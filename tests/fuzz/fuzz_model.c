/* fuzz_model.c — the whole model load (nx_model_load, include/nextn.h) on the
 * tiny checkpoint tests/data/golden/torchref-mini-a/hf, dense or quantized.
 *
 * Input: byte 0 picks the variant, the rest is the file it replaces.
 *   bit 0  0: the rest is the JSON header of model.safetensors, written as
 *             8-byte length + the rest + the original file's data section,
 *             so names, dtypes, shapes and offsets are all tried on real
 *             weights; config.json and generation_config.json are the
 *             original ones.
 *          1: the rest is config.json, next to the original model.safetensors
 *             (a symlink) and generation_config.json.
 *   bit 1  0: the dense checkpoint; 1: a 4-bit MLX-affine copy (group 64)
 *             that nx_quantize writes once per process.
 * A header made for the dense data section means nothing for the quantized
 * one, so a seed is for one variant.
 *
 * After a successful load (one thread) the harness uses what the load
 * promised: nx_model_get_info, a 3-token nx_forward, the checkpoint's own MTP
 * head (nx_drafter_load) and a teacher-forced draft of 3 tokens; everything
 * is freed (LeakSanitizer). Checked: a failed load leaves the model NULL and
 * gives a documented status and a message naming the directory (every file is
 * in it); forward and the draft on a loaded model succeed, and a failed
 * drafter load says why and returns no drafter. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "nextn.h"

#define DENSE_DIR NX_TEST_DATA "/golden/torchref-mini-a/hf"

typedef struct {
    char dir[PATH_MAX];      /* the checkpoint the variant edits      */
    unsigned char *file;     /* its model.safetensors                 */
    size_t size, data_off;   /* file size; where the data section starts */
    char work[2][PATH_MAX];  /* [0] header mode, [1] config mode: what is loaded */
} source;

static source g_src[2];   /* [0] dense, [1] quantized */

static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char path[PATH_MAX];
    size_t n;
    unsigned char *b = fuzz_read_file(fuzz_path(path, from_dir, name), &n);
    fuzz_write_file(fuzz_path(path, to_dir, name), b, n);
    free(b);
}

static source *get_source(int quantized) {
    source *s = &g_src[quantized];
    if (s->file) return s;
    const char *tmp = fuzz_tmpdir("fuzz_model");
    char err[512];
    if (quantized) {
        fuzz_path(s->dir, tmp, "q4");
        nx_quantize_opts q = {.bits = 4, .group_size = 64};
        if (nx_quantize(DENSE_DIR, s->dir, &q, NULL, err, sizeof err) != NX_OK) FUZZ_DIE("nx_quantize: %s", err);
    } else {
        snprintf(s->dir, sizeof s->dir, "%s", DENSE_DIR);
    }
    char path[PATH_MAX];
    s->file = fuzz_read_file(fuzz_path(path, s->dir, "model.safetensors"), &s->size);
    uint64_t header = 0;
    for (int b = 7; b >= 0; b--) header = header << 8 | s->file[b];
    s->data_off = 8 + (size_t)header;
    for (int mode = 0; mode < 2; mode++) {
        char name[32];
        snprintf(name, sizeof name, "%s-%s", quantized ? "q4" : "dense", mode ? "config" : "header");
        fuzz_path(s->work[mode], tmp, name);
        if (mkdir(s->work[mode], 0755) != 0) FUZZ_DIE("cannot make %s", s->work[mode]);
        copy_file(s->dir, s->work[mode], "generation_config.json");
        if (mode == 0) {
            copy_file(s->dir, s->work[mode], "config.json");
        } else {
            char target[PATH_MAX];
            fuzz_path(target, s->dir, "model.safetensors");
            if (symlink(target, fuzz_path(path, s->work[mode], "model.safetensors")) != 0)
                FUZZ_DIE("cannot link %s", path);
        }
    }
    return s;
}

static void free_sources(void) {
    for (int i = 0; i < 2; i++) free(g_src[i].file);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    atexit(free_sources);
    return 0;
}

static void use_model(nx_model *m) {
    char err[512];
    const nx_model_info *info = nx_model_get_info(m);
    CHECK(info && info->vocab_size > 0 && info->hidden_size > 0);
    nx_state *s = NULL;
    nx_status st = nx_state_new(m, 8, &s, err, sizeof err);
    CHECKF(st == NX_OK, "nx_state_new: %s", err);
    int32_t tokens[3] = {1, 2, info->vocab_size - 1};
    float *logits = malloc(sizeof(float) * (size_t)info->vocab_size);
    nx_forward_out out = {.logits = logits};
    st = nx_forward(m, s, tokens, 3, &out, err, sizeof err);
    CHECKF(st == NX_OK, "nx_forward on a loaded model: %s", err);
    nx_state_free(s);
    free(logits);
    nx_drafter *d = NULL;
    err[0] = 0;
    st = nx_drafter_load(m, NULL, NULL, &d, err, sizeof err);
    if (st != NX_OK) {   /* a config without an MTP head, for one */
        CHECKF(d == NULL && err[0], "a failed drafter load (status %d) returned a drafter or no message", st);
        return;
    }
    float *draft = malloc(sizeof(float) * 2 * (size_t)info->vocab_size);   /* rows for tokens 1..2 */
    st = nx_drafter_teacher_forced(d, tokens, 3, draft, NULL, err, sizeof err);
    CHECKF(st == NX_OK, "nx_drafter_teacher_forced: %s", err);
    free(draft);
    nx_drafter_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int config_mode = data[0] & 1;
    source *src = get_source(data[0] >> 1 & 1);
    const char *dir = src->work[config_mode];
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    char path[PATH_MAX];
    if (config_mode) {
        fuzz_write_file(fuzz_path(path, dir, "config.json"), body, n);
    } else {
        unsigned char *file = malloc(8 + n + (src->size - src->data_off));
        for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)n >> (8 * i));
        memcpy(file + 8, body, n);
        memcpy(file + 8 + n, src->file + src->data_off, src->size - src->data_off);
        fuzz_write_file(fuzz_path(path, dir, "model.safetensors"), file, 8 + n + (src->size - src->data_off));
        free(file);
    }
    nx_load_opts opts = {.n_threads = 1};
    nx_model *m = (nx_model *)1;   /* must become NULL on failure */
    char err[512] = "";
    nx_status st = nx_model_load(dir, &opts, &m, err, sizeof err);
    if (st != NX_OK) {
        CHECK(m == NULL);
        CHECKF(st == NX_EIO || st == NX_EFORMAT || st == NX_EUNSUPPORTED || st == NX_ENOMEM, "status %d: %s", st, err);
        CHECK(err[0] != 0);
        CHECKF(st == NX_ENOMEM || strstr(err, dir) != NULL, "the message does not name %s: %s", dir, err);
        return 0;
    }
    use_model(m);
    nx_model_free(m);
    return 0;
}
