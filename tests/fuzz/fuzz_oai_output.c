/* fuzz_oai_output.c — the output assembler and the response builders
 * (src/server/oai.h, "Output assembly" and "Response JSON"): what turns the
 * generated text into OpenAI deltas and bodies.
 *
 * Input:
 *   byte 0  flags: bits 0-1 think_open (0: -1, 1: 0, 2: 1, 3: 0 and at
 *           most one tool call, oai_output_one_call), bit 2 parse_tools,
 *           bits 3-5 the number of stop strings (0 to 7: the API copies any
 *           count and ignores empty strings), bit 6 cut pushes only at UTF-8
 *           character boundaries (as nx_detok_stream does), bit 7
 *           meta.include_usage
 *   byte 1  seed of the push sizes; byte 2: the largest push (1 to 64
 *           bytes; 0-byte pushes happen too)
 *   then, per stop string, a length byte (mod 9) and that many bytes (a NUL
 *           becomes 'x': stop strings are C strings)
 *   the rest: the generated text
 *
 * The assembler runs three times: A, the text pushed in pieces of the
 * fuzzer's choosing (split anywhere: inside UTF-8 sequences, tags, stop
 * strings), then oai_output_finish; B, the text in one push; C, without stop
 * strings, on the text cut where the first completed stop string starts
 * (found here independently: the smallest end, then the longer).
 *
 * Checked:
 *   - every delta: text non-NULL and NUL-terminated at its length, calls NULL
 *     iff there are none, call indexes consecutive from 0, ids "call_" and 24
 *     alphanumerics, names and arguments non-NULL, stopped never going back
 *     to 0, nothing after a stop or after finish;
 *   - the deltas add up to oai_output_content / oai_output_reasoning (the
 *     latter NULL iff there is none) and their calls to oai_output_n_calls;
 *   - A, B and C agree on content, reasoning, calls and stopped (C: stopped
 *     iff a stop string occurs): oai.h says the totals never depend on how
 *     the text was cut, and that output ends at the first completed stop
 *     string, which is dropped with everything after it;
 *   - every builder (chat and text chunks, chat and text completions,
 *     tool_calls, usage chunk, last chunk) gives JSON that parses and
 *     carries the delta's or total's text exactly, or NULL, and NULL only
 *     for invalid UTF-8 (oai.h: "a builder given invalid UTF-8 returns
 *     NULL"): with valid text and stop strings and pushes cut at character
 *     boundaries, nothing may be NULL;
 *   - oai_finish_reason is "tool_calls", "length" or "stop" as the header
 *     says; ASan and LeakSanitizer see no bad access and no leak. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/oai.h"

/* A growing byte string, always NUL-terminated. */
typedef struct {
    char *p;
    size_t n, cap;
} text_buf;

static void buf_add(text_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* RFC 3629 UTF-8: no overlongs, surrogates or code points past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) k = 1, min = 0x80, c &= 0x1f;
        else if ((c & 0xf0) == 0xe0) k = 2, min = 0x800, c &= 0x0f;
        else if ((c & 0xf8) == 0xf0) k = 3, min = 0x10000, c &= 0x07;
        else return 0;
        if (k >= n - i) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            c = (c << 6) | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

static int is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static void check_call(const oai_tool_call *c, int index) {
    CHECK(c->index == index);
    CHECK(c->id && strlen(c->id) == 29 && strncmp(c->id, "call_", 5) == 0);
    for (int i = 5; i < 29; i++) CHECK(is_alnum(c->id[i]));
    CHECK(c->name != NULL && c->arguments != NULL);
}

static int calls_utf8(const oai_tool_call *c, int n) {
    for (int i = 0; i < n; i++)
        if (!utf8_valid((const unsigned char *)c[i].name, strlen(c[i].name)) ||
            !utf8_valid((const unsigned char *)c[i].arguments, strlen(c[i].arguments)))
            return 0;
    return 1;
}

/* A JSON string value equals s[0..n). */
static int json_str_is(const json_t *v, const char *s, size_t n) {
    return json_is_string(v) && json_string_length(v) == n && memcmp(json_string_value(v), s, n) == 0;
}

static json_t *load(const char *s) {
    json_error_t e;
    json_t *j = json_loads(s, JSON_ALLOW_NUL, &e);
    if (!j) fprintf(stderr, "invalid JSON from a builder: %s\n%s\n", e.text, s);
    CHECK(j != NULL);
    return j;
}

typedef struct {
    text_buf content, reasoning;      /* deltas, concatenated */
    int n_calls, stopped;
    char **ids, **names, **args; /* the calls, copied */
} run_result;

static void free_result(run_result *r) {
    free(r->content.p);
    free(r->reasoning.p);
    for (int i = 0; i < r->n_calls; i++) free(r->ids[i]), free(r->names[i]), free(r->args[i]);
    free(r->ids), free(r->names), free(r->args);
}

/* How run A pushes: the flags of byte 0 and the push sizes' generator. */
typedef struct {
    int think_open, parse_tools, utf8_cuts, include_usage;
    uint32_t rng;
    int max_push;
} run_config;

/* xorshift32: push sizes that depend only on the input */
static uint32_t next_rand(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static const oai_meta k_meta = {"chatcmpl-fuzz", 1700000000, "m", 0};

static void check_delta_json(const oai_meta *m, const oai_delta *d, int first, int input_ok) {
    int ok = utf8_valid((const unsigned char *)d->content, d->content_len) &&
             utf8_valid((const unsigned char *)d->reasoning, d->reasoning_len) && calls_utf8(d->calls, d->n_calls);
    char *s = oai_chat_chunk_json(m, d, first, NULL, NULL);
    if (ok && input_ok) CHECK(s != NULL);
    if (s) {
        json_t *j = load(s);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0), *delta = json_object_get(c, "delta");
        CHECK(json_is_object(delta) && json_is_null(json_object_get(c, "finish_reason")));
        json_t *ct = json_object_get(delta, "content");
        if (first || d->content_len) CHECK(json_str_is(ct, d->content, d->content_len));
        else CHECK(ct == NULL);
        json_t *rt = json_object_get(delta, "reasoning_content");
        if (d->reasoning_len) CHECK(json_str_is(rt, d->reasoning, d->reasoning_len));
        else CHECK(rt == NULL);
        json_t *tc = json_object_get(delta, "tool_calls");
        CHECK(d->n_calls ? json_array_size(tc) == (size_t)d->n_calls : tc == NULL);
        for (int i = 0; i < d->n_calls; i++) {
            json_t *ci = json_array_get(tc, i), *fn = json_object_get(ci, "function");
            CHECK(json_integer_value(json_object_get(ci, "index")) == d->calls[i].index);
            CHECK(json_str_is(json_object_get(fn, "name"), d->calls[i].name, strlen(d->calls[i].name)));
            CHECK(json_str_is(json_object_get(fn, "arguments"), d->calls[i].arguments, strlen(d->calls[i].arguments)));
        }
        CHECK((json_object_get(j, "usage") != NULL) == (m->include_usage != 0));
        json_decref(j);
        free(s);
    }
    s = oai_text_chunk_json(m, d, NULL, NULL);
    if (utf8_valid((const unsigned char *)d->content, d->content_len) && input_ok) CHECK(s != NULL);
    if (s) {
        json_t *j = load(s);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        CHECK(json_str_is(json_object_get(c, "text"), d->content, d->content_len));
        json_decref(j);
        free(s);
    }
}

static void collect(run_result *r, const oai_delta *d, int *seen_stop) {
    CHECK(d->content && d->reasoning);
    CHECK(d->content[d->content_len] == '\0' && d->reasoning[d->reasoning_len] == '\0');
    CHECK(d->n_calls >= 0 && (d->n_calls == 0) == (d->calls == NULL));
    CHECK(d->stopped == 0 || d->stopped == 1);
    if (*seen_stop) CHECK(d->stopped == 1);
    CHECK(oai_delta_empty(d) == (!d->content_len && !d->reasoning_len && !d->n_calls));
    buf_add(&r->content, d->content, d->content_len);
    buf_add(&r->reasoning, d->reasoning, d->reasoning_len);
    if (d->n_calls) {
        r->ids = realloc(r->ids, (size_t)(r->n_calls + d->n_calls) * sizeof *r->ids);
        r->names = realloc(r->names, (size_t)(r->n_calls + d->n_calls) * sizeof *r->names);
        r->args = realloc(r->args, (size_t)(r->n_calls + d->n_calls) * sizeof *r->args);
        for (int i = 0; i < d->n_calls; i++) {
            check_call(&d->calls[i], r->n_calls);
            r->ids[r->n_calls] = strdup(d->calls[i].id);
            r->names[r->n_calls] = strdup(d->calls[i].name);
            r->args[r->n_calls] = strdup(d->calls[i].arguments);
            r->n_calls++;
        }
    }
    r->stopped = d->stopped;
    *seen_stop |= d->stopped;
}

/* Pushes text (whole when cfg is NULL), finishes, checks the totals and the
 * whole-response builders. */
static void run(run_result *r, char *const *stop, int n_stop, const run_config *cfg, int think_open, int parse_tools,
                const char *text, size_t n, int input_ok, int include_usage) {
    memset(r, 0, sizeof *r);
    buf_add(&r->content, "", 0);
    buf_add(&r->reasoning, "", 0);
    oai_output *o = oai_output_new(stop, n_stop, think_open, parse_tools != 0);
    CHECK(o != NULL);
    oai_output_seed_ids(o, 12345);
    if (parse_tools == 2) oai_output_one_call(o);
    oai_meta m = k_meta;
    m.include_usage = include_usage;
    oai_delta d;
    int seen_stop = 0, first = 1;
    uint32_t rng = cfg ? cfg->rng : 0;
    for (size_t at = 0; at < n || (cfg && at == 0);) {
        size_t len = n - at;
        if (cfg) {
            len = next_rand(&rng) % (unsigned)(cfg->max_push + 1);
            if (len > n - at) len = n - at;
            if (cfg->utf8_cuts)
                while (at + len < n && ((unsigned char)text[at + len] & 0xc0) == 0x80) len++;
        }
        /* a private copy, so a read past the pushed bytes is caught */
        char *piece = malloc(len ? len : 1);
        memcpy(piece, text + at, len);
        int was_stopped = seen_stop;
        CHECK(oai_output_push(o, piece, len, &d) == 0);
        free(piece);
        if (was_stopped) CHECK(oai_delta_empty(&d) && d.stopped);
        collect(r, &d, &seen_stop);
        if (cfg) check_delta_json(&m, &d, first, input_ok && cfg->utf8_cuts);
        first = 0;
        at += len;
        if (n == 0) break;
    }
    CHECK(oai_output_finish(o, &d) == 0);
    collect(r, &d, &seen_stop);
    if (cfg) check_delta_json(&m, &d, 0, input_ok && cfg->utf8_cuts);
    /* after finish: empty deltas */
    CHECK(oai_output_finish(o, &d) == 0 && oai_delta_empty(&d));
    CHECK(oai_output_push(o, "x", 1, &d) == 0 && oai_delta_empty(&d));

    /* totals */
    const char *content = oai_output_content(o), *reasoning = oai_output_reasoning(o);
    CHECK(content != NULL);
    CHECK(strlen(content) <= r->content.n && memcmp(content, r->content.p, strlen(content)) == 0);
    if (!memchr(r->content.p, 0, r->content.n)) CHECK(strlen(content) == r->content.n);
    CHECK((reasoning == NULL) == (r->reasoning.n == 0));
    if (reasoning) CHECK(memcmp(reasoning, r->reasoning.p, strlen(reasoning)) == 0);
    CHECK(oai_output_n_calls(o) == r->n_calls);
    const char *fr0 = oai_finish_reason(o, 0), *fr1 = oai_finish_reason(o, 1);
    if (r->n_calls) CHECK(strcmp(fr0, "tool_calls") == 0 && strcmp(fr1, "tool_calls") == 0);
    else CHECK(strcmp(fr0, "stop") == 0 && strcmp(fr1, r->stopped ? "stop" : "length") == 0);

    /* whole-response builders */
    int text_ok = utf8_valid((const unsigned char *)r->content.p, r->content.n) &&
                  utf8_valid((const unsigned char *)r->reasoning.p, r->reasoning.n);
    char *tc = oai_output_tool_calls_json(o);
    int calls_ok = 1;
    for (int i = 0; i < r->n_calls; i++)
        calls_ok &= utf8_valid((const unsigned char *)r->names[i], strlen(r->names[i])) &&
                    utf8_valid((const unsigned char *)r->args[i], strlen(r->args[i]));
    if (r->n_calls == 0) CHECK(tc == NULL);
    else CHECK(tc != NULL || !calls_ok);
    if (tc) {
        json_t *j = load(tc);
        CHECK(json_array_size(j) == (size_t)r->n_calls);
        for (int i = 0; i < r->n_calls; i++) {
            json_t *c = json_array_get(j, i), *fn = json_object_get(c, "function");
            CHECK(json_object_get(c, "index") == NULL);
            CHECK(json_str_is(json_object_get(c, "id"), r->ids[i], strlen(r->ids[i])));
            CHECK(json_str_is(json_object_get(fn, "name"), r->names[i], strlen(r->names[i])));
            CHECK(json_str_is(json_object_get(fn, "arguments"), r->args[i], strlen(r->args[i])));
        }
        json_decref(j);
        free(tc);
    }
    oai_usage u = {3, 4, 2};
    char *s = oai_chat_completion_json(&m, o, fr1, u, NULL);
    if (input_ok) CHECK(s != NULL);
    if (s) {
        json_t *j = load(s);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(c, "message");
        json_t *ct = json_object_get(msg, "content");
        if (r->n_calls && r->content.n == 0) CHECK(json_is_null(ct));
        else CHECK(json_str_is(ct, r->content.p, r->content.n));
        json_t *rt = json_object_get(msg, "reasoning_content");
        if (r->reasoning.n) CHECK(json_str_is(rt, r->reasoning.p, r->reasoning.n));
        else CHECK(rt == NULL);
        CHECK(r->n_calls ? json_array_size(json_object_get(msg, "tool_calls")) == (size_t)r->n_calls
                         : json_object_get(msg, "tool_calls") == NULL);
        CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")) == 7);
        json_decref(j);
        free(s);
    } else {
        CHECK(!text_ok || !calls_ok);
    }
    s = oai_text_completion_json(&m, o, fr1, u, NULL);
    if (input_ok) CHECK(s != NULL);
    if (s) {
        json_t *j = load(s);
        CHECK(json_str_is(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"), r->content.p,
                          r->content.n));
        json_decref(j);
        free(s);
    } else {
        CHECK(!utf8_valid((const unsigned char *)r->content.p, r->content.n));
    }
    s = oai_chat_chunk_json(&m, NULL, 0, fr1, NULL);
    CHECK(s != NULL);
    json_decref(load(s));
    free(s);
    s = oai_text_chunk_json(&m, NULL, fr1, NULL);
    CHECK(s != NULL);
    json_decref(load(s));
    free(s);
    s = oai_usage_chunk_json(&m, 1, u);
    CHECK(s != NULL);
    json_decref(load(s));
    free(s);
    oai_output_free(o);
}

static void same_result(const run_result *a, const run_result *b, const char *what) {
    int same = a->content.n == b->content.n && memcmp(a->content.p, b->content.p, a->content.n) == 0 &&
               a->reasoning.n == b->reasoning.n && memcmp(a->reasoning.p, b->reasoning.p, a->reasoning.n) == 0 &&
               a->n_calls == b->n_calls;
    for (int i = 0; same && i < a->n_calls; i++)
        same = strcmp(a->ids[i], b->ids[i]) == 0 && strcmp(a->names[i], b->names[i]) == 0 &&
               strcmp(a->args[i], b->args[i]) == 0;
    if (!same) {
        fprintf(stderr, "%s differ:\n  R1 [%zu] '%.*s'\n  R2 [%zu] '%.*s'\n  C1 [%zu] '%.*s'\n  C2 [%zu] '%.*s'\n  calls %d %d\n",
                what, a->reasoning.n, (int)a->reasoning.n, a->reasoning.p, b->reasoning.n, (int)b->reasoning.n,
                b->reasoning.p, a->content.n, (int)a->content.n, a->content.p, b->content.n, (int)b->content.n,
                b->content.p, a->n_calls, b->n_calls);
    }
    CHECK(same);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    static const int thinks[4] = {-1, 0, 1, 0};
    run_config cfg;
    cfg.think_open = thinks[data[0] & 3];
    cfg.parse_tools = (data[0] >> 2) & 1 ? ((data[0] & 3) == 3 ? 2 : 1) : 0;   /* 2: one call at most */
    int n_stop = (data[0] >> 3) & 7;
    cfg.utf8_cuts = (data[0] >> 6) & 1;
    cfg.include_usage = data[0] >> 7;
    cfg.rng = 0x9e3779b9u * (data[1] + 1u);
    cfg.max_push = 1 + (data[2] & 63);   /* 0-byte pushes still happen (rand % (max+1) == 0) */
    size_t at = 3;
    char *stop[8] = {0};
    int stops_ok = 1;
    for (int i = 0; i < n_stop; i++) {
        size_t l = at < size ? data[at++] % 9 : 0;
        if (l > size - at) l = size - at;
        stop[i] = malloc(l + 1);
        for (size_t k = 0; k < l; k++) stop[i][k] = data[at + k] ? (char)data[at + k] : 'x';
        stop[i][l] = 0;
        at += l;
        stops_ok &= utf8_valid((const unsigned char *)stop[i], l);
    }
    size_t n = size - at;
    char *text = malloc(n ? n : 1);
    memcpy(text, data + at, n);
    int input_ok = stops_ok && utf8_valid((const unsigned char *)text, n);

    run_result a, b, c;
    run(&a, stop, n_stop, &cfg, cfg.think_open, cfg.parse_tools, text, n, input_ok, cfg.include_usage);
    run(&b, stop, n_stop, NULL, cfg.think_open, cfg.parse_tools, text, n, input_ok, 0);
    same_result(&a, &b, "pieces vs whole");
    CHECK(a.stopped == b.stopped);

    /* the reference cut: the stop string completed first (then the longer) */
    size_t best_start = 0, best_end = SIZE_MAX;
    for (int i = 0; i < n_stop; i++) {
        size_t l = strlen(stop[i]);
        if (!l || l > n) continue;
        const char *p = memmem(text, n, stop[i], l);
        if (!p) continue;
        size_t ps = (size_t)(p - text), pe = ps + l;
        if (pe < best_end || (pe == best_end && ps < best_start)) best_start = ps, best_end = pe;
    }
    int found = best_end != SIZE_MAX;
    CHECK(a.stopped == found);
    run(&c, NULL, 0, NULL, cfg.think_open, cfg.parse_tools, text, found ? best_start : n, input_ok, 0);
    same_result(&a, &c, "stops vs text cut at the stop");

    free_result(&a);
    free_result(&b);
    free_result(&c);
    for (int i = 0; i < n_stop; i++) free(stop[i]);
    free(text);
    return 0;
}
