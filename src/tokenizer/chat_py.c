/* chat_py.c — the Python and Jinja2 semantics the Qwen chat templates rely on
 * (contract in chat.h).
 *
 * The reference is what transformers' apply_chat_template does: Jinja2's
 * sandboxed environment over Python objects from json.loads, `tojson` as
 * json.dumps(ensure_ascii=False), and raise_exception() as TemplateError. The
 * sections follow a value's life: exceptions, constructors and output, tests,
 * lookups, operators, str methods, then the printers (str, repr, json.dumps).
 *
 * Every operation first checks the sticky error and then does nothing, so a
 * renderer can run straight through after a failure; the first exception is
 * the one reported, as in Python. */
#include "tokenizer/chat.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

/* ---- Exceptions ------------------------------------------------------------
 * Messages are Python's `type(e).__name__ + ": " + str(e)`. */

void chat_raise(chat_rt *R, const char *type, const char *fmt, ...) {
    if (R->status != NX_OK) return;
    R->status = NX_EINVAL;
    int k = snprintf(R->msg, sizeof R->msg, "%s: ", type);
    if (k < 0 || (size_t)k >= sizeof R->msg) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R->msg + k, sizeof R->msg - (size_t)k, fmt, ap);
    va_end(ap);
}

void chat_template_error(chat_rt *R, const char *msg) { chat_raise(R, "TemplateError", "%s", msg); }

void chat_nomem(chat_rt *R) {
    if (R->status != NX_OK) return;
    R->status = NX_ENOMEM;
    snprintf(R->msg, sizeof R->msg, "out of memory while rendering");
}

/* Using an Undefined in any way other than printing or testing it raises the
 * message it carries. */
static void raise_undefined(chat_rt *R, const chat_val *u) {
    chat_raise(R, "UndefinedError", "%.*s", (int)u->len, u->s);
}

/* The Python type name ("NoneType", "str", ...) used in TypeError messages. */
static const char *py_type(const chat_val *v) {
    switch (v->kind) {
    case CV_UNDEF: return "Undefined";
    case CV_NONE: return "NoneType";
    case CV_BOOL: return "bool";
    case CV_INT: return "int";
    case CV_FLOAT: return "float";
    case CV_STR: return "str";
    case CV_LIST: return "list";
    case CV_DICT: return "dict";
    }
    return "object";
}

/* jinja2.utils.object_type_repr: "None", or "<type> object" for builtins. */
static const char *jinja_type_repr(const chat_val *v) {
    switch (v->kind) {
    case CV_NONE: return "None";
    case CV_BOOL: return "bool object";
    case CV_INT: return "int object";
    case CV_FLOAT: return "float object";
    case CV_STR: return "str object";
    case CV_LIST: return "list object";
    case CV_DICT: return "dict object";
    default: return "Undefined object";
    }
}

/* ---- Constructors and output --------------------------------------------
 * The static values are shared and never written: after a failure every
 * operation returns one of them. */

static chat_val g_undef = {.kind = CV_UNDEF, .s = "value is undefined", .len = 18};
static chat_val g_true = {.kind = CV_BOOL, .b = 1};
static chat_val g_false = {.kind = CV_BOOL, .b = 0};
static chat_val g_empty = {.kind = CV_STR, .s = "", .len = 0};

chat_val *chat_bool_v(int b) { return b ? &g_true : &g_false; }

static chat_val *new_val(chat_rt *R, chat_kind kind) {
    chat_val *v = chat_arena_alloc(R->arena, sizeof *v);
    if (!v) {
        chat_nomem(R);
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->kind = kind;
    return v;
}

chat_val *chat_strn(chat_rt *R, const char *s, size_t len) {
    if (R->status != NX_OK) return &g_empty;
    chat_val *v = new_val(R, CV_STR);
    if (!v) return &g_empty;
    v->s = s;
    v->len = len;
    return v;
}

chat_val *chat_lit(chat_rt *R, const char *s) { return chat_strn(R, s, strlen(s)); }

/* A str value holding a fresh arena copy of len bytes. */
static chat_val *str_copy(chat_rt *R, const char *s, size_t len) {
    if (R->status != NX_OK) return &g_empty;
    char *p = chat_arena_alloc(R->arena, len + 1);
    if (!p) {
        chat_nomem(R);
        return &g_empty;
    }
    if (len) memcpy(p, s, len);
    p[len] = 0;
    return chat_strn(R, p, len);
}

static chat_val *undef_msg(chat_rt *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static chat_val *undef_msg(chat_rt *R, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    chat_val *s = str_copy(R, buf, (size_t)n);
    if (R->status != NX_OK) return &g_undef;
    chat_val *v = new_val(R, CV_UNDEF);
    if (!v) return &g_undef;
    v->s = s->s;
    v->len = s->len;
    return v;
}

static void out_append(chat_rt *R, const char *s, size_t n) {
    if (R->status != NX_OK || n == 0) return;
    if (R->len + n + 1 > R->cap) {
        size_t cap = R->cap ? R->cap : 4096;
        while (cap < R->len + n + 1) cap *= 2;
        char *p = nx_realloc(R->out, cap);
        if (!p) {
            chat_nomem(R);
            return;
        }
        R->out = p;
        R->cap = cap;
    }
    memcpy(R->out + R->len, s, n);
    R->len += n;
    R->out[R->len] = 0;
}

/* A growable byte buffer for building one string (nx_alloc'd, then copied
 * into the arena by sb_done). */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = nx_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static chat_val *sb_done(chat_rt *R, strbuf *b) {
    chat_val *v;
    if (b->oom) {
        chat_nomem(R);
        v = &g_empty;
    } else {
        v = str_copy(R, b->p ? b->p : "", b->n);
    }
    nx_free(b->p);
    return v;
}

static void py_str_into(strbuf *b, const chat_val *v);

void chat_emit(chat_rt *R, const chat_val *v) {
    if (R->status != NX_OK) return;
    if (v->kind == CV_STR || v->kind == CV_INT || v->kind == CV_FLOAT) {
        out_append(R, v->s, v->len);
        return;
    }
    strbuf b = {0};
    py_str_into(&b, v);
    if (b.oom) chat_nomem(R);
    else out_append(R, b.p, b.n);
    nx_free(b.p);
}

void chat_emit_lit(chat_rt *R, const char *s) { out_append(R, s, strlen(s)); }

void chat_capture_begin(chat_rt *R, chat_capture *c) {
    c->out = R->out, c->len = R->len, c->cap = R->cap;
    R->out = NULL, R->len = R->cap = 0;
}

chat_val *chat_capture_end(chat_rt *R, chat_capture *c) {
    chat_val *v = str_copy(R, R->out ? R->out : "", R->len);
    nx_free(R->out);
    R->out = c->out, R->len = c->len, R->cap = c->cap;
    return v;
}

/* ---- Tests ---------------------------------------------------------------
 * Jinja's `is ...` tests and truthiness. Undefined is false, not none, and
 * iterable (it iterates as empty); `is false` is identity with False, so only
 * the JSON value false passes it. */

int chat_truthy(const chat_val *v) {
    switch (v->kind) {
    case CV_UNDEF:
    case CV_NONE: return 0;
    case CV_BOOL: return v->b;
    case CV_INT: return !(v->len == 1 && v->s[0] == '0');
    case CV_FLOAT: return v->d != 0.0;   /* NaN is true, as in Python */
    case CV_STR: return v->len > 0;
    case CV_LIST:
    case CV_DICT: return v->n > 0;
    }
    return 0;
}

int chat_is_defined(const chat_val *v) { return v->kind != CV_UNDEF; }
int chat_is_none(const chat_val *v) { return v->kind == CV_NONE; }
int chat_is_false(const chat_val *v) { return v->kind == CV_BOOL && !v->b; }
int chat_is_string(const chat_val *v) { return v->kind == CV_STR; }
int chat_is_mapping(const chat_val *v) { return v->kind == CV_DICT; }
int chat_is_iterable(const chat_val *v) {
    return v->kind == CV_STR || v->kind == CV_LIST || v->kind == CV_DICT || v->kind == CV_UNDEF;
}
int chat_is_sequence(const chat_val *v) {
    return v->kind == CV_STR || v->kind == CV_LIST || v->kind == CV_DICT;
}

int chat_eq_str(const chat_val *v, const char *s) {
    return v->kind == CV_STR && v->len == strlen(s) && memcmp(v->s, s, v->len) == 0;
}

/* ---- Lookups ---------------------------------------------------------------
 * Jinja2's sandboxed getattr: Python attribute first, then obj[name]. None of
 * the names the templates look up (role, content, function, ...) is an
 * attribute of a JSON type, so a dict gives its key and anything else an
 * Undefined; looking into an Undefined raises. */

chat_val *chat_attr(chat_rt *R, const chat_val *obj, const char *name) {
    if (R->status != NX_OK) return &g_undef;
    if (obj->kind == CV_UNDEF) {
        raise_undefined(R, obj);
        return &g_undef;
    }
    chat_val *v = chat_dict_get(obj, name);
    if (v) return v;
    return undef_msg(R, "'%s' has no attribute '%s'", jinja_type_repr(obj), name);
}

chat_val *chat_item(chat_rt *R, const chat_val *obj, long i) {
    if (R->status != NX_OK) return &g_undef;
    if (obj->kind == CV_UNDEF) {
        raise_undefined(R, obj);
        return &g_undef;
    }
    if (obj->kind == CV_LIST) {
        long j = i < 0 ? i + (long)obj->n : i;
        if (j >= 0 && (size_t)j < obj->n) return &obj->items[j];
    }
    return undef_msg(R, "%s has no element %ld", jinja_type_repr(obj), i);
}

/* ---- Operators -------------------------------------------------------------
 * `in` and `+` as Python evaluates them for JSON values, with Python's
 * TypeError texts; an Undefined operand raises its own message. */

static int bytes_find(const char *h, size_t hn, const char *n, size_t nn, int last, size_t *at) {
    if (nn > hn) return 0;
    if (!last) {
        for (size_t k = 0; k + nn <= hn; k++)
            if (memcmp(h + k, n, nn) == 0) return *at = k, 1;
    } else {
        for (size_t k = hn - nn + 1; k-- > 0;)
            if (memcmp(h + k, n, nn) == 0) return *at = k, 1;
    }
    return 0;
}

int chat_in(chat_rt *R, const char *needle, const chat_val *c) {
    if (R->status != NX_OK) return 0;
    size_t nl = strlen(needle), at;
    switch (c->kind) {
    case CV_STR: return bytes_find(c->s, c->len, needle, nl, 0, &at);
    case CV_LIST:
        for (size_t k = 0; k < c->n; k++)
            if (chat_eq_str(&c->items[k], needle)) return 1;
        return 0;
    case CV_DICT: return chat_dict_get(c, needle) != NULL;
    case CV_UNDEF: return 0;   /* Undefined iterates as empty */
    default:
        chat_raise(R, "TypeError", "argument of type '%s' is not iterable", py_type(c));
        return 0;
    }
}

/* Python's a + b for the types a template can meet. */
static chat_val *py_add(chat_rt *R, const chat_val *a, const chat_val *b) {
    if (R->status != NX_OK) return &g_empty;
    if (a->kind == CV_UNDEF) return raise_undefined(R, a), &g_empty;
    if (b->kind == CV_UNDEF) return raise_undefined(R, b), &g_empty;   /* Undefined.__radd__ */
    if (a->kind == CV_STR && b->kind == CV_STR) {
        char *p = chat_arena_alloc(R->arena, a->len + b->len + 1);
        if (!p) return chat_nomem(R), &g_empty;
        memcpy(p, a->s, a->len);
        memcpy(p + a->len, b->s, b->len);
        p[a->len + b->len] = 0;
        return chat_strn(R, p, a->len + b->len);
    }
    if (a->kind == CV_LIST && b->kind == CV_LIST) {
        chat_val *v = new_val(R, CV_LIST);
        if (!v) return &g_empty;
        v->n = a->n + b->n;
        v->items = chat_arena_alloc(R->arena, (v->n ? v->n : 1) * sizeof *v->items);
        if (!v->items) return chat_nomem(R), &g_empty;
        if (a->n) memcpy(v->items, a->items, a->n * sizeof *v->items);
        if (b->n) memcpy(v->items + a->n, b->items, b->n * sizeof *v->items);
        return v;
    }
    if (a->kind == CV_STR || a->kind == CV_LIST)
        chat_raise(R, "TypeError", "can only concatenate %s (not \"%s\") to %s", py_type(a), py_type(b),
                   py_type(a));
    else
        chat_raise(R, "TypeError", "unsupported operand type(s) for +: '%s' and '%s'", py_type(a),
                   py_type(b));
    return &g_empty;
}

chat_val *chat_cat(chat_rt *R, const chat_val *first, ...) {
    va_list ap;
    va_start(ap, first);
    chat_val *acc = (chat_val *)first;
    const chat_val *next;
    while ((next = va_arg(ap, const chat_val *)) != NULL) acc = py_add(R, acc, next);
    va_end(ap);
    return R->status == NX_OK ? acc : &g_empty;
}

/* ---- str methods -----------------------------------------------------------
 * `x.startswith(...)` on a non-str: the lookup gives an Undefined (or, for a
 * dict holding that key, a value), and calling it raises. */

static int str_method(chat_rt *R, const chat_val *obj, const char *name) {
    if (R->status != NX_OK) return 0;
    if (obj->kind == CV_STR) return 1;
    chat_val *m = chat_attr(R, obj, name);
    if (R->status != NX_OK) return 0;
    if (m->kind == CV_UNDEF) raise_undefined(R, m);
    else chat_raise(R, "TypeError", "'%s' object is not callable", py_type(m));
    return 0;
}

int chat_startswith(chat_rt *R, const chat_val *s, const char *prefix) {
    if (!str_method(R, s, "startswith")) return 0;
    size_t n = strlen(prefix);
    return s->len >= n && memcmp(s->s, prefix, n) == 0;
}

int chat_endswith(chat_rt *R, const chat_val *s, const char *suffix) {
    if (!str_method(R, s, "endswith")) return 0;
    size_t n = strlen(suffix);
    return s->len >= n && memcmp(s->s + s->len - n, suffix, n) == 0;
}

chat_val *chat_split_first(chat_rt *R, const chat_val *s, const char *sep) {
    if (!str_method(R, s, "split")) return &g_empty;
    size_t at;
    if (!bytes_find(s->s, s->len, sep, strlen(sep), 0, &at)) return (chat_val *)s;
    return chat_strn(R, s->s, at);
}

chat_val *chat_split_last(chat_rt *R, const chat_val *s, const char *sep) {
    if (!str_method(R, s, "split")) return &g_empty;
    size_t at, n = strlen(sep);
    if (!bytes_find(s->s, s->len, sep, n, 1, &at)) return (chat_val *)s;
    return chat_strn(R, s->s + at + n, s->len - at - n);
}

/* Python's str.isspace() set (bidi WS/B/S or category Zs), what str.strip()
 * removes when given no characters. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the code point at s[*i] and advances *i (input is valid UTF-8, or
 * WTF-8 for a lone surrogate from a JSON escape). */
static uint32_t utf8_next(const char *s, size_t len, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    uint32_t c = p[0];
    int n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (*i + (size_t)n > len) n = 1;
    if (n == 2) c = ((c & 0x1f) << 6) | (p[1] & 0x3f);
    else if (n == 3) c = ((c & 0x0f) << 12) | ((uint32_t)(p[1] & 0x3f) << 6) | (p[2] & 0x3f);
    else if (n == 4)
        c = ((c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3f) << 12) | ((uint32_t)(p[2] & 0x3f) << 6) |
            (p[3] & 0x3f);
    *i += (size_t)n;
    return c;
}

/* Start of the code point that ends at s[end). */
static size_t utf8_prev(const char *s, size_t end) {
    size_t k = end - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
    return k;
}

static int strip_match(uint32_t c, const char *chars) {
    if (!chars) return py_space(c);
    for (const char *p = chars; *p; p++)   /* chars is ASCII in every template */
        if ((uint32_t)(unsigned char)*p == c) return 1;
    return 0;
}

static chat_val *strip_str(chat_rt *R, const chat_val *s, const char *chars, int left, int right) {
    size_t a = 0, b = s->len;
    if (left) {
        while (a < b) {
            size_t k = a;
            if (!strip_match(utf8_next(s->s, b, &k), chars)) break;
            a = k;
        }
    }
    if (right) {
        while (b > a) {
            size_t k = utf8_prev(s->s, b), j = k;
            if (!strip_match(utf8_next(s->s, b, &j), chars)) break;
            b = k;
        }
    }
    if (a == 0 && b == s->len) return (chat_val *)s;
    return chat_strn(R, s->s + a, b - a);
}

chat_val *chat_strip_chars(chat_rt *R, const chat_val *s, const char *chars, int left, int right) {
    const char *name = left && right ? "strip" : left ? "lstrip" : "rstrip";
    if (!str_method(R, s, name)) return &g_empty;
    return strip_str(R, s, chars, left, right);
}

/* ---- Printers: str(), repr(), json.dumps() --------------------------------
 * Each writes into a strbuf by recursion over the value (depth is bounded by
 * the JSON reader's CHAT_JSON_MAX_DEPTH). */

/* Code points Python's str.isprintable() rejects, so repr() escapes them:
 * Cc, Cf, Zs (but space), Zl, Zp, Cs, Co and the unassigned blocks that
 * matter in practice. Unassigned code points inside assigned blocks are
 * treated as printable (Python 3.11 would escape them); see
 * docs/chat-templates.md. */
static const uint32_t k_nonprint[][2] = {
    {0x0000, 0x001f},   {0x007f, 0x00a0},   {0x00ad, 0x00ad},   {0x0378, 0x0379},
    {0x0600, 0x0605},   {0x061c, 0x061c},   {0x06dd, 0x06dd},   {0x070f, 0x070f},
    {0x0890, 0x0891},   {0x08e2, 0x08e2},   {0x1680, 0x1680},   {0x180e, 0x180e},
    {0x2000, 0x200f},   {0x2028, 0x202f},   {0x205f, 0x206f},   {0x3000, 0x3000},
    {0xd800, 0xf8ff},   {0xfeff, 0xfeff},   {0xfff0, 0xfffb},   {0xfffe, 0xffff},
    {0x110bd, 0x110bd}, {0x110cd, 0x110cd}, {0x13430, 0x1343f}, {0x1bca0, 0x1bca3},
    {0x1d173, 0x1d17a}, {0x1fffe, 0x1ffff}, {0x2fffe, 0x2ffff}, {0x3134b, 0xe00ff},
    {0xe01f0, 0x10ffff},
};

static int py_printable(uint32_t c) {
    for (size_t k = 0; k < sizeof k_nonprint / sizeof k_nonprint[0]; k++) {
        if (c < k_nonprint[k][0]) return 1;
        if (c <= k_nonprint[k][1]) return 0;
    }
    return 1;
}

static void repr_str_into(strbuf *b, const char *s, size_t len) {
    /* Python picks double quotes only when the text has ' and no ". */
    int has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    sb_put(b, &q, 1);
    for (size_t i = 0; i < len;) {
        size_t at = i;
        uint32_t c = utf8_next(s, len, &i);
        char esc[16];
        if (c == (uint32_t)q || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c == '\t') sb_puts(b, "\\t");
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c < 0x7f && c >= 0x20) sb_put(b, s + at, 1);
        else if (py_printable(c)) sb_put(b, s + at, i - at);
        else {
            if (c <= 0xff) snprintf(esc, sizeof esc, "\\x%02x", (unsigned)c);
            else if (c <= 0xffff) snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c);
            else snprintf(esc, sizeof esc, "\\U%08x", (unsigned)c);
            sb_puts(b, esc);
        }
    }
    sb_put(b, &q, 1);
}

static void repr_into(strbuf *b, const chat_val *v) {
    switch (v->kind) {
    case CV_UNDEF: sb_puts(b, "Undefined"); break;
    case CV_NONE: sb_puts(b, "None"); break;
    case CV_BOOL: sb_puts(b, v->b ? "True" : "False"); break;
    case CV_INT:
    case CV_FLOAT: sb_put(b, v->s, v->len); break;
    case CV_STR: repr_str_into(b, v->s, v->len); break;
    case CV_LIST:
        sb_puts(b, "[");
        for (size_t k = 0; k < v->n; k++) {
            if (k) sb_puts(b, ", ");
            repr_into(b, &v->items[k]);
        }
        sb_puts(b, "]");
        break;
    case CV_DICT:
        sb_puts(b, "{");
        for (size_t k = 0; k < v->n; k++) {
            if (k) sb_puts(b, ", ");
            repr_into(b, &v->keys[k]);
            sb_puts(b, ": ");
            repr_into(b, &v->items[k]);
        }
        sb_puts(b, "}");
        break;
    }
}

/* str(v): a str is itself, Undefined prints as nothing, containers as repr. */
static void py_str_into(strbuf *b, const chat_val *v) {
    if (v->kind == CV_STR) sb_put(b, v->s, v->len);
    else if (v->kind != CV_UNDEF) repr_into(b, v);
}

/* json.dumps(ensure_ascii=False): only '"', '\\' and C0 controls are escaped
 * (with \uXXXX in lowercase hex); '/', DEL and non-ASCII stay as they are.
 * Separators are ", " and ": "; keys keep their order. */
static void json_str_into(strbuf *b, const char *s, size_t len) {
    sb_puts(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        if (!esc) continue;
        sb_put(b, s + run, i - run);
        sb_puts(b, esc);
        run = i + 1;
    }
    sb_put(b, s + run, len - run);
    sb_puts(b, "\"");
}

static void json_into(strbuf *b, const chat_val *v) {
    switch (v->kind) {
    case CV_UNDEF: break;   /* rejected by chat_tojson before we get here */
    case CV_NONE: sb_puts(b, "null"); break;
    case CV_BOOL: sb_puts(b, v->b ? "true" : "false"); break;
    case CV_INT: sb_put(b, v->s, v->len); break;
    case CV_FLOAT:
        if (v->d != v->d) sb_puts(b, "NaN");
        else if (v->d > 1.7976931348623157e308) sb_puts(b, "Infinity");
        else if (v->d < -1.7976931348623157e308) sb_puts(b, "-Infinity");
        else sb_put(b, v->s, v->len);
        break;
    case CV_STR: json_str_into(b, v->s, v->len); break;
    case CV_LIST:
        sb_puts(b, "[");
        for (size_t k = 0; k < v->n; k++) {
            if (k) sb_puts(b, ", ");
            json_into(b, &v->items[k]);
        }
        sb_puts(b, "]");
        break;
    case CV_DICT:
        sb_puts(b, "{");
        for (size_t k = 0; k < v->n; k++) {
            if (k) sb_puts(b, ", ");
            json_str_into(b, v->keys[k].s, v->keys[k].len);
            sb_puts(b, ": ");
            json_into(b, &v->items[k]);
        }
        sb_puts(b, "}");
        break;
    }
}

chat_val *chat_tojson(chat_rt *R, const chat_val *v) {
    if (R->status != NX_OK) return &g_empty;
    if (v->kind == CV_UNDEF) {
        chat_raise(R, "TypeError", "Object of type Undefined is not JSON serializable");
        return &g_empty;
    }
    strbuf b = {0};
    json_into(&b, v);
    return sb_done(R, &b);
}

chat_val *chat_string(chat_rt *R, const chat_val *v) {
    if (R->status != NX_OK) return &g_empty;
    if (v->kind == CV_STR) return (chat_val *)v;
    strbuf b = {0};
    py_str_into(&b, v);
    return sb_done(R, &b);
}

chat_val *chat_trim(chat_rt *R, const chat_val *v) {
    chat_val *s = chat_string(R, v);
    if (R->status != NX_OK) return &g_empty;
    return strip_str(R, s, NULL, 1, 1);
}

/* ---- Iteration --------------------------------------------------------------
 * `for x in v` and `v|items`. Items point into the parsed values, except a
 * string's characters, which are made in the arena. */

void chat_iter(chat_rt *R, const chat_val *v, chat_val **items, size_t *n) {
    *items = NULL;
    *n = 0;
    if (R->status != NX_OK) return;
    switch (v->kind) {
    case CV_LIST: *items = v->items, *n = v->n; return;
    case CV_DICT: *items = v->keys, *n = v->n; return;
    case CV_UNDEF: return;
    case CV_STR: {
        size_t count = 0;
        for (size_t i = 0; i < v->len; count++) utf8_next(v->s, v->len, &i);
        chat_val *chars = chat_arena_alloc(R->arena, (count ? count : 1) * sizeof *chars);
        if (!chars) {
            chat_nomem(R);
            return;
        }
        size_t i = 0;
        for (size_t k = 0; k < count; k++) {
            size_t at = i;
            utf8_next(v->s, v->len, &i);
            memset(&chars[k], 0, sizeof chars[k]);
            chars[k].kind = CV_STR;
            chars[k].s = v->s + at;
            chars[k].len = i - at;
        }
        *items = chars;
        *n = count;
        return;
    }
    default:
        chat_raise(R, "TypeError", "'%s' object is not iterable", py_type(v));
    }
}

int chat_items(chat_rt *R, const chat_val *v, chat_val **keys, chat_val **vals, size_t *n) {
    *keys = *vals = NULL;
    *n = 0;
    if (R->status != NX_OK) return 0;
    if (v->kind == CV_UNDEF) return 1;
    if (v->kind != CV_DICT) {
        chat_raise(R, "TypeError", "Can only get item pairs from a mapping.");
        return 0;
    }
    *keys = v->keys;
    *vals = v->items;
    *n = v->n;
    return 1;
}
