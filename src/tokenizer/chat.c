/* chat.c — the public chat-template API (nextn.h, "Chat template"):
 * recognising a template, the documented nextn format, and one render from
 * JSON request to text. The renderers are in chat_qwen.c; the value model and
 * Python semantics in chat_json.c and chat_py.c (see chat.h).
 *
 * A template is recognised by its text, not by a name: the text is reduced to
 * a canonical form that ignores the whitespace Jinja would not print, and that
 * form's hash must equal the hash of a known template. Anything else, even a
 * small edit, is "unknown": rendering it natively could silently differ from
 * what the checkpoint's own template does. Such a checkpoint can still be used
 * with a small JSON file that names the renderer (docs/chat-templates.md). */
#include "tokenizer/chat.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

struct nx_chat_template {
    const char *variant;                             /* "qwen3" or "qwen3.5"              */
    int default_thinking;                            /* 1: thinks when not told otherwise */
    void (*render)(chat_rt *R, const chat_vars *v);
};

/* ---- Known templates -------------------------------------------------------
 * The canonical form keeps the text of every tag ({{ }}, {% %}, {# #}) except
 * whitespace outside string literals (a run of it between two word
 * characters stays, as one space), and drops whitespace between tags only
 * where Jinja drops it too: before a tag that opens with '-' ("{%-", "{{-"),
 * and the newlines that may end the file (trim_blocks / the final newline).
 * Every tag of the known templates opens with '-', so re-indenting, CRLF line
 * ends or a trailing newline do not change the form, while any whitespace
 * Jinja would print does. */

typedef struct {
    const char *variant;
    uint64_t hash;        /* FNV-1a 64 of the canonical form */
    size_t len;           /* its length in bytes             */
    int default_thinking;
    void (*render)(chat_rt *R, const chat_vars *v);
} chat_known;

static const chat_known k_known[] = {
    /* tests/data/chat/Qwen-Qwen3-0.6B.jinja: the generation prompt adds nothing unless
     * enable_thinking is false, so the model thinks by default. */
    {"qwen3", 0xb0ecc192d1c41426ULL, 3019, 1, chat_render_qwen3},
    /* tests/data/chat/Qwen3.5-4B.jinja: the generation prompt opens "<think>\n" unless
     * enable_thinking is false. */
    {"qwen3.5", 0xf1bebfacdbe2f2e4ULL, 5640, 1, chat_render_qwen35},
};

typedef struct {
    uint64_t h;
    size_t n;
} canon_hash;

static void ch_put(canon_hash *c, char ch) {
    c->h ^= (unsigned char)ch;
    c->h *= 0x100000001b3ULL;   /* FNV-1a 64 prime */
    c->n++;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static canon_hash canonical_hash(const char *t, size_t n) {
    canon_hash c = {0xcbf29ce484222325ULL, 0};   /* FNV-1a 64 offset basis */
    size_t i = 0;
    while (i < n) {
        /* Text between tags. */
        if (is_ws(t[i])) {
            size_t j = i;
            while (j < n && is_ws(t[j])) j++;
            int before_strip_tag = j + 2 < n && t[j] == '{' && (t[j + 1] == '{' || t[j + 1] == '%' ||
                                                                 t[j + 1] == '#') && t[j + 2] == '-';
            int trailing_newlines = 0;
            if (j == n) {
                trailing_newlines = 1;
                int nl = 0;
                for (size_t k = i; k < j; k++) {
                    if (t[k] == '\n') nl++;
                    else if (t[k] != '\r') trailing_newlines = 0;
                }
                if (nl > 2) trailing_newlines = 0;
            }
            if (!before_strip_tag && !trailing_newlines)
                for (size_t k = i; k < j; k++) ch_put(&c, t[k]);
            i = j;
            continue;
        }
        if (!(t[i] == '{' && i + 1 < n && (t[i + 1] == '{' || t[i + 1] == '%' || t[i + 1] == '#'))) {
            ch_put(&c, t[i++]);
            continue;
        }
        /* A tag: up to its closing delimiter, whitespace dropped outside string
         * literals (comments have no literals). */
        char close = t[i + 1] == '{' ? '}' : t[i + 1];
        int comment = close == '#';
        ch_put(&c, t[i]);
        ch_put(&c, t[i + 1]);
        i += 2;
        char quote = 0, last = 0;   /* last: the last character kept */
        int gap = 0;                /* whitespace since then */
        while (i < n) {
            char ch = t[i];
            if (quote) {
                ch_put(&c, ch);
                if (ch == '\\' && i + 1 < n) ch_put(&c, t[++i]);
                else if (ch == quote) quote = 0;
                i++;
                continue;
            }
            if (ch == close && i + 1 < n && t[i + 1] == '}') {
                ch_put(&c, ch);
                ch_put(&c, '}');
                i += 2;
                break;
            }
            if (!comment && (ch == '\'' || ch == '"')) quote = ch;
            if (is_ws(ch)) {
                gap = 1;
            } else {
                /* a space between two words is kept as one: "not loop" and
                 * "notloop" are different templates */
                if (gap && is_word(last) && is_word(ch)) ch_put(&c, ' ');
                ch_put(&c, ch);
                last = ch, gap = 0;
            }
            i++;
        }
    }
    return c;
}

/* ---- The nextn chat format -------------------------------------------------
 * {"nextn_chat_format": 1, "base": "qwen3" | "qwen3.5",
 *  "default_thinking": true | false, "comment": "..."}  (last two optional) */

static int is_nextn_format(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && is_ws(text[i])) i++;
    if (i == len || text[i] != '{') return 0;
    static const char key[] = "\"nextn_chat_format\"";
    for (size_t k = i; k + sizeof key - 1 <= len; k++)
        if (memcmp(text + k, key, sizeof key - 1) == 0) return 1;
    return 0;
}

static nx_status parse_nextn_format(const char *text, size_t len, const char *name, nx_chat_template *c,
                                    char *err, size_t errlen) {
    chat_arena arena = {0};
    chat_val *root;
    nx_status st = chat_json_parse(&arena, text, len, &root, err, errlen);
    if (st != NX_OK) {
        nx_err_prefix(err, errlen, "%s: nextn chat format", name);
        chat_arena_free(&arena);
        return st;
    }
    st = NX_OK;
    const chat_val *ver = chat_dict_get(root, "nextn_chat_format");
    const chat_val *base = chat_dict_get(root, "base");
    const chat_val *think = chat_dict_get(root, "default_thinking");
    if (root->kind != CV_DICT || !ver) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: nextn chat format: not a JSON object", name);
    } else if (ver->kind != CV_INT || strcmp(ver->s, "1") != 0) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED,
                     "%s: nextn_chat_format %.*s is not supported (this build reads version 1)", name,
                     (int)ver->src_len, text + ver->src_off);
    } else if (!base || base->kind != CV_STR) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: nextn chat format: \"base\" must be a string, "
                     "\"qwen3\" or \"qwen3.5\"", name);
    } else if (think && think->kind != CV_BOOL) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: nextn chat format: \"default_thinking\" must be true or false",
                     name);
    }
    for (size_t k = 0; st == NX_OK && k < root->n; k++) {
        const chat_val *key = &root->keys[k];
        if (!chat_eq_str(key, "nextn_chat_format") && !chat_eq_str(key, "base") &&
            !chat_eq_str(key, "default_thinking") && !chat_eq_str(key, "comment"))
            st = nx_fail(err, errlen, NX_EFORMAT, "%s: nextn chat format: unknown field \"%.*s\"", name,
                         (int)key->len, key->s);
    }
    const chat_known *known = NULL;
    for (size_t k = 0; st == NX_OK && k < sizeof k_known / sizeof k_known[0]; k++)
        if (chat_eq_str(base, k_known[k].variant)) known = &k_known[k];
    if (st == NX_OK && !known)
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: nextn chat format: unknown base \"%.*s\" "
                     "(known: \"qwen3\", \"qwen3.5\")", name, (int)base->len, base->s);
    if (st == NX_OK) {
        c->variant = known->variant;
        c->render = known->render;
        c->default_thinking = think ? think->b : known->default_thinking;
    }
    chat_arena_free(&arena);
    return st;
}

/* ---- Template objects ------------------------------------------------------
 * A template is only its renderer and thinking default: nothing of the text is
 * kept, and it is immutable, so one may serve several threads. */

nx_status nx_chat_template_new(const char *text, size_t len, const char *name, nx_chat_template **out,
                               char *err, size_t errlen) {
    if (!out) return nx_fail(err, errlen, NX_EINVAL, "nx_chat_template_new: out is NULL");
    *out = NULL;
    if (!name) name = "chat template";
    if (!text) return nx_fail(err, errlen, NX_EINVAL, "%s: template text is NULL", name);
    nx_chat_template tmp = {0};
    if (is_nextn_format(text, len)) {
        nx_status st = parse_nextn_format(text, len, name, &tmp, err, errlen);
        if (st != NX_OK) return st;
    } else {
        canon_hash h = canonical_hash(text, len);
        for (size_t k = 0; k < sizeof k_known / sizeof k_known[0]; k++) {
            if (h.h == k_known[k].hash && h.n == k_known[k].len) {
                tmp.variant = k_known[k].variant;
                tmp.default_thinking = k_known[k].default_thinking;
                tmp.render = k_known[k].render;
            }
        }
        if (!tmp.variant)
            return nx_fail(err, errlen, NX_EUNSUPPORTED,
                           "%s: unknown chat template (nextn renders the Qwen3 and Qwen3.5 templates "
                           "natively and matches them by text); give a chat template file with a known "
                           "Qwen template or one in the nextn chat format (docs/chat-templates.md; the "
                           "CLI's --chat-template FILE)",
                           name);
    }
    nx_chat_template *c = nx_alloc(sizeof *c);
    if (!c) return nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", name);
    *c = tmp;
    *out = c;
    return NX_OK;
}

void nx_chat_template_free(nx_chat_template *c) { nx_free(c); }

const char *nx_chat_template_variant(const nx_chat_template *c) { return c ? c->variant : NULL; }

int nx_chat_template_default_thinking(const nx_chat_template *c) { return c ? c->default_thinking : 0; }

/* ---- Rendering --------------------------------------------------------------
 * Parse and check the request (malformed JSON is NX_EFORMAT), bind the
 * template variables, run the renderer, and hand over its output buffer. */

/* Variables that were not passed: Jinja2 Undefineds named like Jinja names them. */
static chat_val k_undef_tools = {.kind = CV_UNDEF, .s = "'tools' is undefined", .len = 20};
static chat_val k_undef_thinking = {.kind = CV_UNDEF, .s = "'enable_thinking' is undefined", .len = 30};
static chat_val k_undef_vision = {.kind = CV_UNDEF, .s = "'add_vision_id' is undefined", .len = 28};

static const char *kind_name(chat_kind k) {
    switch (k) {
    case CV_NONE: return "null";
    case CV_BOOL: return "a boolean";
    case CV_INT:
    case CV_FLOAT: return "a number";
    case CV_STR: return "a string";
    case CV_LIST: return "an array";
    case CV_DICT: return "an object";
    default: return "undefined";
    }
}

/* messages must be an array of objects, each with a string "role". */
static nx_status check_messages(const chat_val *m, char *err, size_t errlen) {
    if (m->kind != CV_LIST)
        return nx_fail(err, errlen, NX_EFORMAT, "messages_json: expected an array of messages, got %s",
                       kind_name(m->kind));
    for (size_t k = 0; k < m->n; k++) {
        const chat_val *msg = &m->items[k];
        if (msg->kind != CV_DICT)
            return nx_fail(err, errlen, NX_EFORMAT, "messages_json: message %zu is %s, not an object", k,
                           kind_name(msg->kind));
        const chat_val *role = chat_dict_get(msg, "role");
        if (!role) return nx_fail(err, errlen, NX_EFORMAT, "messages_json: message %zu has no \"role\"", k);
        if (role->kind != CV_STR)
            return nx_fail(err, errlen, NX_EFORMAT, "messages_json: message %zu: \"role\" is %s, not a string",
                           k, kind_name(role->kind));
    }
    return NX_OK;
}

static nx_status parse_field(chat_arena *a, const char *field, const char *json, chat_val **out, char *err,
                             size_t errlen) {
    nx_status st = chat_json_parse(a, json, strlen(json), out, err, errlen);
    if (st != NX_OK) nx_err_prefix(err, errlen, "%s", field);
    return st;
}

nx_status chat_render_ex(const nx_chat_template *c, const nx_chat_request *req, const char *extra_kwargs_json,
                         char **out, char *err, size_t errlen) {
    if (!out) return nx_fail(err, errlen, NX_EINVAL, "nx_chat_render: out is NULL");
    *out = NULL;
    if (!c || !req) return nx_fail(err, errlen, NX_EINVAL, "nx_chat_render: template or request is NULL");
    if (!req->messages_json) return nx_fail(err, errlen, NX_EINVAL, "nx_chat_render: messages_json is NULL");
    if (req->enable_thinking < -1 || req->enable_thinking > 1)
        return nx_fail(err, errlen, NX_EINVAL, "nx_chat_render: enable_thinking is %d (use -1, 0 or 1)",
                       req->enable_thinking);

    chat_arena arena = {0};
    chat_val *messages, *tools = &k_undef_tools, *kwargs = NULL;
    nx_status st = parse_field(&arena, "messages_json", req->messages_json, &messages, err, errlen);
    if (st == NX_OK) st = check_messages(messages, err, errlen);
    if (st == NX_OK && req->tools_json) st = parse_field(&arena, "tools_json", req->tools_json, &tools, err, errlen);
    if (st == NX_OK && extra_kwargs_json) {
        st = parse_field(&arena, "extra_kwargs", extra_kwargs_json, &kwargs, err, errlen);
        if (st == NX_OK && kwargs->kind != CV_DICT)
            st = nx_fail(err, errlen, NX_EFORMAT, "extra_kwargs: expected an object, got %s",
                         kind_name(kwargs->kind));
    }
    if (st != NX_OK) {
        chat_arena_free(&arena);
        return st;
    }

    /* Not passed means undefined, which both templates read as "thinking on";
     * a nextn-format file with default_thinking false turns that into false. */
    chat_vars v = {
        .messages = messages,
        .tools = tools,
        .add_generation_prompt = chat_bool_v(req->add_generation_prompt != 0),
        .enable_thinking = req->enable_thinking >= 0 ? chat_bool_v(req->enable_thinking)
                           : c->default_thinking     ? &k_undef_thinking
                                                     : chat_bool_v(0),
        .add_vision_id = &k_undef_vision,
    };
    chat_val *kw;
    if ((kw = chat_dict_get(kwargs, "add_generation_prompt"))) v.add_generation_prompt = kw;
    if ((kw = chat_dict_get(kwargs, "enable_thinking"))) v.enable_thinking = kw;
    if ((kw = chat_dict_get(kwargs, "add_vision_id"))) v.add_vision_id = kw;

    chat_rt R = {.arena = &arena, .status = NX_OK};
    c->render(&R, &v);
    if (R.status == NX_OK && R.out && memchr(R.out, 0, R.len))
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: the rendered text contains a NUL character "
                     "(\\u0000 in the input), which a C string cannot carry", c->variant);
    else if (R.status != NX_OK)
        st = nx_fail(err, errlen, R.status, "%s", R.msg);
    if (st == NX_OK && !R.out) {
        R.out = nx_alloc(1);
        if (R.out) R.out[0] = 0;
        else st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", c->variant);
    }
    chat_arena_free(&arena);
    if (st != NX_OK) {
        nx_free(R.out);
        return st;
    }
    *out = R.out;
    return NX_OK;
}

nx_status nx_chat_render(const nx_chat_template *c, const nx_chat_request *req, char **out, char *err,
                         size_t errlen) {
    return chat_render_ex(c, req, NULL, out, err, errlen);
}
