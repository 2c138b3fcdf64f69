/* tokenize.c — POST /tokenize and POST /detokenize, in vLLM's shape: what a
 * prompt costs in tokens before it is sent (clients trim conversations to
 * the context with it), and token ids back to text. The prompt is built
 * exactly as a completion request's is -- the same parser, the same chat
 * template with its generation prompt -- so the count is the one the
 * completion will report as usage.prompt_tokens.
 *
 *   /tokenize    {"prompt": ...} or {"messages": [...]} (any completion field
 *                is accepted and checked), "return_token_strs": true adds
 *                each token's text
 *                -> {"count", "max_model_len", "tokens"[, "token_strs"]}
 *   /detokenize  {"tokens": [ids]} -> {"prompt": text} (special tokens
 *                written out) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"
#include "server/oai.h"

/* The body's top-level object, or NULL with a 400 sent. */
static json_t *body_object(nx_server *s, struct MHD_Connection *c, const char *body, size_t len, enum MHD_Result *sent) {
    char err[300];
    json_t *root = oai_load_body(body, len, err, sizeof err);
    if (!root) *sent = srv_send_error(s, c, 400, err, "invalid_request_error", NULL);
    return root;
}

static enum MHD_Result send_built(nx_server *s, struct MHD_Connection *c, json_t *root, int ok) {
    char *json = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    enum MHD_Result r = json ? srv_send_json(s, c, 200, json) : srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    free(json);
    return r;
}

enum MHD_Result srv_tokenize(nx_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    enum MHD_Result sent = MHD_NO;
    json_t *root = body_object(s, c, body, len, &sent);
    if (!root) return sent;
    int chat = json_object_get(root, "messages") != NULL;
    json_t *strs = json_object_get(root, "return_token_strs");   /* borrowed: read before root goes */
    int with_strs = json_is_true(strs), bad_strs = strs && !json_is_boolean(strs) && !json_is_null(strs);
    json_decref(root);
    if (bad_strs)
        return srv_send_error(s, c, 400, "return_token_strs must be a boolean", "invalid_request_error", "return_token_strs");
    oai_request q;
    int status, think_open, cache_at[NX_CACHE_POINTS], n = 0;
    char err[600];
    const char *param;
    if (oai_parse_request(body, len, chat, &q, &status, &param, err, sizeof err) != 0)
        return srv_send_error(s, c, (unsigned)status, err, status == 400 ? "invalid_request_error" : "server_error", param);
    int32_t *ids = NULL;
    int bad = srv_build_prompt(s, c, &q, &ids, &n, &think_open, cache_at, &sent);
    oai_request_free(&q);
    if (bad) return sent;
    int ok = 1;
    json_t *r = json_object(), *tokens = json_array(), *texts = with_strs ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
        if (json_array_append_new(tokens, json_integer(ids[i]))) ok = 0;
        if (!texts) continue;
        char *t = NULL;
        size_t tl = 0;
        json_t *v = nx_detokenize(s->o.tokenizer, &ids[i], 1, 0, &t, &tl, NULL, 0) == NX_OK ? json_stringn(t, tl) : NULL;
        nx_free(t);
        if (!v || json_array_append_new(texts, v)) ok = 0;
    }
    nx_free(ids);
    ok &= json_object_set_new(r, "count", json_integer(n)) == 0;
    ok &= json_object_set_new(r, "max_model_len", json_integer(s->o.max_ctx)) == 0;
    ok &= json_object_set_new(r, "tokens", tokens) == 0;
    if (texts) ok &= json_object_set_new(r, "token_strs", texts) == 0;
    return send_built(s, c, r, ok);
}

enum MHD_Result srv_detokenize(nx_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    enum MHD_Result sent = MHD_NO;
    json_t *root = body_object(s, c, body, len, &sent);
    if (!root) return sent;
    json_t *arr = json_object_get(root, "tokens");
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char msg[160] = "";
    if (!json_is_array(arr)) snprintf(msg, sizeof msg, "tokens must be an array of token ids");
    const int V = nx_tokenizer_vocab_size(s->o.tokenizer);
    for (size_t i = 0; i < n && !msg[0] && ids; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id >= V)
            snprintf(msg, sizeof msg, "tokens[%zu] is not a token id in [0, %d)", i, V);
        else ids[i] = (int32_t)id;
    }
    json_decref(root);
    if (!ids || msg[0]) {
        free(ids);
        return ids ? srv_send_error(s, c, 400, msg, "invalid_request_error", "tokens")
                   : srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    }
    char *text = NULL;
    size_t tl = 0;
    nx_status st = nx_detokenize(s->o.tokenizer, ids, (int)n, 0, &text, &tl, NULL, 0);
    free(ids);
    json_t *r = json_object();
    int ok = st == NX_OK && json_object_set_new(r, "prompt", json_stringn(text, tl)) == 0;
    nx_free(text);
    return send_built(s, c, r, ok);
}
