/* chat.h — private interface of the chat-template renderer (src/tokenizer/chat*.c).
 *
 * nextn renders the Qwen ChatML templates natively: each known template is a C
 * function that walks the conversation the way the Jinja source does, statement
 * by statement (chat_qwen.c). What those functions need from Python and Jinja2
 * lives here as a small value model:
 *
 *   chat_json.c  an arena, and a JSON reader that keeps what Python's json.loads
 *                would give: ints as their digits, floats re-spelled the way
 *                Python's repr() spells them (2.0, 1e-05), strings as UTF-8.
 *   chat_py.c    the Python/Jinja2 semantics the templates use: truthiness,
 *                str()/repr(), json.dumps(ensure_ascii=False), `in`, `+`,
 *                str methods, attribute lookup with Jinja2's Undefined, and the
 *                exceptions those raise.
 *   chat_qwen.c  the two renderers, "qwen3" and "qwen3.5".
 *   chat.c       the public API (nextn.h): template detection, the documented
 *                nextn format, request parsing and validation.
 *
 * Errors while rendering are sticky, as in a pager: the first raised exception
 * is recorded in chat_rt and every later operation is a no-op that returns a
 * harmless value, so renderers read like the template, and the reported error
 * is the one Jinja2 would raise first. Its text is Python's
 * `type(e).__name__ + ": " + str(e)`, e.g. "TemplateError: No messages provided."
 */
#ifndef NX_TOKENIZER_CHAT_H
#define NX_TOKENIZER_CHAT_H

#include <stddef.h>

#include "nextn.h"

/* ---- Arena: every value and string of one render ----------------------- */

typedef struct chat_block chat_block;
typedef struct {
    chat_block *head;
} chat_arena;

/* 16-byte aligned, uninitialised; NULL when out of memory. */
void *chat_arena_alloc(chat_arena *a, size_t n);
void chat_arena_free(chat_arena *a);

/* ---- Values ----------------------------------------------------------------
 * What json.loads gives, plus Undefined. A value and its strings live in the
 * arena of the parse or render that made them (or are static) and are never
 * written after they are made; parsed strings are also NUL-terminated. */

typedef enum {
    CV_UNDEF,   /* Jinja2 Undefined; s is the message using it raises            */
    CV_NONE,
    CV_BOOL,    /* b                                                             */
    CV_INT,     /* s: the digits, as Python's str(int) prints them               */
    CV_FLOAT,   /* d, and s: Python's repr(float)                                */
    CV_STR,     /* s, len: UTF-8 bytes (may hold NUL)                            */
    CV_LIST,    /* items[n]                                                      */
    CV_DICT     /* keys[n] (CV_STR, unique, in insertion order) -> items[n]      */
} chat_kind;

typedef struct chat_val chat_val;
struct chat_val {
    chat_kind kind;
    int b;
    const char *s;
    size_t len;
    double d;
    chat_val *items;
    chat_val *keys;
    size_t n;
    size_t src_off, src_len;   /* where the value was in the JSON text (parsed values) */
};

/* Parses len bytes of JSON the way Python's json.loads does (NaN/Infinity
 * accepted, control characters in strings rejected, duplicate keys keep the
 * first position and the last value). Invalid UTF-8 and nesting deeper than
 * CHAT_JSON_MAX_DEPTH are errors. On failure returns NX_EFORMAT (NX_ENOMEM) with
 * "line L column C: what" in err. */
#define CHAT_JSON_MAX_DEPTH 512
nx_status chat_json_parse(chat_arena *a, const char *text, size_t len, chat_val **out,
                          char *err, size_t errlen);

/* d[key] for a CV_DICT, or NULL. */
chat_val *chat_dict_get(const chat_val *d, const char *key);

/* Python's repr(float) of d into buf (at least 32 bytes); returns the length. */
int chat_float_repr(double d, char *buf);

/* ---- Render context ------------------------------------------------------ */

typedef struct {
    chat_arena *arena;
    char *out;            /* the rendered text (nx_alloc'd), out[len] == 0     */
    size_t len, cap;
    nx_status status;     /* NX_OK until the first failure; then sticky        */
    char msg[512];        /* "TypeError: ...", set with status                 */
} chat_rt;

/* The template variables a render sees. Values never NULL; CV_UNDEF = not passed. */
typedef struct {
    chat_val *messages;               /* CV_LIST of CV_DICT, each with a CV_STR role */
    chat_val *tools;
    chat_val *add_generation_prompt;
    chat_val *enable_thinking;
    chat_val *add_vision_id;          /* qwen3.5 only; an extra keyword argument    */
} chat_vars;

void chat_render_qwen3(chat_rt *R, const chat_vars *v);
void chat_render_qwen35(chat_rt *R, const chat_vars *v);

/* Like nx_chat_render, plus extra_kwargs_json: NULL or a JSON object of extra
 * template variables (transformers' **kwargs). Keys the renderers read:
 * add_vision_id, and add_generation_prompt / enable_thinking, which then
 * override the request's fields; others are accepted and unused, as in Jinja. */
nx_status chat_render_ex(const nx_chat_template *c, const nx_chat_request *req,
                         const char *extra_kwargs_json, char **out, char *err, size_t errlen);

/* ---- Python / Jinja2 semantics (chat_py.c) ------------------------------- */

/* Records an exception (the first one only): chat_raise(R, "TypeError", ...). */
void chat_raise(chat_rt *R, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* raise_exception(msg) of transformers: TemplateError. */
void chat_template_error(chat_rt *R, const char *msg);
void chat_nomem(chat_rt *R);

/* Constants and constructors (arena-backed; a failed allocation is sticky ENOMEM). */
chat_val *chat_bool_v(int b);
chat_val *chat_lit(chat_rt *R, const char *s);                /* a C string literal    */
chat_val *chat_strn(chat_rt *R, const char *s, size_t len);   /* references s          */

/* Appends str(v) to the output ({{ v }}; Undefined prints nothing). */
void chat_emit(chat_rt *R, const chat_val *v);
void chat_emit_lit(chat_rt *R, const char *s);

/* A macro call's output as a value: begin sets the output aside, end returns
 * what was emitted since as a str and puts the output back (also after a failure). */
typedef struct {
    char *out;
    size_t len, cap;
} chat_capture;
void chat_capture_begin(chat_rt *R, chat_capture *c);
chat_val *chat_capture_end(chat_rt *R, chat_capture *c);

/* Tests and truthiness (never raise). */
int chat_truthy(const chat_val *v);
int chat_is_defined(const chat_val *v);
int chat_is_none(const chat_val *v);
int chat_is_false(const chat_val *v);        /* `is false`: the JSON value false only */
int chat_is_string(const chat_val *v);
int chat_is_mapping(const chat_val *v);
int chat_is_iterable(const chat_val *v);     /* str, list, dict, Undefined (iter() works) */
int chat_is_sequence(const chat_val *v);     /* str, list, dict                       */
int chat_eq_str(const chat_val *v, const char *s);   /* v == 'literal'                 */

/* obj.name and obj[i], with Jinja2's sandboxed lookup: a missing key is an
 * Undefined carrying the message Jinja2 would raise on use; looking into an
 * Undefined raises it. */
chat_val *chat_attr(chat_rt *R, const chat_val *obj, const char *name);
chat_val *chat_item(chat_rt *R, const chat_val *obj, long i);

/* `needle in container` (str: substring; list: element; dict: key). */
int chat_in(chat_rt *R, const char *needle, const chat_val *container);
/* a + b + ... (Python +, left to right); CHAT_END ends the list. Each argument
 * must already be evaluated, so at most one of them may come from a call that
 * raises (C evaluates arguments in no fixed order; Python left to right). */
#define CHAT_END ((const chat_val *)0)
chat_val *chat_cat(chat_rt *R, const chat_val *first, ...);

/* str methods; calling one on a non-str raises what Jinja2 raises. */
int chat_startswith(chat_rt *R, const chat_val *s, const char *prefix);
int chat_endswith(chat_rt *R, const chat_val *s, const char *suffix);
chat_val *chat_split_first(chat_rt *R, const chat_val *s, const char *sep);  /* s.split(sep)[0]  */
chat_val *chat_split_last(chat_rt *R, const chat_val *s, const char *sep);   /* s.split(sep)[-1] */
chat_val *chat_strip_chars(chat_rt *R, const chat_val *s, const char *chars, int left, int right);
#define chat_strip(R, s, ch)  chat_strip_chars((R), (s), (ch), 1, 1)
#define chat_lstrip(R, s, ch) chat_strip_chars((R), (s), (ch), 1, 0)
#define chat_rstrip(R, s, ch) chat_strip_chars((R), (s), (ch), 0, 1)

/* Filters. */
chat_val *chat_trim(chat_rt *R, const chat_val *v);     /* |trim: str(v).strip()          */
chat_val *chat_string(chat_rt *R, const chat_val *v);   /* |string: str(v)                */
chat_val *chat_tojson(chat_rt *R, const chat_val *v);   /* json.dumps(v, ensure_ascii=False) */

/* for x in v: fills *items and *n (dict: its keys; str: one str per code point;
 * Undefined: nothing); non-iterables raise TypeError. */
void chat_iter(chat_rt *R, const chat_val *v, chat_val **items, size_t *n);
/* v|items: (key, value) pairs of a mapping; Undefined gives none; else TypeError. */
int chat_items(chat_rt *R, const chat_val *v, chat_val **keys, chat_val **vals, size_t *n);

#endif
