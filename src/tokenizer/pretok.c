/* pretok.c — everything between the input text and the BPE pieces: UTF-8
 * checks, NFC, added-token matching and the pre-tokenizer regex split.
 *
 * The regexes in tokenizer.json are written for Oniguruma (what HF runs). We
 * run them with PCRE2 in UTF + UCP mode, JIT compiled. The two agree on every
 * construct the Qwen patterns use (\p{L}, \p{N}, \p{M}, (?i:...), \s+(?!\S),
 * greedy classes) except \s: PCRE2 also counts U+180E MONGOLIAN VOWEL
 * SEPARATOR as space (a pre-Unicode-6.3 leftover), Oniguruma uses the
 * White_Space property. So \s and \S are rewritten to \p{White_Space} and
 * \P{White_Space} before compiling (both also work inside a class).
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/err.h"
#include "tokenizer/nfc9.h"

/* ---- UTF-8 -------------------------------------------------------------------- */

size_t nx_tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, int *truncated) {
    uint8_t c = s[0];
    *truncated = 0;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;   /* the second byte's range depends on the first */
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;          /* no overlongs */
        if (c == 0xED) hi = 0x9F;          /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;          /* no overlongs */
        if (c == 0xF4) hi = 0x8F;          /* nothing above U+10FFFF */
    } else {
        *cp = UINT32_MAX;
        return 1;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *cp = UINT32_MAX;
            *truncated = 1;
            return i;
        }
        if (s[i] < lo || s[i] > hi) {
            *cp = UINT32_MAX;
            return i;
        }
        lo = 0x80, hi = 0xBF;
        v = v << 6 | (s[i] & 0x3F);
    }
    *cp = v;
    return need + 1;
}

static inline int ascii8(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (v & 0x8080808080808080ull) == 0;
}

size_t nx_tok_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n && ascii8(s + i)) {
            i += 8;
            continue;
        }
        uint32_t cp;
        int trunc;
        size_t k = nx_tok_utf8_next(s + i, n - i, &cp, &trunc);
        if (cp == UINT32_MAX) return i;
        i += k;
    }
    return n;
}

/* ---- NFC ------------------------------------------------------------------------ */

/* Blocks where every character has NFC_Quick_Check=Yes, combining class 0
 * and never composes with a character before it, so a string made only of
 * them is already NFC whatever the order. Derived from the Unicode 14 data
 * (Python's unicodedata: assigned, ccc 0, NFC(c) == c, not the second half of
 * a primary composite); the tests check every one against utf8proc. Normal
 * text in these scripts skips utf8proc entirely. */
static const uint32_t NFC_STABLE[][2] = {
    {0x0000, 0x02FF}, {0x03A3, 0x0482}, {0x0488, 0x052F}, {0x05D0, 0x05EA},
    {0x0620, 0x064A}, {0x0671, 0x06D5}, {0x0E01, 0x0E30}, {0x10D0, 0x1160},
    {0x1E00, 0x1F15}, {0x2002, 0x2064}, {0x20E3, 0x20E3}, {0x2100, 0x2125},
    {0x2127, 0x2129}, {0x212C, 0x218B}, {0x2190, 0x2328}, {0x232B, 0x2426},
    {0x2460, 0x2ADB}, {0x2ADD, 0x2B73}, {0x3000, 0x3029}, {0x3030, 0x303F},
    {0x3041, 0x3096}, {0x309B, 0x30FF}, {0x3220, 0xA48C}, {0xAC00, 0xD7A3},
    {0xE000, 0xF8FF}, {0xFE00, 0xFE0F}, {0xFF01, 0xFFBE}, {0x1F000, 0x1F02B},
    {0x1F100, 0x1F1AD}, {0x1F1E6, 0x1F202}, {0x1F300, 0x1F6D7}, {0x1F900, 0x1FA53},
    {0x1FA70, 0x1FA74}, {0x1FA78, 0x1FA7C}, {0x1FA80, 0x1FA86}, {0x1FA90, 0x1FAAC},
    {0x1FAE0, 0x1FAE7}, {0x1FAF0, 0x1FAF6}, {0x20000, 0x2A6DF}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F},
};

/* 1 if cp is in one of the n sorted ranges r. */
static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int nx_tok_nfc_stable(uint32_t cp) {
    return in_ranges(NFC_STABLE, (int)(sizeof NFC_STABLE / sizeof NFC_STABLE[0]), cp);
}

/* HF tokenizers' NFC has Unicode 9.0 data: to it a mark or composing letter
 * added since (nfc9.h: e.g. U+1DF6, or U+11935 U+11930 -> U+11938) is
 * unassigned, so class 0 and composing with nothing. We treat each such code
 * point as a boundary: left as it is, with NFC done on the text either side
 * on its own. */
static int nfc_unassigned_in_9(int32_t c) {
    return c >= (int32_t)NFC_UNASSIGNED_IN_9[0][0] &&
           in_ranges(NFC_UNASSIGNED_IN_9, (int)(sizeof NFC_UNASSIGNED_IN_9 / sizeof NFC_UNASSIGNED_IN_9[0]),
                     (uint32_t)c);
}

static int already_nfc(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n && ascii8(s + i)) {
            i += 8;
            continue;
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int trunc;
        i += nx_tok_utf8_next(s + i, n - i, &cp, &trunc);
        if (!nx_tok_nfc_stable(cp)) return 0;
    }
    return 1;
}

/* NFC = canonical decomposition, canonical ordering (each run of non-starters
 * stably sorted by combining class), canonical composition (UAX #15).
 * utf8proc_decompose does the first two at once, but orders the marks by a
 * gnome sort, quadratic in the length of a run: a prompt of "a" and 64 KB of
 * alternating U+0301 U+0316 took 2.5 s, 256 KB 75 s. So we decompose one
 * character at a time into our UTF-32 buffer, sort each run ourselves (short
 * ones by insertion, long ones by counting: linear in a long run, and the same
 * order, since every one of these sorts is stable), let utf8proc recompose
 * each piece between Unicode 9.0 boundaries (below) and re-encode UTF-8 in
 * place. */

/* Room for n code points in w->nfc (the contents kept); -1: no memory. */
static int nfc_reserve(nx_tok_work *w, size_t n) {
    if (n <= w->cap_nfc) return 0;
    const size_t cap = n + n / 2 + 64;
    int32_t *p = nx_realloc(w->nfc, cap * sizeof *p);
    if (!p) return -1;
    w->nfc = p, w->cap_nfc = cap;
    return 0;
}

/* The combining class HF sees (a boundary's is 0). */
static int ccc_of(int32_t c) {
    const int k = utf8proc_get_property(c)->combining_class;
    return k && !nfc_unassigned_in_9(c) ? k : 0;
}

/* Runs up to this long are sorted by insertion (a letter with two or three
 * accents is the common case: no counting table to clear). */
#define NFC_SHORT_RUN 16

/* Sorts every run of non-starters among the n code points of w->nfc by
 * combining class, keeping equal classes in order (a long run by counting,
 * its copy in the space after the n); -1: no memory. */
static int nfc_order(nx_tok_work *w, size_t n) {
    for (size_t i = 0; i < n;) {
        if (ccc_of(w->nfc[i]) == 0) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && ccc_of(w->nfc[j]) != 0) j++;
        if (j - i <= NFC_SHORT_RUN) {
            for (size_t a = i + 1; a < j; a++) {
                const int32_t x = w->nfc[a];
                const int cx = ccc_of(x);
                size_t b = a;
                for (; b > i && ccc_of(w->nfc[b - 1]) > cx; b--) w->nfc[b] = w->nfc[b - 1];
                w->nfc[b] = x;
            }
        } else {
            if (nfc_reserve(w, n + (j - i))) return -1;
            int32_t *run = w->nfc + i, *sorted = w->nfc + n;
            size_t at[257] = {0};   /* at[c + 1]: marks of class c, then their first slots */
            for (size_t k = 0; k < j - i; k++) at[ccc_of(run[k]) + 1]++;
            for (int c = 1; c < 257; c++) at[c] += at[c - 1];
            for (size_t k = 0; k < j - i; k++) sorted[at[ccc_of(run[k])]++] = run[k];
            memcpy(run, sorted, (j - i) * sizeof *run);
        }
        i = j;
    }
    return 0;
}

/* Composes each piece of the n code points in b between boundaries on its
 * own, in place; returns the new length. opt must hold UTF8PROC_STABLE, or
 * utf8proc composes the exclusions (U+2ADD U+0338 -> U+2ADC). */
static size_t nfc_compose(int32_t *b, size_t n, utf8proc_option_t opt) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && !nfc_unassigned_in_9(b[j])) j++;
        const utf8proc_ssize_t r = utf8proc_normalize_utf32(b + i, (utf8proc_ssize_t)(j - i), opt);
        memmove(b + out, b + i, (size_t)r * sizeof *b);
        out += (size_t)r;
        if (j < n) b[out++] = b[j++];
        i = j;
    }
    return out;
}

nx_status nx_tok_nfc(nx_tok_work *w, const char *s, size_t n, const char **out, size_t *out_n) {
    if (already_nfc((const uint8_t *)s, n)) {
        *out = s, *out_n = n;
        return NX_OK;
    }
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    enum { ROOM = 32 };   /* code points one decomposition may take before we ask again (canonical ones take <= 4) */
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (len <= 0)
            return nx_fail(w->err, w->errlen, NX_EINVAL, "NFC: %s",
                           utf8proc_errmsg(len < 0 ? len : UTF8PROC_ERROR_INVALIDUTF8));
        utf8proc_ssize_t r = 0;
        for (size_t room = ROOM;; room = (size_t)r) {
            if (nfc_reserve(w, k + room)) return nx_fail(w->err, w->errlen, NX_ENOMEM, "NFC buffer");
            if (nfc_unassigned_in_9(c)) {   /* kept whole: HF does not decompose U+11938 */
                w->nfc[k] = c, r = 1;
                break;
            }
            int bound = 0;   /* grapheme state: unused without UTF8PROC_CHARBOUND */
            r = utf8proc_decompose_char(c, w->nfc + k, (utf8proc_ssize_t)room, opt, &bound);
            if (r < 0) return nx_fail(w->err, w->errlen, NX_EINVAL, "NFC: %s", utf8proc_errmsg(r));
            if ((size_t)r <= room) break;
        }
        k += (size_t)r;
        i += (size_t)len;
    }
    if (nfc_order(w, k)) return nx_fail(w->err, w->errlen, NX_ENOMEM, "NFC buffer");
    k = nfc_compose(w->nfc, k, opt);
    utf8proc_ssize_t r = utf8proc_reencode(w->nfc, (utf8proc_ssize_t)k, 0);   /* only UTF-8 now */
    if (r < 0) return nx_fail(w->err, w->errlen, NX_EINVAL, "NFC: %s", utf8proc_errmsg(r));
    *out = (const char *)w->nfc, *out_n = (size_t)r;
    return NX_OK;
}

/* ---- added tokens ---------------------------------------------------------------- */

typedef struct {
    int first, idx;
    size_t len;
} order_key;

static int order_cmp(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->first != y->first) return x->first - y->first;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;   /* longest first */
    return x->idx - y->idx;
}

nx_status nx_tok_matcher_build(nx_tok_matcher *m, const nx_tokenizer *t, int normalized) {
    memset(m, 0, sizeof *m);
    order_key *keys = nx_alloc(((size_t)t->n_added + 1) * sizeof *keys);
    m->order = nx_alloc(((size_t)t->n_added + 1) * sizeof *m->order);
    if (!keys || !m->order) {
        nx_free(keys);
        return NX_ENOMEM;
    }
    for (int i = 0; i < t->n_added; i++) {
        const nx_tok_added *a = &t->added[i];
        if (a->normalized != normalized || a->plen == 0) continue;
        keys[m->n++] = (order_key){(uint8_t)a->pattern[0], i, a->plen};
    }
    qsort(keys, (size_t)m->n, sizeof *keys, order_cmp);
    for (int i = 0; i < m->n; i++) m->order[i] = keys[i].idx;
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < m->n && keys[k].first < b) k++;
        m->start[b] = k;
    }
    nx_free(keys);
    return NX_OK;
}

void nx_tok_matcher_free(nx_tok_matcher *m) {
    nx_free(m->order);
    m->order = NULL;
}

/* The leftmost match at or after pos, the longest there (Aho-Corasick
 * LeftmostLongest). Returns the added-token index, or -1. */
static int find_added(const nx_tokenizer *t, const nx_tok_matcher *m, const uint8_t *s, size_t n, size_t pos,
                      size_t *at) {
    for (size_t i = pos; i < n; i++) {
        int b = s[i];
        for (int j = m->start[b]; j < m->start[b + 1]; j++) {
            const nx_tok_added *a = &t->added[m->order[j]];
            if (a->plen <= n - i && memcmp(s + i, a->pattern, a->plen) == 0) {
                *at = i;
                return m->order[j];
            }
        }
    }
    return -1;
}

/* Rust's char::is_whitespace / regex \s: the White_Space property. */
static int white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Start of the character that ends at s[end) (input is valid UTF-8). */
static size_t char_start(const uint8_t *s, size_t end) {
    size_t j = end - 1;
    while (j > 0 && (s[j] & 0xC0) == 0x80) j--;
    return j;
}

static uint32_t char_at(const uint8_t *s, size_t n, size_t *len) {
    uint32_t cp;
    int trunc;
    *len = nx_tok_utf8_next(s, n, &cp, &trunc);
    return cp;
}

/* HF: `\s*$` over s[0..end): where the trailing whitespace run starts. */
static size_t ws_run_start(const uint8_t *s, size_t end) {
    while (end > 0) {
        size_t j = char_start(s, end), len;
        if (!white_space(char_at(s + j, end - j, &len))) break;
        end = j;
    }
    return end;
}

/* HF: `^\s*` over s[0..n): the length of the leading whitespace run. */
static size_t ws_run_len(const uint8_t *s, size_t n) {
    size_t i = 0, len;
    while (i < n && white_space(char_at(s + i, n - i, &len))) i += len;
    return i;
}

/* Rust regex \w (Alphabetic, M, Nd, Pc, Join_Control) on the character at s. */
static int word_char(const nx_tokenizer *t, nx_tok_work *w, const uint8_t *s, size_t len) {
    return pcre2_match(t->word_re, s, len, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, w->md, NULL) > 0;
}

static int single_word_ok(const nx_tokenizer *t, nx_tok_work *w, const uint8_t *s, size_t n, size_t start,
                          size_t stop) {
    if (start > 0) {
        size_t j = char_start(s, start);
        if (word_char(t, w, s + j, start - j)) return 0;
    }
    if (stop < n) {
        size_t len;
        char_at(s + stop, n - stop, &len);
        if (word_char(t, w, s + stop, len)) return 0;
    }
    return 1;
}

typedef nx_status (*segment_fn)(nx_tokenizer *t, nx_tok_work *w, const char *s, size_t n);

/* HF's AddedVocabulary::find_matches: the text between matches goes to fn,
 * each kept match becomes its id. A skipped match (a special token in
 * NX_SPECIAL_AS_TEXT, a single_word token inside a word) still consumes its
 * text as far as matching goes, as in HF's iterator. */
static nx_status split_added(nx_tokenizer *t, nx_tok_work *w, const nx_tok_matcher *m, const char *text, size_t n,
                             segment_fn fn) {
    const uint8_t *s = (const uint8_t *)text;
    size_t start_offset = 0, pos = 0, at;
    nx_status st;
    int k;
    while (pos < n && (k = find_added(t, m, s, n, pos, &at)) >= 0) {
        const nx_tok_added *a = &t->added[k];
        size_t start = at, stop = at + a->plen;
        pos = stop;
        if (a->special && w->mode == NX_SPECIAL_AS_TEXT) continue;
        if (a->single_word && !single_word_ok(t, w, s, n, start, stop)) continue;
        if (a->lstrip) {
            size_t ns = ws_run_start(s, start);
            start = ns > start_offset ? ns : start_offset;   /* spaces a previous match took */
        }
        if (a->rstrip) stop += ws_run_len(s + stop, n - stop);
        if (start_offset < start && (st = fn(t, w, text + start_offset, start - start_offset)) != NX_OK) return st;
        if (nx_tok_push_id(w, a->id) != 0) return nx_fail(w->err, w->errlen, NX_ENOMEM, "token buffer");
        start_offset = stop;
    }
    return start_offset < n ? fn(t, w, text + start_offset, n - start_offset) : NX_OK;
}

/* ---- the regex split ---------------------------------------------------------- */

pcre2_code *nx_tok_regex_compile(const nx_tokenizer *t, const char *pat, size_t len, int literal, int *oom,
                                 char *msg, size_t msglen) {
    static const char ws[] = "\\p{White_Space}", nws[] = "\\P{White_Space}";
    size_t cap = len * (sizeof ws) + 1;
    char *out = nx_alloc(cap);
    size_t *from = nx_alloc(cap * sizeof *from);   /* output offset -> pattern offset */
    pcre2_compile_context *cc = pcre2_compile_context_create(t->gctx);
    pcre2_code *code = NULL;
    *oom = 0;
    if (!out || !from || !cc) {
        *oom = 1;
        snprintf(msg, msglen, "out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        if (!literal && pat[i] == '\\' && i + 1 < len) {
            char c = pat[i + 1];
            if (c == 's' || c == 'S') {
                for (size_t j = 0; j < sizeof ws - 1; j++) from[k] = i, out[k++] = (c == 's' ? ws : nws)[j];
                i += 2;
                continue;
            }
            if (c == 'Q') {   /* \Q...\E is literal text: copy it unchanged */
                const char *e = NULL;
                for (size_t j = i + 2; j + 1 < len; j++)
                    if (pat[j] == '\\' && pat[j + 1] == 'E') { e = pat + j + 2; break; }
                size_t stop = e ? (size_t)(e - pat) : len;
                while (i < stop) from[k] = i, out[k++] = pat[i++];
                continue;
            }
            from[k] = i, out[k++] = pat[i++];   /* any other escape: both bytes as they are */
        }
        from[k] = i, out[k++] = pat[i++];
    }
    from[k] = len;
    int ec;
    PCRE2_SIZE eo;
    /* PCRE2 refuses UCP beside LITERAL (a String pattern matches its bytes) */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code = pcre2_compile((PCRE2_SPTR)out, k, opts, &ec, &eo, cc);
    if (!code) {
        PCRE2_UCHAR buf[256];
        *oom = ec == PCRE2_ERROR_HEAP_FAILED;
        pcre2_get_error_message(ec, buf, sizeof buf);
        snprintf(msg, msglen, "invalid regular expression at offset %zu: %s", from[eo < k ? eo : k], (char *)buf);
    }
done:
    pcre2_compile_context_free(cc);
    nx_free(out);
    nx_free(from);
    return code;
}

static int re_match(const nx_tokenizer *t, int k, nx_tok_work *w, const char *s, size_t n, size_t pos) {
    if (t->stage_jit[k]) {
        int rc = pcre2_jit_match(t->stage[k], (PCRE2_SPTR)s, n, pos, 0, w->md, NULL);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
        /* the interpreter keeps its backtracking frames on the heap instead */
    }
    return pcre2_match(t->stage[k], (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, w->md, NULL);
}

/* HF's Split with behavior Isolated: every match is a piece and so is every
 * gap between matches. The pieces of stage k are split again by stage k+1;
 * after the last stage they go to BPE. An empty match only marks a boundary. */
static nx_status split_stage(nx_tokenizer *t, nx_tok_work *w, int k, const char *s, size_t n) {
    if (k == t->n_stages) {
        if (w->piece_fn) {
            if (n) w->piece_fn(w->piece_ud, s, n);
            return NX_OK;
        }
        nx_status st = nx_tok_bpe_piece(t, w, s, n);
        if (st != NX_OK) return nx_fail(w->err, w->errlen, st, "BPE on a piece of %zu bytes: %s", n, nx_status_str(st));
        return NX_OK;
    }
    size_t prev = 0, pos = 0;
    nx_status st;
    while (pos <= n) {
        int rc = re_match(t, k, w, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(rc, buf, sizeof buf);
            return nx_fail(w->err, w->errlen, NX_ERANGE, "pre-tokenizer regex %d at byte %zu: %s", k, pos, (char *)buf);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev && (st = split_stage(t, w, k + 1, s + prev, ms - prev)) != NX_OK) return st;
        if (me > ms && (st = split_stage(t, w, k + 1, s + ms, me - ms)) != NX_OK) return st;
        prev = me > prev ? me : prev;
        if (me == ms) {   /* empty match: step one character */
            if (ms >= n) break;
            uint32_t cp;
            int trunc;
            pos = ms + nx_tok_utf8_next((const uint8_t *)s + ms, n - ms, &cp, &trunc);
        } else {
            pos = me;
        }
    }
    return prev < n ? split_stage(t, w, k + 1, s + prev, n - prev) : NX_OK;
}

/* ---- the pipeline -------------------------------------------------------------- */

static nx_status normalized_segment(nx_tokenizer *t, nx_tok_work *w, const char *s, size_t n) {
    return split_stage(t, w, 0, s, n);
}

/* Text between raw-matched added tokens: normalize, then match the
 * normalized:true added tokens (HF extract_and_normalize, step 2). The NFC
 * buffer stays untouched until this segment is done. */
static nx_status raw_segment(nx_tokenizer *t, nx_tok_work *w, const char *s, size_t n) {
    if (t->nfc) {
        nx_status st = nx_tok_nfc(w, s, n, &s, &n);
        if (st != NX_OK) return st;
    }
    if (w->mode != NX_SPECIAL_NONE && t->match_norm.n > 0)
        return split_added(t, w, &t->match_norm, s, n, normalized_segment);
    return split_stage(t, w, 0, s, n);
}

nx_status nx_tok_encode(nx_tokenizer *t, nx_tok_work *w, const char *text, size_t len) {
    if (w->mode != NX_SPECIAL_NONE && t->match_raw.n > 0)
        return split_added(t, w, &t->match_raw, text, len, raw_segment);
    return raw_segment(t, w, text, len);
}
