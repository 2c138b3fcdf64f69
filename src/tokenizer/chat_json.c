/* chat_json.c — the arena and the JSON reader behind the chat renderer (chat.h).
 *
 * Why not jansson: the templates print numbers the way Python does after
 * json.loads, so 2.0 must stay "2.0" and 1e-05 "1e-05", and integers of any
 * size keep their digits. jansson turns every real into a double and prints it
 * its own way. This reader keeps an int's digits as text and re-spells a float
 * with Python's repr rules (shortest round-trip digits), which reproduces the
 * input whenever it was written by Python and otherwise prints what Python
 * would print for the same JSON. */
#include "tokenizer/chat.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

/* ---- Arena ---------------------------------------------------------------
 * One render allocates many small values and strings and frees them all at
 * the end, so they come from blocks that are released together. */

#define CHAT_BLOCK_BYTES (64 * 1024)   /* usual block size; bigger requests get their own */

struct chat_block {
    chat_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *chat_arena_alloc(chat_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    chat_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > CHAT_BLOCK_BYTES ? n : CHAT_BLOCK_BYTES;
        b = nx_alloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void chat_arena_free(chat_arena *a) {
    chat_block *b = a->head;
    while (b) {
        chat_block *next = b->next;
        nx_free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---- Python's repr(float) ------------------------------------------------
 * The shortest digit string that reads back as the same double (printf's
 * correctly rounded %.*e tried at 1..17 digits), laid out as Python does:
 * positional when the decimal exponent is in [-4, 16), with ".0" for an
 * integral value; otherwise d[.ddd]e+XX with at least two exponent digits. */

int chat_float_repr(double d, char *buf) {
    if (isnan(d)) return sprintf(buf, "nan");
    if (isinf(d)) return sprintf(buf, d < 0 ? "-inf" : "inf");
    char tmp[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp is [-]D[.DDD]e(+|-)XX */
    const char *s = tmp;
    int neg = (*s == '-');
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int e = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;

    char *o = buf;
    if (neg) *o++ = '-';
    if (e < -4 || e >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e >= 0) {
        for (int i = 0; i <= e; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > e + 1) {
            memcpy(o, digits + e + 1, (size_t)(nd - e - 1));
            o += nd - e - 1;
        } else {
            *o++ = '0';
        }
    } else {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -e - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    }
    *o = 0;
    return (int)(o - buf);
}

/* ---- JSON reader ---------------------------------------------------------
 * Recursive descent over the grammar Python's json module accepts (which adds
 * NaN, Infinity and -Infinity to RFC 8259). Containers collect their children
 * in a temporary vector and then move into the arena. */

typedef struct {
    chat_arena *a;
    const char *t;
    size_t n, i;
    int depth;
    char *err;
    size_t errlen;
    nx_status st;
} jreader;

static int jfail(jreader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Records the first error as "line L column C: what"; returns 0 for `return jfail(...)`. */
static int jfail(jreader *r, size_t at, const char *fmt, ...) {
    if (r->st != NX_OK) return 0;
    r->st = NX_EFORMAT;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < r->n; k++) {
        if (r->t[k] == '\n') { line++; col = 1; } else col++;
    }
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    nx_fail(r->err, r->errlen, NX_EFORMAT, "line %zu column %zu: %s", line, col, what);
    return 0;
}

static void *jalloc(jreader *r, size_t n) {
    void *p = chat_arena_alloc(r->a, n ? n : 1);
    if (!p && r->st == NX_OK) {
        r->st = NX_ENOMEM;
        nx_fail(r->err, r->errlen, NX_ENOMEM, "out of memory reading JSON");
    }
    return p;
}

static void skip_ws(jreader *r) {
    while (r->i < r->n) {
        char c = r->t[r->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->i++;
    }
}

static int lit_at(jreader *r, const char *lit) {
    size_t k = strlen(lit);
    return r->n - r->i >= k && memcmp(r->t + r->i, lit, k) == 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static int utf8_seq_len(const unsigned char *p, size_t avail) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if ((size_t)len > avail) return 0;
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    return len;
}

static char *put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {   /* a lone surrogate lands here too (as WTF-8) */
        *o++ = (char)(0xe0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    return o;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *v = x;
    return 1;
}

/* A string starting at the opening quote. The decoded text is never longer
 * than the source span (an escape of 6 or 12 bytes yields at most 3 or 4). */
static int read_string(jreader *r, chat_val *v) {
    size_t start = r->i++;
    size_t end = r->i;
    while (end < r->n && r->t[end] != '"') end += (r->t[end] == '\\') ? 2 : 1;
    char *o = jalloc(r, (end < r->n ? end : r->n) - start + 1);
    if (!o) return 0;
    v->kind = CV_STR;
    v->s = o;
    for (;;) {
        if (r->i >= r->n) return jfail(r, start, "unterminated string starting here");
        unsigned char c = (unsigned char)r->t[r->i];
        if (c == '"') { r->i++; break; }
        if (c < 0x20) return jfail(r, r->i, "invalid control character in string");
        if (c != '\\') {
            int k = utf8_seq_len((const unsigned char *)r->t + r->i, r->n - r->i);
            if (!k) return jfail(r, r->i, "invalid UTF-8 in string");
            memcpy(o, r->t + r->i, (size_t)k);
            o += k;
            r->i += (size_t)k;
            continue;
        }
        if (r->i + 1 >= r->n) return jfail(r, start, "unterminated string starting here");
        char e = r->t[r->i + 1];
        r->i += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (r->n - r->i < 4 || !hex4(r->t + r->i, &cp))
                return jfail(r, r->i - 2, "invalid \\uXXXX escape");
            r->i += 4;
            /* A high surrogate followed by an escaped low one is one code point;
             * unpaired surrogates are kept, as Python keeps them. */
            if (cp >= 0xd800 && cp <= 0xdbff && r->n - r->i >= 6 && r->t[r->i] == '\\' &&
                r->t[r->i + 1] == 'u' && hex4(r->t + r->i + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                r->i += 6;
            }
            o = put_utf8(o, cp);
            break;
        }
        default:
            return jfail(r, r->i - 2, "invalid escape '\\%c'", e);
        }
    }
    v->len = (size_t)(o - v->s);
    *o = 0;
    return 1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int read_number(jreader *r, chat_val *v) {
    size_t start = r->i, k = r->i;
    if (k < r->n && r->t[k] == '-') k++;
    if (k < r->n && r->t[k] == '0') {
        k++;
    } else if (k < r->n && is_digit(r->t[k])) {
        while (k < r->n && is_digit(r->t[k])) k++;
    } else {
        return jfail(r, start, "expecting value");
    }
    int is_float = 0;
    if (k + 1 < r->n && r->t[k] == '.' && is_digit(r->t[k + 1])) {
        is_float = 1;
        k++;
        while (k < r->n && is_digit(r->t[k])) k++;
    }
    if (k < r->n && (r->t[k] == 'e' || r->t[k] == 'E')) {
        size_t m = k + 1;
        if (m < r->n && (r->t[m] == '+' || r->t[m] == '-')) m++;
        if (m < r->n && is_digit(r->t[m])) {
            is_float = 1;
            k = m;
            while (k < r->n && is_digit(r->t[k])) k++;
        }
    }
    size_t len = k - start;
    r->i = k;
    char *text = jalloc(r, len + 1);
    if (!text) return 0;
    memcpy(text, r->t + start, len);
    text[len] = 0;
    if (!is_float) {
        v->kind = CV_INT;
        if (strcmp(text, "-0") == 0) text[0] = '0', text[1] = 0, len = 1;   /* int("-0") == 0 */
        v->s = text;
        v->len = len;
        return 1;
    }
    v->kind = CV_FLOAT;
    v->d = strtod(text, NULL);   /* correctly rounded, like Python's float() */
    char buf[40];
    int n = chat_float_repr(v->d, buf);
    char *s = jalloc(r, (size_t)n + 1);
    if (!s) return 0;
    memcpy(s, buf, (size_t)n + 1);
    v->s = s;
    v->len = (size_t)n;
    return 1;
}

static int read_value(jreader *r, chat_val *v);

/* Grows a temporary vector of values (freed by the caller). */
static int push(jreader *r, chat_val **vec, size_t *n, size_t *cap, const chat_val *x) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        chat_val *nv = nx_realloc(*vec, nc * sizeof *nv);
        if (!nv) {
            if (r->st == NX_OK) {
                r->st = NX_ENOMEM;
                nx_fail(r->err, r->errlen, NX_ENOMEM, "out of memory reading JSON");
            }
            return 0;
        }
        *vec = nv;
        *cap = nc;
    }
    (*vec)[(*n)++] = *x;
    return 1;
}

static chat_val *move_to_arena(jreader *r, const chat_val *vec, size_t n) {
    chat_val *dst = jalloc(r, n * sizeof *dst);
    if (dst && n) memcpy(dst, vec, n * sizeof *dst);
    return dst;
}

static int read_array(jreader *r, chat_val *v) {
    chat_val *vec = NULL, x;
    size_t n = 0, cap = 0;
    int ok = 1;
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->t[r->i] == ']') {
        r->i++;
    } else {
        for (;;) {
            skip_ws(r);
            if (!read_value(r, &x) || !push(r, &vec, &n, &cap, &x)) { ok = 0; break; }
            skip_ws(r);
            if (r->i < r->n && r->t[r->i] == ',') { r->i++; continue; }
            if (r->i < r->n && r->t[r->i] == ']') { r->i++; break; }
            ok = jfail(r, r->i, "expecting ',' or ']'");
            break;
        }
    }
    if (ok) {
        v->kind = CV_LIST;
        v->n = n;
        v->items = move_to_arena(r, vec, n);
        ok = v->items != NULL;
    }
    nx_free(vec);
    return ok;
}

/* Duplicate keys: Python's dict keeps the first position and the last value.
 * Sorting key indices finds the duplicates in O(n log n) for any object size. */
static _Thread_local const chat_val *g_sort_keys;   /* qsort has no context argument */
static int cmp_key_index(const void *pa, const void *pb) {
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const chat_val *ka = &g_sort_keys[a], *kb = &g_sort_keys[b];
    size_t m = ka->len < kb->len ? ka->len : kb->len;
    int c = memcmp(ka->s, kb->s, m);
    if (c) return c;
    if (ka->len != kb->len) return ka->len < kb->len ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int dedup_keys(jreader *r, chat_val *keys, chat_val *vals, size_t *n) {
    if (*n < 2) return 1;
    size_t *idx = nx_alloc(*n * sizeof *idx);
    unsigned char *drop = nx_calloc(*n, 1);
    if (!idx || !drop) {
        nx_free(idx);
        nx_free(drop);
        r->st = NX_ENOMEM;
        nx_fail(r->err, r->errlen, NX_ENOMEM, "out of memory reading JSON");
        return 0;
    }
    for (size_t k = 0; k < *n; k++) idx[k] = k;
    g_sort_keys = keys;
    qsort(idx, *n, sizeof *idx, cmp_key_index);
    int any = 0;
    for (size_t k = 0; k < *n;) {
        size_t j = k + 1;
        while (j < *n && keys[idx[j]].len == keys[idx[k]].len &&
               memcmp(keys[idx[j]].s, keys[idx[k]].s, keys[idx[k]].len) == 0)
            j++;
        if (j - k > 1) {
            vals[idx[k]] = vals[idx[j - 1]];
            for (size_t m = k + 1; m < j; m++) drop[idx[m]] = 1;
            any = 1;
        }
        k = j;
    }
    if (any) {
        size_t w = 0;
        for (size_t k = 0; k < *n; k++) {
            if (drop[k]) continue;
            keys[w] = keys[k];
            vals[w] = vals[k];
            w++;
        }
        *n = w;
    }
    nx_free(idx);
    nx_free(drop);
    return 1;
}

static int read_object(jreader *r, chat_val *v) {
    chat_val *keys = NULL, *vals = NULL, k, x;
    size_t nk = 0, capk = 0, nv = 0, capv = 0;
    int ok = 1;
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->t[r->i] == '}') {
        r->i++;
    } else {
        for (;;) {
            skip_ws(r);
            if (r->i >= r->n || r->t[r->i] != '"') {
                ok = jfail(r, r->i, "expecting property name enclosed in double quotes");
                break;
            }
            size_t ks = r->i;
            if (!read_string(r, &k)) { ok = 0; break; }
            k.src_off = ks;
            k.src_len = r->i - ks;
            skip_ws(r);
            if (r->i >= r->n || r->t[r->i] != ':') { ok = jfail(r, r->i, "expecting ':' delimiter"); break; }
            r->i++;
            skip_ws(r);
            if (!read_value(r, &x) || !push(r, &keys, &nk, &capk, &k) || !push(r, &vals, &nv, &capv, &x)) {
                ok = 0;
                break;
            }
            skip_ws(r);
            if (r->i < r->n && r->t[r->i] == ',') { r->i++; continue; }
            if (r->i < r->n && r->t[r->i] == '}') { r->i++; break; }
            ok = jfail(r, r->i, "expecting ',' or '}'");
            break;
        }
    }
    if (ok) ok = dedup_keys(r, keys, vals, &nk);
    if (ok) {
        v->kind = CV_DICT;
        v->n = nk;
        v->keys = move_to_arena(r, keys, nk);
        v->items = move_to_arena(r, vals, nk);
        ok = v->keys && v->items;
    }
    nx_free(keys);
    nx_free(vals);
    return ok;
}

static int read_value(jreader *r, chat_val *v) {
    memset(v, 0, sizeof *v);
    if (r->i >= r->n) return jfail(r, r->i, "expecting value");
    size_t start = r->i;
    char c = r->t[r->i];
    int ok;
    if (c == '{' || c == '[') {
        if (++r->depth > CHAT_JSON_MAX_DEPTH)
            return jfail(r, r->i, "nested deeper than %d levels", CHAT_JSON_MAX_DEPTH);
        ok = c == '{' ? read_object(r, v) : read_array(r, v);
        r->depth--;
    } else if (c == '"') {
        ok = read_string(r, v);
    } else if (lit_at(r, "null")) {
        v->kind = CV_NONE, r->i += 4, ok = 1;
    } else if (lit_at(r, "true")) {
        v->kind = CV_BOOL, v->b = 1, r->i += 4, ok = 1;
    } else if (lit_at(r, "false")) {
        v->kind = CV_BOOL, v->b = 0, r->i += 5, ok = 1;
    } else if (lit_at(r, "NaN") || lit_at(r, "Infinity") || lit_at(r, "-Infinity")) {
        int neg = c == '-';
        v->kind = CV_FLOAT;
        v->d = c == 'N' ? NAN : neg ? -INFINITY : INFINITY;
        v->s = c == 'N' ? "nan" : neg ? "-inf" : "inf";
        v->len = strlen(v->s);
        r->i += c == 'N' ? 3 : neg ? 9 : 8;
        ok = 1;
    } else {
        ok = read_number(r, v);
    }
    v->src_off = start;
    v->src_len = r->i - start;
    return ok;
}

nx_status chat_json_parse(chat_arena *a, const char *text, size_t len, chat_val **out,
                          char *err, size_t errlen) {
    jreader r = {.a = a, .t = text, .n = len, .err = err, .errlen = errlen, .st = NX_OK};
    *out = NULL;
    chat_val *v = jalloc(&r, sizeof *v);
    if (!v) return r.st;
    skip_ws(&r);
    if (!read_value(&r, v)) return r.st;
    skip_ws(&r);
    if (r.i != r.n) {
        jfail(&r, r.i, "extra data after the JSON value");
        return r.st;
    }
    *out = v;
    return NX_OK;
}

chat_val *chat_dict_get(const chat_val *d, const char *key) {
    if (!d || d->kind != CV_DICT) return NULL;
    size_t kl = strlen(key);
    for (size_t k = 0; k < d->n; k++)
        if (d->keys[k].len == kl && memcmp(d->keys[k].s, key, kl) == 0) return &d->items[k];
    return NULL;
}
