/* fuzz_encode.c — nx_tokenize, nx_detokenize and the streaming decoder on any
 * bytes, with the bundled model's tokenizer (models/default, loaded once).
 *
 * Input: the text to encode (any bytes; NULs included, it is length-based).
 *
 * Checked, in every special-token mode (PARSE, AS_TEXT, NONE), against
 * include/nextn.h and src/tokenizer/tokenizer.h:
 *   - invalid UTF-8 is NX_EINVAL and the message gives the byte offset of the
 *     first bad sequence (found here with utf8proc, independently);
 *   - valid UTF-8 encodes: *ids is NULL iff *n is 0, non-empty text gives ids,
 *     every id is in [0, vocab) and defined; NONE emits no added token and
 *     AS_TEXT no special one;
 *   - decoding gives valid UTF-8, NUL-terminated at its length; in NONE mode
 *     decode(encode(s)) is NFC(s) (utf8proc), in the other modes it is s
 *     itself when s is already NFC (the added tokens here have no lstrip or
 *     rstrip, so nothing is dropped);
 *   - the streaming decoder, pushed one id at a time and flushed, gives
 *     exactly the whole decode, in valid UTF-8 pieces (with and without
 *     skip_special);
 *   - the input bytes read as int32 ids (negative, out of range, anything)
 *     decode to valid UTF-8, whole and streamed alike.
 * NFC must stay linear in a run of combining marks: fixed in 41bb55e (the
 * quadratic sort of utf8proc took seconds on 64 KB of marks); the fuzzer's
 * -timeout is what catches a regression there. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "fuzz.h"
#include "nextn.h"
#include "tokenizer/tokenizer.h"

static nx_tokenizer *g_tok;

static void free_tokenizer(void) { nx_tokenizer_free(g_tok); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[512];
    if (nx_tokenizer_load(NX_MODELS_DIR "/default", &g_tok, err, sizeof err) != NX_OK) FUZZ_DIE("tokenizer: %s", err);
    atexit(free_tokenizer);
    return 0;
}

/* Offset of the first invalid UTF-8 sequence (RFC 3629: no overlongs,
 * surrogates or code points past U+10FFFF), n if there is none. */
static size_t first_invalid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp < 0) return i;
        i += (size_t)k;
    }
    return n;
}

static void check_ids(const int32_t *ids, int n, nx_special_mode mode) {
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        CHECKF(id >= 0 && id < g_tok->vocab_size, "id %d outside [0, %d)", id, g_tok->vocab_size);
        uint8_t f = g_tok->id_flags[id];
        CHECKF(f & NX_TOK_DEFINED, "id %d is not defined", id);
        if (mode == NX_SPECIAL_NONE) CHECKF(!(f & NX_TOK_ADDED), "NONE mode emitted added token %d", id);
        if (mode == NX_SPECIAL_AS_TEXT) CHECKF(!(f & NX_TOK_SPECIAL), "AS_TEXT mode emitted special token %d", id);
    }
}

static void check_stream(const int32_t *ids, int n, int skip, const char *whole, size_t whole_len) {
    nx_detok_stream *s = NULL;
    char err[256];
    CHECKF(nx_detok_stream_new(g_tok, skip, &s, err, sizeof err) == NX_OK, "nx_detok_stream_new: %s", err);
    size_t at = 0, len;
    for (int i = 0; i < n; i++) {
        const char *p = nx_detok_stream_push(s, ids[i], &len);
        CHECKF(at + len <= whole_len && memcmp(whole + at, p, len) == 0, "the stream differs from the whole decode at %zu",
               at);
        CHECK(first_invalid((const uint8_t *)p, len) == len);
        at += len;
    }
    const char *p = nx_detok_stream_flush(s, &len);
    CHECKF(at + len == whole_len && memcmp(whole + at, p, len) == 0, "the stream gives %zu bytes, the whole decode %zu",
           at + len, whole_len);
    nx_detok_stream_free(s);
}

/* Decodes ids both ways (skip_special 0 and 1); returns the decode without
 * skipping when want is not NULL (caller frees with nx_free). */
static void check_decode(const int32_t *ids, int n, char **want, size_t *want_len) {
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        size_t len = 0;
        char err[256];
        CHECKF(nx_detokenize(g_tok, ids, n, skip, &out, &len, err, sizeof err) == NX_OK && out, "nx_detokenize: %s", err);
        CHECK(strlen(out) <= len && out[len] == 0);
        CHECK(first_invalid((const uint8_t *)out, len) == len);
        check_stream(ids, n, skip, out, len);
        if (!skip && want) {
            *want = out;
            *want_len = len;
        } else {
            nx_free(out);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    size_t bad = first_invalid(data, size);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t nfc_len = -1;
    if (bad == size) nfc_len = utf8proc_map(data, (utf8proc_ssize_t)size, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int is_nfc = nfc_len >= 0 && (size_t)nfc_len == size && memcmp(nfc, data, size) == 0;

    static const nx_special_mode modes[3] = {NX_SPECIAL_PARSE, NX_SPECIAL_AS_TEXT, NX_SPECIAL_NONE};
    for (int m = 0; m < 3; m++) {
        int32_t *ids = (int32_t *)1;
        int n = -7;
        char err[512] = "";
        nx_status st = nx_tokenize(g_tok, text, size, modes[m], &ids, &n, err, sizeof err);
        if (bad < size) {
            CHECKF(st == NX_EINVAL, "invalid UTF-8 at byte %zu was accepted (status %d)", bad, st);
            char want[64];
            snprintf(want, sizeof want, "byte offset %zu", bad);
            CHECKF(strstr(err, want), "the message '%s' lacks '%s'", err, want);
            break;
        }
        CHECKF(st == NX_OK, "valid UTF-8 was refused: %s (%s)", nx_status_str(st), err);
        CHECKF(n >= 0 && (n == 0) == (ids == NULL), "n %d, ids %p", n, (void *)ids);
        CHECK(size == 0 || n > 0);
        check_ids(ids, n, modes[m]);
        char *out;
        size_t len;
        check_decode(ids, n, &out, &len);
        if (modes[m] == NX_SPECIAL_NONE && nfc_len >= 0)
            CHECKF(len == (size_t)nfc_len && memcmp(out, nfc, len) == 0,
                   "NONE: decode(encode(s)) is not NFC(s) (%zu vs %zd bytes)", len, nfc_len);
        if (modes[m] != NX_SPECIAL_NONE && is_nfc)
            CHECKF(len == size && memcmp(out, data, size) == 0, "mode %d: decode(encode(s)) is not s (%zu vs %zu bytes)",
                   (int)modes[m], len, size);
        nx_free(out);
        nx_free(ids);
    }
    free(nfc);

    if (size >= 4) {   /* the bytes as arbitrary ids */
        int n = (int)(size / 4);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        memcpy(ids, data, (size_t)n * sizeof *ids);
        check_decode(ids, n, NULL, NULL);
        free(ids);
    }
    return 0;
}
