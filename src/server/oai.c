/* oai.c — the OpenAI wire format (see oai.h), from the model's text out: the
 * output assembler (stop strings -> reasoning -> tool calls) and the response
 * builders. Request bodies are read in oai_request.c. jansson does all JSON
 * reading and writing. */
#include "server/oai.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LIT_LEN(s) (sizeof(s) - 1)

/* Random-looking alphanumerics from a seed (splitmix64 steps): ids only need
 * to be distinct, and deterministic ids keep tests and replays exact. */
static void alnum24(char out[25], uint64_t x) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < 24; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        out[i] = abc[(z ^ (z >> 31)) % LIT_LEN(abc)];
    }
    out[24] = '\0';
}

void oai_make_id(char *out, size_t outlen, const char *prefix, uint64_t seed) {
    char tail[25];
    alnum24(tail, seed);
    if (outlen) snprintf(out, outlen, "%s%s", prefix ? prefix : "", tail);
}

/* ---- Output assembly ------------------------------------------------------
 *
 * Three stages, each with its own buffer of held text (oai.h draws the flow).
 * A stage passes on what it has decided and keeps the rest; at finish every
 * stage flushes in order. Held text is always short (a possible tag or stop
 * string, or one open tool call), so searching a whole buffer on each push
 * is cheap. */

/* A growable byte string, NUL-terminated once anything was added. */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* Removes the first k bytes. */
static void sb_drop(sbuf *b, size_t k) {
    if (!k) return;
    memmove(b->p, b->p + k, b->n - k + 1);
    b->n -= k;
}

static void sb_clear(sbuf *b) { sb_drop(b, b->n); }

static const char *find(const char *s, size_t n, const char *lit) { return n ? memmem(s, n, lit, strlen(lit)) : NULL; }

static int starts_with(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    return n >= k && memcmp(s, lit, k) == 0;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag:
 * the bytes that may still grow into tag. */
static size_t partial(const char *s, size_t n, const char *tag, size_t tlen) {
    for (size_t k = tlen - 1 < n ? tlen - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

enum {
    T_AWAIT,       /* think_open 0: the output may still begin with "<think>" */
    T_REASONING,   /* inside <think> */
    T_CONTENT      /* after </think>, or no reasoning at all */
};

struct oai_output {
    char **stop;
    size_t *stop_len;
    int n_stop;
    int parse_tools;
    uint64_t id_seed;
    int failed;           /* out of memory: sticky, nothing more is emitted */
    int stopped;          /* a stop string ended the output */
    int finished;         /* every stage is flushed */

    sbuf held_stop;       /* stage 1: a tail that may begin a stop string */
    int think;            /* stage 2: T_* */
    int trim_nl;          /* drop '\n' until other text comes (reasoning start, after </think>) */
    sbuf held_think;      /* a possible "<think>", or newlines + a possible "</think>" */
    int in_call;          /* stage 3: held_tool is whitespace + an open "<tool_call>..." */
    int trim_ws;          /* drop whitespace until other text comes (after a call) */
    sbuf held_tool;       /* otherwise whitespace + a possible "<tool_call>" */

    sbuf content, reasoning;          /* totals */
    oai_tool_call *calls;
    int n_calls, cap_calls;
    int one_call;             /* parallel_tool_calls false: later calls dropped */
    json_t *tools;            /* the request's tools, for parameter types; or NULL */
    sbuf step_content, step_reasoning; /* this push; the delta points here */
    int step_first_call;
};

/* Appends to a stage's held text; 0, or -1 (failed set) when out of memory. */
static int hold(oai_output *o, sbuf *b, const char *s, size_t n) {
    if (sb_add(b, s, n) == 0) return 0;
    o->failed = 1;
    return -1;
}

static void emit(oai_output *o, sbuf *total, sbuf *step, const char *s, size_t n) {
    if (n && (sb_add(total, s, n) || sb_add(step, s, n))) o->failed = 1;
}
static void emit_content(oai_output *o, const char *s, size_t n) { emit(o, &o->content, &o->step_content, s, n); }
static void emit_reasoning(oai_output *o, const char *s, size_t n) { emit(o, &o->reasoning, &o->step_reasoning, s, n); }

/* Compact JSON for "arguments". Reals are written with 15 significant digits
 * when that reads back to the same values (it does for any decimal a model
 * writes: 0.1 stays 0.1, where jansson's default 17 digits give
 * 0.10000000000000001), else with 17, which always does. */
static char *dump_args(const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_t *back = s ? json_loads(s, 0, NULL) : NULL;
    int same = back && json_equal(back, v);
    json_decref(back);
    if (same || !s) return s;
    free(s);
    return json_dumps(v, JSON_COMPACT);
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && is_ws(*p)) p++;
    return p;
}

/* The declared JSON Schema "type" of parameter key[0..klen) of function
 * `name` in the request's tools (the array oai_request.c checked), or NULL
 * when the tools declare none (no such function or parameter, or a type
 * that is not one string, e.g. ["integer", "null"]). */
static const char *declared_type(const json_t *tools, const char *name, const char *key, size_t klen) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(f, "name"));
        if (!fname || strcmp(fname, name) != 0) continue;
        const json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        return json_string_value(json_object_get(json_object_getn(props, key, klen), "type"));
    }
    return NULL;
}

/* 1 if JSON value j (may be NULL) is of JSON Schema type `type` ("integer"
 * takes any number: 3.0 is an integer in JSON Schema; null passes, as a
 * model writes it for an argument it leaves unset), 0 if not, -1 for a type
 * not read back as JSON. */
static int of_type(const json_t *j, const char *type) {
    int fits;
    if (!strcmp(type, "number") || !strcmp(type, "integer")) fits = json_is_number(j);
    else if (!strcmp(type, "boolean")) fits = json_is_boolean(j);
    else if (!strcmp(type, "object")) fits = json_is_object(j);
    else if (!strcmp(type, "array")) fits = json_is_array(j);
    else return -1;   /* a type not read back as JSON ("string", or one this does not know) */
    return fits || json_is_null(j);
}

/* A parameter value. The template writes every value as text (objects and
 * arrays as JSON, the rest as Python prints them), so its type is read back
 * from the schema the request declared, as vLLM's Qwen3-Coder parser does:
 * a "string" parameter keeps its text whatever it looks like (an id
 * "10001", a "true"); a number, integer, boolean, object or array parameter
 * is the text read as JSON when that gives the type (booleans also in
 * Python's True / False), else the text. Without a declared type: JSON when
 * the text parses as a non-string JSON value, else the text (a quoted "x"
 * stays the 3-character string). */
static json_t *param_value(const char *v, size_t n, const char *type) {
    if (type && strcmp(type, "string") == 0) return json_stringn(v, n);
    if (type && strcmp(type, "boolean") == 0 && (n == 4 || n == 5) &&
        (strncasecmp(v, "true", n) == 0 || strncasecmp(v, "false", n) == 0))
        return json_boolean(n == 4);
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
    const int fits = type ? of_type(j, type) : -1;
    if (j && (fits >= 0 ? fits : !json_is_string(j))) return j;
    json_decref(j);
    return json_stringn(v, n);
}

/* Qwen3.5: <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>;
 * tools (may be NULL) types the values (param_value). */
static int parse_xml_call(const char *p, const char *end, const json_t *tools, char **name, char **args) {
    p = skip_ws(p, end);
    if (!starts_with(p, (size_t)(end - p), "<function=")) return -1;
    p += LIT_LEN("<function=");
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return -1;
    json_t *obj = json_object();
    if (!obj || !(*name = strndup(p, (size_t)(gt - p)))) goto bad;
    for (p = gt + 1;;) {
        p = skip_ws(p, end);
        if (starts_with(p, (size_t)(end - p), "</function>")) break;
        if (!starts_with(p, (size_t)(end - p), "<parameter=")) goto bad;
        const char *key = p + LIT_LEN("<parameter=");
        const char *kend = memchr(key, '>', (size_t)(end - key));
        if (!kend) goto bad;
        const char *v = kend + 1, *vend = find(v, (size_t)(end - v), "</parameter>");
        if (!vend) goto bad;
        p = vend + LIT_LEN("</parameter>");
        /* the template writes "<parameter=P>\n" VALUE "\n</parameter>" */
        if (v < vend && *v == '\n') v++;
        if (v < vend && vend[-1] == '\n') vend--;
        const char *type = declared_type(tools, *name, key, (size_t)(kend - key));
        if (json_object_setn_new(obj, key, (size_t)(kend - key), param_value(v, (size_t)(vend - v), type))) goto bad;
    }
    p = skip_ws(p + LIT_LEN("</function>"), end);
    if (p != end || !(*args = dump_args(obj))) goto bad;
    json_decref(obj);
    return 0;
bad:
    json_decref(obj);
    free(*name);
    *name = NULL;
    return -1;
}

/* Qwen3: {"name": "NAME", "arguments": {...}} ("parameters" is accepted too,
 * and arguments already given as a string are kept as they are). */
static int parse_json_call(const char *p, const char *end, char **name, char **args) {
    json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
    json_t *nm = json_object_get(j, "name"), *a = json_object_get(j, "arguments");
    if (!a) a = json_object_get(j, "parameters");
    int ok = json_is_string(nm) && (!a || json_is_object(a) || json_is_string(a) || json_is_null(a));
    if (ok) {
        *name = strdup(json_string_value(nm));
        *args = json_is_string(a) ? strdup(json_string_value(a)) : json_is_object(a) ? dump_args(a) : strdup("{}");
        ok = *name && *args;
    }
    json_decref(j);
    if (ok) return 0;
    free(*name);
    free(*args);
    *name = *args = NULL;
    return -1;
}

/* Parses one call body (between the tags) and appends it. -1: malformed (or
 * out of memory, which also sets failed). */
static int add_call(oai_output *o, const char *body, size_t n) {
    const char *end = body + n, *p = skip_ws(body, end);
    char *name = NULL, *args = NULL;
    int rc = p < end && *p == '{' ? parse_json_call(p, end, &name, &args) : parse_xml_call(p, end, o->tools, &name, &args);
    if (rc) return -1;
    if (o->one_call && o->n_calls == 1) { /* a well-formed call, dropped */
        free(name);
        free(args);
        return 0;
    }
    if (o->n_calls == o->cap_calls) {
        int cap = o->cap_calls ? 2 * o->cap_calls : 4;
        oai_tool_call *c = realloc(o->calls, (size_t)cap * sizeof *c);
        if (!c) goto oom;
        o->calls = c;
        o->cap_calls = cap;
    }
    oai_tool_call *c = &o->calls[o->n_calls];
    char tail[25];
    alnum24(tail, o->id_seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(o->n_calls + 1)));
    if (!(c->id = malloc(LIT_LEN("call_") + sizeof tail))) goto oom;
    sprintf(c->id, "call_%s", tail);
    c->index = o->n_calls++;
    c->name = name;
    c->arguments = args;
    return 0;
oom:
    free(name);
    free(args);
    o->failed = 1;
    return -1;
}

/* Stage 3: answer text -> content and tool calls. */
static void tools_feed(oai_output *o, const char *s, size_t n) {
    static const char open_tag[] = "<tool_call>", close_tag[] = "</tool_call>";
    sbuf *b = &o->held_tool;
    if (!o->parse_tools) {
        emit_content(o, s, n);
        return;
    }
    if (hold(o, b, s, n)) return;
    for (;;) {
        if (o->in_call) {
            const char *open = find(b->p, b->n, open_tag);
            const char *body = open + LIT_LEN(open_tag);
            const char *close = find(body, (size_t)(b->p + b->n - body), close_tag);
            if (!close) return;
            size_t end = (size_t)(close - b->p) + LIT_LEN(close_tag);
            if (add_call(o, body, (size_t)(close - body)) == 0)
                o->trim_ws = 1;
            else
                emit_content(o, b->p, end);   /* not a call after all: the text as it was */
            sb_drop(b, end);
            o->in_call = 0;
            continue;
        }
        if (o->trim_ws) {
            size_t k = 0;
            while (k < b->n && is_ws(b->p[k])) k++;
            sb_drop(b, k);
            if (!b->n) return;
            o->trim_ws = 0;
        }
        const char *open = find(b->p, b->n, open_tag);
        if (open) {
            /* whitespace before the call stays held with it: dropped if it parses */
            size_t k = (size_t)(open - b->p);
            while (k > 0 && is_ws(b->p[k - 1])) k--;
            emit_content(o, b->p, k);
            sb_drop(b, k);
            o->in_call = 1;
            continue;
        }
        size_t keep = partial(b->p, b->n, open_tag, LIT_LEN(open_tag));
        while (keep < b->n && is_ws(b->p[b->n - keep - 1])) keep++;
        emit_content(o, b->p, b->n - keep);
        sb_drop(b, b->n - keep);
        return;
    }
}

static void tools_flush(oai_output *o) {
    sbuf *b = &o->held_tool;
    size_t k = 0;
    while (k < b->n && is_ws(b->p[k])) k++;
    /* an open call is returned as text; trailing whitespace after calls is dropped */
    if (o->in_call || k < b->n || o->n_calls == 0) emit_content(o, b->p, b->n);
    sb_clear(b);
    o->in_call = 0;
}

/* Drops leading newlines while *trim is set; clears it once other text came. */
static void trim_newlines(sbuf *b, int *trim) {
    if (!*trim) return;
    size_t k = 0;
    while (k < b->n && b->p[k] == '\n') k++;
    sb_drop(b, k);
    if (b->n) *trim = 0;
}

static size_t trailing_newlines(const sbuf *b, size_t end) {
    size_t k = 0;
    while (k < end && b->p[end - k - 1] == '\n') k++;
    return k;
}

/* Stage 2: text -> reasoning and answer. */
static void think_feed(oai_output *o, const char *s, size_t n) {
    static const char open_tag[] = "<think>", close_tag[] = "</think>";
    sbuf *b = &o->held_think;
    if (hold(o, b, s, n)) return;
    for (;;) {
        if (o->think == T_AWAIT) {
            if (starts_with(b->p, b->n, open_tag)) {
                sb_drop(b, LIT_LEN(open_tag));
                o->think = T_REASONING;
                o->trim_nl = 1;
                continue;
            }
            if (b->n < LIT_LEN(open_tag) && memcmp(b->p, open_tag, b->n) == 0) return;   /* undecided */
            o->think = T_CONTENT;
        }
        if (o->think == T_REASONING) {
            trim_newlines(b, &o->trim_nl);
            const char *close = find(b->p, b->n, close_tag);
            if (close) {
                size_t k = (size_t)(close - b->p);
                emit_reasoning(o, b->p, k - trailing_newlines(b, k));
                sb_drop(b, k + LIT_LEN(close_tag));
                o->think = T_CONTENT;
                o->trim_nl = 1;
                continue;
            }
            /* hold a possible "</think>" and the newlines before it (stripped if it comes) */
            size_t keep = partial(b->p, b->n, close_tag, LIT_LEN(close_tag));
            keep += trailing_newlines(b, b->n - keep);
            emit_reasoning(o, b->p, b->n - keep);
            sb_drop(b, b->n - keep);
            return;
        }
        trim_newlines(b, &o->trim_nl);
        tools_feed(o, b->p, b->n);
        sb_clear(b);
        return;
    }
}

static void think_flush(oai_output *o) {
    sbuf *b = &o->held_think;
    if (o->think == T_REASONING)   /* no </think>: all of it was reasoning */
        emit_reasoning(o, b->p, b->n - trailing_newlines(b, b->n));
    else
        tools_feed(o, b->p, b->n);   /* T_AWAIT: a partial "<think>" is answer text */
    sb_clear(b);
}

/* Stage 1: raw text -> text before the first stop string. */
static void stop_feed(oai_output *o, const char *s, size_t n) {
    sbuf *b = &o->held_stop;
    if (o->n_stop == 0) {
        think_feed(o, s, n);
        return;
    }
    if (hold(o, b, s, n)) return;
    /* The held text had no whole stop string, so any match ends in the new
     * bytes; the one completed first (then the longer) is what a byte-by-byte
     * stream would have found, so the result does not depend on the cuts. */
    size_t start = 0, end = SIZE_MAX;
    for (int i = 0; i < o->n_stop; i++) {
        const char *p = memmem(b->p, b->n, o->stop[i], o->stop_len[i]);
        size_t ps = p ? (size_t)(p - b->p) : 0, pe = ps + o->stop_len[i];
        if (p && (pe < end || (pe == end && ps < start))) start = ps, end = pe;
    }
    if (end != SIZE_MAX) {
        think_feed(o, b->p, start);
        sb_clear(b);
        o->stopped = 1;
        return;
    }
    size_t keep = 0;
    for (int i = 0; i < o->n_stop; i++) {
        size_t k = partial(b->p, b->n, o->stop[i], o->stop_len[i]);
        if (k > keep) keep = k;
    }
    think_feed(o, b->p, b->n - keep);
    sb_drop(b, b->n - keep);
}

static void finish_stages(oai_output *o) {
    think_feed(o, o->held_stop.p, o->held_stop.n);
    sb_clear(&o->held_stop);
    think_flush(o);
    tools_flush(o);
    o->finished = 1;
}

oai_output *oai_output_new(char *const *stop, int n_stop, int think_open, int parse_tools) {
    oai_output *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->parse_tools = parse_tools;
    o->think = think_open < 0 ? T_CONTENT : think_open ? T_REASONING : T_AWAIT;
    o->trim_nl = think_open > 0;
    if (n_stop > 0 && (!(o->stop = calloc((size_t)n_stop, sizeof *o->stop)) ||
                       !(o->stop_len = calloc((size_t)n_stop, sizeof *o->stop_len))))
        goto oom;
    for (int i = 0; i < n_stop; i++) {
        if (!stop[i] || !*stop[i]) continue;
        if (!(o->stop[o->n_stop] = strdup(stop[i]))) goto oom;
        o->stop_len[o->n_stop++] = strlen(stop[i]);
    }
    /* the buffers that deltas and totals point into exist from the start, so
     * those pointers are never NULL */
    if (sb_add(&o->content, "", 0) || sb_add(&o->reasoning, "", 0) || sb_add(&o->step_content, "", 0) ||
        sb_add(&o->step_reasoning, "", 0))
        goto oom;
    return o;
oom:
    oai_output_free(o);
    return NULL;
}

void oai_output_free(oai_output *o) {
    if (!o) return;
    for (int i = 0; i < o->n_stop; i++) free(o->stop[i]);
    free(o->stop);
    free(o->stop_len);
    for (int i = 0; i < o->n_calls; i++) {
        free(o->calls[i].id);
        free(o->calls[i].name);
        free(o->calls[i].arguments);
    }
    free(o->calls);
    json_decref(o->tools);
    sbuf *bufs[] = {&o->held_stop, &o->held_think, &o->held_tool, &o->content,
                    &o->reasoning, &o->step_content, &o->step_reasoning};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->p);
    free(o);
}

void oai_output_seed_ids(oai_output *o, uint64_t seed) { o->id_seed = seed; }

void oai_output_one_call(oai_output *o) { o->one_call = 1; }

int oai_output_tools(oai_output *o, const char *tools_json) {
    json_decref(o->tools);
    o->tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    return tools_json && !o->tools ? -1 : 0;
}

static void begin_step(oai_output *o) {
    sb_clear(&o->step_content);
    sb_clear(&o->step_reasoning);
    o->step_first_call = o->n_calls;
}

static int end_step(oai_output *o, oai_delta *d) {
    if (o->failed) begin_step(o);   /* an incomplete step is not sent */
    d->reasoning = o->step_reasoning.p;
    d->reasoning_len = o->step_reasoning.n;
    d->content = o->step_content.p;
    d->content_len = o->step_content.n;
    d->n_calls = o->n_calls - o->step_first_call;
    d->calls = d->n_calls ? o->calls + o->step_first_call : NULL;
    d->stopped = o->stopped;
    return o->failed ? -1 : 0;
}

int oai_output_echo(oai_output *o, const char *text, size_t len, oai_delta *d) {
    begin_step(o);
    if (!o->finished && !o->failed) emit_content(o, text, len);
    return end_step(o, d);
}

int oai_output_push(oai_output *o, const char *text, size_t len, oai_delta *d) {
    begin_step(o);
    if (!o->finished && !o->failed) {
        stop_feed(o, text, len);
        if (o->stopped) finish_stages(o);   /* nothing more will come: send all that is held */
    }
    return end_step(o, d);
}

int oai_output_finish(oai_output *o, oai_delta *d) {
    begin_step(o);
    if (!o->finished && !o->failed) finish_stages(o);
    return end_step(o, d);
}

int oai_delta_empty(const oai_delta *d) { return !d->reasoning_len && !d->content_len && !d->n_calls; }

int oai_output_n_calls(const oai_output *o) { return o->n_calls; }
const char *oai_output_content(const oai_output *o) { return o->content.p; }
const char *oai_output_reasoning(const oai_output *o) { return o->reasoning.n ? o->reasoning.p : NULL; }

const char *oai_finish_reason(const oai_output *o, int hit_limit) {
    if (o->n_calls > 0) return "tool_calls";
    return hit_limit && !o->stopped ? "length" : "stop";
}

/* ---- Response JSON --------------------------------------------------------
 *
 * Objects are built with jansson, which keeps keys in insertion order, so the
 * output reads in OpenAI's order. A failed allocation (or text that is not
 * UTF-8) makes a setter fail; *ok remembers it and the builder returns NULL
 * rather than a body with a field missing. */

static void put(json_t *obj, const char *key, json_t *v, int *ok) {
    if (json_object_set_new(obj, key, v)) *ok = 0;
}

static json_t *nullable(const char *s) { return s ? json_string(s) : json_null(); }
static json_t *text(const char *s, size_t n) { return json_stringn(s ? s : "", s ? n : 0); }

static char *dump(json_t *root, int ok) {
    char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

static json_t *envelope(const oai_meta *m, const char *object, int *ok) {
    json_t *r = json_object();
    put(r, "id", json_string(m->id ? m->id : ""), ok);
    put(r, "object", json_string(object), ok);
    put(r, "created", json_integer(m->created), ok);
    put(r, "model", nullable(m->model), ok);
    return r;
}

static json_t *usage_json(oai_usage u, int *ok) {
    json_t *r = json_object();
    put(r, "prompt_tokens", json_integer(u.prompt_tokens), ok);
    put(r, "completion_tokens", json_integer(u.completion_tokens), ok);
    put(r, "total_tokens", json_integer((json_int_t)u.prompt_tokens + u.completion_tokens), ok);
    json_t *details = json_object();
    put(details, "cached_tokens", json_integer(u.cached_tokens), ok);
    put(r, "prompt_tokens_details", details, ok);
    return r;
}

/* ---- log-probabilities (oai_logprobs) ---- */

static json_t *logprob_value(float x) { return json_real(isfinite(x) ? x : -9999.0); }

/* A token's text: its bytes decoded as nx_detokenize does (valid UTF-8). */
static json_t *token_text(const nx_tokenizer *t, int32_t id, int *ok) {
    char *s = NULL;
    size_t n = 0;
    json_t *v = nx_detokenize(t, &id, 1, 0, &s, &n, NULL, 0) == NX_OK ? json_stringn(s, n) : NULL;
    nx_free(s);
    if (!v) *ok = 0;
    return v ? v : json_null();
}

/* {"token":T,"logprob":L,"bytes":[...]} */
static json_t *chat_token(const nx_tokenizer *t, int32_t id, float logprob, int *ok) {
    json_t *e = json_object(), *bytes = json_array();
    size_t n;
    const char *b = nx_tokenizer_token_bytes(t, id, &n);
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(bytes, json_integer((unsigned char)b[i]))) *ok = 0;
    put(e, "token", token_text(t, id, ok), ok);
    put(e, "logprob", logprob_value(logprob), ok);
    put(e, "bytes", bytes, ok);
    return e;
}

static json_t *chat_logprobs(const oai_logprobs *l, int *ok) {
    json_t *r = json_object(), *content = json_array();
    for (int i = 0; i < l->n; i++) {
        const nx_token_logprob *x = &l->lp[i];
        json_t *e = chat_token(l->tok, x->id, x->logprob, ok), *top = json_array();
        for (int j = 0; j < x->n_top; j++)
            if (json_array_append_new(top, chat_token(l->tok, x->top_id[j], x->top_logprob[j], ok))) *ok = 0;
        put(e, "top_logprobs", top, ok);
        if (json_array_append_new(content, e)) *ok = 0;
    }
    put(r, "content", content, ok);
    put(r, "refusal", json_null(), ok);
    return r;
}

/* Completions spell a token that is not whole UTF-8 (a piece of a
 * character) as "bytes:\xNN..." of its bytes, as OpenAI does: distinct
 * pieces stay distinct keys in top_logprobs, where U+FFFD would merge them. */
static json_t *text_token(const nx_tokenizer *t, int32_t id, int *ok) {
    size_t n;
    const char *b = nx_tokenizer_token_bytes(t, id, &n);
    json_t *v = token_text(t, id, ok);
    if (!b || (json_string_length(v) == n && memcmp(json_string_value(v), b, n) == 0)) return v;
    char *s = malloc(6 + 4 * n + 1);
    if (s) {
        size_t k = (size_t)sprintf(s, "bytes:");
        for (size_t i = 0; i < n; i++) k += (size_t)sprintf(s + k, "\\x%02x", (unsigned char)b[i]);
        json_decref(v);
        v = json_stringn(s, k);
        free(s);
    }
    if (!s || !v) *ok = 0;
    return v ? v : json_null();
}

/* {text: logprob} with the token's text as the key (two tokens of one text
 * keep the first). */
static void text_top_put(json_t *obj, const nx_tokenizer *t, int32_t id, float logprob, int *ok) {
    json_t *key = text_token(t, id, ok);
    const char *k = json_string_value(key);
    if (k && !json_object_getn(obj, k, json_string_length(key)) &&
        json_object_setn_new(obj, k, json_string_length(key), logprob_value(logprob)))
        *ok = 0;
    json_decref(key);
}

static json_t *text_logprobs(const oai_logprobs *l, int *ok) {
    json_t *r = json_object(), *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < l->n; i++) {
        const nx_token_logprob *x = &l->lp[i];
        json_t *top = x->n_top < 0 ? json_null() : json_object();
        int chosen_listed = 0;
        for (int j = 0; j < x->n_top; j++) {
            text_top_put(top, l->tok, x->top_id[j], x->top_logprob[j], ok);
            chosen_listed |= x->top_id[j] == x->id;
        }
        if (!chosen_listed && x->n_top >= 0) text_top_put(top, l->tok, x->id, x->logprob, ok);
        json_t *lp = x->n_top < 0 ? json_null() : logprob_value(x->logprob);
        if (json_array_append_new(tokens, text_token(l->tok, x->id, ok)) || json_array_append_new(lps, lp) ||
            json_array_append_new(tops, top) || json_array_append_new(offs, json_integer(l->text_offset ? l->text_offset[i] : 0)))
            *ok = 0;
    }
    put(r, "tokens", tokens, ok);
    put(r, "token_logprobs", lps, ok);
    put(r, "top_logprobs", tops, ok);
    put(r, "text_offset", offs, ok);
    return r;
}

static json_t *logprobs_json(const oai_logprobs *l, int chat, int *ok) {
    if (!l || !l->tok) return json_null();
    return chat ? chat_logprobs(l, ok) : text_logprobs(l, ok);
}

/* [{"index":0, key: value, "logprobs":L, "finish_reason":F}] */
static json_t *choices(const char *key, json_t *value, json_t *logprobs, const char *finish_reason, int *ok) {
    json_t *c = json_object(), *arr = json_array();
    put(c, "index", json_integer(0), ok);
    put(c, key, value, ok);
    put(c, "logprobs", logprobs, ok);
    put(c, "finish_reason", nullable(finish_reason), ok);
    if (json_array_append_new(arr, c)) *ok = 0;
    return arr;
}

/* Stream deltas carry each call's "index"; a message's calls do not. */
static json_t *calls_json(const oai_tool_call *calls, int n, int with_index, int *ok) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_t *c = json_object(), *fn = json_object();
        if (with_index) put(c, "index", json_integer(calls[i].index), ok);
        put(c, "id", json_string(calls[i].id), ok);
        put(c, "type", json_string("function"), ok);
        put(fn, "name", json_string(calls[i].name), ok);
        put(fn, "arguments", json_string(calls[i].arguments), ok);
        put(c, "function", fn, ok);
        if (json_array_append_new(arr, c)) *ok = 0;
    }
    return arr;
}

char *oai_output_tool_calls_json(const oai_output *o) {
    int ok = 1;
    if (o->n_calls == 0) return NULL;
    json_t *arr = calls_json(o->calls, o->n_calls, 0, &ok);
    char *s = ok ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

char *oai_chat_completion_json(const oai_meta *m, const oai_output *o, const char *finish_reason, oai_usage u,
                               const oai_logprobs *lp) {
    int ok = 1;
    json_t *root = envelope(m, "chat.completion", &ok), *msg = json_object();
    put(msg, "role", json_string("assistant"), &ok);
    put(msg, "content", o->n_calls && !o->content.n ? json_null() : text(o->content.p, o->content.n), &ok);
    if (o->reasoning.n) put(msg, "reasoning_content", text(o->reasoning.p, o->reasoning.n), &ok);
    if (o->n_calls) put(msg, "tool_calls", calls_json(o->calls, o->n_calls, 0, &ok), &ok);
    put(root, "choices", choices("message", msg, logprobs_json(lp, 1, &ok), finish_reason, &ok), &ok);
    put(root, "usage", usage_json(u, &ok), &ok);
    return dump(root, ok);
}

char *oai_chat_chunk_json(const oai_meta *m, const oai_delta *d, int first, const char *finish_reason,
                          const oai_logprobs *lp) {
    int ok = 1;
    json_t *root = envelope(m, "chat.completion.chunk", &ok), *delta = json_object();
    if (first) put(delta, "role", json_string("assistant"), &ok);
    if (first || (d && d->content_len)) put(delta, "content", text(d ? d->content : NULL, d ? d->content_len : 0), &ok);
    if (d && d->reasoning_len) put(delta, "reasoning_content", text(d->reasoning, d->reasoning_len), &ok);
    if (d && d->n_calls) put(delta, "tool_calls", calls_json(d->calls, d->n_calls, 1, &ok), &ok);
    put(root, "choices", choices("delta", delta, logprobs_json(lp, 1, &ok), finish_reason, &ok), &ok);
    if (m->include_usage) put(root, "usage", json_null(), &ok);
    return dump(root, ok);
}

char *oai_text_completion_json(const oai_meta *m, const oai_output *o, const char *finish_reason, oai_usage u,
                               const oai_logprobs *lp) {
    int ok = 1;
    json_t *root = envelope(m, "text_completion", &ok);
    json_t *t = text(o->content.p, o->content.n);
    put(root, "choices", choices("text", t, logprobs_json(lp, 0, &ok), finish_reason, &ok), &ok);
    put(root, "usage", usage_json(u, &ok), &ok);
    return dump(root, ok);
}

char *oai_text_chunk_json(const oai_meta *m, const oai_delta *d, const char *finish_reason, const oai_logprobs *lp) {
    int ok = 1;
    json_t *root = envelope(m, "text_completion", &ok);
    json_t *t = text(d ? d->content : NULL, d ? d->content_len : 0);
    put(root, "choices", choices("text", t, logprobs_json(lp, 0, &ok), finish_reason, &ok), &ok);
    if (m->include_usage) put(root, "usage", json_null(), &ok);
    return dump(root, ok);
}

char *oai_usage_chunk_json(const oai_meta *m, int chat, oai_usage u) {
    int ok = 1;
    json_t *root = envelope(m, chat ? "chat.completion.chunk" : "text_completion", &ok);
    put(root, "choices", json_array(), &ok);
    put(root, "usage", usage_json(u, &ok), &ok);
    return dump(root, ok);
}

char *oai_error_json(const char *message, const char *type, const char *param, const char *code) {
    int ok = 1;
    json_t *root = json_object(), *e = json_object();
    put(e, "message", json_string(message ? message : ""), &ok);
    put(e, "type", nullable(type), &ok);
    put(e, "param", nullable(param), &ok);
    put(e, "code", nullable(code), &ok);
    put(root, "error", e, &ok);
    return dump(root, ok);
}
