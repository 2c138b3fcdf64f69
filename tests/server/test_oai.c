/* test_oai.c — the OpenAI wire format: request validation, the output
 * assembler (stop strings, reasoning, tool calls; the same totals however the
 * text is cut into pushes) and the response builders, read back with jansson. */
#include "test.h"

#include <jansson.h>

#include "server/oai.h"

/* ---- Requests ------------------------------------------------------------- */

static int parse(const char *body, int chat, oai_request *r, int *status, char *err, size_t errlen) {
    return oai_parse_request(body, strlen(body), chat, r, status, NULL, err, errlen);
}

static void chat_request_keeps_messages_and_reads_every_field(void) {
    const char *body =
        "{\"model\":\"qwen\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":\"text\",\"text\":\"!\"}]}],"
        "\"temperature\":0.7,\"top_p\":0.8,\"top_k\":20,\"min_p\":0.05,\"presence_penalty\":1.5,"
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":-1,\"max_tokens\":64,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]}";
    oai_request r;
    int status = 0;
    char err[256];
    CHECKF(parse(body, 1, &r, &status, err, sizeof err) == 0, "%s", err);
    CHECK(r.chat == 1 && r.model && strcmp(r.model, "qwen") == 0);
    CHECKF(r.messages_json && strcmp(r.messages_json,
                                     "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                                     "[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":\"text\",\"text\":\"!\"}]}]") == 0,
           "%s", r.messages_json);
    CHECK(r.tools_json && strstr(r.tools_json, "\"name\":\"f\""));
    CHECK(r.prompt == NULL);
    CHECK(fabsf(r.sampling.temperature - 0.7f) < 1e-6f && fabsf(r.sampling.top_p - 0.8f) < 1e-6f);
    CHECK(r.sampling.top_k == 20 && fabsf(r.sampling.min_p - 0.05f) < 1e-6f);
    CHECK(r.sampling.presence_penalty == 1.5f && r.sampling.frequency_penalty == -0.5f);
    CHECK(fabsf(r.sampling.repetition_penalty - 1.1f) < 1e-6f);
    CHECK(r.seed_given == 1 && r.sampling.seed == UINT64_MAX);   /* -1 as 64 bits */
    CHECK(r.max_tokens == 64 && r.stream == 1 && r.include_usage == 1 && r.enable_thinking == 0);
    oai_request_free(&r);
    oai_request_free(&r);   /* idempotent */
    oai_request_free(NULL);
}

static void absent_fields_take_openai_defaults(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 1, &r, &status, err, sizeof err) == 0);
    CHECK(r.model == NULL && r.tools_json == NULL && r.n_stop == 0 && r.stop == NULL);
    CHECK(r.sampling.temperature == 1.0f && r.sampling.top_p == 1.0f && r.sampling.top_k == 0);
    CHECK(r.sampling.min_p == 0.0f && r.sampling.repetition_penalty == 1.0f);
    CHECK(r.sampling.presence_penalty == 0.0f && r.sampling.frequency_penalty == 0.0f);
    CHECK(r.max_tokens == -1 && r.seed_given == 0 && r.stream == 0 && r.include_usage == 0);
    CHECK(r.enable_thinking == -1);
    oai_request_free(&r);
    /* the ranges' ends are in them: temperature 2, top_p 1, penalties +-2 */
    CHECKF(parse("{\"prompt\":\"x\",\"temperature\":2,\"top_p\":1,\"presence_penalty\":-2,\"frequency_penalty\":2}", 0,
                 &r, &status, err, sizeof err) == 0,
           "%s", err);
    CHECK(r.sampling.temperature == 2.0f && r.sampling.top_p == 1.0f && r.sampling.presence_penalty == -2.0f &&
          r.sampling.frequency_penalty == 2.0f);
    oai_request_free(&r);
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":true},"
                "\"top_k\":-1,\"seed\":42}",
                1, &r, &status, err, sizeof err) == 0);
    CHECK(r.enable_thinking == 1 && r.sampling.top_k == 0 && r.seed_given == 1 && r.sampling.seed == 42);
    oai_request_free(&r);
}

static void completion_prompt_is_a_string_or_token_ids(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"prompt\":\"Once upon\",\"max_tokens\":5}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.chat == 0 && r.prompt && strcmp(r.prompt, "Once upon") == 0 && r.messages_json == NULL);
    CHECK(r.max_tokens == 5);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":[\"In the beginning\"]}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.prompt && strcmp(r.prompt, "In the beginning") == 0);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":[\"a\",\"b\"]}", 0, &r, &status, err, sizeof err) == -1 && status == 400);
    CHECK(strstr(err, "prompt") != NULL);
    /* token ids: an array of integers, or an array holding one */
    static const char *const as_ids[] = {"{\"prompt\":[9707,0,2147483647]}", "{\"prompt\":[[9707,0,2147483647]]}"};
    for (int i = 0; i < 2; i++) {
        CHECKF(parse(as_ids[i], 0, &r, &status, err, sizeof err) == 0, "%s", err);
        CHECK(r.prompt == NULL && r.n_prompt_ids == 3 && r.prompt_ids[0] == 9707 && r.prompt_ids[1] == 0 &&
              r.prompt_ids[2] == INT32_MAX);
        oai_request_free(&r);
    }
    CHECK(parse("{\"prompt\":[7]}", 0, &r, &status, err, sizeof err) == 0 && r.n_prompt_ids == 1 && r.prompt_ids[0] == 7);
    oai_request_free(&r);
}

static void stop_is_a_string_or_a_list(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"prompt\":\"x\",\"stop\":\"\\n\\n\"}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.n_stop == 1 && strcmp(r.stop[0], "\n\n") == 0);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":\"x\",\"stop\":[\"END\",\"###\",\"a\",\"b\"]}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.n_stop == 4 && strcmp(r.stop[0], "END") == 0 && strcmp(r.stop[3], "b") == 0);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":\"x\",\"stop\":[]}", 0, &r, &status, err, sizeof err) == 0 && r.n_stop == 0);
    oai_request_free(&r);
}

static void max_completion_tokens_wins_over_max_tokens(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"prompt\":\"x\",\"max_completion_tokens\":7,\"max_tokens\":100}", 0, &r, &status, err,
                sizeof err) == 0);
    CHECK(r.max_tokens == 7);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":\"x\",\"max_completion_tokens\":0}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.max_tokens == 0);
    oai_request_free(&r);
}

static void tool_choice_none_drops_the_tools(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\"}",
                1, &r, &status, err, sizeof err) == 0);
    CHECK(r.tools_json == NULL);
    oai_request_free(&r);
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":null}", 1, &r, &status, err,
                sizeof err) == 0);
    CHECK(r.tools_json == NULL);
    oai_request_free(&r);
}

/* "developer" (OpenAI's newer name for the system role) reaches the chat
 * template as "system"; max_tokens' field name is kept for messages. */
static void a_developer_message_is_a_system_message(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                "\"x\"}],\"max_completion_tokens\":3}",
                1, &r, &status, err, sizeof err) == 0);
    CHECKF(r.messages_json && strcmp(r.messages_json, "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":"
                                                      "\"user\",\"content\":\"x\"}]") == 0,
           "%s", r.messages_json);
    CHECK(r.max_tokens == 3 && strcmp(r.max_tokens_name, "max_completion_tokens") == 0);
    oai_request_free(&r);
}

/* A tool call's arguments sent as a string holding a JSON object (as OpenAI
 * clients send them) reach the template as that object; an object stays;
 * null is no arguments; another string is left as sent for the template to
 * judge (Qwen3's prints it), the first such call noted for the error message. */
static void tool_call_arguments_become_objects(void) {
    oai_request r;
    int status;
    char err[256];
    CHECKF(parse("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                 "{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":1}\"}},{\"function\":{\"name\":\"g\",\"arguments\":{\"k\":2}}}]}]}",
                 1, &r, &status, err, sizeof err) == 0,
           "%s", err);
    CHECKF(r.messages_json && strstr(r.messages_json, "\"arguments\":{\"q\":1}") &&
               strstr(r.messages_json, "\"arguments\":{\"k\":2}") && r.odd_arguments[0] == -1,
           "%s", r.messages_json);
    oai_request_free(&r);
    static const char *const odd[] = {"\"not json\"", "\"[1,2]\""};
    for (int i = 0; i < 2; i++) {
        char body[300];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":"
                 "[{\"function\":{\"name\":\"f\",\"arguments\":{}}},{\"function\":{\"name\":\"f\",\"arguments\":%s}}]}]}",
                 odd[i]);
        CHECKF(parse(body, 1, &r, &status, err, sizeof err) == 0 && r.odd_arguments[0] == 1 && r.odd_arguments[1] == 1 &&
                   strstr(r.messages_json, odd[i]),
               "%s: %s", odd[i], err);
        oai_request_free(&r);
    }
    /* null arguments render as a call without parameters, not as a template error */
    CHECKF(parse("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":null}}]}]}",
                 1, &r, &status, err, sizeof err) == 0 && strstr(r.messages_json, "\"arguments\":{}") && r.odd_arguments[0] == -1,
           "%s", err);
    oai_request_free(&r);
}

static void logit_bias_becomes_the_sampling_entries(void) {
    oai_request r;
    int status;
    char err[256];
    CHECKF(parse("{\"prompt\":\"x\",\"logit_bias\":{\"15\":-100,\"0\":2.5,\"2147483647\":100}}", 0, &r, &status,
                 err, sizeof err) == 0, "%s", err);
    CHECK(r.sampling.n_logit_bias == 3 && r.sampling.logit_bias == r.bias);
    float sum = 0;
    int seen = 0;
    for (int i = 0; i < r.sampling.n_logit_bias; i++) {
        const nx_logit_bias *b = &r.sampling.logit_bias[i];
        seen |= (b->id == 15 && b->bias == -100.0f) << 0 | (b->id == 0 && b->bias == 2.5f) << 1 |
                (b->id == INT32_MAX && b->bias == 100.0f) << 2;
        sum += b->bias;
    }
    CHECKF(seen == 7 && sum == 2.5f, "entries %d", seen);
    oai_request_free(&r);
    CHECK(parse("{\"prompt\":\"x\",\"logit_bias\":{}}", 0, &r, &status, err, sizeof err) == 0);
    CHECK(r.sampling.n_logit_bias == 0 && r.sampling.logit_bias == NULL && r.bias == NULL);
    oai_request_free(&r);
    /* NX_MAX_LOGIT_BIAS entries pass, one more is refused */
    for (int extra = 0; extra < 2; extra++) {
        static char body[32 * (NX_MAX_LOGIT_BIAS + 2)];
        int k = snprintf(body, sizeof body, "{\"prompt\":\"x\",\"logit_bias\":{");
        for (int i = 0; i < NX_MAX_LOGIT_BIAS + extra; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s\"%d\":1", i ? "," : "", i);
        snprintf(body + k, sizeof body - (size_t)k, "}}");
        int rc = parse(body, 0, &r, &status, err, sizeof err);
        CHECKF(extra ? rc == -1 && strstr(err, "at most") : rc == 0 && r.sampling.n_logit_bias == NX_MAX_LOGIT_BIAS, "%d: %s",
               extra, err);
        oai_request_free(&r);
    }
}

static void unknown_fields_and_nulls_are_ignored(void) {
    oai_request r;
    int status;
    char err[256];
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"bob\"}],\"user\":\"u1\","
                "\"logit_bias\":{},\"metadata\":{\"a\":[1,2]},\"temperature\":null,\"stop\":null,"
                "\"frobnicate\":true,\"logprobs\":false,\"top_logprobs\":0,\"response_format\":{\"type\":\"text\"},"
                "\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"functions\":[],\"function_call\":\"auto\"}",
                1, &r, &status, err, sizeof err) == 0);
    CHECK(r.sampling.temperature == 1.0f && r.n_stop == 0 && r.one_call == 0);
    CHECK(r.messages_json && strstr(r.messages_json, "\"name\":\"bob\""));   /* extra message keys kept */
    oai_request_free(&r);
    /* the "off" values of fields nextn refuses when they are on */
    CHECKF(parse("{\"prompt\":\"x\",\"logprobs\":false,\"echo\":false,\"best_of\":1,\"suffix\":\"\",\"user\":\"u\"}", 0,
                 &r, &status, err, sizeof err) == 0, "%s", err);
    CHECK(r.prompt && strcmp(r.prompt, "x") == 0);
    oai_request_free(&r);
    CHECKF(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":0,\"parallel_tool_calls\":false}", 1, &r, &status, err,
                 sizeof err) == 0, "%s", err);
    CHECK(r.one_call == 1);   /* at most one tool call */
    oai_request_free(&r);
}

/* logprobs in either endpoint's spelling: chat's boolean + top_logprobs,
 * completions' count; off values leave them off. */
static void logprobs_are_read_in_either_spelling(void) {
    static const struct {
        int chat;
        const char *body;
        int on, top;
    } cases[] = {
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", 1, 0},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":20}", 1, 20},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}", 1, 3},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":0,\"top_logprobs\":0}", 0, 0},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":null,\"top_logprobs\":null}", 0, 0},
        {0, "{\"prompt\":\"x\",\"logprobs\":0}", 1, 0},
        {0, "{\"prompt\":\"x\",\"logprobs\":5}", 1, 5},
        {0, "{\"prompt\":\"x\",\"logprobs\":true,\"top_logprobs\":2}", 1, 2},
        {0, "{\"prompt\":\"x\",\"logprobs\":false}", 0, 0},
        {0, "{\"prompt\":\"x\"}", 0, 0},
    };
    oai_request r;
    int status;
    char err[256] = "";
    CHECKF(parse("{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1,\"max_tokens\":0}", 0, &r, &status, err, sizeof err) == 0 &&
               r.echo == 1 && r.logprobs == 1 && r.max_tokens == 0,
           "%s", err);
    oai_request_free(&r);
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", 1, &r, &status, err, sizeof err) == 0 && r.echo == 0);
    oai_request_free(&r);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = parse(cases[i].body, cases[i].chat, &r, &status, err, sizeof err);
        CHECKF(rc == 0 && r.logprobs == cases[i].on && (!r.logprobs || r.top_logprobs == cases[i].top),
               "%s -> rc %d (%s), logprobs %d top %d", cases[i].body, rc, err, r.logprobs, r.top_logprobs);
        oai_request_free(&r);
    }
}

static void invalid_requests_get_400_naming_the_field(void) {
    static const struct {
        int chat;
        const char *body, *needle, *param;   /* param: OpenAI's, the top-level field (NULL: the body) */
    } cases[] = {
        {0, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens must be a non-negative integer", "max_tokens"},
        {0, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens", "max_tokens"},
        {0, "{\"prompt\":\"x\",\"max_completion_tokens\":\"9\"}", "max_completion_tokens", "max_completion_tokens"},
        {0, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature must be between 0 and 2", "temperature"},
        {0, "{\"prompt\":\"x\",\"temperature\":3}", "temperature must be between 0 and 2", "temperature"},
        {0, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature must be a number", "temperature"},
        {0, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "top_p"},
        {0, "{\"prompt\":\"x\",\"top_p\":1e-50}", "top_p", "top_p"},   /* 0 as a float (found by fuzzing) */
        {0, "{\"prompt\":\"x\",\"repetition_penalty\":1e-46}", "repetition_penalty", "repetition_penalty"},
        {0, "{\"prompt\":\"x\",\"top_p\":1.01}", "top_p", "top_p"},
        {0, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", "top_k"},
        {0, "{\"prompt\":\"x\",\"min_p\":1.5}", "min_p", "min_p"},
        {0, "{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty", "presence_penalty"},
        {0, "{\"prompt\":\"x\",\"frequency_penalty\":-3}", "frequency_penalty", "frequency_penalty"},
        {0, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty", "repetition_penalty"},
        {0, "{\"prompt\":\"x\",\"seed\":1.5}", "seed", "seed"},
        {0, "{\"prompt\":\"x\",\"stream\":1}", "stream must be a boolean", "stream"},
        {0, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":\"yes\"}}", "include_usage", "stream_options"},
        {0, "{\"prompt\":\"x\",\"n\":2}", "n must be 1 (only one choice is supported)", "n"},
        {0, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "stop"},
        {0, "{\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}", "stop", "stop"},
        {0, "{\"prompt\":\"x\",\"stop\":5}", "stop", "stop"},
        {0, "{\"prompt\":\"x\",\"model\":3}", "model", "model"},
        {0, "{\"max_tokens\":3}", "prompt", "prompt"},
        {0, "{\"prompt\":[]}", "prompt must be a string, an array of token ids", "prompt"},
        {0, "{\"prompt\":[[]]}", "prompt must be a string, an array of token ids", "prompt"},
        {0, "{\"prompt\":[1,\"a\"]}", "prompt[1] must be a token id", "prompt"},
        {0, "{\"prompt\":[1,-2]}", "prompt[1] must be a token id", "prompt"},
        {0, "{\"prompt\":[2147483648]}", "prompt[0] must be a token id", "prompt"},
        {0, "{\"prompt\":[[1],[2]]}", "prompt holds 2 prompts: one per request", "prompt"},
        {0, "{\"prompt\":[\"a\",\"b\"]}", "prompt holds 2 prompts: one per request", "prompt"},
        {0, "{\"prompt\":[1,[2]]}", "prompt[1] must be a token id", "prompt"},
        {1, "{\"max_tokens\":3}", "messages must be a non-empty array", "messages"},
        {1, "{\"messages\":[]}", "messages must be a non-empty array", "messages"},
        {1, "{\"messages\":{\"role\":\"user\",\"content\":\"x\"}}", "messages must be a non-empty array", "messages"},
        {1, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":7}]}", "messages[1].role", "messages"},
        {1, "{\"messages\":[\"hi\"]}", "messages[0] must be an object", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools", "tools"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[5]}", "tools[0] must be an object with type", "tools"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
            "{\"type\":\"function\",\"function\":{}}]}",
         "tools[1].function must be an object with a non-empty name", "tools"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
            "\"parameters\":[]}}]}",
         "tools[0].function.parameters must be an object", "tools"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
            "\"description\":[\"two\",\"parts\"]}}]}",
         "tools[0].function.description must be a string", "tools"},
        {1, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", "messages[0].role must be system, developer",
         "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"describe\"},"
            "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}]}",
         "messages[0].content[1].type must be \"text\" (images, audio and files are not supported)", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}",
         "messages[0].content[0].text must be a string", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":[\"hi\"]}]}", "messages[0].content[0] must be an object",
         "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content must be a string or an array",
         "messages"},
        /* a message without content: the client's text got lost on its way, and the
         * model would answer a turn it never saw */
        {1, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"},{\"role\":\"user\"}]}",
         "messages[1].content is required", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content is required", "messages"},
        /* a tool call the template cannot render is named, not left to a template error about a
         * "dict object" the client never sent */
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":"
            "[{\"id\":\"c\",\"type\":\"function\"}]}]}",
         "messages[1].tool_calls[0].function.name must be a non-empty string", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}},"
            "{\"function\":{\"arguments\":\"{}\"}}]}]}",
         "messages[0].tool_calls[1].function.name must be a non-empty string", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"\"}}]}]}",
         "messages[0].tool_calls[0].function.name must be a non-empty string", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":7}}]}]}",
         "messages[0].tool_calls[0].function.name must be a non-empty string", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":\"f\"}]}]}",
         "messages[0].tool_calls[0].function must be an object", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":[1]}}]}]}",
         "messages[0].tool_calls[0].function.arguments must be a string or an object", "messages"},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":7}]}]}",
         "messages[0].tool_calls[0].function.arguments must be a string or an object", "messages"},
        {1, "{\"messages\":[{\"role\":\"developer\"},{\"role\":\"user\",\"content\":\"x\"}]}",
         "messages[0].content is required", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"tool_call_id\":\"c\"}]}",
         "messages[1].content is required", "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
            "\"tool_calls\":[]}]}",
         "messages[1].content is required (a string or an array of content parts) unless the message has tool_calls",
         "messages"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":1}}",
         "enable_thinking", "chat_template_kwargs"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias must be an object", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", "logit_bias keys must be token ids", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias keys must be token ids", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"\":1}}", "logit_bias keys must be token ids", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"2147483648\":1}}", "logit_bias keys must be token ids", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"7\":1,\"8\":100.5}}", "logit_bias[8] must be a number between -100 and 100",
         "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"7\":\"1\"}}", "logit_bias[7] must be a number", "logit_bias"},
        {0, "{\"prompt\":\"x\",\"logit_bias\":{\"07\":1}}", "logit_bias keys must be token ids", "logit_bias"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"parallel_tool_calls\":\"no\"}", "parallel_tool_calls must be a boolean",
         "parallel_tool_calls"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[{\"name\":\"f\"}]}", "functions (deprecated)", "functions"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"function_call\":{\"name\":\"f\"}}", "function_call (deprecated)",
         "function_call"},
        /* logprobs: a boolean or a count up to 20; top_logprobs needs them on */
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":\"yes\"}", "logprobs must be a boolean or", "logprobs"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs needs logprobs to be true",
         "top_logprobs"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":1}",
         "top_logprobs needs logprobs to be true", "top_logprobs"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs must be at most 20",
         "top_logprobs"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":-1}",
         "top_logprobs must be a non-negative integer", "top_logprobs"},
        {0, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs must be at most 20", "logprobs"},
        {0, "{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs must be a boolean or a non-negative integer", "logprobs"},
        {0, "{\"prompt\":\"x\",\"logprobs\":1.5}", "logprobs must be a boolean or a non-negative integer", "logprobs"},
        /* asking for what nextn does not do: refused, not ignored */
        {0, "{\"prompt\":\"x\",\"echo\":1}", "echo must be a boolean", "echo"},
        {0, "{\"prompt\":\"x\",\"best_of\":3}", "best_of must be 1", "best_of"},
        {0, "{\"prompt\":\"x\",\"best_of\":0}", "best_of must be a positive integer", "best_of"},
        {0, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix is not supported", "suffix"},
        {0, "{\"prompt\":\"x\",\"suffix\":3}", "suffix must be a string", "suffix"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
         "only {\"type\": \"text\"} is supported", "response_format"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}",
         "only {\"type\": \"text\"} is supported", "response_format"},
        {0, "{\"prompt\":\"x\",\"response_format\":\"json\"}", "response_format must be an object",
         "response_format"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "cannot force a tool call",
         "tool_choice"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
         "cannot force a tool call", "tool_choice"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"always\"}", "tool_choice must be", "tool_choice"},
        {1, "[{\"role\":\"user\",\"content\":\"x\"}]", "must be a JSON object", NULL},
        {1, "\"hello\"", "must be a JSON object", NULL},
        {1, "{\"messages\": [", "invalid JSON at line 1", NULL},
        {1, "", "invalid JSON", NULL},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} trailing", "invalid JSON", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        oai_request r;
        int status = 0;
        char err[256] = "";
        const char *param = "unset";
        int rc = oai_parse_request(cases[i].body, strlen(cases[i].body), cases[i].chat, &r, &status, &param, err,
                                   sizeof err);
        CHECKF(rc == -1 && status == 400 && strstr(err, cases[i].needle), "%s -> rc %d status %d '%s'",
               cases[i].body, rc, status, err);
        CHECKF(cases[i].param ? param && strcmp(param, cases[i].param) == 0 : param == NULL, "%s -> param %s",
               cases[i].body, param ? param : "NULL");
        /* left zeroed: nothing to free, and freeing is still safe */
        CHECK(r.model == NULL && r.messages_json == NULL && r.prompt == NULL && r.prompt_ids == NULL && r.stop == NULL);
        oai_request_free(&r);
    }
}

static void invalid_json_message_is_ascii_and_has_a_position(void) {
    oai_request r;
    int status;
    char err[256];
    const char body[] = "{\"prompt\": \xff\xfe}";
    CHECK(oai_parse_request(body, sizeof body - 1, 0, &r, &status, NULL, err, sizeof err) == -1 && status == 400);
    int ascii = 1;
    for (const char *p = err; *p; p++) ascii &= (unsigned char)*p < 0x80;
    CHECKF(ascii && strstr(err, "column"), "%s", err);
    char *e = oai_error_json(err, "invalid_request_error", NULL, NULL);
    CHECK(e != NULL);
    free(e);
}

/* ---- Output assembly ------------------------------------------------------- */

/* One run of the assembler: the text cut into pieces, every delta collected. */
typedef struct {
    const char *text;
    const char *stop[4];
    int n_stop, think_open, parse_tools;
} scenario;

typedef struct {
    char reasoning[2048], content[2048];   /* the deltas, concatenated */
    char *calls;                           /* oai_output_tool_calls_json */
    int n_calls, stopped, delta_calls;
    int totals_match;                      /* deltas == oai_output_content / _reasoning */
} result;

static void cat(char *dst, const char *s, size_t n) {
    size_t k = strlen(dst);
    if (k + n < 2048) {
        memcpy(dst + k, s, n);
        dst[k + n] = '\0';
    }
}

static void collect(result *res, const oai_delta *d) {
    CHECK(strlen(d->content) == d->content_len && strlen(d->reasoning) == d->reasoning_len);
    cat(res->reasoning, d->reasoning, d->reasoning_len);
    cat(res->content, d->content, d->content_len);
    for (int i = 0; i < d->n_calls; i++) CHECK(d->calls[i].index == res->delta_calls + i);
    res->delta_calls += d->n_calls;
    res->stopped = d->stopped;
}

/* Pushes text[0..n) in pieces: cut > 0 splits once at cut, step > 0 pushes
 * step bytes at a time, both 0 pushes it whole; one_call: oai_output_one_call. */
static result run_calls(const scenario *sc, size_t cut, size_t step, int one_call) {
    result res;
    memset(&res, 0, sizeof res);
    oai_output *o = oai_output_new((char *const *)sc->stop, sc->n_stop, sc->think_open, sc->parse_tools);
    CHECK(o != NULL);
    if (!o) return res;
    if (one_call) oai_output_one_call(o);
    oai_delta d;
    size_t n = strlen(sc->text);
    for (size_t at = 0; at < n;) {
        size_t len = step ? step : cut && at == 0 ? cut : n - at;
        if (len > n - at) len = n - at;
        CHECK(oai_output_push(o, sc->text + at, len, &d) == 0);
        collect(&res, &d);
        at += len;
    }
    CHECK(oai_output_finish(o, &d) == 0);
    collect(&res, &d);
    const char *r = oai_output_reasoning(o);
    res.totals_match = strcmp(res.content, oai_output_content(o)) == 0 && strcmp(res.reasoning, r ? r : "") == 0;
    res.n_calls = oai_output_n_calls(o);
    res.calls = oai_output_tool_calls_json(o);
    CHECK(res.delta_calls == res.n_calls);
    oai_output_free(o);
    return res;
}

static result run(const scenario *sc, size_t cut, size_t step) { return run_calls(sc, cut, step, 0); }
static result run_whole(const scenario *sc) { return run(sc, 0, 0); }

static void think_open_sends_text_to_reasoning_until_the_close_tag(void) {
    scenario sc = {"\nLet me think.\nStill.\n</think>\n\nThe answer is 4.", {0}, 0, 1, 0};
    result r = run_whole(&sc);
    CHECKF(strcmp(r.reasoning, "Let me think.\nStill.") == 0, "'%s'", r.reasoning);
    CHECKF(strcmp(r.content, "The answer is 4.") == 0, "'%s'", r.content);
    CHECK(r.totals_match && r.n_calls == 0 && r.calls == NULL && !r.stopped);
    /* never closed: everything is reasoning */
    scenario open = {"thinking forever\n", {0}, 0, 1, 0};
    r = run_whole(&open);
    CHECK(strcmp(r.reasoning, "thinking forever") == 0 && r.content[0] == '\0');
}

static void think_tag_at_the_start_opens_reasoning_without_think_open(void) {
    scenario sc = {"<think>\nhmm\n</think>\n\nok", {0}, 0, 0, 0};
    result r = run_whole(&sc);
    CHECK(strcmp(r.reasoning, "hmm") == 0 && strcmp(r.content, "ok") == 0);
    /* not at the very start: plain content, left exactly as generated */
    scenario later = {"\nHi <think>x</think>\n\n", {0}, 0, 0, 0};
    r = run_whole(&later);
    CHECK(r.reasoning[0] == '\0' && strcmp(r.content, "\nHi <think>x</think>\n\n") == 0);
    /* a partial "<think>" at finish is content */
    scenario partial = {"<thi", {0}, 0, 0, 0};
    r = run_whole(&partial);
    CHECK(strcmp(r.content, "<thi") == 0 && r.reasoning[0] == '\0');
    /* think_open -1: no reasoning split at all */
    scenario off = {"<think>\nx\n</think>\n\ny", {0}, 0, -1, 0};
    r = run_whole(&off);
    CHECK(strcmp(r.content, off.text) == 0 && r.reasoning[0] == '\0');
}

static void stop_string_spanning_pushes_ends_the_output(void) {
    const char *stop[] = {"###"};
    oai_output *o = oai_output_new((char *const *)stop, 1, -1, 0);
    oai_delta d;
    oai_output_push(o, "Answer: 42 #", 12, &d);
    CHECKF(strcmp(d.content, "Answer: 42 ") == 0 && !d.stopped, "'%s'", d.content);   /* "#" held */
    oai_output_push(o, "#", 1, &d);
    CHECK(d.content_len == 0 && !d.stopped);
    oai_output_push(o, "# more", 6, &d);
    CHECK(d.content_len == 0 && d.stopped == 1);
    oai_output_push(o, "ignored", 7, &d);   /* after the stop: nothing */
    CHECK(d.content_len == 0 && d.stopped == 1);
    oai_output_finish(o, &d);
    CHECK(oai_delta_empty(&d) && d.stopped == 1);
    CHECK(strcmp(oai_output_content(o), "Answer: 42 ") == 0);
    CHECK(strcmp(oai_finish_reason(o, 1), "stop") == 0);
    oai_output_free(o);
}

/* An echoed prompt goes out as it is: a stop string inside it does not end
 * the output, and the output after it is cut as usual. */
static void an_echo_is_not_searched_for_stop_strings(void) {
    const char *stop[] = {"###"};
    oai_output *o = oai_output_new((char *const *)stop, 1, -1, 0);
    oai_delta d;
    CHECK(oai_output_echo(o, "Q: ### A:", 9, &d) == 0 && strcmp(d.content, "Q: ### A:") == 0 && !d.stopped);
    oai_output_push(o, " 42 ### no", 10, &d);
    CHECK(strcmp(d.content, " 42 ") == 0 && d.stopped);
    CHECK(strcmp(oai_output_content(o), "Q: ### A: 42 ") == 0);
    oai_output_free(o);
}

static void stop_strings_are_never_partially_emitted(void) {
    const char *stop[] = {"STOP"};
    const char *text = "go S ST STO STOx then STOP tail";
    oai_output *o = oai_output_new((char *const *)stop, 1, -1, 0);
    oai_delta d;
    char sent[256] = "";
    for (size_t i = 0; text[i]; i++) {
        oai_output_push(o, text + i, 1, &d);
        strncat(sent, d.content, d.content_len);
        /* what was sent never ends inside a possible "STOP" */
        size_t n = strlen(sent);
        CHECKF(n == 0 || (sent[n - 1] != 'S' && sent[n - 1] != 'T' && sent[n - 1] != 'O'), "after %zu: '%s'", i,
               sent);
    }
    CHECK(strcmp(sent, "go S ST STO STOx then ") == 0);
    oai_output_free(o);
    /* a held prefix that turns out not to be a stop is released at finish */
    o = oai_output_new((char *const *)stop, 1, -1, 0);
    oai_output_push(o, "abc ST", 6, &d);
    CHECK(strcmp(d.content, "abc ") == 0);
    oai_output_finish(o, &d);
    CHECK(strcmp(d.content, "ST") == 0 && !d.stopped);
    oai_output_free(o);
}

static void the_first_completed_stop_string_wins(void) {
    scenario sc = {"hello world, then END and STOP", {"STOP", "END"}, 2, -1, 0};
    result r = run_whole(&sc);
    CHECK(strcmp(r.content, "hello world, then ") == 0 && r.stopped);
    /* "lo w" is complete before "world" is */
    scenario overlap = {"hello world", {"world", "lo w"}, 2, -1, 0};
    r = run_whole(&overlap);
    CHECKF(strcmp(r.content, "hel") == 0, "'%s'", r.content);
    /* both end on the same byte: the longer one */
    scenario tie = {"xab", {"b", "ab"}, 2, -1, 0};
    r = run_whole(&tie);
    CHECK(strcmp(r.content, "x") == 0);
    /* a stop inside reasoning ends everything there */
    scenario inthink = {"plan A. STOP more</think>answer", {"STOP"}, 1, 1, 0};
    r = run_whole(&inthink);
    CHECK(strcmp(r.reasoning, "plan A. ") == 0 && r.content[0] == '\0' && r.stopped);
}

static const char *sv(const json_t *v) { return json_is_string(v) ? json_string_value(v) : ""; }

/* The arguments of call i in a tool_calls JSON array, parsed. */
static json_t *call_args(const char *calls_json, size_t i, const char **name, const char **id) {
    json_t *arr = json_loads(calls_json ? calls_json : "null", 0, NULL);
    json_t *c = json_array_get(arr, i), *fn = json_object_get(c, "function");
    static char nbuf[64], ibuf[64];
    snprintf(nbuf, sizeof nbuf, "%s", sv(json_object_get(fn, "name")));
    snprintf(ibuf, sizeof ibuf, "%s", sv(json_object_get(c, "id")));
    CHECK(c == NULL || strcmp(sv(json_object_get(c, "type")), "function") == 0);
    *name = nbuf;
    if (id) *id = ibuf;
    json_t *args = json_loads(sv(json_object_get(fn, "arguments")), 0, NULL);
    json_decref(arr);
    return args;
}

static void xml_tool_call_becomes_a_call_with_typed_arguments(void) {
    scenario sc = {"Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                   "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
                   "<parameter=where>\n{\"lat\": 48.85, \"lon\": 2.35}\n</parameter>\n"
                   "<parameter=tags>\n[\"a\", 1]\n</parameter>\n<parameter=none>\nnull\n</parameter>\n"
                   "<parameter=note>\nline one\nline two\n\n</parameter>\n<parameter=quoted>\n\"x\"\n</parameter>\n"
                   "<parameter=ratio>\n0.1\n</parameter>\n</function>\n</tool_call>\n",
                   {0}, 0, -1, 1};
    result r = run_whole(&sc);
    CHECKF(strcmp(r.content, "Let me check.") == 0, "'%s'", r.content);
    CHECK(r.n_calls == 1);
    const char *name, *id;
    json_t *a = call_args(r.calls, 0, &name, &id);
    CHECK(strcmp(name, "get_weather") == 0);
    CHECKF(strlen(id) == 29 && strncmp(id, "call_", 5) == 0, "%s", id);
    CHECK(strspn(id + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") == 24);
    CHECK(json_is_object(a) && json_object_size(a) == 9);
    CHECK(strcmp(sv(json_object_get(a, "city")), "Paris") == 0);
    CHECK(json_integer_value(json_object_get(a, "days")) == 3 && json_is_integer(json_object_get(a, "days")));
    CHECK(json_is_true(json_object_get(a, "metric")));
    CHECK(json_real_value(json_object_get(json_object_get(a, "where"), "lat")) == 48.85);
    CHECK(json_array_size(json_object_get(a, "tags")) == 2);
    CHECK(json_is_null(json_object_get(a, "none")));
    /* one newline stripped on each side, the rest kept */
    CHECKF(strcmp(sv(json_object_get(a, "note")), "line one\nline two\n") == 0, "%s",
           json_string_value(json_object_get(a, "note")));
    CHECK(strcmp(sv(json_object_get(a, "quoted")), "\"x\"") == 0);
    /* 0.1 spelled as written, in key order */
    CHECKF(r.calls && strstr(r.calls, "\\\"ratio\\\":0.1}") && strstr(r.calls, "{\\\"city\\\":\\\"Paris\\\""), "%s",
           r.calls);
    json_decref(a);
    free(r.calls);
}

/* The template writes every parameter as text, so "10001" may be a string
 * id or a number: the request's tools say which. A client whose string
 * parameter came back as a number (or whose boolean came back as "True")
 * fails its own schema validation. */
static void xml_parameters_take_the_types_the_tools_declare(void) {
    static const char tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"other\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"id\":{\"type\":\"integer\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"id\":{\"type\":\"string\"},\"flag\":{\"type\":\"string\"},\"word\":{\"type\":\"string\"},"
        "\"n\":{\"type\":\"integer\"},\"x\":{\"type\":\"number\"},\"bad\":{\"type\":\"integer\"},"
        "\"on\":{\"type\":\"boolean\"},\"off\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"},"
        "\"tags\":{\"type\":\"array\"},\"notarray\":{\"type\":\"array\"},\"unset\":{\"type\":\"integer\"},"
        "\"either\":{\"type\":[\"integer\",\"null\"]},\"free\":{}}}}}]";
    const char *text =
        "<tool_call>\n<function=get>\n<parameter=id>\n10001\n</parameter>\n<parameter=flag>\ntrue\n</parameter>\n"
        "<parameter=word>\nnull\n</parameter>\n<parameter=n>\n10001\n</parameter>\n<parameter=x>\n2.5\n</parameter>\n"
        "<parameter=bad>\nmany\n</parameter>\n<parameter=on>\nTrue\n</parameter>\n<parameter=off>\nfalse\n</parameter>\n"
        "<parameter=opts>\n{\"a\": 1}\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n"
        "<parameter=notarray>\n{\"a\": 1}\n</parameter>\n<parameter=unset>\nnull\n</parameter>\n"
        "<parameter=either>\n7\n</parameter>\n<parameter=free>\n8\n</parameter>\n<parameter=undeclared>\n9\n</parameter>\n"
        "</function>\n</tool_call>";
    oai_output *o = oai_output_new(NULL, 0, -1, 1);
    CHECK(o && oai_output_tools(o, tools) == 0);
    if (!o) return;
    oai_delta d;
    CHECK(oai_output_push(o, text, strlen(text), &d) == 0 && oai_output_finish(o, &d) == 0);
    char *calls = oai_output_tool_calls_json(o);
    const char *name;
    json_t *a = call_args(calls, 0, &name, NULL);
    CHECK(strcmp(name, "get") == 0);
    /* declared strings keep their text, however numeric or literal it looks */
    CHECKF(strcmp(sv(json_object_get(a, "id")), "10001") == 0, "%s", calls);
    CHECK(strcmp(sv(json_object_get(a, "flag")), "true") == 0 && strcmp(sv(json_object_get(a, "word")), "null") == 0);
    /* declared numbers, booleans, objects and arrays are read as JSON (booleans in Python's spelling too) */
    CHECK(json_is_integer(json_object_get(a, "n")) && json_integer_value(json_object_get(a, "n")) == 10001);
    CHECK(json_real_value(json_object_get(a, "x")) == 2.5);
    CHECK(json_is_true(json_object_get(a, "on")) && json_is_false(json_object_get(a, "off")));
    CHECK(json_integer_value(json_object_get(json_object_get(a, "opts"), "a")) == 1);
    CHECK(json_array_size(json_object_get(a, "tags")) == 1);
    CHECK(json_is_null(json_object_get(a, "unset")));
    /* text that is not of the declared type stays text, for the client's own check to catch */
    CHECK(strcmp(sv(json_object_get(a, "bad")), "many") == 0);
    CHECK(strcmp(sv(json_object_get(a, "notarray")), "{\"a\": 1}") == 0);
    /* no single declared type: the guess as before */
    CHECK(json_integer_value(json_object_get(a, "either")) == 7 && json_integer_value(json_object_get(a, "free")) == 8);
    CHECK(json_integer_value(json_object_get(a, "undeclared")) == 9);
    json_decref(a);
    free(calls);
    oai_output_free(o);
}

static void json_tool_call_form_is_parsed(void) {
    scenario sc = {"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"kjv\", \"n\": 2}}\n</tool_call>",
                   {0}, 0, -1, 1};
    result r = run_whole(&sc);
    CHECK(r.content[0] == '\0' && r.n_calls == 1);
    CHECKF(r.calls && strstr(r.calls, "\"arguments\":\"{\\\"q\\\":\\\"kjv\\\",\\\"n\\\":2}\""), "%s", r.calls);
    const char *name;
    json_t *a = call_args(r.calls, 0, &name, NULL);
    CHECK(strcmp(name, "search") == 0 && json_integer_value(json_object_get(a, "n")) == 2);
    json_decref(a);
    free(r.calls);
}

static void two_tool_calls_get_indexes_and_distinct_ids(void) {
    scenario sc = {"<think>\nneed two\n</think>\n\n<tool_call>\n<function=a>\n</function>\n</tool_call>\n"
                   "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
                   {0}, 0, 0, 1};
    result r = run_whole(&sc);
    CHECK(strcmp(r.reasoning, "need two") == 0 && r.content[0] == '\0' && r.n_calls == 2);
    const char *name, *id;
    char id0[64];
    json_t *a = call_args(r.calls, 0, &name, &id);
    CHECK(strcmp(name, "a") == 0 && json_object_size(a) == 0);
    snprintf(id0, sizeof id0, "%s", id);
    json_decref(a);
    a = call_args(r.calls, 1, &name, &id);
    CHECK(strcmp(name, "b") == 0 && json_is_object(a) && strcmp(id0, id) != 0);
    json_decref(a);
    free(r.calls);
    /* parallel_tool_calls false: the first call only, the second's text gone */
    for (size_t step = 0; step <= 7; step += 7) {
        r = run_calls(&sc, 0, step, 1);
        CHECK(r.n_calls == 1 && r.content[0] == '\0' && r.totals_match);
        a = call_args(r.calls, 0, &name, &id);
        CHECK(strcmp(name, "a") == 0 && strcmp(id0, id) == 0);
        json_decref(a);
        free(r.calls);
    }
}

static void malformed_or_unterminated_tool_calls_become_content(void) {
    scenario open = {"Sure.\n<tool_call>\n<function=f>\n<parameter=x>\n1", {0}, 0, -1, 1};
    result r = run_whole(&open);
    CHECK(r.n_calls == 0 && strcmp(r.content, open.text) == 0);
    scenario bad = {"<tool_call>\nnot a call\n</tool_call> after", {0}, 0, -1, 1};
    r = run_whole(&bad);
    CHECK(r.n_calls == 0 && strcmp(r.content, bad.text) == 0);
    scenario noclose = {"<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", {0}, 0, -1, 1};
    r = run_whole(&noclose);
    CHECK(r.n_calls == 0 && strcmp(r.content, noclose.text) == 0);
    /* with parse_tools 0 a well-formed call is just text */
    scenario off = {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", {0}, 0, -1, 0};
    r = run_whole(&off);
    CHECK(r.n_calls == 0 && strcmp(r.content, off.text) == 0);
    /* whitespace is kept exactly when there are no calls */
    scenario ws = {"a b  \n", {0}, 0, -1, 1};
    r = run_whole(&ws);
    CHECK(strcmp(r.content, "a b  \n") == 0);
}

static int same(const result *a, const result *b) {
    return strcmp(a->reasoning, b->reasoning) == 0 && strcmp(a->content, b->content) == 0 &&
           a->n_calls == b->n_calls && a->stopped == b->stopped &&
           ((!a->calls && !b->calls) || (a->calls && b->calls && strcmp(a->calls, b->calls) == 0));
}

static void any_cut_of_the_text_gives_the_same_totals(void) {
    static const scenario cases[] = {
        {"\nReason here.\n\n</think>\n\nAnswer </thin and done.\n", {0}, 0, 1, 0},
        {"<think>\n\nr</think>c<think>", {0}, 0, 0, 0},
        {"<thinking>x", {0}, 0, 0, 0},
        {"one ST two STOP three END", {"STOP", "END"}, 2, -1, 0},
        {"aaab", {"aab", "b"}, 2, -1, 0},
        {"abcabd", {"abd", "cab"}, 2, -1, 0},
        {"Let me look.\n\n<tool_call>\n<function=f>\n<parameter=q>\nx < y\n</parameter>\n</function>\n"
         "</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"k\": [1, 2.5]}}\n</tool_call>\n\n",
         {0}, 0, -1, 1},
        {"r\n</think>\n\nx <tool_call>\n<function=f>\n</function>\n</tool_call> trailing <tool_c", {"</tool_call> t"},
         1, 1, 1},
        {"<think>\nplan\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call><tool_call>\n<function=", {0}, 0, 0,
         1},
        {"text <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> STOP x", {"STOP"}, 1, -1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const scenario *sc = &cases[c];
        result whole = run_whole(sc);
        CHECKF(whole.totals_match, "case %zu", c);
        result bytes = run(sc, 0, 1);
        CHECKF(same(&whole, &bytes) && bytes.totals_match, "case %zu byte by byte: R'%s' C'%s' vs R'%s' C'%s'", c,
               bytes.reasoning, bytes.content, whole.reasoning, whole.content);
        free(bytes.calls);
        for (size_t cut = 1; cut < strlen(sc->text); cut++) {
            result two = run(sc, cut, 0);
            CHECKF(same(&whole, &two) && two.totals_match, "case %zu cut at %zu: R'%s' C'%s'", c, cut, two.reasoning,
                   two.content);
            free(two.calls);
        }
        free(whole.calls);
    }
}

static void finish_reason_prefers_tool_calls_then_length(void) {
    oai_output *o = oai_output_new(NULL, 0, -1, 1);
    oai_delta d;
    oai_output_push(o, "plain", 5, &d);
    CHECK(strcmp(oai_finish_reason(o, 0), "stop") == 0 && strcmp(oai_finish_reason(o, 1), "length") == 0);
    oai_output_push(o, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", 38, &d);
    CHECK(d.n_calls == 1 && strcmp(d.calls[0].arguments, "{}") == 0 && strcmp(d.calls[0].name, "f") == 0);
    CHECK(strcmp(oai_finish_reason(o, 1), "tool_calls") == 0);
    oai_output_free(o);
}

static void call_ids_follow_the_seed(void) {
    const char *text = "<tool_call>\n{\"name\": \"f\"}\n</tool_call>";
    char ids[3][64];
    for (int i = 0; i < 3; i++) {
        oai_output *o = oai_output_new(NULL, 0, -1, 1);
        oai_output_seed_ids(o, i < 2 ? 7 : 8);
        oai_delta d;
        oai_output_push(o, text, strlen(text), &d);
        snprintf(ids[i], sizeof ids[i], "%s", d.n_calls ? d.calls[0].id : "");
        oai_output_free(o);
    }
    CHECK(strcmp(ids[0], ids[1]) == 0 && strcmp(ids[0], ids[2]) != 0 && strlen(ids[0]) == 29);
    char id[64];
    oai_make_id(id, sizeof id, "chatcmpl-", 1);
    CHECK(strncmp(id, "chatcmpl-", 9) == 0 && strlen(id) == 9 + 24);
}

/* ---- Response JSON ---------------------------------------------------------- */

static json_t *load(char *s) {
    json_error_t e;
    json_t *j = s ? json_loads(s, 0, &e) : NULL;
    CHECKF(j != NULL, "%s", s ? e.text : "NULL body");
    free(s);
    return j;
}

/* The string at key, "" when it is missing or not a string. */
static const char *str(json_t *o, const char *key) { return sv(json_object_get(o, key)); }
static json_t *choice0(json_t *j) { return json_array_get(json_object_get(j, "choices"), 0); }

static oai_output *sample_output(void) {
    oai_output *o = oai_output_new(NULL, 0, 1, 1);
    const char *t = "why\n</think>\n\n<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n"
                    "</tool_call>";
    oai_delta d;
    oai_output_push(o, t, strlen(t), &d);
    oai_output_finish(o, &d);
    return o;
}

static void chat_completion_json_has_openai_fields(void) {
    oai_meta m = {"chatcmpl-abc", 1700000000, "qwen", 0};
    oai_usage u = {10, 5, 4};
    oai_output *o = sample_output();
    json_t *j = load(oai_chat_completion_json(&m, o, oai_finish_reason(o, 0), u, NULL));
    CHECK(strcmp(str(j, "id"), "chatcmpl-abc") == 0 && strcmp(str(j, "object"), "chat.completion") == 0);
    CHECK(json_integer_value(json_object_get(j, "created")) == 1700000000 && strcmp(str(j, "model"), "qwen") == 0);
    json_t *c = choice0(j), *msg = json_object_get(c, "message");
    CHECK(json_integer_value(json_object_get(c, "index")) == 0 && json_is_null(json_object_get(c, "logprobs")));
    CHECK(strcmp(str(c, "finish_reason"), "tool_calls") == 0);
    CHECK(strcmp(str(msg, "role"), "assistant") == 0);
    CHECK(json_is_null(json_object_get(msg, "content")));   /* tool calls and no content */
    CHECK(strcmp(str(msg, "reasoning_content"), "why") == 0);
    json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0), *fn = json_object_get(tc, "function");
    CHECK(strcmp(str(tc, "type"), "function") == 0 && strncmp(str(tc, "id"), "call_", 5) == 0);
    CHECK(json_object_get(tc, "index") == NULL);
    CHECK(strcmp(str(fn, "name"), "f") == 0 && strcmp(str(fn, "arguments"), "{\"x\":1}") == 0);
    json_t *us = json_object_get(j, "usage");
    CHECK(json_integer_value(json_object_get(us, "prompt_tokens")) == 10);
    CHECK(json_integer_value(json_object_get(us, "completion_tokens")) == 5);
    CHECK(json_integer_value(json_object_get(us, "total_tokens")) == 15);
    CHECK(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")) == 4);
    json_decref(j);
    oai_output_free(o);

    /* plain answer: content is a string, no reasoning_content or tool_calls keys */
    o = oai_output_new(NULL, 0, -1, 1);
    oai_delta d;
    oai_output_push(o, "Hello \"you\"", 11, &d);
    oai_output_finish(o, &d);
    m.model = NULL;
    j = load(oai_chat_completion_json(&m, o, "stop", u, NULL));
    msg = json_object_get(choice0(j), "message");
    CHECK(strcmp(str(msg, "content"), "Hello \"you\"") == 0 && json_is_null(json_object_get(j, "model")));
    CHECK(!json_object_get(msg, "reasoning_content") && !json_object_get(msg, "tool_calls"));
    json_decref(j);
    oai_output_free(o);
}

static void chat_chunks_carry_role_first_deltas_then_finish_and_usage(void) {
    oai_meta m = {"chatcmpl-s", 1, "qwen", 1};
    json_t *j = load(oai_chat_chunk_json(&m, NULL, 1, NULL, NULL));
    json_t *c = choice0(j), *delta = json_object_get(c, "delta");
    CHECK(strcmp(str(j, "object"), "chat.completion.chunk") == 0 && strcmp(str(j, "id"), "chatcmpl-s") == 0);
    CHECK(strcmp(str(delta, "role"), "assistant") == 0);
    CHECK(json_is_string(json_object_get(delta, "content")) && strcmp(str(delta, "content"), "") == 0);
    CHECK(json_is_null(json_object_get(c, "finish_reason")) && json_object_get(c, "finish_reason"));
    CHECK(json_is_null(json_object_get(c, "logprobs")) && json_object_get(c, "logprobs"));
    CHECK(json_is_null(json_object_get(j, "usage")) && json_object_get(j, "usage"));   /* include_usage */
    json_decref(j);

    /* reasoning, content and a call in one delta */
    oai_output *o = oai_output_new(NULL, 0, 1, 1);
    oai_delta d;
    const char *t = "r</think>ans<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    oai_output_push(o, t, strlen(t), &d);
    j = load(oai_chat_chunk_json(&m, &d, 0, NULL, NULL));
    delta = json_object_get(choice0(j), "delta");
    CHECK(!json_object_get(delta, "role"));
    CHECK(strcmp(str(delta, "reasoning_content"), "r") == 0 && strcmp(str(delta, "content"), "ans") == 0);
    json_t *tc = json_array_get(json_object_get(delta, "tool_calls"), 0), *fn = json_object_get(tc, "function");
    CHECK(json_is_integer(json_object_get(tc, "index")) && json_integer_value(json_object_get(tc, "index")) == 0);
    CHECK(strncmp(str(tc, "id"), "call_", 5) == 0 && strcmp(str(tc, "type"), "function") == 0);
    CHECK(strcmp(str(fn, "name"), "f") == 0 && strcmp(str(fn, "arguments"), "{\"a\":1}") == 0);
    json_decref(j);
    oai_output_free(o);

    j = load(oai_chat_chunk_json(&m, NULL, 0, "tool_calls", NULL));
    c = choice0(j);
    CHECK(json_object_size(json_object_get(c, "delta")) == 0 && strcmp(str(c, "finish_reason"), "tool_calls") == 0);
    json_decref(j);

    j = load(oai_usage_chunk_json(&m, 1, (oai_usage){3, 4, 0}));
    CHECK(json_is_array(json_object_get(j, "choices")) && json_array_size(json_object_get(j, "choices")) == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")) == 7);
    CHECK(strcmp(str(j, "object"), "chat.completion.chunk") == 0);
    json_decref(j);

    m.include_usage = 0;   /* without include_usage chunks have no "usage" key */
    j = load(oai_chat_chunk_json(&m, NULL, 0, "stop", NULL));
    CHECK(json_object_get(j, "usage") == NULL);
    json_decref(j);
}

/* Logprob entries as OpenAI spells them, with the bundled model's
 * tokenizer: chat {"content":[{token, logprob, bytes, top_logprobs}],
 * "refusal":null}, a token that is a piece of a UTF-8 character as U+FFFD
 * with its exact byte, -inf as -9999; completions' parallel arrays, the top
 * object holding the chosen token when it is not among the alternatives. */
static void logprobs_json_follows_openai(void) {
    char err[512];
    nx_tokenizer *t = NULL;
    CHECKF(nx_tokenizer_load(NX_MODELS_DIR "/default", &t, err, sizeof err) == NX_OK, "%s", err);
    if (!t) return;
    int32_t *ids = NULL, piece = -1;
    int n = 0;
    CHECK(nx_tokenize(t, " the earth", 10, NX_SPECIAL_PARSE, &ids, &n, err, sizeof err) == NX_OK && n >= 2);
    for (int32_t id = 0; id < nx_tokenizer_vocab_size(t) && piece < 0; id++) {   /* a lone byte >= 0x80 */
        size_t len;
        const char *b = nx_tokenizer_token_bytes(t, id, &len);
        if (b && len == 1 && (unsigned char)b[0] >= 0x80) piece = id;
    }
    CHECK(piece >= 0);
    nx_token_logprob lp[3] = {{ids[0], -0.25f, 2, {ids[1], ids[0]}, {-0.125f, -0.25f}},
                              {ids[1], -INFINITY, 1, {ids[0]}, {-0.5f}},
                              {piece, -3.0f, 0, {0}, {0}}};
    int off[3] = {0, 4, 10};
    oai_logprobs l = {t, lp, 3, off};
    oai_meta m = {"chatcmpl-lp", 1, "qwen", 0};
    json_t *j = load(oai_chat_chunk_json(&m, NULL, 0, NULL, &l)), *c = json_object_get(choice0(j), "logprobs");
    json_t *content = json_object_get(c, "content");
    CHECK(json_is_null(json_object_get(c, "refusal")) && json_object_get(c, "refusal") && json_array_size(content) == 3);
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(content, (size_t)i), *bytes = json_object_get(e, "bytes");
        size_t len;
        const char *b = nx_tokenizer_token_bytes(t, lp[i].id, &len);
        CHECKF(json_array_size(bytes) == len, "entry %d: %zu bytes, want %zu", i, json_array_size(bytes), len);
        for (size_t k = 0; k < len && k < json_array_size(bytes); k++)
            CHECK(json_integer_value(json_array_get(bytes, k)) == (unsigned char)b[k]);
        CHECK((int)json_array_size(json_object_get(e, "top_logprobs")) == lp[i].n_top);
    }
    json_t *e0 = json_array_get(content, 0), *top0 = json_array_get(json_object_get(e0, "top_logprobs"), 0);
    CHECK(strcmp(str(e0, "token"), " the") == 0 && json_real_value(json_object_get(e0, "logprob")) == -0.25);
    char *second = NULL;
    CHECK(nx_detokenize(t, &ids[1], 1, 0, &second, NULL, err, sizeof err) == NX_OK && strcmp(str(top0, "token"), second) == 0);
    nx_free(second);
    CHECK(json_real_value(json_object_get(top0, "logprob")) == -0.125 && json_object_get(top0, "bytes"));
    CHECK(json_real_value(json_object_get(json_array_get(content, 1), "logprob")) == -9999.0);
    CHECK(strcmp(str(json_array_get(content, 2), "token"), "\xEF\xBF\xBD") == 0);
    json_decref(j);
    /* the whole chat response carries the same object; no tokenizer: null */
    oai_output *o = sample_output();
    j = load(oai_chat_completion_json(&m, o, "stop", (oai_usage){1, 3, 0}, &l));
    CHECK(json_array_size(json_object_get(json_object_get(choice0(j), "logprobs"), "content")) == 3);
    json_decref(j);
    oai_logprobs none = {NULL, lp, 3, off};
    j = load(oai_chat_completion_json(&m, o, "stop", (oai_usage){1, 3, 0}, &none));
    CHECK(json_is_null(json_object_get(choice0(j), "logprobs")));
    json_decref(j);
    oai_output_free(o);
    /* completions */
    o = oai_output_new(NULL, 0, -1, 0);
    j = load(oai_text_completion_json(&m, o, "length", (oai_usage){1, 3, 0}, &l));
    c = json_object_get(choice0(j), "logprobs");
    json_t *toks = json_object_get(c, "tokens"), *lps = json_object_get(c, "token_logprobs");
    json_t *tops = json_object_get(c, "top_logprobs"), *offs = json_object_get(c, "text_offset");
    CHECK(json_array_size(toks) == 3 && json_array_size(lps) == 3 && json_array_size(tops) == 3 && json_array_size(offs) == 3);
    CHECK(strcmp(sv(json_array_get(toks, 0)), " the") == 0 && json_real_value(json_array_get(lps, 0)) == -0.25);
    CHECK(json_real_value(json_array_get(lps, 1)) == -9999.0);
    for (int i = 0; i < 3; i++) CHECK(json_integer_value(json_array_get(offs, (size_t)i)) == off[i]);
    json_t *t0 = json_array_get(tops, 0), *t1 = json_array_get(tops, 1), *t2 = json_array_get(tops, 2);
    CHECK(json_object_size(t0) == 2 && json_real_value(json_object_get(t0, " the")) == -0.25);   /* chosen among them */
    CHECK(json_object_size(t1) == 2 && json_real_value(json_object_get(t1, " the")) == -0.5);    /* + the chosen one */
    /* completions spell the byte piece as OpenAI does: bytes:\xNN */
    char spelled[16];
    size_t plen;
    const char *pb = nx_tokenizer_token_bytes(t, piece, &plen);
    snprintf(spelled, sizeof spelled, "bytes:\\x%02x", pb ? (unsigned char)pb[0] : 0);
    CHECKF(strcmp(sv(json_array_get(toks, 2)), spelled) == 0, "'%s'", sv(json_array_get(toks, 2)));
    CHECK(json_object_size(t2) == 1 && json_real_value(json_object_get(t2, spelled)) == -3.0);
    json_decref(j);
    /* an entry without a logprob (an echoed prompt's first token): null */
    lp[0].n_top = -1;
    j = load(oai_text_chunk_json(&m, NULL, NULL, &l));
    c = json_object_get(choice0(j), "logprobs");
    CHECK(strcmp(sv(json_array_get(json_object_get(c, "tokens"), 0)), " the") == 0);
    CHECK(json_is_null(json_array_get(json_object_get(c, "token_logprobs"), 0)));
    CHECK(json_is_null(json_array_get(json_object_get(c, "top_logprobs"), 0)));
    CHECK(json_real_value(json_array_get(json_object_get(c, "token_logprobs"), 2)) == -3.0);
    json_decref(j);
    oai_output_free(o);
    nx_free(ids);
    nx_tokenizer_free(t);
}

static void text_completion_json_and_chunks_use_text(void) {
    oai_meta m = {"cmpl-t", 2, "qwen", 0};
    oai_output *o = oai_output_new(NULL, 0, -1, 0);
    oai_delta d;
    oai_output_push(o, "and the earth", 13, &d);
    json_t *j = load(oai_text_chunk_json(&m, &d, NULL, NULL));
    json_t *c = choice0(j);
    CHECK(strcmp(str(j, "object"), "text_completion") == 0 && strcmp(str(c, "text"), "and the earth") == 0);
    CHECK(json_is_null(json_object_get(c, "finish_reason")) && json_object_get(j, "usage") == NULL);
    json_decref(j);
    oai_output_finish(o, &d);
    j = load(oai_text_completion_json(&m, o, "length", (oai_usage){2, 3, 0}, NULL));
    c = choice0(j);
    CHECK(strcmp(str(j, "id"), "cmpl-t") == 0 && strcmp(str(j, "object"), "text_completion") == 0);
    CHECK(strcmp(str(c, "text"), "and the earth") == 0 && strcmp(str(c, "finish_reason"), "length") == 0);
    CHECK(json_is_null(json_object_get(c, "logprobs")) && json_object_get(c, "logprobs"));
    CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")) == 5);
    json_decref(j);
    j = load(oai_usage_chunk_json(&m, 0, (oai_usage){2, 3, 0}));
    CHECK(strcmp(str(j, "object"), "text_completion") == 0 && json_array_size(json_object_get(j, "choices")) == 0);
    json_decref(j);
    oai_output_free(o);
}

static void error_json_has_message_type_param_and_code(void) {
    const char *msg = "temperature must be between 0 and 2";
    json_t *j = load(oai_error_json(msg, "invalid_request_error", "temperature", NULL));
    json_t *e = json_object_get(j, "error");
    CHECK(strcmp(str(e, "message"), msg) == 0);
    CHECK(strcmp(str(e, "type"), "invalid_request_error") == 0 && strcmp(str(e, "param"), "temperature") == 0);
    CHECK(json_is_null(json_object_get(e, "code")) && json_object_get(e, "code"));
    json_decref(j);
}

/* An empty API key is refused at start: it would let in "Authorization:
 * Bearer " with no token (a key that was meant and lost, not an open server). */
static void an_empty_api_key_is_refused(void) {
    char err[256] = "";
    nx_server *s = (nx_server *)&err;   /* must come back NULL */
    nx_server_opts o = {.api_key = ""};
    CHECKF(nx_server_start(&o, &s, err, sizeof err) == NX_EINVAL && !s && strstr(err, "api_key is empty"), "'%s'", err);
}

static const nx_test tests[] = {
    {"an_empty_api_key_is_refused", "nx_server_start with api_key \"\": NX_EINVAL naming it, no server", an_empty_api_key_is_refused},
    {"chat_request_keeps_messages_and_reads_every_field", "content-part arrays kept as sent; sampling, seed -1 as u64",
     chat_request_keeps_messages_and_reads_every_field},
    {"absent_fields_take_openai_defaults", "temperature 1, top_p 1, max_tokens -1, enable_thinking -1; top_k -1 is off",
     absent_fields_take_openai_defaults},
    {"completion_prompt_is_a_string_or_token_ids", "a string or token ids, alone or in an array of one; two refused",
     completion_prompt_is_a_string_or_token_ids},
    {"stop_is_a_string_or_a_list", "one string, four strings, empty list", stop_is_a_string_or_a_list},
    {"max_completion_tokens_wins_over_max_tokens", "both sent: the newer name",
     max_completion_tokens_wins_over_max_tokens},
    {"tool_choice_none_drops_the_tools", "tools_json NULL for tool_choice none and tools null",
     tool_choice_none_drops_the_tools},
    {"tool_call_arguments_become_objects", "a string holding a JSON object becomes it, null {}; another string left, the first noted",
     tool_call_arguments_become_objects},
    {"a_developer_message_is_a_system_message", "role developer becomes system; the max_tokens field's name kept",
     a_developer_message_is_a_system_message},
    {"unknown_fields_and_nulls_are_ignored", "extra keys and null values change nothing",
     unknown_fields_and_nulls_are_ignored},
    {"logit_bias_becomes_the_sampling_entries", "logit_bias {\"id\": bias} parsed into nx_sampling; {} is none",
     logit_bias_becomes_the_sampling_entries},
    {"logprobs_are_read_in_either_spelling",
     "chat's boolean + top_logprobs, completions' count; off values leave them off; echo with max_tokens 0 (completions)",
     logprobs_are_read_in_either_spelling},
    {"logprobs_json_follows_openai",
     "chat content entries (token, logprob, bytes, top_logprobs; U+FFFD for a byte piece; -inf as -9999), refusal null; "
     "completions' tokens / token_logprobs / top_logprobs objects with the chosen token / text_offset, a byte piece as "
     "bytes:\\xNN",
     logprobs_json_follows_openai},
    {"an_echo_is_not_searched_for_stop_strings", "oai_output_echo: a stop string inside the prompt is sent; after it, cut",
     an_echo_is_not_searched_for_stop_strings},
    {"invalid_requests_get_400_naming_the_field", "every range, type and shape error; *out left zeroed",
     invalid_requests_get_400_naming_the_field},
    {"invalid_json_message_is_ascii_and_has_a_position", "jansson's message quotes bytes: kept ASCII for JSON",
     invalid_json_message_is_ascii_and_has_a_position},
    {"think_open_sends_text_to_reasoning_until_the_close_tag", "newlines trimmed as the template trims them",
     think_open_sends_text_to_reasoning_until_the_close_tag},
    {"think_tag_at_the_start_opens_reasoning_without_think_open", "only at the very start; -1 disables",
     think_tag_at_the_start_opens_reasoning_without_think_open},
    {"stop_string_spanning_pushes_ends_the_output", "\"#\" + \"#\" + \"# more\" with stop ###",
     stop_string_spanning_pushes_ends_the_output},
    {"stop_strings_are_never_partially_emitted", "byte by byte, a possible stop prefix is held",
     stop_strings_are_never_partially_emitted},
    {"the_first_completed_stop_string_wins", "earliest completion, longer on a tie, inside reasoning too",
     the_first_completed_stop_string_wins},
    {"xml_tool_call_becomes_a_call_with_typed_arguments", "Qwen3.5 form: JSON-typed values, multi-line strings",
     xml_tool_call_becomes_a_call_with_typed_arguments},
    {"xml_parameters_take_the_types_the_tools_declare", "Qwen3.5 form: a declared string stays text, declared types are read as JSON",
     xml_parameters_take_the_types_the_tools_declare},
    {"json_tool_call_form_is_parsed", "Qwen3 form: arguments re-serialized compactly", json_tool_call_form_is_parsed},
    {"two_tool_calls_get_indexes_and_distinct_ids",
     "after reasoning, both forms, whitespace between dropped; one_call keeps the first",
     two_tool_calls_get_indexes_and_distinct_ids},
    {"malformed_or_unterminated_tool_calls_become_content", "open at finish, bad body, parse_tools off",
     malformed_or_unterminated_tool_calls_become_content},
    {"any_cut_of_the_text_gives_the_same_totals", "think tags, stop strings, tool calls: every cut and byte by byte",
     any_cut_of_the_text_gives_the_same_totals},
    {"finish_reason_prefers_tool_calls_then_length", "stop / length / tool_calls",
     finish_reason_prefers_tool_calls_then_length},
    {"call_ids_follow_the_seed", "same seed same ids, other seed other ids; oai_make_id", call_ids_follow_the_seed},
    {"chat_completion_json_has_openai_fields", "parsed back: every field, content null with tool calls",
     chat_completion_json_has_openai_fields},
    {"chat_chunks_carry_role_first_deltas_then_finish_and_usage", "role chunk, delta chunk, {} + finish, usage chunk",
     chat_chunks_carry_role_first_deltas_then_finish_and_usage},
    {"text_completion_json_and_chunks_use_text", "text_completion object, choices[0].text",
     text_completion_json_and_chunks_use_text},
    {"error_json_has_message_type_param_and_code", "OpenAI's error envelope",
     error_json_has_message_type_param_and_code},
};

NX_TEST_MAIN(tests)
