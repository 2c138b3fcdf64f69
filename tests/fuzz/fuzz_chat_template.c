/* fuzz_chat_template.c — nx_chat_template_new on any template text, then
 * nx_chat_render of fixed, realistic requests with what it recognised.
 *
 * Input: the template text (not NUL-terminated: the API takes a length).
 *
 * Checked (include/nextn.h):
 *   - a failure leaves *out NULL and has a message naming the template
 *     ("fuzz.jinja"); the status is EUNSUPPORTED (an unknown template) or
 *     EFORMAT / EUNSUPPORTED (a bad nextn chat format file) or ENOMEM;
 *   - a Jinja template is recognised only if it is a known one up to
 *     whitespace Jinja ignores: its skeleton (below) must equal that of the
 *     known template of the variant it was taken for, tests/data/chat/
 *     Qwen-Qwen3-0.6B.jinja or Qwen3.5-4B.jinja. Fixed in 20f562b: "not
 *     loop.last" edited to "notloop.last" (an undefined name to Jinja) was
 *     still recognised and rendered as the original;
 *   - a recognised template has variant "qwen3" or "qwen3.5" and a thinking
 *     default of 0 or 1, and every fixed request (system, user, assistant
 *     with reasoning and tool calls, tool results, a tools list, vision
 *     parts; add_generation_prompt 0 and 1; enable_thinking -1, 0 and 1)
 *     renders to a string, or fails with NX_EINVAL, a message and no output;
 *     everything is freed (LeakSanitizer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "nextn.h"

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather for a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":1e1}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"noop\",\"parameters\":{}}}]";

/* Multi-line entries are parenthesised: each is one string. */
static const char *const k_messages[] = {
    /* a whole tool-using conversation */
    ("[{\"role\":\"system\",\"content\":\"You are helpful.\\nBe brief.\"},"
     "{\"role\":\"user\",\"content\":\"Weather in Paris and T\xc5\x8dky\xc5\x8d?\"},"
     "{\"role\":\"assistant\",\"content\":\"<think>\\nNeed tools.\\n</think>\\n\\nLet me check.\","
     "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
     "\"arguments\":{\"city\":\"Paris\",\"days\":2}}},"
     "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
     "\"arguments\":\"{\\\"city\\\": \\\"Tokyo\\\"}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"{\\\"temp\\\": 21.5}\"},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"rain\"},"
     "{\"role\":\"assistant\",\"content\":\"Paris 21.5C, Tokyo rain.\",\"reasoning_content\":\"summarise\"},"
     "{\"role\":\"user\",\"content\":\"Thanks! \xf0\x9f\x98\x80\"}]"),
    /* content parts with vision and text */
    ("[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"image\":\"x.png\"},{\"type\":\"text\",\"text\":\"What is this?\"},"
     "{\"type\":\"video\",\"video\":\"v.mp4\"}]},{\"role\":\"assistant\",\"content\":\"A cat.\"}]"),
    /* edge cases */
    "[]",
    "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"name\":\"noop\",\"arguments\":{}}]}]",
    "[{\"role\":\"user\",\"content\":\"<tool_response>x</tool_response>\"},{\"role\":\"weird\",\"content\":1}]",
};

/* ---- Skeletons ---------------------------------------------------------------
 * The text without its whitespace, except that a run of whitespace between two
 * word characters ([A-Za-z0-9_]) stays as one space. Jinja reads "not loop"
 * and "notloop" differently, and a recognised template stands for the known
 * one, so the two must have the same skeleton. The converse does not hold
 * (whitespace Jinja prints is not in it), so this is a necessary condition
 * only, computed without reference to the library's canonical form. */

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_word(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* Writes the skeleton of t[0..n) to out (room for n bytes); returns its length. */
static size_t skeleton(const char *t, size_t n, char *out) {
    size_t k = 0;
    int gap = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (is_space(c)) {
            gap = 1;
            continue;
        }
        if (gap && k > 0 && is_word((unsigned char)out[k - 1]) && is_word(c)) out[k++] = ' ';
        out[k++] = (char)c;
        gap = 0;
    }
    return k;
}

typedef struct {
    const char *variant, *file;
    char *skel;
    size_t len;
} known_template;

static known_template g_known[] = {
    {"qwen3", NX_TEST_DATA "/chat/Qwen-Qwen3-0.6B.jinja", NULL, 0},
    {"qwen3.5", NX_TEST_DATA "/chat/Qwen3.5-4B.jinja", NULL, 0},
};

static void free_known(void) {
    for (size_t i = 0; i < sizeof g_known / sizeof *g_known; i++) free(g_known[i].skel);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (size_t i = 0; i < sizeof g_known / sizeof *g_known; i++) {
        size_t n;
        char *text = (char *)fuzz_read_file(g_known[i].file, &n);
        g_known[i].skel = malloc(n ? n : 1);
        g_known[i].len = skeleton(text, n, g_known[i].skel);
        free(text);
    }
    atexit(free_known);
    return 0;
}

/* The nextn chat format (docs/chat-templates.md) is JSON, recognised by its
 * key: the first non-space character is '{' and "nextn_chat_format" occurs. */
static int is_nextn_format(const char *t, size_t n) {
    size_t i = 0;
    while (i < n && is_space((unsigned char)t[i])) i++;
    return i < n && t[i] == '{' && memmem(t, n, "\"nextn_chat_format\"", 19) != NULL;
}

static void check_recognised(const char *text, size_t n, const char *variant) {
    if (is_nextn_format(text, n)) return;
    const known_template *known = NULL;
    for (size_t i = 0; i < sizeof g_known / sizeof *g_known; i++)
        if (strcmp(g_known[i].variant, variant) == 0) known = &g_known[i];
    CHECKF(known != NULL, "recognised as %s, which has no known template here", variant);
    char *skel = malloc(n ? n : 1);
    size_t len = skeleton(text, n, skel);
    CHECKF(len == known->len && memcmp(skel, known->skel, len) == 0,
           "recognised as %s, but its text differs from %s beyond whitespace", variant, known->file);
    free(skel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    nx_chat_template *c = (nx_chat_template *)1;
    char err[1024] = "";
    nx_status st = nx_chat_template_new(text, size, "fuzz.jinja", &c, err, sizeof err);
    if (st != NX_OK) {
        CHECK(c == NULL);
        CHECKF(err[0] && strstr(err, "fuzz.jinja"), "the message does not name the template: '%s'", err);
        CHECKF(st == NX_EUNSUPPORTED || st == NX_EFORMAT || st == NX_ENOMEM, "status %s: %s", nx_status_str(st), err);
        return 0;
    }
    const char *v = nx_chat_template_variant(c);
    CHECKF(v && (!strcmp(v, "qwen3") || !strcmp(v, "qwen3.5")), "variant %s", v ? v : "(null)");
    check_recognised(text, size, v);
    int thinking = nx_chat_template_default_thinking(c);
    CHECKF(thinking == 0 || thinking == 1, "default thinking %d", thinking);
    for (size_t m = 0; m < sizeof k_messages / sizeof *k_messages; m++)
        for (int tools = 0; tools < 2; tools++)
            for (int gen = 0; gen < 2; gen++)
                for (int think = -1; think <= 1; think++) {
                    nx_chat_request req = {k_messages[m], tools ? k_tools : NULL, gen, think};
                    char *out = (char *)1;
                    err[0] = 0;
                    st = nx_chat_render(c, &req, &out, err, sizeof err);
                    if (st == NX_OK) {
                        CHECK(out != NULL && out != (char *)1);
                        nx_free(out);
                    } else {
                        CHECKF(out == NULL && err[0], "a failed render left output or no message (%s)",
                               nx_status_str(st));
                        CHECKF(st == NX_EINVAL, "render status %s: %s", nx_status_str(st), err);
                    }
                }
    nx_chat_template_free(c);
    return 0;
}
