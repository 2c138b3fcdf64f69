/* test_chat.c — the native Qwen chat-template renderer against Python Jinja2.
 *
 * The reference is tests/data/chat/ (see its README): the golden conversations
 * rendered by Jinja2 3.1.2 as transformers sets it up, and extra conversations
 * rendered the same way by make_extra.py. Every line must match byte for byte,
 * and every template error must carry Jinja2's own message. The rest pins
 * template detection, the nextn chat format, request validation and the
 * Python number spelling. */
#include "test.h"

#include "base/alloc.h"
#include "nextn.h"
#include "tokenizer/chat.h"

#define CHAT_DIR NX_TEST_DATA "/chat"
#define QWEN3_FILE CHAT_DIR "/Qwen-Qwen3-0.6B.jinja"
#define QWEN35_FILE CHAT_DIR "/Qwen3.5-4B.jinja"

/* ---- Helpers --------------------------------------------------------------- */

static nx_chat_template *load_template(const char *path) {
    size_t n;
    char *text = nx_test_read_file(path, &n);
    if (!text) {
        fprintf(stderr, "  cannot read %s\n", path);
        return NULL;
    }
    nx_chat_template *c = NULL;
    char err[512] = "";
    nx_status st = nx_chat_template_new(text, n, path, &c, err, sizeof err);
    if (st != NX_OK) fprintf(stderr, "  %s: %s\n", path, err);
    free(text);
    return c;
}

static nx_chat_template *template_from_text(const char *text, nx_status *st, char *err, size_t errlen) {
    nx_chat_template *c = NULL;
    *st = nx_chat_template_new(text, strlen(text), "test.jinja", &c, err, errlen);
    return c;
}

/* Renders; returns the status; *out (NULL on failure) is freed by the caller. */
static nx_status render(const nx_chat_template *c, const char *messages, const char *tools, int gen, int think,
                        char **out, char *err, size_t errlen) {
    nx_chat_request req = {messages, tools, gen, think};
    err[0] = 0;
    return nx_chat_render(c, &req, out, err, errlen);
}

/* Checks one render against an expected text. */
static void expect_render(const nx_chat_template *c, const char *messages, const char *tools, int gen, int think,
                          const char *want) {
    char *out = NULL, err[512];
    nx_status st = render(c, messages, tools, gen, think, &out, err, sizeof err);
    CHECKF(st == NX_OK, "%s: %s", nx_status_str(st), err);
    if (st == NX_OK) CHECKF(strcmp(out, want) == 0, "\n--- got ---\n%s\n--- want ---\n%s", out, want);
    nx_free(out);
}

/* Checks that a render fails with status `want_st` and a message containing want_msg. */
static void expect_error(const nx_chat_template *c, const char *messages, const char *tools, nx_status want_st,
                         const char *want_msg) {
    char *out = NULL, err[512];
    nx_status st = render(c, messages, tools, 1, -1, &out, err, sizeof err);
    CHECKF(st == want_st, "status %s, want %s (%s)", nx_status_str(st), nx_status_str(want_st), err);
    CHECKF(out == NULL, "output set on failure");
    CHECKF(strstr(err, want_msg) != NULL, "message \"%s\" lacks \"%s\"", err, want_msg);
    nx_free(out);
}

/* ---- Reference files ----------------------------------------------------------
 * Each line: {"id", "template", "messages", "tools", "add_generation_prompt",
 * "enable_thinking", "extra_kwargs", "rendered", "error", ...}. messages,
 * tools and extra_kwargs are passed on as their raw text from the line, so
 * numbers reach the renderer spelled as in the file. */

typedef struct {
    int lines, renders, errors, matched;
} ref_counts;

static char *span_dup(const char *line, const chat_val *v) {
    char *s = malloc(v->src_len + 1);
    memcpy(s, line + v->src_off, v->src_len);
    s[v->src_len] = 0;
    return s;
}

static void check_reference_line(const char *line, nx_chat_template *q3, nx_chat_template *q35, ref_counts *n,
                                 int want_errors) {
    chat_arena arena = {0};
    chat_val *d;
    char err[512];
    if (chat_json_parse(&arena, line, strlen(line), &d, err, sizeof err) != NX_OK) {
        CHECKF(0, "unreadable reference line: %s", err);
        chat_arena_free(&arena);
        return;
    }
    const chat_val *id = chat_dict_get(d, "id"), *tmpl = chat_dict_get(d, "template");
    const chat_val *msgs = chat_dict_get(d, "messages"), *tools = chat_dict_get(d, "tools");
    const chat_val *gen = chat_dict_get(d, "add_generation_prompt");
    const chat_val *think = chat_dict_get(d, "enable_thinking");
    const chat_val *kw = chat_dict_get(d, "extra_kwargs");
    const chat_val *rendered = chat_dict_get(d, "rendered"), *error = chat_dict_get(d, "error");
    int is_error = error && error->kind == CV_STR;
    n->lines++;
    if (is_error != want_errors) {
        chat_arena_free(&arena);
        return;
    }
    if (is_error) n->errors++;
    else n->renders++;

    nx_chat_template *c = chat_eq_str(tmpl, "qwen3") ? q3 : q35;
    char *messages = span_dup(line, msgs);
    char *tools_json = tools && tools->kind != CV_NONE ? span_dup(line, tools) : NULL;
    char *kw_json = kw && kw->kind == CV_DICT && kw->n > 0 ? span_dup(line, kw) : NULL;
    nx_chat_request req = {messages, tools_json, gen && gen->kind == CV_BOOL && gen->b,
                           think && think->kind == CV_BOOL ? think->b : -1};
    char *out = NULL;
    err[0] = 0;
    nx_status st = chat_render_ex(c, &req, kw_json, &out, err, sizeof err);
    int ok;
    if (is_error) {
        ok = st == NX_EINVAL && strcmp(err, error->s) == 0;
        CHECKF(ok, "%s [%s]: got %s \"%s\", want \"%s\"", id->s, tmpl->s, nx_status_str(st), err, error->s);
    } else {
        ok = st == NX_OK && strlen(out) == rendered->len && memcmp(out, rendered->s, rendered->len) == 0;
        if (st != NX_OK) CHECKF(ok, "%s [%s]: %s: %s", id->s, tmpl->s, nx_status_str(st), err);
        else CHECKF(ok, "%s [%s]:\n--- got ---\n%s\n--- want ---\n%s", id->s, tmpl->s, out, rendered->s);
    }
    n->matched += ok;
    nx_free(out);
    free(messages);
    free(tools_json);
    free(kw_json);
    chat_arena_free(&arena);
}

static ref_counts check_reference_file(const char *path, int want_errors) {
    ref_counts n = {0};
    nx_chat_template *q3 = load_template(QWEN3_FILE), *q35 = load_template(QWEN35_FILE);
    char *text = nx_test_read_file(path, NULL);
    CHECKF(text && q3 && q35, "cannot read %s or the templates", path);
    if (text && q3 && q35) {
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            if (*line) check_reference_line(line, q3, q35, &n, want_errors);
    }
    free(text);
    nx_chat_template_free(q3);
    nx_chat_template_free(q35);
    return n;
}

static void test_golden_renders(void) {
    ref_counts n = check_reference_file(CHAT_DIR "/chat-golden.jsonl", 0);
    printf("     %d/%d golden renders match byte for byte\n", n.matched, n.renders);
    /* The visible set has 56 renders; a fuller set dropped in its place must pass too. */
    CHECK(n.renders >= 56 && n.matched == n.renders);
}

static void test_golden_errors(void) {
    ref_counts n = check_reference_file(CHAT_DIR "/chat-golden.jsonl", 1);
    printf("     %d/%d golden errors match\n", n.matched, n.errors);
    CHECK(n.errors >= 3 && n.matched == n.errors);
}

static void test_extra_conversations(void) {
    ref_counts a = check_reference_file(CHAT_DIR "/chat-extra.jsonl", 0);
    ref_counts b = check_reference_file(CHAT_DIR "/chat-extra.jsonl", 1);
    printf("     %d/%d extra renders and %d/%d extra errors match\n", a.matched, a.renders, b.matched, b.errors);
    CHECK(a.renders >= 109 && a.matched == a.renders);
    CHECK(b.errors >= 61 && b.matched == b.errors);
}

/* ---- Template detection ------------------------------------------------------ */

static void test_detects_both_templates(void) {
    nx_chat_template *q3 = load_template(QWEN3_FILE), *q35 = load_template(QWEN35_FILE);
    CHECK(q3 && strcmp(nx_chat_template_variant(q3), "qwen3") == 0);
    CHECK(q35 && strcmp(nx_chat_template_variant(q35), "qwen3.5") == 0);
    /* Both think by default: Qwen3 leaves the prompt open, Qwen3.5 opens "<think>\n". */
    CHECK(q3 && nx_chat_template_default_thinking(q3) == 1);
    CHECK(q35 && nx_chat_template_default_thinking(q35) == 1);
    nx_chat_template_free(q3);
    nx_chat_template_free(q35);
    nx_chat_template_free(NULL);
}

/* Rewrites a template: every run of spaces at a line start removed, "\n" as
 * "\r\n", and extra newlines at the end. Jinja renders it the same. */
static char *reindent(const char *text) {
    size_t n = strlen(text);
    char *o = malloc(3 * n + 8), *p = o;
    int line_start = 1;
    for (size_t i = 0; i < n; i++) {
        if (line_start && text[i] == ' ') continue;
        line_start = 0;
        if (text[i] == '\n') {
            *p++ = '\r';
            line_start = 1;
        }
        *p++ = text[i];
    }
    strcpy(p, "\r\n\n");
    return o;
}

static void test_detection_ignores_unprinted_whitespace(void) {
    const char *files[] = {QWEN3_FILE, QWEN35_FILE}, *want[] = {"qwen3", "qwen3.5"};
    for (int k = 0; k < 2; k++) {
        char *text = nx_test_read_file(files[k], NULL), *re = reindent(text), err[512];
        nx_status st;
        nx_chat_template *c = template_from_text(re, &st, err, sizeof err);
        CHECKF(st == NX_OK && strcmp(nx_chat_template_variant(c), want[k]) == 0, "%s: %s", files[k], err);
        nx_chat_template_free(c);
        free(text);
        free(re);
    }
}

static void test_edited_template_is_unknown(void) {
    char *text = nx_test_read_file(QWEN35_FILE, NULL), err[512];
    /* A changed string literal changes the output: must not match. */
    char *p = strstr(text, "No messages provided.");
    CHECK(p != NULL);
    if (p) p[0] = 'n';
    nx_status st;
    nx_chat_template *c = template_from_text(text, &st, err, sizeof err);
    CHECK(st == NX_EUNSUPPORTED && c == NULL);
    free(text);
    /* Whitespace Jinja would print (after a tag without '-') also counts. */
    text = nx_test_read_file(QWEN3_FILE, NULL);
    char *edited = malloc(strlen(text) + 8);
    strcpy(edited, text);
    strcat(edited, "\n \n");
    c = template_from_text(edited, &st, err, sizeof err);
    CHECK(st == NX_EUNSUPPORTED && c == NULL);
    free(text);
    free(edited);
    /* Whitespace between two words inside a tag is syntax: "notloop.last" is
     * an undefined variable to Jinja, not "not loop.last" (found by fuzzing:
     * the canonical form dropped every space inside tags). */
    const char *files[] = {QWEN3_FILE, QWEN35_FILE};
    for (int k = 0; k < 2; k++) {
        text = nx_test_read_file(files[k], NULL);
        p = text ? strstr(text, "not loop.last") : NULL;
        CHECK(p != NULL);
        if (!p) continue;
        memmove(p + 3, p + 4, strlen(p + 4) + 1);   /* "notloop.last" */
        c = template_from_text(text, &st, err, sizeof err);
        CHECKF(st == NX_EUNSUPPORTED && c == NULL, "%s with \"notloop.last\" was recognised", files[k]);
        nx_chat_template_free(c);
        free(text);
    }
}

static void test_llama3_template_is_rejected(void) {
    const char *llama3 =
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
    nx_chat_template *c = (nx_chat_template *)1;
    char err[512] = "";
    nx_status st = nx_chat_template_new(llama3, strlen(llama3), "llama3.jinja", &c, err, sizeof err);
    CHECK(st == NX_EUNSUPPORTED);
    CHECK(c == NULL);
    CHECKF(strstr(err, "llama3.jinja") && strstr(err, "--chat-template FILE") &&
               strstr(err, "docs/chat-templates.md"),
           "%s", err);
    /* Empty text and a JSON object that is not the nextn format are unknown too. */
    st = nx_chat_template_new("", 0, "empty", &c, err, sizeof err);
    CHECK(st == NX_EUNSUPPORTED);
    st = nx_chat_template_new("{\"chat_template\": \"x\"}", 22, "cfg.json", &c, err, sizeof err);
    CHECK(st == NX_EUNSUPPORTED);
}

/* ---- The nextn chat format ------------------------------------------------------ */

static void test_nextn_format_selects_a_renderer(void) {
    const char *file = "{\n  \"nextn_chat_format\": 1,\n  \"base\": \"qwen3.5\",\n"
                       "  \"default_thinking\": false,\n  \"comment\": \"Qwen3.5-0.8B: thinks only when asked\"\n}\n";
    char err[512];
    nx_status st;
    nx_chat_template *c = template_from_text(file, &st, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    if (!c) return;
    CHECK(strcmp(nx_chat_template_variant(c), "qwen3.5") == 0);
    CHECK(nx_chat_template_default_thinking(c) == 0);
    const char *msgs = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
    expect_render(c, msgs, NULL, 1, -1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect_render(c, msgs, NULL, 1, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    nx_chat_template_free(c);

    /* Without default_thinking the base template's default holds. */
    c = template_from_text("{\"nextn_chat_format\": 1, \"base\": \"qwen3\"}", &st, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    if (!c) return;
    CHECK(strcmp(nx_chat_template_variant(c), "qwen3") == 0);
    CHECK(nx_chat_template_default_thinking(c) == 1);
    expect_render(c, msgs, NULL, 1, -1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    nx_chat_template_free(c);
}

static void test_bad_nextn_format_is_a_clear_error(void) {
    static const struct {
        const char *text;
        nx_status st;
        const char *msg;
    } cases[] = {
        {"{\"nextn_chat_format\": 1, \"base\": \"llama3\"}", NX_EFORMAT, "unknown base \"llama3\""},
        {"{\"nextn_chat_format\": 1}", NX_EFORMAT, "\"base\" must be a string"},
        {"{\"nextn_chat_format\": 2, \"base\": \"qwen3\"}", NX_EUNSUPPORTED, "nextn_chat_format 2 is not supported"},
        {"{\"nextn_chat_format\": 1, \"base\": \"qwen3\", \"thinking\": true}", NX_EFORMAT,
         "unknown field \"thinking\""},
        {"{\"nextn_chat_format\": 1, \"base\": \"qwen3\", \"default_thinking\": 1}", NX_EFORMAT,
         "\"default_thinking\" must be true or false"},
        {"{\"nextn_chat_format\": 1, \"base\": \"qwen3\",}", NX_EFORMAT, "line 1 column 42"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char err[512] = "";
        nx_status st;
        nx_chat_template *c = template_from_text(cases[k].text, &st, err, sizeof err);
        CHECKF(st == cases[k].st && c == NULL, "case %zu: %s (%s)", k, nx_status_str(st), err);
        CHECKF(strstr(err, "test.jinja") && strstr(err, cases[k].msg), "case %zu: \"%s\" lacks \"%s\"", k, err,
               cases[k].msg);
        nx_chat_template_free(c);
    }
}

/* ---- Requests ---------------------------------------------------------------- */

static void test_malformed_messages_are_format_errors(void) {
    nx_chat_template *c = load_template(QWEN35_FILE);
    if (!c) { CHECK(0); return; }
    expect_error(c, "[{\"role\": \"user\", \"content\": \"Hi\"", NULL, NX_EFORMAT, "messages_json: line 1 column 34");
    expect_error(c, "not json", NULL, NX_EFORMAT, "messages_json: line 1 column 1: expecting value");
    expect_error(c, "[] []", NULL, NX_EFORMAT, "extra data");
    expect_error(c, "{\"role\": \"user\"}", NULL, NX_EFORMAT, "expected an array of messages, got an object");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"a\"}, \"hi\"]", NULL, NX_EFORMAT,
                 "message 1 is a string, not an object");
    expect_error(c, "[{\"content\": \"hi\"}]", NULL, NX_EFORMAT, "message 0 has no \"role\"");
    expect_error(c, "[{\"role\": 7, \"content\": \"hi\"}]", NULL, NX_EFORMAT, "message 0: \"role\" is a number");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"a\x01\"}]", NULL, NX_EFORMAT, "invalid control character");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"\xff\"}]", NULL, NX_EFORMAT, "invalid UTF-8");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"\\q\"}]", NULL, NX_EFORMAT, "invalid escape");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"\\u12G4\"}]", NULL, NX_EFORMAT, "invalid \\uXXXX escape");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"\\u12", NULL, NX_EFORMAT, "invalid \\uXXXX escape");
    expect_error(c, "[{\"role\": \"user\"} {\"role\": \"user\"}]", NULL, NX_EFORMAT, "line 1 column 19: expecting ',' or ']'");
    expect_error(c, "[true]", NULL, NX_EFORMAT, "message 0 is a boolean, not an object");
    expect_error(c, "[{\"role\": \"user\"}, [1]]", NULL, NX_EFORMAT, "message 1 is an array, not an object");
    expect_error(c, "[{\"role\": \"user\", \"content\": \"a\"}]", "[{]", NX_EFORMAT, "tools_json: line 1 column 3");
    /* Deep nesting is refused, not recursed into. */
    char deep[2 * CHAT_JSON_MAX_DEPTH + 64];
    size_t k = 0;
    for (int d = 0; d < CHAT_JSON_MAX_DEPTH + 5; d++) deep[k++] = '[';
    deep[k] = 0;
    expect_error(c, deep, NULL, NX_EFORMAT, "nested deeper than");
    nx_chat_template_free(c);
}

static void test_api_misuse_is_einval(void) {
    nx_chat_template *c = load_template(QWEN3_FILE);
    if (!c) { CHECK(0); return; }
    char *out = (char *)1, err[256];
    nx_chat_request req = {"[]", NULL, 1, 2};
    CHECK(nx_chat_render(c, &req, &out, err, sizeof err) == NX_EINVAL && out == NULL);
    CHECK(strstr(err, "enable_thinking") != NULL);
    req.enable_thinking = -1;
    req.messages_json = NULL;
    CHECK(nx_chat_render(c, &req, &out, err, sizeof err) == NX_EINVAL);
    CHECK(nx_chat_render(NULL, &req, &out, err, sizeof err) == NX_EINVAL);
    CHECK(nx_chat_render(c, &req, NULL, err, sizeof err) == NX_EINVAL);
    nx_chat_template *t = NULL;
    CHECK(nx_chat_template_new(NULL, 0, "x", &t, NULL, 0) == NX_EINVAL && t == NULL);
    CHECK(nx_chat_template_new("x", 1, "x", NULL, NULL, 0) == NX_EINVAL);
    CHECK(nx_chat_template_variant(NULL) == NULL);
    nx_chat_template_free(c);
}

/* ---- Branches spelled out ------------------------------------------------------ */

static const char *k_tool_flow =
    "[{\"role\": \"user\", \"content\": \"Weather in the Eiffel Tower city?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"Search first.\","
    "  \"tool_calls\": [{\"function\": {\"name\": \"search\", \"arguments\": {\"q\": \"Eiffel Tower\", \"n\": 1}}}]},"
    " {\"role\": \"tool\", \"content\": \"Paris\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>Now the weather.</think>\","
    "  \"tool_calls\": [{\"name\": \"weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}]},"
    " {\"role\": \"tool\", \"content\": \"21C\"}, {\"role\": \"tool\", \"content\": \"sunny\"}]";

static void test_qwen3_keeps_reasoning_after_the_last_query(void) {
    nx_chat_template *c = load_template(QWEN3_FILE);
    if (!c) { CHECK(0); return; }
    /* Both assistant turns follow the only query, so both keep their reasoning;
     * the second tool call has no "function" wrapper and string arguments. */
    expect_render(c, k_tool_flow, NULL, 1, -1,
                  "<|im_start|>user\nWeather in the Eiffel Tower city?<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nSearch first.\n</think>\n\n"
                  "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"Eiffel Tower\", \"n\": 1}}\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nParis\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nNow the weather.\n</think>\n\n"
                  "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\n21C\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n");
    nx_chat_template_free(c);
}

static const char *k_param_call =
    "[{\"role\": \"user\", \"content\": \"Go\"},"
    " {\"role\": \"assistant\", \"content\": \"Sure.\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
    "   \"arguments\": {\"s\": \"x\", \"f\": 2.0, \"e\": 1e-05, \"b\": true, \"n\": null, \"l\": [1, \"a\"]}}}]}]";

static void test_qwen35_renders_tool_calls_as_parameters(void) {
    nx_chat_template *c = load_template(QWEN35_FILE);
    if (!c) { CHECK(0); return; }
    /* String arguments are not a mapping: Jinja2's |items raises. */
    expect_error(c, k_tool_flow, NULL, NX_EINVAL, "TypeError: Can only get item pairs from a mapping.");
    expect_render(c, k_param_call, NULL, 0, -1,
                  "<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nSure.\n\n"
                  "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n<parameter=f>\n2.0\n</parameter>\n"
                  "<parameter=e>\n1e-05\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n<parameter=n>\nNone\n"
                  "</parameter>\n<parameter=l>\n[1, \"a\"]\n</parameter>\n</function>\n</tool_call><|im_end|>\n");
    nx_chat_template_free(c);
}

static void test_system_message_in_the_middle(void) {
    const char *msgs = "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"system\", \"content\": \"Be brief.\"},"
                       " {\"role\": \"user\", \"content\": \"Go on\"}]";
    nx_chat_template *q3 = load_template(QWEN3_FILE), *q35 = load_template(QWEN35_FILE);
    if (!q3 || !q35) { CHECK(0); return; }
    expect_render(q3, msgs, NULL, 0, -1,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n"
                  "<|im_start|>user\nGo on<|im_end|>\n");
    expect_error(q35, msgs, NULL, NX_EINVAL, "TemplateError: System message must be at the beginning.");
    nx_chat_template_free(q3);
    nx_chat_template_free(q35);
}

static void test_qwen35_renders_content_parts_and_vision(void) {
    nx_chat_template *c = load_template(QWEN35_FILE);
    if (!c) { CHECK(0); return; }
    const char *msgs =
        "[{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \" Look. \"}]},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"image\", \"image\": \"a.png\"},"
        "   {\"type\": \"text\", \"text\": \"and\"}, {\"type\": \"video\", \"video\": \"b.mp4\"},"
        "   {\"type\": \"image_url\", \"image_url\": {\"url\": \"c\"}}]}]";
    expect_render(c, msgs, NULL, 1, 0,
                  "<|im_start|>system\nLook.<|im_end|>\n<|im_start|>user\n"
                  "<|vision_start|><|image_pad|><|vision_end|>and<|vision_start|><|video_pad|><|vision_end|>"
                  "<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* add_vision_id (an extra keyword argument) numbers them. */
    nx_chat_request req = {msgs, NULL, 0, -1};
    char *out = NULL, err[256];
    CHECK(chat_render_ex(c, &req, "{\"add_vision_id\": true}", &out, err, sizeof err) == NX_OK);
    CHECKF(out && strstr(out, "Picture 1: <|vision_start|><|image_pad|>") &&
               strstr(out, "Video 1: <|vision_start|><|video_pad|>") && strstr(out, "Picture 2: "),
           "%s", out ? out : err);
    nx_free(out);
    expect_error(c, "[{\"role\": \"system\", \"content\": [{\"image\": \"x\"}]}, {\"role\": \"user\", \"content\": \"a\"}]",
                 NULL, NX_EINVAL, "TemplateError: System message cannot contain images.");
    expect_error(c, "[{\"role\": \"user\", \"content\": 5}]", NULL, NX_EINVAL, "TemplateError: Unexpected content type.");
    nx_chat_template_free(c);
}

static void test_nul_in_content_is_refused(void) {
    nx_chat_template *c = load_template(QWEN3_FILE);
    if (!c) { CHECK(0); return; }
    expect_error(c, "[{\"role\": \"user\", \"content\": \"a\\u0000b\"}]", NULL, NX_EUNSUPPORTED, "NUL character");
    nx_chat_template_free(c);
}

/* ---- Numbers -------------------------------------------------------------------- */

static void test_numbers_keep_python_spelling(void) {
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"2.0", "2.0"},           {"1e-05", "1e-05"},   {"1e+16", "1e+16"},       {"1.5e+300", "1.5e+300"},
        {"-0.0", "-0.0"},         {"0.1", "0.1"},       {"123456789.125", "123456789.125"},
        {"1E5", "100000.0"},      {"1.50", "1.5"},      {"0.0001", "0.0001"},     {"0.00001", "1e-05"},
        {"1e15", "1000000000000000.0"}, {"5e-324", "5e-324"}, {"1e400", "inf"},   {"-1.25", "-1.25"},
        {"12345678901234567890", "12345678901234567890"}, {"-0", "0"},            {"7", "7"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        chat_arena a = {0};
        chat_val *v;
        char err[128];
        CHECK(chat_json_parse(&a, cases[k].json, strlen(cases[k].json), &v, err, sizeof err) == NX_OK);
        CHECKF(v && strcmp(v->s, cases[k].want) == 0, "%s -> %s, want %s", cases[k].json, v ? v->s : "?",
               cases[k].want);
        chat_arena_free(&a);
    }
}

/* ---- Allocation failures ---------------------------------------------------------- */

static void test_allocation_failures_are_clean(void) {
    nx_chat_template *c = load_template(QWEN35_FILE);
    if (!c) { CHECK(0); return; }
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]";
    int ok_at = -1;
    for (long n = 0; n < 200 && ok_at < 0; n++) {
        char *out = NULL, err[256];
        nx_alloc_fail_after(n);
        nx_status st = render(c, k_param_call, tools, 1, -1, &out, err, sizeof err);
        nx_alloc_fail_after(-1);
        if (st == NX_OK) ok_at = (int)n;
        else CHECKF(st == NX_ENOMEM, "fail after %ld: %s %s", n, nx_status_str(st), err);
        CHECK(st == NX_OK || out == NULL);
        nx_free(out);
    }
    CHECK(ok_at > 0);
    nx_chat_template_free(c);
}

static const nx_test tests[] = {
    {"golden_renders_match_jinja2_byte_for_byte", "every golden render of both templates is reproduced exactly",
     test_golden_renders},
    {"golden_errors_carry_the_templates_own_message", "every golden error is NX_EINVAL with Jinja2's message",
     test_golden_errors},
    {"extra_conversations_match_jinja2", "make_extra.py's conversations render (or fail) exactly as in Jinja2",
     test_extra_conversations},
    {"both_qwen_templates_are_detected_by_text", "the Qwen3 and Qwen3.5 templates select their renderers",
     test_detects_both_templates},
    {"detection_ignores_whitespace_jinja_does_not_print", "re-indented CRLF copies are still recognised",
     test_detection_ignores_unprinted_whitespace},
    {"an_edited_template_is_unknown", "a changed literal, printed whitespace or two words joined make the text unknown",
     test_edited_template_is_unknown},
    {"a_llama3_template_is_rejected_with_guidance", "unknown templates are NX_EUNSUPPORTED naming the fix",
     test_llama3_template_is_rejected},
    {"a_nextn_format_file_selects_a_renderer", "the documented JSON format picks a base and thinking default",
     test_nextn_format_selects_a_renderer},
    {"a_bad_nextn_format_file_is_a_clear_error", "bad versions, bases and fields are named in the message",
     test_bad_nextn_format_is_a_clear_error},
    {"malformed_messages_are_format_errors", "bad JSON and bad message shapes are NX_EFORMAT, never a crash",
     test_malformed_messages_are_format_errors},
    {"api_misuse_is_einval", "NULL arguments and out-of-range enable_thinking are NX_EINVAL",
     test_api_misuse_is_einval},
    {"qwen3_keeps_reasoning_after_the_last_query", "a multi-step tool flow keeps every post-query think block",
     test_qwen3_keeps_reasoning_after_the_last_query},
    {"qwen35_renders_tool_calls_as_parameters", "arguments print as Python str or JSON, strings raise",
     test_qwen35_renders_tool_calls_as_parameters},
    {"a_mid_conversation_system_message_is_qwen3_only", "qwen3 renders it, qwen3.5 raises its error",
     test_system_message_in_the_middle},
    {"qwen35_renders_content_parts_and_vision", "text parts, image and video placeholders, add_vision_id",
     test_qwen35_renders_content_parts_and_vision},
    {"a_nul_in_the_output_is_refused", "\\u0000 in content is an error, not a silently cut string",
     test_nul_in_content_is_refused},
    {"numbers_keep_python_spelling", "floats print as Python's repr, ints keep their digits",
     test_numbers_keep_python_spelling},
    {"allocation_failures_are_clean", "every failed allocation gives NX_ENOMEM and no output",
     test_allocation_failures_are_clean},
};

NX_TEST_MAIN(tests)
