/* decode.c — ids back to text.
 *
 * HF's ByteLevel decoder maps every char of every token string back to its
 * byte (a token with any char outside the byte map is taken as its raw UTF-8
 * bytes), concatenates all the bytes, and runs String::from_utf8_lossy once:
 * each maximal invalid subpart becomes one U+FFFD. Added tokens go through the
 * same decoder (their ASCII content maps to itself). We precompute each id's
 * bytes at load, so decoding is a copy plus one UTF-8 pass, and the streaming
 * decoder needs no allocation after it is created.
 */
#include "tokenizer/tokenizer.h"

#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

/* ---- bytes -> text -------------------------------------------------------------- */

size_t nx_tok_utf8_lossy(const uint8_t *in, size_t n, char *out, size_t *held) {
    size_t i = 0, k = 0;
    while (i < n) {
        if (in[i] < 0x80) {
            out[k++] = (char)in[i++];
            continue;
        }
        uint32_t cp;
        int truncated;
        size_t len = nx_tok_utf8_next(in + i, n - i, &cp, &truncated);
        if (cp != UINT32_MAX) {
            memcpy(out + k, in + i, len);
        } else if (truncated && held) {   /* an incomplete tail: wait for more bytes */
            *held = n - i;
            return k;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += len;
            continue;
        }
        k += len;
        i += len;
    }
    if (held) *held = 0;
    return k;
}

/* ---- the per-id byte table ---------------------------------------------------------- */

int nx_tok_build_decode(nx_tokenizer *t) {
    int16_t inv[0x144];   /* the byte map's code points are all below U+0144 */
    for (int i = 0; i < 0x144; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[t->byte_char[b]] = (int16_t)b;

    size_t nv = (size_t)t->vocab_size;
    const char **str = nx_calloc(nv, sizeof *str);
    uint32_t *slen = nx_calloc(nv, sizeof *slen);
    t->dec_off = nx_calloc(nv, sizeof *t->dec_off);
    t->dec_len = nx_calloc(nv, sizeof *t->dec_len);
    if (!str || !slen || !t->dec_off || !t->dec_len) goto oom;
    size_t total = 0;
    for (size_t id = 0; id < nv; id++) {
        if (t->id_len[id] != UINT32_MAX) {
            str[id] = t->vocab_text + t->id_off[id];
            slen[id] = t->id_len[id];
        }
    }
    for (int i = 0; i < t->n_added; i++) {   /* HF looks up added tokens first */
        str[t->added[i].id] = t->added_text + t->added[i].off;
        slen[t->added[i].id] = t->added[i].len;
    }
    for (size_t id = 0; id < nv; id++) total += slen[id];
    t->dec_bytes = nx_alloc(total + 1);
    if (!t->dec_bytes) goto oom;
    size_t k = 0;
    t->max_dec_len = 0;
    for (size_t id = 0; id < nv; id++) {
        const uint8_t *s = (const uint8_t *)str[id];
        size_t n = slen[id], start = k;
        t->dec_off[id] = (uint32_t)k;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int trunc;
            size_t len = nx_tok_utf8_next(s + i, n - i, &cp, &trunc);
            if (cp >= 0x144 || inv[cp] < 0) {   /* not byte-level: the raw bytes */
                k = start;
                memcpy(t->dec_bytes + k, s, n);
                k += n;
                break;
            }
            t->dec_bytes[k++] = (char)inv[cp];
            i += len;
        }
        t->dec_len[id] = (uint32_t)(k - start);
        if (k - start > t->max_dec_len) t->max_dec_len = k - start;
    }
    nx_free(str);
    nx_free(slen);
    return 0;
oom:
    nx_free(str);
    nx_free(slen);
    return -1;
}

static inline int kept(const nx_tokenizer *t, int32_t id, int skip_special) {
    if (id < 0 || id >= t->vocab_size) return 0;
    uint8_t f = t->id_flags[id];
    return (f & NX_TOK_DEFINED) && !(skip_special && (f & NX_TOK_SPECIAL));
}

const char *nx_tokenizer_token_bytes(const nx_tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (!kept(t, id, 0)) return NULL;
    *len = t->dec_len[id];
    return t->dec_bytes + t->dec_off[id];
}

nx_status nx_detokenize(const nx_tokenizer *t, const int32_t *ids, int n, int skip_special, char **text,
                        size_t *len, char *err, size_t errlen) {
    if (!t || !text || n < 0 || (n > 0 && !ids))
        return nx_fail(err, errlen, NX_EINVAL, "nx_detokenize: NULL tokenizer/ids/text or negative count");
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (kept(t, ids[i], skip_special)) total += t->dec_len[ids[i]];
    uint8_t *raw = nx_alloc(total + 1);
    char *out = nx_alloc(3 * total + 1);   /* each byte becomes at most one U+FFFD */
    if (!raw || !out) {
        nx_free(raw);
        nx_free(out);
        return nx_fail(err, errlen, NX_ENOMEM, "nx_detokenize: %zu bytes", 4 * total + 2);
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (!kept(t, ids[i], skip_special)) continue;
        memcpy(raw + k, t->dec_bytes + t->dec_off[ids[i]], t->dec_len[ids[i]]);
        k += t->dec_len[ids[i]];
    }
    size_t m = nx_tok_utf8_lossy(raw, k, out, NULL);
    out[m] = 0;
    nx_free(raw);
    *text = out;
    if (len) *len = m;
    return NX_OK;
}

/* ---- streaming ----------------------------------------------------------------- */

/* `in` holds the undecided tail (at most 3 bytes of an incomplete character)
 * followed by the newest token's bytes; `out` is sized for the worst case
 * (every byte a U+FFFD), so push and flush never allocate. */
struct nx_detok_stream {
    const nx_tokenizer *t;
    int skip_special;
    uint8_t *in;
    size_t n_in;
    char *out;
};

nx_status nx_detok_stream_new(const nx_tokenizer *t, int skip_special, nx_detok_stream **out, char *err,
                              size_t errlen) {
    if (!t || !out) return nx_fail(err, errlen, NX_EINVAL, "nx_detok_stream_new: NULL argument");
    nx_detok_stream *s = nx_calloc(1, sizeof *s);
    size_t cap = t->max_dec_len + 4;
    if (s) {
        s->in = nx_alloc(cap);
        s->out = nx_alloc(3 * cap + 1);
    }
    if (!s || !s->in || !s->out) {
        nx_detok_stream_free(s);
        return nx_fail(err, errlen, NX_ENOMEM, "nx_detok_stream_new");
    }
    s->t = t;
    s->skip_special = skip_special;
    *out = s;
    return NX_OK;
}

void nx_detok_stream_free(nx_detok_stream *s) {
    if (!s) return;
    nx_free(s->in);
    nx_free(s->out);
    nx_free(s);
}

const char *nx_detok_stream_push(nx_detok_stream *s, int32_t id, size_t *len) {
    if (len) *len = 0;
    if (!s) return "";
    const nx_tokenizer *t = s->t;
    if (!kept(t, id, s->skip_special)) {
        s->out[0] = 0;
        return s->out;
    }
    memcpy(s->in + s->n_in, t->dec_bytes + t->dec_off[id], t->dec_len[id]);
    size_t n = s->n_in + t->dec_len[id], held;
    size_t m = nx_tok_utf8_lossy(s->in, n, s->out, &held);
    memmove(s->in, s->in + n - held, held);
    s->n_in = held;
    s->out[m] = 0;
    if (len) *len = m;
    return s->out;
}

const char *nx_detok_stream_flush(nx_detok_stream *s, size_t *len) {
    if (len) *len = 0;
    if (!s) return "";
    size_t m = nx_tok_utf8_lossy(s->in, s->n_in, s->out, NULL);
    s->n_in = 0;
    s->out[m] = 0;
    if (len) *len = m;
    return s->out;
}
