/* tokenizer.c — loading a Hugging Face tokenizer.json (byte-level BPE, the
 * Qwen family), tokenizer_config.json, lookups, and the nx_tokenize entry.
 *
 * Loading accepts exactly what it can reproduce bit for bit and names
 * anything else: a malformed file is NX_EFORMAT with the file and JSON path
 * of the field ("model.merges[12]"), a well-formed but unhandled feature is
 * NX_EUNSUPPORTED with the same. What is read:
 *   model        BPE: vocab, merges ("a b" or ["a","b"]), unk_token, fuse_unk,
 *                byte_fallback, ignore_merges (dropout and subword affixes
 *                must be off)
 *   added_tokens id, content, special, normalized, lstrip, rstrip, single_word
 *   normalizer   null, NFC, or a Sequence of NFC
 *   pre_tokenizer Sequence[Split{Regex|String, Isolated}..., ByteLevel], or a
 *                bare ByteLevel (use_regex: the GPT-2 regex); add_prefix_space false
 *   decoder      ByteLevel
 * post_processor, truncation and padding do not change ids of a plain encode
 * without special tokens (Qwen adds no BOS/EOS), so they are ignored.
 */
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"

/* HF ByteLevel with use_regex: true splits with GPT-2's pattern. */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust regex \w, for single_word added tokens. */
static const char WORD_CLASS[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";

typedef struct {
    const char *file;
    char *err;
    size_t errlen;
} loader;

static nx_status lfail(const loader *L, nx_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nx_status lfail(const loader *L, nx_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nx_fail(L->err, L->errlen, st, "%s: %s", L->file, msg);
}

static void *pcre_malloc(PCRE2_SIZE n, void *ud) { (void)ud; return nx_alloc(n); }
static void pcre_free(void *p, void *ud) { (void)ud; nx_free(p); }

/* ---- JSON helpers ---------------------------------------------------------------- */

/* A boolean field: absent or null gives def; anything but a boolean is -1. */
static int jbool(const json_t *obj, const char *key, int def) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return def;
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

static const char *jstr(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static nx_status flag(const loader *L, const json_t *obj, const char *key, int def, int *out, const char *where) {
    int v = jbool(obj, key, def);
    if (v < 0) return lfail(L, NX_EFORMAT, "%s.%s is not a boolean", where, key);
    *out = v;
    return NX_OK;
}

static int arena_append(nx_tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->vocab_text_len + n + 1 > t->vocab_text_cap) {
        size_t cap = t->vocab_text_cap ? t->vocab_text_cap : 1 << 16;
        while (cap < t->vocab_text_len + n + 1) cap *= 2;
        char *p = nx_realloc(t->vocab_text, cap);
        if (!p) return -1;
        t->vocab_text = p;
        t->vocab_text_cap = cap;
    }
    memcpy(t->vocab_text + t->vocab_text_len, s, n);
    *off = (uint32_t)t->vocab_text_len;
    t->vocab_text_len += n;
    return 0;
}

/* ---- model ---------------------------------------------------------------------- */

static nx_status load_vocab(const loader *L, nx_tokenizer *t, const json_t *vocab, int *max_id) {
    if (!json_is_object(vocab)) return lfail(L, NX_EFORMAT, "model.vocab is missing or not an object");
    if (nx_tok_strmap_init(&t->vocab, json_object_size(vocab)) != 0) return lfail(L, NX_ENOMEM, "model.vocab");
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach((json_t *)vocab, key, klen, v) {
        if (!json_is_integer(v)) return lfail(L, NX_EFORMAT, "model.vocab[\"%.40s\"] is not an integer id", key);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= NX_TOK_MAX_ID)
            return lfail(L, NX_EFORMAT, "model.vocab[\"%.40s\"]: id %lld is out of range [0, %d)", key,
                         (long long)id, NX_TOK_MAX_ID);
        uint32_t off;
        if (arena_append(t, key, klen, &off) != 0 ||
            nx_tok_strmap_put(&t->vocab, t->vocab_text, off, (uint32_t)klen, (int32_t)id) != 0)
            return lfail(L, NX_ENOMEM, "model.vocab");
        if (id > *max_id) *max_id = (int)id;
    }
    return NX_OK;
}

/* One merges entry as (a, b): "a b" with exactly one space (HF splits on ' '
 * and wants two parts) or ["a", "b"]. Returns 1 for a "#version" line. */
static int merge_parts(const json_t *e, const char **a, size_t *la, const char **b, size_t *lb) {
    if (json_is_string(e)) {
        const char *s = json_string_value(e);
        size_t n = json_string_length(e);
        if (n >= 8 && memcmp(s, "#version", 8) == 0) return 1;
        const char *sp = memchr(s, ' ', n);
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) return -1;
        *a = s, *la = (size_t)(sp - s), *b = sp + 1, *lb = n - *la - 1;
        return 0;
    }
    if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
        json_is_string(json_array_get(e, 1))) {
        *a = json_string_value(json_array_get(e, 0)), *la = json_string_length(json_array_get(e, 0));
        *b = json_string_value(json_array_get(e, 1)), *lb = json_string_length(json_array_get(e, 1));
        return 0;
    }
    return -1;
}

static nx_status load_merges(const loader *L, nx_tokenizer *t, const json_t *merges) {
    if (!json_is_array(merges)) return lfail(L, NX_EFORMAT, "model.merges is missing or not an array");
    size_t n = json_array_size(merges);
    if (nx_tok_pairmap_init(&t->merges, n) != 0) return lfail(L, NX_ENOMEM, "model.merges");
    char *cat = NULL;
    size_t cap = 0;
    nx_status st = NX_OK;
    int32_t rank = 0;
    for (size_t i = 0; i < n && st == NX_OK; i++) {
        const char *a, *b;
        size_t la, lb;
        int r = merge_parts(json_array_get(merges, i), &a, &la, &b, &lb);
        if (r == 1) continue;
        if (r < 0) {
            st = lfail(L, NX_EFORMAT, "model.merges[%zu] is neither \"a b\" (one space) nor [\"a\", \"b\"]", i);
            break;
        }
        int32_t ia = nx_tok_strmap_get(&t->vocab, t->vocab_text, a, la);
        int32_t ib = nx_tok_strmap_get(&t->vocab, t->vocab_text, b, lb);
        if (ia < 0 || ib < 0) {
            st = lfail(L, NX_EFORMAT, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", i,
                       (int)(ia < 0 ? (la < 40 ? la : 40) : (lb < 40 ? lb : 40)), ia < 0 ? a : b);
            break;
        }
        if (la + lb > cap) {
            nx_free(cat);
            cap = 2 * (la + lb) + 64;
            if (!(cat = nx_alloc(cap))) {
                st = lfail(L, NX_ENOMEM, "model.merges");
                break;
            }
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t id = nx_tok_strmap_get(&t->vocab, t->vocab_text, cat, la + lb);
        if (id < 0) {
            st = lfail(L, NX_EFORMAT, "model.merges[%zu]: merged token \"%.*s\" is not in model.vocab", i,
                       (int)(la + lb < 40 ? la + lb : 40), cat);
            break;
        }
        nx_tok_pairmap_put(&t->merges, ia, ib, rank++, id);
    }
    t->n_merges = rank;
    nx_free(cat);
    return st;
}

static nx_status load_model(const loader *L, nx_tokenizer *t, const json_t *root, int *max_id) {
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return lfail(L, NX_EFORMAT, "model is missing or not an object");
    const json_t *type = json_object_get(model, "type");
    if (type && !json_is_string(type)) return lfail(L, NX_EFORMAT, "model.type is not a string");
    if (type && strcmp(json_string_value(type), "BPE") != 0)
        return lfail(L, NX_EUNSUPPORTED, "model.type \"%.40s\" is not supported (only \"BPE\")",
                     json_string_value(type));
    if (!type && !json_object_get(model, "merges"))
        return lfail(L, NX_EUNSUPPORTED, "model has no type and no merges (only BPE is supported)");
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return lfail(L, NX_EUNSUPPORTED, "model.dropout is not supported (BPE dropout is random)");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return lfail(L, NX_EUNSUPPORTED, "model.%s is not supported (must be null or \"\")", affixes[i]);
    }
    nx_status st;
    if ((st = flag(L, model, "fuse_unk", 0, &t->fuse_unk, "model")) ||
        (st = flag(L, model, "byte_fallback", 0, &t->byte_fallback, "model")) ||
        (st = flag(L, model, "ignore_merges", 0, &t->ignore_merges, "model")))
        return st;
    const json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk) && !json_is_string(unk))
        return lfail(L, NX_EFORMAT, "model.unk_token is not a string");
    if ((st = load_vocab(L, t, json_object_get(model, "vocab"), max_id)) != NX_OK) return st;
    /* HF's BPE looks unk up in model.vocab only; missing there means no unk. */
    t->unk_id = json_is_string(unk) ? nx_tok_strmap_get(&t->vocab, t->vocab_text, json_string_value(unk),
                                                        json_string_length(unk))
                                    : -1;
    return load_merges(L, t, json_object_get(model, "merges"));
}

/* ---- added tokens --------------------------------------------------------------- */

static nx_status load_added(const loader *L, nx_tokenizer *t, const json_t *root, int *max_id) {
    const json_t *arr = json_object_get(root, "added_tokens");
    if (!arr || json_is_null(arr)) return NX_OK;
    if (!json_is_array(arr)) return lfail(L, NX_EFORMAT, "added_tokens is not an array");
    size_t n = json_array_size(arr), total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_object_get(json_array_get(arr, i), "content");
        if (json_is_string(c)) total += json_string_length(c);
    }
    t->added = nx_calloc(n + 1, sizeof *t->added);
    t->added_text = nx_alloc(total + 1);
    if (!t->added || !t->added_text || nx_tok_strmap_init(&t->added_map, n) != 0)
        return lfail(L, NX_ENOMEM, "added_tokens");
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        if (!json_is_object(e)) return lfail(L, NX_EFORMAT, "added_tokens[%zu] is not an object", i);
        const json_t *id = json_object_get(e, "id"), *content = json_object_get(e, "content");
        if (!json_is_integer(id)) return lfail(L, NX_EFORMAT, "added_tokens[%zu].id is missing or not an integer", i);
        if (json_integer_value(id) < 0 || json_integer_value(id) >= NX_TOK_MAX_ID)
            return lfail(L, NX_EFORMAT, "added_tokens[%zu].id %lld is out of range [0, %d)", i,
                         (long long)json_integer_value(id), NX_TOK_MAX_ID);
        if (!json_is_string(content))
            return lfail(L, NX_EFORMAT, "added_tokens[%zu].content is missing or not a string", i);
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        int special = 0, normalized = 0, lstrip = 0, rstrip = 0, single_word = 0;
        nx_status st;
        if ((st = flag(L, e, "special", 0, &special, where)) ||
            (st = flag(L, e, "normalized", !special, &normalized, where)) ||
            (st = flag(L, e, "lstrip", 0, &lstrip, where)) || (st = flag(L, e, "rstrip", 0, &rstrip, where)) ||
            (st = flag(L, e, "single_word", 0, &single_word, where)))
            return st;
        size_t len = json_string_length(content);
        if (len == 0) continue;   /* HF ignores a token with empty content */
        /* A content listed twice keeps the id it got first (HF's add_tokens looks
         * the content up before taking the entry's id); the later entry's flags
         * are not taken either. */
        if (nx_tok_strmap_get(&t->added_map, t->added_text, json_string_value(content), len) >= 0) continue;
        nx_tok_added *a = &t->added[t->n_added++];
        memcpy(t->added_text + off, json_string_value(content), len);
        *a = (nx_tok_added){(uint32_t)off, (uint32_t)len, NULL, 0, (int32_t)json_integer_value(id),
                            (uint8_t)special, (uint8_t)lstrip, (uint8_t)rstrip, (uint8_t)normalized,
                            (uint8_t)single_word};
        off += len;
        if (nx_tok_strmap_put(&t->added_map, t->added_text, a->off, a->len, a->id) != 0)
            return lfail(L, NX_ENOMEM, "added_tokens");
        if (a->id > *max_id) *max_id = a->id;
    }
    return NX_OK;
}

/* What each added token is matched as: its content, normalized by the
 * tokenizer's normalizer when normalized is true (HF refresh_added_tokens). */
static nx_status added_patterns(const loader *L, nx_tokenizer *t) {
    nx_tok_work w = {.err = L->err, .errlen = L->errlen};
    nx_status st = NX_OK;
    for (int i = 0; i < t->n_added && st == NX_OK; i++) {
        nx_tok_added *a = &t->added[i];
        const char *s = t->added_text + a->off;
        size_t n = a->len;
        if (a->normalized && t->nfc && (st = nx_tok_nfc(&w, s, n, &s, &n)) != NX_OK) break;
        if (!(a->pattern = nx_alloc(n + 1))) {
            st = lfail(L, NX_ENOMEM, "added_tokens");
            break;
        }
        memcpy(a->pattern, s, n);
        a->plen = n;
    }
    nx_free(w.nfc);
    return st;
}

/* ---- normalizer, pre-tokenizer, decoder ------------------------------------------ */

static nx_status load_normalizer(const loader *L, const json_t *n, const char *where, int *nfc) {
    if (!n || json_is_null(n)) return NX_OK;
    const char *type = jstr(n, "type");
    if (!type) return lfail(L, NX_EFORMAT, "%s.type is missing", where);
    if (strcmp(type, "NFC") == 0) {
        *nfc = 1;
        return NX_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return lfail(L, NX_EFORMAT, "%s.normalizers is not an array", where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            nx_status st = load_normalizer(L, json_array_get(list, i), sub, nfc);
            if (st != NX_OK) return st;
        }
        return NX_OK;
    }
    return lfail(L, NX_EUNSUPPORTED, "%s.type \"%.40s\" is not supported (only NFC)", where, type);
}

static nx_status add_stage(const loader *L, nx_tokenizer *t, const char *pat, size_t len, int literal,
                           const char *where) {
    if (t->n_stages == NX_TOK_MAX_STAGES)
        return lfail(L, NX_EUNSUPPORTED, "%s: more than %d split stages", where, NX_TOK_MAX_STAGES);
    char msg[320];
    int oom;
    pcre2_code *re = nx_tok_regex_compile(t, pat, len, literal, &oom, msg, sizeof msg);
    if (!re) return lfail(L, oom ? NX_ENOMEM : NX_EFORMAT, "%s: %s", where, msg);
    t->stage[t->n_stages] = re;
    /* Without JIT (an unusual build of PCRE2) the interpreter gives the same splits. */
    t->stage_jit[t->n_stages] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    t->n_stages++;
    return NX_OK;
}

static nx_status load_split(const loader *L, nx_tokenizer *t, const json_t *p, const char *where) {
    const json_t *pat = json_object_get(p, "pattern");
    const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
    if (!json_is_string(re) && !json_is_string(lit))
        return lfail(L, NX_EFORMAT, "%s.pattern is neither {\"Regex\": ...} nor {\"String\": ...}", where);
    const char *behavior = jstr(p, "behavior");
    if (!behavior || strcmp(behavior, "Isolated") != 0)
        return lfail(L, NX_EUNSUPPORTED, "%s.behavior \"%.40s\" is not supported (only Isolated)", where,
                     behavior ? behavior : "(missing)");
    int invert = jbool(p, "invert", 0);
    if (invert != 0) return lfail(L, NX_EUNSUPPORTED, "%s.invert must be false", where);
    char sub[128];
    snprintf(sub, sizeof sub, "%s.pattern.%s", where, json_is_string(re) ? "Regex" : "String");
    const json_t *s = json_is_string(re) ? re : lit;
    return add_stage(L, t, json_string_value(s), json_string_length(s), !json_is_string(re), sub);
}

/* HF's ByteLevel defaults are add_prefix_space: true and use_regex: true. */
static nx_status load_bytelevel(const loader *L, nx_tokenizer *t, const json_t *p, const char *where) {
    int aps = jbool(p, "add_prefix_space", 1), use_regex = jbool(p, "use_regex", 1);
    if (aps != 0) return lfail(L, NX_EUNSUPPORTED, "%s.add_prefix_space must be false", where);
    if (use_regex < 0) return lfail(L, NX_EFORMAT, "%s.use_regex is not a boolean", where);
    return use_regex ? add_stage(L, t, GPT2_REGEX, sizeof GPT2_REGEX - 1, 0, where) : NX_OK;
}

static nx_status load_pretokenizer(const loader *L, nx_tokenizer *t, const json_t *p) {
    if (!p || json_is_null(p))
        return lfail(L, NX_EUNSUPPORTED, "pre_tokenizer is null (a ByteLevel pre-tokenizer is required)");
    const char *type = jstr(p, "type");
    if (!type) return lfail(L, NX_EFORMAT, "pre_tokenizer.type is missing");
    if (strcmp(type, "ByteLevel") == 0) return load_bytelevel(L, t, p, "pre_tokenizer");
    if (strcmp(type, "Sequence") != 0)
        return lfail(L, NX_EUNSUPPORTED, "pre_tokenizer.type \"%.40s\" is not supported", type);
    const json_t *list = json_object_get(p, "pretokenizers");
    if (!json_is_array(list)) return lfail(L, NX_EFORMAT, "pre_tokenizer.pretokenizers is not an array");
    size_t n = json_array_size(list);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(list, i);
        char where[64];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *et = jstr(e, "type");
        nx_status st;
        if (!et) return lfail(L, NX_EFORMAT, "%s.type is missing", where);
        if (strcmp(et, "Split") == 0) {
            st = load_split(L, t, e, where);
        } else if (strcmp(et, "ByteLevel") == 0) {
            /* after the byte mapping a later split would see mapped chars */
            if (i + 1 != n) return lfail(L, NX_EUNSUPPORTED, "%s: ByteLevel must be the last step", where);
            st = load_bytelevel(L, t, e, where);
        } else {
            return lfail(L, NX_EUNSUPPORTED, "%s.type \"%.40s\" is not supported", where, et);
        }
        if (st != NX_OK) return st;
    }
    const char *last = n ? jstr(json_array_get(list, n - 1), "type") : NULL;
    if (!last || strcmp(last, "ByteLevel") != 0)
        return lfail(L, NX_EUNSUPPORTED, "pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)");
    return NX_OK;
}

static nx_status load_decoder(const loader *L, const json_t *d) {
    const char *type = d ? jstr(d, "type") : NULL;
    if (!d || json_is_null(d)) return lfail(L, NX_EUNSUPPORTED, "decoder is missing (only ByteLevel is supported)");
    if (!type) return lfail(L, NX_EFORMAT, "decoder.type is missing");
    if (strcmp(type, "ByteLevel") != 0)
        return lfail(L, NX_EUNSUPPORTED, "decoder.type \"%.40s\" is not supported (only ByteLevel)", type);
    return NX_OK;
}

/* ---- derived tables -------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 to U+0100.. in byte order. */
static void byte_map(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static void byte_symbols(nx_tokenizer *t) {
    byte_map(t->byte_char);
    t->bytes_direct = 1;
    for (int b = 0; b < 256; b++) {
        uint32_t c = t->byte_char[b];
        char *u = t->byte_utf8[b];
        if (c < 0x80) u[0] = (char)c, t->byte_utf8_len[b] = 1;
        else u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3F)), t->byte_utf8_len[b] = 2;
        t->byte_sym[b] = nx_tok_strmap_get(&t->vocab, t->vocab_text, u, t->byte_utf8_len[b]);
        if (t->byte_sym[b] < 0) t->bytes_direct = 0;
        t->byte_fb_n[b] = 0;
        int ok = 1;
        for (int j = 0; j < t->byte_utf8_len[b]; j++) {   /* HF: format!("<{:#04X}>") per byte */
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)u[j]);
            t->byte_fb[b][j] = nx_tok_strmap_get(&t->vocab, t->vocab_text, name, 6);
            if (t->byte_fb[b][j] < 0) ok = 0;
        }
        if (ok) t->byte_fb_n[b] = t->byte_utf8_len[b];
    }
}

static nx_status id_tables(const loader *L, nx_tokenizer *t) {
    size_t nv = (size_t)t->vocab_size;
    t->id_off = nx_alloc(nv * sizeof *t->id_off);
    t->id_len = nx_alloc(nv * sizeof *t->id_len);
    t->id_flags = nx_calloc(nv, 1);
    if (!t->id_off || !t->id_len || !t->id_flags) return lfail(L, NX_ENOMEM, "id tables");
    for (size_t i = 0; i < nv; i++) t->id_len[i] = UINT32_MAX;
    for (uint32_t i = 0; i <= t->vocab.mask; i++) {
        const nx_tok_strslot *e = &t->vocab.slots[i];
        if (e->id < 0) continue;
        t->id_off[e->id] = e->off;
        t->id_len[e->id] = e->len;
        t->id_flags[e->id] = NX_TOK_DEFINED;
    }
    for (int i = 0; i < t->n_added; i++)
        t->id_flags[t->added[i].id] = NX_TOK_DEFINED | NX_TOK_ADDED | (t->added[i].special ? NX_TOK_SPECIAL : 0);
    return NX_OK;
}

/* ---- tokenizer_config.json, chat_template.jinja ------------------------------------ */

static void add_stop(nx_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_stop; i++)
        if (t->stop[i] == id) return;
    if (t->n_stop < (int)(sizeof t->stop / sizeof t->stop[0])) t->stop[t->n_stop++] = id;
}

/* The whole file in a NUL-terminated buffer (nx_free), or NULL with errno set. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        errno = ENOMEM;
        if ((buf = nx_alloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            errno = EIO;
            nx_free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

static nx_status load_config(nx_tokenizer *t, const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    loader L = {path, err, errlen};
    int32_t eos = -1;
    if (access(path, F_OK) == 0) {
        json_error_t je;
        json_t *root = json_load_file(path, 0, &je);
        if (!root) return lfail(&L, NX_EFORMAT, "not valid JSON (line %d: %s)", je.line, je.text);
        const json_t *e = json_object_get(root, "eos_token");
        const char *eos_s = json_is_string(e) ? json_string_value(e) : jstr(e, "content");
        if (eos_s) eos = nx_tokenizer_token_id(t, eos_s);
        const json_t *ct = json_object_get(root, "chat_template");
        const char *tmpl = json_is_string(ct) ? json_string_value(ct) : NULL;
        for (size_t i = 0; json_is_array(ct) && i < json_array_size(ct); i++) {
            const json_t *c = json_array_get(ct, i);
            const char *name = jstr(c, "name");
            if (name && strcmp(name, "default") == 0) tmpl = jstr(c, "template");
        }
        if (tmpl && !(t->chat_template = nx_strdup(tmpl))) {
            json_decref(root);
            return lfail(&L, NX_ENOMEM, "chat_template");
        }
        json_decref(root);
    }
    /* A separate chat_template.jinja is what newer checkpoints ship, and what
     * transformers prefers over the config's copy. */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (access(path, F_OK) == 0) {
        char *tmpl = read_file(path, NULL);
        if (!tmpl) return lfail(&L, errno == ENOMEM ? NX_ENOMEM : NX_EIO, "cannot read: %s", strerror(errno));
        nx_free(t->chat_template);
        t->chat_template = tmpl;
    }
    add_stop(t, eos);
    add_stop(t, nx_tokenizer_token_id(t, "<|im_end|>"));
    add_stop(t, nx_tokenizer_token_id(t, "<|endoftext|>"));
    return NX_OK;
}

/* ---- load / free ------------------------------------------------------------------ */

static nx_status load_json(nx_tokenizer *t, const json_t *root, char *err, size_t errlen) {
    loader L = {t->path, err, errlen};
    if (!json_is_object(root)) return lfail(&L, NX_EFORMAT, "the top level is not a JSON object");
    int max_id = -1;
    nx_status st;
    if ((st = load_model(&L, t, root, &max_id)) || (st = load_added(&L, t, root, &max_id)) ||
        (st = load_normalizer(&L, json_object_get(root, "normalizer"), "normalizer", &t->nfc)) ||
        (st = load_pretokenizer(&L, t, json_object_get(root, "pre_tokenizer"))) ||
        (st = load_decoder(&L, json_object_get(root, "decoder"))))
        return st;
    t->vocab_size = max_id + 1;
    byte_symbols(t);
    if ((st = id_tables(&L, t)) || (st = added_patterns(&L, t))) return st;
    for (int i = 0; i < t->n_added; i++) {
        if (!t->added[i].single_word || t->word_re) continue;
        int ec;
        PCRE2_SIZE eo;
        pcre2_compile_context *cc = pcre2_compile_context_create(t->gctx);
        t->word_re = cc ? pcre2_compile((PCRE2_SPTR)WORD_CLASS, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                                        &eo, cc)
                        : NULL;
        pcre2_compile_context_free(cc);
        if (!t->word_re) return lfail(&L, NX_ENOMEM, "single_word matcher");
    }
    if (nx_tok_matcher_build(&t->match_raw, t, 0) || nx_tok_matcher_build(&t->match_norm, t, 1) ||
        nx_tok_build_decode(t) != 0)
        return lfail(&L, NX_ENOMEM, "tables");
    return NX_OK;
}

nx_status nx_tokenizer_load(const char *dir, nx_tokenizer **out, char *err, size_t errlen) {
    if (!dir || !out) return nx_fail(err, errlen, NX_EINVAL, "nx_tokenizer_load: NULL argument");
    nx_tokenizer *t = nx_calloc(1, sizeof *t);
    if (!t) return nx_fail(err, errlen, NX_ENOMEM, "nx_tokenizer_load");
    nx_tok_cache_init(t);
    size_t plen = strlen(dir) + sizeof "/tokenizer.json";
    nx_status st = NX_ENOMEM;
    t->path = nx_alloc(plen);
    t->gctx = pcre2_general_context_create(pcre_malloc, pcre_free, NULL);
    if (!t->path || !t->gctx) {
        nx_fail(err, errlen, st, "nx_tokenizer_load: %s", dir);
        goto fail;
    }
    snprintf(t->path, plen, "%s/tokenizer.json", dir);
    /* One read and json_loadb: json_load_file reads with getc, a byte at a time. */
    size_t n;
    char *text = read_file(t->path, &n);
    if (!text) {
        int e = errno;
        st = nx_fail(err, errlen, e == ENOMEM ? NX_ENOMEM : NX_EIO, "%s: cannot read: %s", t->path, strerror(e));
        goto fail;
    }
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_ALLOW_NUL, &je);
    nx_free(text);
    if (!root) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: not valid JSON (line %d, column %d: %s)", t->path, je.line,
                     je.column, je.text);
        goto fail;
    }
    st = load_json(t, root, err, errlen);
    json_decref(root);
    if (st == NX_OK) st = load_config(t, dir, err, errlen);
    if (st != NX_OK) goto fail;
    *out = t;
    return NX_OK;
fail:
    nx_tokenizer_free(t);
    return st;
}

void nx_tokenizer_free(nx_tokenizer *t) {
    if (!t) return;
    nx_tok_cache_free(t);
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stage[i]);
    pcre2_code_free(t->word_re);
    pcre2_general_context_free(t->gctx);
    nx_tok_matcher_free(&t->match_raw);
    nx_tok_matcher_free(&t->match_norm);
    for (int i = 0; i < t->n_added; i++) nx_free(t->added[i].pattern);
    nx_free(t->added);
    nx_free(t->added_text);
    nx_tok_strmap_free(&t->added_map);
    nx_tok_strmap_free(&t->vocab);
    nx_tok_pairmap_free(&t->merges);
    nx_free(t->vocab_text);
    nx_free(t->id_off);
    nx_free(t->id_len);
    nx_free(t->id_flags);
    nx_free(t->dec_bytes);
    nx_free(t->dec_off);
    nx_free(t->dec_len);
    nx_free(t->chat_template);
    nx_free(t->path);
    nx_free(t);
}

/* ---- lookups ---------------------------------------------------------------------- */

int nx_tokenizer_vocab_size(const nx_tokenizer *t) { return t ? t->vocab_size : 0; }

/* HF token_to_id: the added vocabulary first, then the model's. */
int32_t nx_tokenizer_token_id(const nx_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = nx_tok_strmap_get(&t->added_map, t->added_text, token, n);
    return id >= 0 ? id : nx_tok_strmap_get(&t->vocab, t->vocab_text, token, n);
}

int nx_tokenizer_is_special(const nx_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->vocab_size && (t->id_flags[id] & NX_TOK_SPECIAL) != 0;
}

int nx_tokenizer_stop_ids(const nx_tokenizer *t, const int32_t **ids) {
    if (ids) *ids = t ? t->stop : NULL;
    return t ? t->n_stop : 0;
}

const char *nx_tokenizer_chat_template(const nx_tokenizer *t) { return t ? t->chat_template : NULL; }

/* ---- encode ----------------------------------------------------------------------- */

size_t nx_utf8_check(const char *text, size_t len) { return text ? nx_tok_utf8_check((const uint8_t *)text, len) : 0; }

nx_status nx_tokenize(nx_tokenizer *t, const char *text, size_t len, nx_special_mode mode, int32_t **ids, int *n,
                      char *err, size_t errlen) {
    if (!t || !ids || !n || (!text && len))
        return nx_fail(err, errlen, NX_EINVAL, "nx_tokenize: NULL tokenizer, text or output");
    if (mode != NX_SPECIAL_PARSE && mode != NX_SPECIAL_AS_TEXT && mode != NX_SPECIAL_NONE)
        return nx_fail(err, errlen, NX_EINVAL, "nx_tokenize: unknown special-token mode %d", (int)mode);
    size_t bad = nx_tok_utf8_check((const uint8_t *)text, len);
    if (bad < len) return nx_fail(err, errlen, NX_EINVAL, "nx_tokenize: invalid UTF-8 at byte offset %zu", bad);
    nx_tok_work w = {.mode = mode, .err = err, .errlen = errlen};
    nx_status st = NX_OK;
    if (!(w.md = pcre2_match_data_create(1, t->gctx)))
        st = nx_fail(err, errlen, NX_ENOMEM, "nx_tokenize: match data");
    if (st == NX_OK) st = nx_tok_encode(t, &w, text ? text : "", len);
    if (st == NX_OK && w.n_ids > (size_t)INT32_MAX)
        st = nx_fail(err, errlen, NX_ERANGE, "nx_tokenize: %zu tokens", w.n_ids);
    if (st == NX_OK) {
        *n = (int)w.n_ids;
        *ids = w.n_ids ? w.ids : NULL;
        if (w.n_ids) w.ids = NULL;   /* now the caller's */
    }
    nx_tok_work_free(&w);
    return st;
}

nx_status nx_tok_pieces(nx_tokenizer *t, const char *text, size_t len, void (*fn)(void *ud, const char *s, size_t n),
                        void *ud, char *err, size_t errlen) {
    nx_tok_work w = {.mode = NX_SPECIAL_NONE, .err = err, .errlen = errlen, .piece_fn = fn, .piece_ud = ud};
    if (!(w.md = pcre2_match_data_create(1, t->gctx))) return nx_fail(err, errlen, NX_ENOMEM, "match data");
    nx_status st = nx_tok_encode(t, &w, text, len);
    nx_tok_work_free(&w);
    return st;
}
