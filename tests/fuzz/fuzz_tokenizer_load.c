/* fuzz_tokenizer_load.c — nx_tokenizer_load on a fuzzed tokenizer.json or
 * tokenizer_config.json, the other file being the bundled model's
 * (models/default).
 *
 * Input: byte 0 picks the file (bit 0), the rest is its text.
 *   0  tokenizer.json, beside models/default/tokenizer_config.json; a
 *      successful load is then used: fixed texts are encoded in the three
 *      special-token modes and decoded whole and streamed, and every id of
 *      the vocabulary is decoded.
 *   1  tokenizer_config.json, beside models/default/tokenizer.json; only
 *      the config varies, so a loaded tokenizer gets the lookups but not the
 *      texts, and a chat template found in the config goes to
 *      nx_chat_template_new and, if recognised, renders a one-message
 *      conversation.
 *
 * Checked (include/nextn.h): a failed load returns a documented status with a
 * message naming the file and leaves *out as it was; a String split pattern
 * is matched as its bytes, so it is never an invalid regular expression
 * (fixed in 41bb55e: PCRE2 refused UCP beside LITERAL and every such
 * tokenizer.json failed to load), unless too large for PCRE2. A loaded
 * tokenizer's stop ids are in the vocabulary; encoding gives defined ids in
 * [0, vocab), or a failure with a message and no ids; the stream decoder
 * agrees with the whole decode; everything is freed (LeakSanitizer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "nextn.h"
#include "tokenizer/tokenizer.h"

#define DEFAULT_DIR NX_MODELS_DIR "/default"

static const char *const k_file[2] = {"tokenizer.json", "tokenizer_config.json"};
static char g_dir[2][PATH_MAX];   /* [mode]: the directory loaded */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *tmp = fuzz_tmpdir("fuzz_tokenizer_load");
    for (int mode = 0; mode < 2; mode++) {
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "mode%d", mode);
        fuzz_path(g_dir[mode], tmp, name);
        if (mkdir(g_dir[mode], 0755) != 0) FUZZ_DIE("cannot make %s", g_dir[mode]);
        const char *other = k_file[!mode];   /* the file the input does not replace */
        size_t n;
        unsigned char *b = fuzz_read_file(fuzz_path(path, DEFAULT_DIR, other), &n);
        fuzz_write_file(fuzz_path(path, g_dir[mode], other), b, n);
        free(b);
    }
    return 0;
}

#define T(lit) {lit, sizeof lit - 1}
static const struct {
    const char *s;
    size_t n;
} k_texts[] = {
    T(""),
    T("Hello, world! It's 2024 and we'll see.\n\n  indented\ttab\r\n"),
    T("<|im_start|>user\nhi <|im_end|>\n<think>\nx</think>  <tool_call>{\"a\": 1}</tool_call>"),
    T("caf\xc3\xa9 cafe\xcc\x81 \xe2\x84\xab \xef\xac\x81 \xea\xb0\x80\xe1\x86\xa8 >\xcc\xb8 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
      "\xf0\x9f\x98\x80"),
    T("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    T("ababababababababababababababababababababababababababababababababababababababababababababab!!"),
    T("\x00\x01\x7f \xc2\x80 \xc2\xa0 \xe1\xa0\x8e \xe3\x80\x80 x"),
    T("word<|endoftext|>word <|endoftext|> <|im_end|>"),
};
#undef T

/* Decodes ids whole and streamed; the two must agree. */
static void check_decode(const nx_tokenizer *t, const int32_t *ids, int n) {
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        size_t len = 0;
        char err[256];
        CHECKF(nx_detokenize(t, ids, n, skip, &out, &len, err, sizeof err) == NX_OK, "nx_detokenize: %s", err);
        nx_detok_stream *ds = NULL;
        CHECKF(nx_detok_stream_new(t, skip, &ds, err, sizeof err) == NX_OK, "nx_detok_stream_new: %s", err);
        size_t at = 0, l;
        for (int i = 0; i < n; i++) {
            const char *p = nx_detok_stream_push(ds, ids[i], &l);
            CHECKF(at + l <= len && memcmp(out + at, p, l) == 0, "the stream differs from the whole decode at %zu", at);
            at += l;
        }
        const char *p = nx_detok_stream_flush(ds, &l);
        CHECKF(at + l == len && memcmp(out + at, p, l) == 0, "the stream gives %zu bytes, the whole decode %zu", at + l,
               len);
        nx_detok_stream_free(ds);
        nx_free(out);
    }
}

/* Lookups always; with texts, encodes and decodes k_texts and every id. */
static void use_tokenizer(nx_tokenizer *t, int with_texts) {
    int vocab = nx_tokenizer_vocab_size(t);
    CHECK(vocab == t->vocab_size && vocab >= 0);
    const int32_t *stop;
    int n_stop = nx_tokenizer_stop_ids(t, &stop);
    CHECKF(n_stop >= 0 && n_stop <= 4, "%d stop ids", n_stop);
    for (int i = 0; i < n_stop; i++) CHECKF(stop[i] >= 0 && stop[i] < vocab, "stop id %d", stop[i]);
    (void)nx_tokenizer_token_id(t, "<|im_end|>");
    (void)nx_tokenizer_token_id(t, "a");
    for (int id = -1; id <= vocab && id < 300000; id += 1 + id / 7) (void)nx_tokenizer_is_special(t, id);
    if (!with_texts) return;
    for (size_t k = 0; k < sizeof k_texts / sizeof *k_texts; k++) {
        for (int m = 0; m < 3; m++) {
            int32_t *ids = NULL;
            int n = 0;
            char err[512] = "";
            nx_status st = nx_tokenize(t, k_texts[k].s, k_texts[k].n, (nx_special_mode)m, &ids, &n, err, sizeof err);
            if (st != NX_OK) {   /* a regex hitting a match limit, say: it must say why */
                CHECKF(err[0] && ids == NULL, "text %zu, mode %d: a failed encode without a message or with ids", k, m);
                continue;
            }
            CHECKF(n >= 0 && (n == 0) == (ids == NULL), "n %d, ids %p", n, (void *)ids);
            for (int i = 0; i < n; i++) {
                CHECKF(ids[i] >= 0 && ids[i] < vocab, "text %zu, mode %d: id %d outside [0, %d)", k, m, ids[i], vocab);
                CHECKF(t->id_flags[ids[i]] & NX_TOK_DEFINED, "text %zu, mode %d: id %d is not defined", k, m, ids[i]);
            }
            check_decode(t, ids, n);
            nx_free(ids);
        }
    }
    if (vocab > 0 && vocab <= 1 << 20) {   /* every id decodes */
        int32_t *all = malloc((size_t)vocab * sizeof *all);
        for (int i = 0; i < vocab; i++) all[i] = i;
        char *out = NULL;
        char err[256];
        CHECKF(nx_detokenize(t, all, vocab, 0, &out, NULL, err, sizeof err) == NX_OK, "decoding every id: %s", err);
        nx_free(out);
        free(all);
    }
}

static void use_chat_template(const nx_tokenizer *t) {
    const char *text = nx_tokenizer_chat_template(t);
    if (!text) return;
    nx_chat_template *c = NULL;
    char err[512];
    nx_status st = nx_chat_template_new(text, strlen(text), "fuzz", &c, err, sizeof err);
    if (st != NX_OK) {
        CHECKF(c == NULL && err[0], "a failed nx_chat_template_new returned a template or no message");
        return;
    }
    nx_chat_request req = {"[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, 1, -1};
    char *out = NULL;
    CHECKF(nx_chat_render(c, &req, &out, err, sizeof err) == NX_OK, "nx_chat_render: %s", err);
    nx_free(out);
    nx_chat_template_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] & 1;
    char path[PATH_MAX];
    fuzz_write_file(fuzz_path(path, g_dir[mode], k_file[mode]), data + 1, size - 1);
    nx_tokenizer *t = (nx_tokenizer *)1;   /* a failed load must leave it */
    char err[1024] = "";
    nx_status st = nx_tokenizer_load(g_dir[mode], &t, err, sizeof err);
    if (st != NX_OK) {
        CHECK(t == (nx_tokenizer *)1);
        CHECKF(err[0] != 0, "status %s without a message", nx_status_str(st));
        CHECKF(strstr(err, k_file[mode]), "the message does not name %s: %s", k_file[mode], err);
        CHECKF(st == NX_EFORMAT || st == NX_EUNSUPPORTED || st == NX_ENOMEM || st == NX_EIO, "status %s: %s",
               nx_status_str(st), err);
        CHECKF(!strstr(err, ".pattern.String: invalid regular expression") || strstr(err, "too large"),
               "a String pattern, matched as its bytes, was refused as a regular expression: %s", err);
        return 0;
    }
    CHECK(t != NULL && t != (nx_tokenizer *)1);
    use_tokenizer(t, mode == 0);
    if (mode == 1) use_chat_template(t);
    nx_tokenizer_free(t);
    return 0;
}
