/* fuzz_chat_request.c — the request side of the chat renderer, with the real
 * templates (tests/data/chat/Qwen-Qwen3-0.6B.jinja and Qwen3.5-4B.jinja) and
 * the bundled model's tokenizer, all loaded once.
 *
 * Input: byte 0 holds flags, the rest is up to three NUL-separated fields:
 * messages_json \0 tools_json \0 extra_kwargs_json.
 *   bit 0     the template: 1 Qwen3.5, 0 Qwen3
 *   bit 1     add_generation_prompt
 *   bits 2-3  enable_thinking = value % 3 - 1
 *   bit 4     pass tools_json (else NULL)
 *   bit 5     pass extra_kwargs_json through chat_render_ex (src/tokenizer/chat.h)
 *   bit 6     the server's route instead: the rest is a whole
 *             POST /v1/chat/completions body, parsed by oai_parse_request
 *             (src/server/oai.h); its messages, tools and enable_thinking
 *             are rendered
 *   bit 7     also parse the messages field with chat_json_parse and walk
 *             the values
 *
 * Checked: a render returns NX_OK with a string, or fails with no output, a
 * message and NX_EFORMAT (bad JSON or request shape), NX_EINVAL (a template
 * exception: the message is a Python exception, "SomethingError: ...") or
 * NX_EUNSUPPORTED / NX_ENOMEM. A rendered prompt tokenizes, or is refused as
 * invalid UTF-8 (a lone surrogate from a \uD800 escape). oai_parse_request
 * fails with 400 and a message, or hands over messages_json. chat_json_parse
 * gives well-formed values: strings NUL-terminated at their length, dict
 * keys unique strings, floats whose spelling reads back as the same double,
 * ints spelled as digits; or fails with a line number. Everything is freed
 * (LeakSanitizer). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "nextn.h"
#include "server/oai.h"
#include "tokenizer/chat.h"

static nx_chat_template *g_qwen3, *g_qwen35;
static nx_tokenizer *g_tok;

static nx_chat_template *load_template(const char *path) {
    size_t n;
    char *text = (char *)fuzz_read_file(path, &n);
    nx_chat_template *c = NULL;
    char err[512];
    if (nx_chat_template_new(text, n, path, &c, err, sizeof err) != NX_OK) FUZZ_DIE("%s", err);
    free(text);
    return c;
}

static void free_fixtures(void) {
    nx_chat_template_free(g_qwen3);
    nx_chat_template_free(g_qwen35);
    nx_tokenizer_free(g_tok);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    g_qwen3 = load_template(NX_TEST_DATA "/chat/Qwen-Qwen3-0.6B.jinja");
    g_qwen35 = load_template(NX_TEST_DATA "/chat/Qwen3.5-4B.jinja");
    char err[512];
    if (nx_tokenizer_load(NX_MODELS_DIR "/default", &g_tok, err, sizeof err) != NX_OK) FUZZ_DIE("tokenizer: %s", err);
    atexit(free_fixtures);
    return 0;
}

static void render(const nx_chat_template *c, const nx_chat_request *req, const char *kwargs) {
    char *out = (char *)1;
    char err[1024] = "";
    nx_status st = kwargs ? chat_render_ex(c, req, kwargs, &out, err, sizeof err)
                          : nx_chat_render(c, req, &out, err, sizeof err);
    if (st != NX_OK) {
        CHECKF(out == NULL && err[0], "a failed render (%s) left output or no message", nx_status_str(st));
        CHECKF(st == NX_EFORMAT || st == NX_EINVAL || st == NX_EUNSUPPORTED || st == NX_ENOMEM, "render status %s: %s",
               nx_status_str(st), err);
        if (st == NX_EINVAL) {   /* "TypeError: ..." and the like: the first ':' ends "...Error" */
            const char *e = strstr(err, "Error: ");
            CHECKF(e && strchr(err, ':') == e + 5, "an NX_EINVAL message that is not a Python exception: %s", err);
        }
        return;
    }
    CHECK(out != NULL && out != (char *)1);
    int32_t *ids = NULL;
    int n = 0;
    st = nx_tokenize(g_tok, out, strlen(out), NX_SPECIAL_PARSE, &ids, &n, err, sizeof err);
    CHECKF(st == NX_OK || (st == NX_EINVAL && strstr(err, "invalid UTF-8")), "tokenizing the rendered prompt: %s", err);
    nx_free(ids);
    nx_free(out);
}

static void walk(const chat_val *v, int depth) {
    CHECKF(depth <= CHAT_JSON_MAX_DEPTH + 1, "depth %d", depth);
    switch (v->kind) {
    case CV_NONE:
    case CV_BOOL: break;
    case CV_INT:
        CHECK(v->s && v->len == strlen(v->s) && v->len > 0);
        for (size_t i = (v->s[0] == '-'); i < v->len; i++) CHECKF(v->s[i] >= '0' && v->s[i] <= '9', "int '%s'", v->s);
        break;
    case CV_FLOAT:
        CHECK(v->s && v->len == strlen(v->s));
        if (isnan(v->d)) CHECKF(!strcmp(v->s, "nan"), "nan spelled %s", v->s);
        else if (isinf(v->d)) CHECKF(!strcmp(v->s, v->d < 0 ? "-inf" : "inf"), "inf spelled %s", v->s);
        else {
            CHECKF(strtod(v->s, NULL) == v->d, "float %s does not read back as %.17g", v->s, v->d);
            CHECKF(strchr(v->s, '.') || strchr(v->s, 'e'), "float %s has neither '.' nor 'e'", v->s);
        }
        break;
    case CV_STR: CHECK(v->s && v->s[v->len] == 0); break;
    case CV_LIST:
        for (size_t i = 0; i < v->n; i++) walk(&v->items[i], depth + 1);
        break;
    case CV_DICT:
        for (size_t i = 0; i < v->n; i++) {
            CHECKF(v->keys[i].kind == CV_STR && v->keys[i].s[v->keys[i].len] == 0, "key %zu", i);
            if (v->n < 200)   /* quadratic: only where it is cheap */
                for (size_t j = 0; j < i; j++)
                    CHECK(!(v->keys[i].len == v->keys[j].len && !memcmp(v->keys[i].s, v->keys[j].s, v->keys[j].len)));
            walk(&v->items[i], depth + 1);
        }
        break;
    default: CHECKF(0, "value kind %d", (int)v->kind);
    }
}

static void server_route(const nx_chat_template *c, const uint8_t *body, size_t len) {
    oai_request q;
    int status = 0;
    char err[512] = "";
    if (oai_parse_request((const char *)body, len, 1, &q, &status, NULL, err, sizeof err) != 0) {
        CHECKF(status == 400 || status == 500, "status %d", status);
        CHECK(err[0]);
        return;
    }
    CHECK(q.messages_json != NULL);
    nx_chat_request req = {q.messages_json, q.tools_json, 1, q.enable_thinking};
    render(c, &req, NULL);
    oai_request_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t flags = data[0];
    const nx_chat_template *c = (flags & 1) ? g_qwen35 : g_qwen3;
    if (flags & 0x40) {
        server_route(c, data + 1, size - 1);
        return 0;
    }
    /* the fields as C strings: the body and two spare NULs, so a missing
     * field is an empty string at the end */
    char *buf = malloc(size + 2);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = buf[size] = buf[size + 1] = 0;
    const char *field[3] = {buf, NULL, NULL};
    for (int k = 0; k < 2; k++) {
        const char *end = field[k] + strlen(field[k]);
        if (end >= buf + size - 1) break;
        field[k + 1] = end + 1;
    }
    int think = (flags >> 2 & 3) % 3 - 1;
    nx_chat_request req = {field[0], (flags & 0x10) ? (field[1] ? field[1] : "") : NULL, flags >> 1 & 1, think};
    render(c, &req, (flags & 0x20) ? (field[2] ? field[2] : "{}") : NULL);

    if (flags & 0x80) {
        chat_arena a = {0};
        chat_val *v = NULL;
        char err[512] = "";
        nx_status st = chat_json_parse(&a, field[0], strlen(field[0]), &v, err, sizeof err);
        if (st == NX_OK) {
            CHECK(v != NULL);
            walk(v, 0);
        } else {
            CHECKF(v == NULL && err[0] && strstr(err, "line "), "a parse error without a position: %s", err);
        }
        chat_arena_free(&a);
    }
    free(buf);
    return 0;
}
