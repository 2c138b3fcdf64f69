/* oai_request.c — the OpenAI wire format (see oai.h), part 1: a request
 * body in, a validated oai_request out, or a 400 whose message and param name
 * the field at fault. jansson reads the JSON.
 *
 * Validation follows OpenAI's ranges; a field sent as null means "use the
 * default", as OpenAI's own schema treats it. Every message names the field,
 * because the client sees nothing else. */
#include "server/oai.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a request's parse reports: the message, and the top-level field it
 * names (OpenAI's "param"; NULL when the body as a whole is at fault). */
typedef struct {
    char *err;
    size_t errlen;
    const char *param;
} parse_err;

static int __attribute__((format(printf, 3, 4))) fail(parse_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (e->err && e->errlen) vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
    e->param = param;
    return -1;
}

/* The sampling floats: range [lo, hi], lo excluded when lo_open. */
static const struct {
    const char *key;
    size_t offset;            /* of the float in nx_sampling */
    double lo, hi;
    int lo_open;
    const char *range;        /* for the error message */
} real_fields[] = {
    {"temperature", offsetof(nx_sampling, temperature), 0, 2, 0, "between 0 and 2"},
    {"top_p", offsetof(nx_sampling, top_p), 0, 1, 1, "greater than 0 and at most 1"},
    {"min_p", offsetof(nx_sampling, min_p), 0, 1, 0, "between 0 and 1"},
    {"presence_penalty", offsetof(nx_sampling, presence_penalty), -2, 2, 0, "between -2 and 2"},
    {"frequency_penalty", offsetof(nx_sampling, frequency_penalty), -2, 2, 0, "between -2 and 2"},
    {"repetition_penalty", offsetof(nx_sampling, repetition_penalty), 0, 1e30, 1, "greater than 0"},
};

static json_t *field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Stores the boolean at key in *out (untouched when absent). name is the
 * field's full name for the message, e.g. "stream_options.include_usage",
 * param the top-level field holding it. */
static int get_bool(const json_t *obj, const char *key, const char *name, const char *param, int *out, parse_err *e) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return fail(e, param, "%s must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

/* The integer at key, which must be >= lo. 1: stored in *out, 0: absent, -1: invalid. */
static int get_int(const json_t *obj, const char *key, long long lo, const char *what, long long *out, parse_err *e) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo) return fail(e, key, "%s must be %s", key, what);
    *out = json_integer_value(v);
    return 1;
}

static int clamp_int(long long v) { return v > INT_MAX ? INT_MAX : (int)v; }


/* messages[i]: a role of OpenAI's ("developer", its newer name for the
 * system role, becomes "system": the chat template knows that one), and
 * content that is a string or an array of text parts (absent or null only
 * in an assistant message with tool_calls). Images,
 * audio and files are refused: the model here reads text only, and a
 * template would render an image part as placeholder tokens with no image
 * behind them. */
static int check_message(json_t *m, size_t i, oai_request *r, parse_err *e) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role) return fail(e, "messages", "messages[%zu].role must be a string", i);
    size_t k = 0;
    while (k < sizeof roles / sizeof *roles && strcmp(role, roles[k]) != 0) k++;
    if (k == sizeof roles / sizeof *roles)
        return fail(e, "messages", "messages[%zu].role must be system, developer, user, assistant or tool", i);
    const int assistant = strcmp(role, "assistant") == 0;
    /* (role is not read again: setting "role" frees the string it points to) */
    if (strcmp(role, "developer") == 0 && json_object_set_new(m, "role", json_string("system"))) return 1;
    json_t *calls = json_object_get(m, "tool_calls"), *call;
    if (calls && !json_is_null(calls) && !json_is_array(calls))
        return fail(e, "messages", "messages[%zu].tool_calls must be an array", i);
    json_array_foreach(calls, k, call) {
        if (!json_is_object(call)) return fail(e, "messages", "messages[%zu].tool_calls[%zu] must be an object", i, k);
        /* the templates take {"function": {"name", "arguments"}} or the
         * name and arguments on the call itself, and concatenate the name
         * into the prompt: without one they fail with a message about a
         * dict object that names nothing the client sent */
        json_t *fn = json_object_get(call, "function"), *holder = fn ? fn : call;
        if (fn && !json_is_object(fn))
            return fail(e, "messages", "messages[%zu].tool_calls[%zu].function must be an object", i, k);
        json_t *name = json_object_get(holder, "name");
        if (!json_is_string(name) || json_string_length(name) == 0)
            return fail(e, "messages", "messages[%zu].tool_calls[%zu].function.name must be a non-empty string", i, k);
        /* OpenAI clients send "arguments" as a JSON string; the Qwen3.5
         * template iterates them as a mapping (Qwen3's prints a string as it
         * is and anything else as JSON): a string holding an object becomes
         * that object, null no arguments ({}); another string is left to the
         * template, and the first such call is noted for its error message.
         * A number or an array is no spelling of arguments at all. */
        json_t *args = json_object_get(holder, "arguments");
        if (!args || json_is_object(args)) continue;
        if (json_is_null(args)) {
            if (json_object_set_new(holder, "arguments", json_object())) return 1;
            continue;
        }
        if (!json_is_string(args))
            return fail(e, "messages", "messages[%zu].tool_calls[%zu].function.arguments must be a string or an object",
                        i, k);
        json_t *obj = json_loads(json_string_value(args), 0, NULL);
        if (json_is_object(obj)) {
            if (json_object_set_new(holder, "arguments", obj)) return 1;
            continue;
        }
        json_decref(obj);
        if (r->odd_arguments[0] < 0) r->odd_arguments[0] = (int)i, r->odd_arguments[1] = (int)k;
    }
    json_t *c = json_object_get(m, "content"), *part;
    /* content is required (OpenAI's rule) but for an assistant turn that
     * calls tools: a template renders a missing one as an empty turn, so a
     * client's lost text would go unnoticed while the model answers nothing */
    if (!c || json_is_null(c)) {
        if (assistant && json_array_size(calls) > 0) return 0;
        if (assistant)
            return fail(e, "messages", "messages[%zu].content is required (a string or an array of content parts) "
                                       "unless the message has tool_calls", i);
        return fail(e, "messages", "messages[%zu].content is required (a string or an array of content parts)", i);
    }
    if (json_is_string(c)) return 0;
    if (!json_is_array(c))
        return fail(e, "messages", "messages[%zu].content must be a string or an array of content parts", i);
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type)
            return fail(e, "messages", "messages[%zu].content[%zu] must be an object with a string type", i, k);
        if (strcmp(type, "text") != 0)
            return fail(e, "messages", "messages[%zu].content[%zu].type must be \"text\" (images, audio and files are not supported)",
                        i, k);
        if (!json_is_string(json_object_get(part, "text")))
            return fail(e, "messages", "messages[%zu].content[%zu].text must be a string", i, k);
    }
    return 0;
}

/* tools[i]: {"type": "function", "function": {"name": ..., "description"?,
 * "parameters"?: an object}}, as OpenAI takes them; anything else would be
 * rendered into the prompt as it came. */
static int check_tool(const json_t *t, size_t i, parse_err *e) {
    const json_t *f = json_object_get(t, "function"), *name = json_object_get(f, "name"), *v;
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!json_is_object(t) || !type || strcmp(type, "function") != 0)
        return fail(e, "tools", "tools[%zu] must be an object with type \"function\"", i);
    if (!json_is_object(f) || !json_is_string(name) || json_string_length(name) == 0)
        return fail(e, "tools", "tools[%zu].function must be an object with a non-empty name", i);
    if ((v = json_object_get(f, "description")) && !json_is_null(v) && !json_is_string(v))
        return fail(e, "tools", "tools[%zu].function.description must be a string", i);
    if ((v = json_object_get(f, "parameters")) && !json_is_null(v) && !json_is_object(v))
        return fail(e, "tools", "tools[%zu].function.parameters must be an object", i);
    return 0;
}

static int parse_messages(const json_t *root, oai_request *r, parse_err *e) {
    json_t *msgs = field(root, "messages"), *m, *tools, *choice;
    size_t i;
    int st;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) return fail(e, "messages", "messages must be a non-empty array");
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) return fail(e, "messages", "messages[%zu] must be an object", i);
        if ((st = check_message(m, i, r, e))) return st;
    }
    tools = field(root, "tools");
    choice = field(root, "tool_choice");
    if (tools && !json_is_array(tools)) return fail(e, "tools", "tools must be an array");
    json_array_foreach(tools, i, m)
        if ((st = check_tool(m, i, e))) return st;
    /* "required" and a named function ask for a tool call whatever the model
     * says: a guarantee only constrained decoding could give */
    const char *cs = json_string_value(choice);
    if (choice && !(cs && (strcmp(cs, "auto") == 0 || strcmp(cs, "none") == 0)))
        return fail(e, "tool_choice",
                    json_is_object(choice) || (cs && strcmp(cs, "required") == 0)
                        ? "tool_choice: only \"auto\" and \"none\" are supported (nextn cannot force a tool call)"
                        : "tool_choice must be \"auto\" or \"none\"");
    if (cs && strcmp(cs, "none") == 0) tools = NULL;
    /* the deprecated spelling of tools: refused, or its functions would
     * silently never reach the prompt */
    json_t *fns = field(root, "functions"), *fc = field(root, "function_call");
    const char *fcs = json_string_value(fc);
    if (fns && !(json_is_array(fns) && json_array_size(fns) == 0))
        return fail(e, "functions", "functions (deprecated) is not supported: send tools");
    if (fc && !(fcs && (strcmp(fcs, "auto") == 0 || strcmp(fcs, "none") == 0)))
        return fail(e, "function_call", "function_call (deprecated) is not supported: send tool_choice");
    int parallel = 1;
    if (get_bool(root, "parallel_tool_calls", "parallel_tool_calls", "parallel_tool_calls", &parallel, e)) return -1;
    r->one_call = !parallel;
    /* Default real precision (17 digits) reads back to the same doubles; the
     * chat renderer re-spells them as Python would. */
    if (!(r->messages_json = json_dumps(msgs, JSON_COMPACT))) return 1;
    if (tools && !(r->tools_json = json_dumps(tools, JSON_COMPACT))) return 1;
    return 0;
}

static int parse_stop(const json_t *root, oai_request *r, parse_err *e) {
    static const char msg[] = "stop must be a non-empty string or an array of up to 4 non-empty strings";
    json_t *v = field(root, "stop");
    if (!v) return 0;
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if ((!json_is_string(v) && !json_is_array(v)) || n > 4) return fail(e, "stop", "%s", msg);
    if (n == 0) return 0;
    if (!(r->stop = calloc(n, sizeof *r->stop))) return 1;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0) return fail(e, "stop", "%s", msg);
        if (!(r->stop[r->n_stop] = strdup(json_string_value(s)))) return 1;
        r->n_stop++;
    }
    return 0;
}

/* "prompt": a string, or token ids (an array of integers), or an array
 * holding one of those (OpenAI's batch form, of one prompt). Whether each id
 * is in the vocabulary is the engine's check. */
static int parse_prompt(const json_t *root, oai_request *r, parse_err *e) {
    static const char msg[] = "prompt must be a string, an array of token ids, or an array holding one of them";
    json_t *v = field(root, "prompt"), *t;
    size_t i;
    if (json_is_array(v) && json_array_size(v) > 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        return fail(e, "prompt", "prompt holds %zu prompts: one per request is supported", json_array_size(v));
    if (json_is_array(v) && json_array_size(v) == 1 && !json_is_integer(json_array_get(v, 0))) v = json_array_get(v, 0);
    if (json_is_string(v)) return (r->prompt = strdup(json_string_value(v))) ? 0 : 1;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > INT_MAX) return fail(e, "prompt", "%s", msg);
    if (!(r->prompt_ids = malloc(json_array_size(v) * sizeof *r->prompt_ids))) return 1;
    json_array_foreach(v, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return fail(e, "prompt", "prompt[%zu] must be a token id (an integer >= 0)", i);
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* "logit_bias": {"token id": bias, ...}, OpenAI's map; the bias between -100
 * and 100. Whether each id is in the vocabulary is the engine's check. */
static int parse_logit_bias(const json_t *root, oai_request *r, parse_err *e) {
    json_t *v = field(root, "logit_bias"), *b;
    const char *key;
    if (!v) return 0;
    if (!json_is_object(v)) return fail(e, "logit_bias", "logit_bias must be an object of token ids and biases");
    size_t n = json_object_size(v);
    if (n == 0) return 0;
    if (n > NX_MAX_LOGIT_BIAS)
        return fail(e, "logit_bias", "logit_bias has %zu entries (at most %d)", n, NX_MAX_LOGIT_BIAS);
    if (!(r->bias = calloc(n, sizeof *r->bias))) return 1;
    json_object_foreach(v, key, b) {
        /* a decimal token id: digits only, no leading zero (else "7" and
         * "07" would be two entries for one token), below 2^31 */
        size_t len = strspn(key, "0123456789");
        long long id = len && len <= 10 && key[len] == '\0' && (key[0] != '0' || len == 1) ? strtoll(key, NULL, 10) : -1;
        if (id < 0 || id > INT32_MAX)
            return fail(e, "logit_bias", "logit_bias keys must be token ids (decimal integers)");
        if (!json_is_number(b) || json_number_value(b) < -100 || json_number_value(b) > 100)
            return fail(e, "logit_bias", "logit_bias[%lld] must be a number between -100 and 100", id);
        r->bias[r->sampling.n_logit_bias++] = (nx_logit_bias){(int32_t)id, (float)json_number_value(b)};
    }
    r->sampling.logit_bias = r->bias;
    return 0;
}

/* Log-probabilities. Chat sends "logprobs" as a boolean and the
 * alternatives as "top_logprobs"; completions send a count of alternatives
 * as "logprobs", where 0 still asks for the chosen tokens' own. Either
 * spelling is taken for either endpoint: true is a count of 0, and false
 * (or, for chat, 0) is off. */
static int parse_logprobs(const json_t *root, oai_request *r, parse_err *e) {
    json_t *v;
    long long n = 0;
    int got;
    if ((v = field(root, "logprobs"))) {
        if (!json_is_boolean(v) && !(json_is_integer(v) && json_integer_value(v) >= 0))
            return fail(e, "logprobs", "logprobs must be a boolean or a non-negative integer");
        long long count = json_is_integer(v) ? json_integer_value(v) : 0;
        if (count > NX_MAX_TOP_LOGPROBS)
            return fail(e, "logprobs", "logprobs must be at most %d (alternatives a token)", NX_MAX_TOP_LOGPROBS);
        r->logprobs = json_is_true(v) || (json_is_integer(v) && (!r->chat || count > 0));
        r->top_logprobs = (int)count;
    }
    if ((got = get_int(root, "top_logprobs", 0, "a non-negative integer", &n, e)) < 0) return -1;
    if (got && n > NX_MAX_TOP_LOGPROBS) return fail(e, "top_logprobs", "top_logprobs must be at most %d", NX_MAX_TOP_LOGPROBS);
    if (got && n > 0 && !r->logprobs) return fail(e, "top_logprobs", "top_logprobs needs logprobs to be true");
    if (got) r->top_logprobs = (int)n;
    return 0;
}

/* Fields that ask for output nextn does not produce (several candidates, a
 * suffix) or a guarantee it cannot give (JSON output): refused rather than
 * ignored, so that a client relying on one learns it from the first
 * request. Their "off" values pass: 1 for best_of, "" for suffix, {"type":
 * "text"}. */
static int parse_unsupported(const json_t *root, const oai_request *r, parse_err *e) {
    json_t *v;
    long long n = 0;
    int got;
    if (!r->chat) {
        if ((got = get_int(root, "best_of", 1, "a positive integer", &n, e)) < 0) return -1;
        if (got && n != 1) return fail(e, "best_of", "best_of must be 1 (only one choice is supported)");
        if ((v = field(root, "suffix")) && !json_is_string(v)) return fail(e, "suffix", "suffix must be a string");
        if (v && json_string_length(v) > 0) return fail(e, "suffix", "suffix is not supported");
    }
    if ((v = field(root, "response_format"))) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (!json_is_object(v) || !type)
            return fail(e, "response_format", "response_format must be an object with a string \"type\"");
        if (strcmp(type, "text") != 0)
            return fail(e, "response_format",
                        "response_format: only {\"type\": \"text\"} is supported (nextn does not constrain its "
                        "output to JSON)");
    }
    return 0;
}

/* Fills r from the parsed body (an object). 0: ok, -1: invalid (e set), 1: out of memory. */
static int parse_body(const json_t *root, oai_request *r, parse_err *e) {
    json_t *v;
    long long n = 0;
    int got, rc;

    if ((v = field(root, "model"))) {
        if (!json_is_string(v)) return fail(e, "model", "model must be a string");
        if (!(r->model = strdup(json_string_value(v)))) return 1;
    }
    if (r->chat) {
        if ((rc = parse_messages(root, r, e))) return rc;
    } else {
        if ((rc = parse_prompt(root, r, e))) return rc;
    }

    const char *nonneg = "a non-negative integer";
    if ((got = get_int(root, "max_tokens", 0, nonneg, &n, e)) < 0) return -1;
    if (got) r->max_tokens = clamp_int(n), r->max_tokens_name = "max_tokens";
    if ((got = get_int(root, "max_completion_tokens", 0, nonneg, &n, e)) < 0) return -1;
    if (got) r->max_tokens = clamp_int(n), r->max_tokens_name = "max_completion_tokens";   /* the newer name wins */

    for (size_t i = 0; i < sizeof real_fields / sizeof *real_fields; i++) {
        const char *key = real_fields[i].key;
        if (!(v = field(root, key))) continue;
        if (!json_is_number(v)) return fail(e, key, "%s must be a number", key);
        /* the range holds for the value the sampler gets: a float, so that
         * top_p 1e-50 (0 once rounded) is refused like top_p 0 */
        const double x = json_number_value(v);
        const float f = (float)x;
        if (x < real_fields[i].lo || x > real_fields[i].hi || (real_fields[i].lo_open && f <= real_fields[i].lo))
            return fail(e, key, "%s must be %s", key, real_fields[i].range);
        *(float *)((char *)&r->sampling + real_fields[i].offset) = f;
    }
    if ((got = get_int(root, "top_k", -1, "a non-negative integer (or -1 for no limit)", &n, e)) < 0) return -1;
    if (got) r->sampling.top_k = n < 0 ? 0 : clamp_int(n);
    if ((got = get_int(root, "seed", LLONG_MIN, "an integer", &n, e)) < 0) return -1;
    if (got) {
        r->sampling.seed = (uint64_t)n;   /* negative seeds are valid: the same 64 bits */
        r->seed_given = 1;
    }
    if ((v = field(root, "n")) && (!json_is_integer(v) || json_integer_value(v) != 1))
        return fail(e, "n", "n must be 1 (only one choice is supported)");

    if ((rc = parse_stop(root, r, e))) return rc;
    if ((rc = parse_logit_bias(root, r, e))) return rc;
    if (get_bool(root, "stream", "stream", "stream", &r->stream, e)) return -1;
    if ((v = field(root, "stream_options"))) {
        if (!json_is_object(v)) return fail(e, "stream_options", "stream_options must be an object");
        if (get_bool(v, "include_usage", "stream_options.include_usage", "stream_options", &r->include_usage, e))
            return -1;
    }
    if ((v = field(root, "chat_template_kwargs"))) {
        if (!json_is_object(v)) return fail(e, "chat_template_kwargs", "chat_template_kwargs must be an object");
        if (get_bool(v, "enable_thinking", "chat_template_kwargs.enable_thinking", "chat_template_kwargs",
                     &r->enable_thinking, e))
            return -1;
    }
    if (parse_logprobs(root, r, e)) return -1;
    if (!r->chat && get_bool(root, "echo", "echo", "echo", &r->echo, e)) return -1;
    return parse_unsupported(root, r, e);
}

json_t *oai_load_body(const char *body, size_t len, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, JSON_DECODE_ANY, &je);
    if (json_is_object(root)) return root;
    if (err && errlen) {
        if (root) snprintf(err, errlen, "the request body must be a JSON object");
        else {
            snprintf(err, errlen, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
            oai_ascii_only(err);   /* jansson quotes the input near the error */
        }
    }
    json_decref(root);
    return NULL;
}

int oai_parse_request(const char *body, size_t len, int chat, oai_request *out, int *status, const char **param,
                      char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->chat = chat;
    out->max_tokens = -1;
    out->max_tokens_name = "max_tokens";
    out->odd_arguments[0] = out->odd_arguments[1] = -1;
    out->enable_thinking = -1;
    out->sampling = nx_sampling_default();
    out->sampling.temperature = 1.0f;   /* OpenAI's default; nextn's own default is greedy */
    *status = 400;
    parse_err e = {err, errlen, NULL};

    json_t *root = oai_load_body(body, len, err, errlen);
    int rc = -1;
    if (root) {
        rc = parse_body(root, out, &e);
        json_decref(root);
    }
    if (rc > 0) {
        *status = 500;
        fail(&e, NULL, "out of memory");
    }
    if (param) *param = rc ? e.param : NULL;
    if (rc == 0) return 0;
    oai_request_free(out);
    return -1;
}

void oai_ascii_only(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80 || (unsigned char)*s < 0x20) *s = '?';
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    free(r->model);
    free(r->messages_json);
    free(r->tools_json);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->bias);
    memset(r, 0, sizeof *r);
}
