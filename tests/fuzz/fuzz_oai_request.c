/* fuzz_oai_request.c — oai_parse_request and oai_request_free
 * (src/server/oai.h, "Request"): the body of every POST the server takes.
 *
 * Input: byte 0 selects the call, the rest is the HTTP request body.
 *   bit 0      1: /v1/chat/completions, 0: /v1/completions
 *   bits 1-2   the error buffer: 0 a 256-byte one, 1 600 bytes, 2 1 to 8
 *              bytes (truncation), 3 none (err NULL, errlen 0)
 *
 * Checked (the promises of oai.h):
 *   - the result is 0 or -1;
 *   - a failure gives status 400 (500 is for out of memory, which the fuzzer
 *     does not cause), leaves the request all zero, and a message
 *     terminated inside errlen that is printable ASCII (it goes into JSON),
 *     names a field (or says "invalid JSON" / "request body") and comes back
 *     intact from oai_error_json; *param is NULL or the top-level field the
 *     message begins with (NULL after a success);
 *   - a success echoes chat; a chat request has messages_json, a non-empty
 *     array of objects with a string role equal to the body's "messages"
 *     (re-serializing lost nothing), and tools_json equal to "tools" unless
 *     tool_choice is "none"; a completion has a prompt or prompt ids (ids
 *     >= 0) and neither; every
 *     sampling parameter is inside its documented range as the float the
 *     sampler gets: top_p in (0, 1] and repetition_penalty > 0 with open
 *     lower bounds (fixed in cd374a4: 1e-50 passed as a double and became
 *     0.0f), temperature in [0, 2], min_p in [0, 1], the penalties in
 *     [-2, 2], top_k >= 0; logit bias entries with ids >= 0 and biases in
 *     [-100, 100], held in bias (NULL when none); 0 to 4 non-empty stop strings, stop NULL when
 *     there are none; flags 0 or 1; enable_thinking -1, 0 or 1;
 *   - oai_request_free zeroes the request and may be called twice; ASan and
 *     LeakSanitizer see no bad access and no leak. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/oai.h"

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/* What a message may name: a field, or the body as a whole. */
static const char *const k_field_words[] = {
    "invalid JSON", "request body", "messages", "model", "prompt", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "seed", "n must", "stop", "stream", "stream_options", "include_usage", "chat_template_kwargs",
    "enable_thinking", "tools", "tool_choice", "logprobs", "top_logprobs", "echo", "best_of", "suffix",
    "response_format", "logit_bias", "parallel_tool_calls", "functions", "function_call",
};

/* param: NULL (the body) or a top-level field the message names */
static void check_failure(const oai_request *r, int status, const char *param, const char *err, size_t errlen) {
    CHECKF(status == 400, "status %d", status);
    CHECK(all_zero(r, sizeof *r));
    CHECK(param == NULL || strcmp(param, "unset") != 0);
    if (param && err && errlen >= 256) CHECKF(strncmp(err, param, strlen(param)) == 0, "param %s for '%s'", param, err);
    if (!err || !errlen) return;
    CHECK(memchr(err, '\0', errlen) != NULL);
    if (errlen < 16) return;   /* truncated: only the termination can be checked */
    CHECK(err[0] != '\0');
    for (const char *p = err; *p; p++) CHECKF((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80, "byte 0x%02x in '%s'",
                                                (unsigned char)*p, err);
    int named = 0;
    for (size_t i = 0; i < sizeof k_field_words / sizeof *k_field_words; i++) named |= strstr(err, k_field_words[i]) != NULL;
    CHECKF(named, "the message names no field: %s", err);
    char *e = oai_error_json(err, "invalid_request_error", NULL, NULL);
    CHECK(e != NULL);
    json_t *j = json_loads(e, 0, NULL);
    CHECK(j != NULL);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "message")), err) == 0);
    json_decref(j);
    free(e);
}

static void check_chat(const oai_request *r, const json_t *root) {
    CHECK(r->messages_json != NULL && r->prompt == NULL && r->prompt_ids == NULL);
    json_t *m = json_loads(r->messages_json, 0, NULL);
    CHECK(json_is_array(m) && json_array_size(m) > 0);
    size_t i;
    json_t *v;
    json_array_foreach(m, i, v) CHECK(json_is_object(v) && json_is_string(json_object_get(v, "role")));
    CHECK(json_equal(m, json_object_get(root, "messages")));
    json_decref(m);
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    int none = json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0;
    CHECK((r->tools_json != NULL) == (tools && !json_is_null(tools) && !none));
    if (r->tools_json) {
        json_t *t = json_loads(r->tools_json, 0, NULL);
        CHECK(json_is_array(t) && json_equal(t, tools));
        json_decref(t);
    }
}

static void check_success(const oai_request *r, int chat, const char *body, size_t len) {
    CHECK(r->chat == chat);
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    CHECK(json_is_object(root));   /* the parser accepted it */
    json_t *model = json_object_get(root, "model");
    if (!model || json_is_null(model)) CHECK(r->model == NULL);
    else CHECK(r->model && strcmp(r->model, json_string_value(model)) == 0);
    if (chat) check_chat(r, root);
    else CHECK((r->prompt != NULL) != (r->prompt_ids != NULL) && r->messages_json == NULL && r->tools_json == NULL);
    CHECK((r->prompt_ids != NULL) == (r->n_prompt_ids > 0));
    for (int i = 0; i < r->n_prompt_ids; i++) CHECK(r->prompt_ids[i] >= 0);
    json_decref(root);
    CHECK(r->max_tokens >= -1);
    const nx_sampling *s = &r->sampling;
    CHECKF(s->temperature >= 0 && s->temperature <= 2, "temperature %g", s->temperature);
    CHECKF(s->top_p > 0 && s->top_p <= 1, "top_p %g", s->top_p);
    CHECKF(s->min_p >= 0 && s->min_p <= 1, "min_p %g", s->min_p);
    CHECKF(s->presence_penalty >= -2 && s->presence_penalty <= 2, "presence_penalty %g", s->presence_penalty);
    CHECKF(s->frequency_penalty >= -2 && s->frequency_penalty <= 2, "frequency_penalty %g", s->frequency_penalty);
    CHECKF(s->repetition_penalty > 0, "repetition_penalty %g", s->repetition_penalty);
    CHECK(s->top_k >= 0);
    CHECK(s->n_logit_bias >= 0 && s->n_logit_bias <= NX_MAX_LOGIT_BIAS && s->logit_bias == r->bias);
    CHECK((s->n_logit_bias == 0) == (r->bias == NULL));
    for (int i = 0; i < s->n_logit_bias; i++)
        CHECKF(s->logit_bias[i].id >= 0 && s->logit_bias[i].bias >= -100 && s->logit_bias[i].bias <= 100, "bias %d: %d %g",
               i, s->logit_bias[i].id, s->logit_bias[i].bias);
    CHECK(r->n_stop >= 0 && r->n_stop <= 4);
    CHECK((r->n_stop == 0) == (r->stop == NULL));
    for (int i = 0; i < r->n_stop; i++) CHECK(r->stop[i] && r->stop[i][0]);
    CHECK(r->stream == 0 || r->stream == 1);
    CHECK(r->include_usage == 0 || r->include_usage == 1);
    CHECK(r->seed_given == 0 || r->seed_given == 1);
    CHECK(r->enable_thinking >= -1 && r->enable_thinking <= 1);
    CHECK(r->logprobs == 0 || r->logprobs == 1);
    CHECKF(r->top_logprobs >= 0 && r->top_logprobs <= NX_MAX_TOP_LOGPROBS, "top_logprobs %d", r->top_logprobs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int chat = data[0] & 1, err_mode = data[0] >> 1 & 3;
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    size_t errlen = err_mode == 0 ? 256 : err_mode == 1 ? 600 : err_mode == 2 ? 1 + size % 8 : 0;
    char *err = err_mode == 3 ? NULL : malloc(errlen);   /* on the heap: ASan sees a write past errlen */
    oai_request r;
    memset(&r, 0xa5, sizeof r);   /* garbage in: the parser must set every field */
    int status = -7;
    const char *param = "unset";
    int rc = oai_parse_request(body, len, chat, &r, &status, &param, err, errlen);
    CHECKF(rc == 0 || rc == -1, "oai_parse_request returned %d", rc);
    if (rc == 0) {
        CHECK(param == NULL);
        check_success(&r, chat, body, len);
    } else {
        check_failure(&r, status, param, err, errlen);
    }
    oai_request_free(&r);
    CHECK(all_zero(&r, sizeof r));
    oai_request_free(&r);
    free(err);
    return 0;
}
