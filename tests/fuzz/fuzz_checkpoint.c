/* fuzz_checkpoint.c — speculative-session checkpoint files (nx_spec_load,
 * include/nextn.h "Checkpoints") on tests/data/golden/torchref-mini-a/hf with
 * its own MTP head as the drafter, both loaded once.
 *
 * Input: a checkpoint file as nx_spec_save writes it (layout at the top of
 * src/spec/checkpoint.c). Before writing it the harness recomputes the
 * header's payload_hash (ckpt_hash: xxh64 of the header and the rest): the hash
 * guards against damage, not forgery, so anyone can write a file that passes
 * it, and mutations must reach the checks behind it. A file whose drafter_id
 * is 0 is loaded into a fresh plain session, any other into a fresh session
 * with the drafter (context 64, greedy).
 *
 * Checked:
 *   - a load that succeeds took only what the session will use safely: with
 *     the drafter, every deferred draft token is a row of the vocabulary (the
 *     head embeds them on the next draft; fixed in 928b415, before which a
 *     token of 1024 read past the embedding); without it, no draft rows or
 *     deferred entries at all; then up to 3 rounds of nx_spec_step succeed;
 *   - a load that fails has a documented status, a message naming the file,
 *     and leaves the session FRESH: a 2-token prefill succeeds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "nextn.h"
#include "spec/checkpoint.h"

#define MODEL_DIR NX_TEST_DATA "/golden/torchref-mini-a/hf"
#define MAX_CTX 64

static nx_model *g_model;
static nx_drafter *g_drafter;
static int g_vocab, g_hidden;
static char g_path[PATH_MAX];

static void free_model(void) {
    nx_drafter_free(g_drafter);
    nx_model_free(g_model);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[512];
    nx_load_opts opts = {.n_threads = 1};
    if (nx_model_load(MODEL_DIR, &opts, &g_model, err, sizeof err) != NX_OK) FUZZ_DIE("model: %s", err);
    if (nx_drafter_load(g_model, NULL, NULL, &g_drafter, err, sizeof err) != NX_OK) FUZZ_DIE("drafter: %s", err);
    const nx_model_info *info = nx_model_get_info(g_model);
    g_vocab = info->vocab_size;
    g_hidden = info->hidden_size;
    fuzz_path(g_path, fuzz_tmpdir("fuzz_checkpoint"), "checkpoint.bin");
    atexit(free_model);
    return 0;
}

static nx_spec *new_session(int with_drafter) {
    nx_spec_opts o = {.draft = 0, .accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    nx_spec *s = NULL;
    char err[512];
    nx_status st = nx_spec_new(g_model, with_drafter ? g_drafter : NULL, MAX_CTX, &o, &s, err, sizeof err);
    if (st != NX_OK) FUZZ_DIE("nx_spec_new: %s", err);
    return s;
}

/* After a successful load: the deferred entries are the payload's last part,
 * tokens[n_defer] then hiddens[n_defer][hidden]; their sizes were checked
 * against the file by the load, so they are where the header says. */
static void check_loaded(const unsigned char *file, size_t size, const ckpt_header *h, int with_drafter) {
    if (!with_drafter) {
        CHECKF(h->rows == 0 && h->n_defer == 0, "a plain session took %d draft rows and %d deferred entries", h->rows,
               h->n_defer);
        return;
    }
    CHECKF(h->n_defer >= 0, "n_defer %d", h->n_defer);
    int64_t tail = (int64_t)h->n_defer * 4 * (1 + (int64_t)g_hidden);
    CHECKF(tail <= (int64_t)(size - sizeof *h), "%d deferred entries do not fit the file", h->n_defer);
    const unsigned char *tok = file + size - tail;
    for (int i = 0; i < h->n_defer; i++) {
        int32_t t;
        memcpy(&t, tok + 4 * i, 4);
        CHECKF(t >= 0 && t < g_vocab, "the load took deferred draft token %d of a vocabulary of %d", t, g_vocab);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *file = (unsigned char *)fuzz_copy(data, size);
    ckpt_header h = {0};
    int with_drafter = 1;
    if (size >= sizeof h) {
        memcpy(&h, file, sizeof h);
        h.payload_hash = ckpt_hash(file, size);
        memcpy(file, &h, sizeof h);
        with_drafter = h.drafter_id != 0;
    }
    fuzz_write_file(g_path, file, size);
    (void)nx_spec_checkpoint_tokens(g_path);
    nx_spec *s = new_session(with_drafter);
    char err[512] = "";
    nx_status st = nx_spec_load(s, g_path, err, sizeof err);
    if (st == NX_OK) {
        check_loaded(file, size, &h, with_drafter);
        int32_t emitted[16];
        int n_emitted;
        for (int r = 0; r < 3 && nx_spec_length(s) + 17 < MAX_CTX; r++) {
            st = nx_spec_step(s, 16, emitted, &n_emitted, err, sizeof err);
            CHECKF(st == NX_OK, "a step after a good load: %s", err);
        }
    } else {
        CHECKF(st == NX_EINVAL || st == NX_EFORMAT || st == NX_ERANGE || st == NX_EIO || st == NX_ENOMEM,
               "status %d: %s", st, err);
        CHECKF(err[0] && (st == NX_ENOMEM || strstr(err, g_path)), "the message does not name the file: %s", err);
        static const int32_t two[2] = {5, 6};
        int32_t first;
        st = nx_spec_prefill(s, two, 2, &first, err, sizeof err);
        CHECKF(st == NX_OK, "the session is not FRESH after a failed load: %s", err);
    }
    nx_spec_free(s);
    free(file);
    return 0;
}
