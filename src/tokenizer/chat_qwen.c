/* chat_qwen.c — the Qwen3 and Qwen3.5 chat templates, rendered natively.
 *
 * Each renderer is the Jinja template transcribed statement by statement, in
 * template order, with the template line quoted above the C that does it. The
 * Python semantics (what `+`, `in`, `.strip('\n')`, `|tojson` do to each JSON
 * type, and the exceptions they raise) live in chat_py.c, so a branch here
 * reads like its line in the template. Because errors are sticky (chat.h), a
 * failed step turns the rest of the walk into no-ops; loops still stop early
 * on R->status only to save time.
 *
 * Evaluation order matters for which exception wins, so a line that evaluates
 * two operands that can both raise evaluates them into locals first, in the
 * order Python does.
 *
 * Sources: Qwen-Qwen3-0.6B.jinja and Qwen3.5-4B.jinja in
 * tests/data/chat/ (byte-identical to llama.cpp models/templates/). */
#include "tokenizer/chat.h"

#include <stdio.h>

#define S(lit) chat_lit(R, (lit))

/* ---- Qwen3 (Qwen/Qwen3-0.6B and the rest of the April 2025 family) ------- */

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* The assistant turn: reasoning from reasoning_content or split out of
 * content, kept only after the last real user query. */
static void qwen3_assistant(chat_rt *R, const chat_val *msg, const chat_val *role, int after_query,
                            int last) {
    /* {%- set content = message.content %} / {%- set reasoning_content = '' %} */
    chat_val *mc = chat_attr(R, msg, "content");
    chat_val *content = mc;
    chat_val *reasoning = S("");
    /* {%- if message.reasoning_content is defined and message.reasoning_content is not none %} */
    chat_val *rc = chat_attr(R, msg, "reasoning_content");
    if (chat_is_defined(rc) && !chat_is_none(rc)) {
        reasoning = rc;
    } else if (chat_in(R, "</think>", mc)) {
        /* content = message.content.split('</think>')[-1].lstrip('\n')
         * reasoning_content = message.content.split('</think>')[0].rstrip('\n')
         *                     .split('<think>')[-1].lstrip('\n') */
        content = chat_lstrip(R, chat_split_last(R, mc, "</think>"), "\n");
        reasoning = chat_lstrip(
            R, chat_split_last(R, chat_rstrip(R, chat_split_first(R, mc, "</think>"), "\n"), "<think>"),
            "\n");
    }
    /* {%- if loop.index0 > ns.last_query_index %}
     *     {%- if loop.last or (not loop.last and reasoning_content) %} */
    if (after_query && (last || chat_truthy(reasoning))) {
        /* '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n')
         *     + '\n</think>\n\n' + content.lstrip('\n') */
        chat_val *r = chat_strip(R, reasoning, "\n");
        chat_val *c = chat_lstrip(R, content, "\n");
        chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n<think>\n"), r, S("\n</think>\n\n"), c,
                              CHAT_END));
    } else {
        /* '<|im_start|>' + message.role + '\n' + content */
        chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n"), content, CHAT_END));
    }
    /* {%- if message.tool_calls %} {%- for tool_call in message.tool_calls %} */
    chat_val *tcs = chat_attr(R, msg, "tool_calls");
    if (chat_truthy(tcs)) {
        chat_val *calls;
        size_t nc;
        chat_iter(R, tcs, &calls, &nc);
        for (size_t j = 0; j < nc && R->status == NX_OK; j++) {
            const chat_val *tc = &calls[j];
            /* {%- if (loop.first and content) or (not loop.first) %} '\n' */
            if ((j == 0 && chat_truthy(content)) || j > 0) chat_emit_lit(R, "\n");
            /* {%- if tool_call.function %} {%- set tool_call = tool_call.function %} */
            chat_val *fn = chat_attr(R, tc, "function");
            if (chat_truthy(fn)) tc = fn;
            chat_emit_lit(R, "<tool_call>\n{\"name\": \"");
            chat_emit(R, chat_attr(R, tc, "name"));
            chat_emit_lit(R, "\", \"arguments\": ");
            /* {%- if tool_call.arguments is string %} raw {%- else %} |tojson */
            chat_val *args = chat_attr(R, tc, "arguments");
            chat_emit(R, chat_is_string(args) ? args : chat_tojson(R, args));
            chat_emit_lit(R, "}\n</tool_call>");
        }
    }
    chat_emit_lit(R, "<|im_end|>\n");
}

void chat_render_qwen3(chat_rt *R, const chat_vars *V) {
    const chat_val *messages = V->messages;
    long n = (long)messages->n;
    chat_val *m0 = chat_item(R, messages, 0);   /* Undefined when there are no messages */

    /* {%- if tools %}: the tools block, with the system message inside it. */
    if (chat_truthy(V->tools)) {
        chat_emit_lit(R, "<|im_start|>system\n");
        /* {%- if messages[0].role == 'system' %} {{- messages[0].content + '\n\n' }} */
        if (chat_eq_str(chat_attr(R, m0, "role"), "system"))
            chat_emit(R, chat_cat(R, chat_attr(R, m0, "content"), S("\n\n"), CHAT_END));
        chat_emit_lit(R, QWEN3_TOOLS_HEAD);
        chat_val *tools;
        size_t nt;
        chat_iter(R, V->tools, &tools, &nt);
        for (size_t k = 0; k < nt; k++) {
            chat_emit_lit(R, "\n");
            chat_emit(R, chat_tojson(R, &tools[k]));
        }
        chat_emit_lit(R, QWEN3_TOOLS_TAIL);
    } else if (chat_eq_str(chat_attr(R, m0, "role"), "system")) {
        /* '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' */
        chat_emit(R, chat_cat(R, S("<|im_start|>system\n"), chat_attr(R, m0, "content"), S("<|im_end|>\n"),
                              CHAT_END));
    }

    /* {%- for message in messages[::-1] %}: the last user message that is not a
     * wrapped tool response is the query; assistant turns after it keep their
     * reasoning. Without one, last_query_index stays at the last message. */
    int multi_step_tool = 1;
    long last_query_index = n - 1;
    for (long k = 0; k < n && R->status == NX_OK; k++) {
        long index = n - 1 - k;
        const chat_val *msg = &messages->items[index];
        if (!multi_step_tool || !chat_eq_str(chat_attr(R, msg, "role"), "user")) continue;
        /* not(message.content.startswith('<tool_response>') and message.content.endswith(...)) */
        chat_val *content = chat_attr(R, msg, "content");
        int wrapped = chat_startswith(R, content, "<tool_response>") &&
                      chat_endswith(R, content, "</tool_response>");
        if (R->status == NX_OK && !wrapped) {
            multi_step_tool = 0;
            last_query_index = index;
        }
    }

    for (long i = 0; i < n && R->status == NX_OK; i++) {
        const chat_val *msg = &messages->items[i];
        chat_val *role = chat_attr(R, msg, "role");
        int first = i == 0, last = i == n - 1;
        /* {%- if (message.role == "user") or (message.role == "system" and not loop.first) %} */
        if (chat_eq_str(role, "user") || (chat_eq_str(role, "system") && !first)) {
            chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n"), chat_attr(R, msg, "content"),
                                  S("<|im_end|>"), S("\n"), CHAT_END));
        } else if (chat_eq_str(role, "assistant")) {
            qwen3_assistant(R, msg, role, i > last_query_index, last);
        } else if (chat_eq_str(role, "tool")) {
            /* Consecutive tool results share one user turn. */
            if (first || !chat_eq_str(chat_attr(R, &messages->items[i - 1], "role"), "tool"))
                chat_emit_lit(R, "<|im_start|>user");
            chat_emit_lit(R, "\n<tool_response>\n");
            chat_emit(R, chat_attr(R, msg, "content"));   /* {{ }} prints str(content) */
            chat_emit_lit(R, "\n</tool_response>");
            if (last || !chat_eq_str(chat_attr(R, &messages->items[i + 1], "role"), "tool"))
                chat_emit_lit(R, "<|im_end|>\n");
        }
        /* any other role renders nothing */
    }

    /* The generation prompt: thinking is the model's default; only an explicit
     * enable_thinking=false pre-fills an empty think block. */
    if (chat_truthy(V->add_generation_prompt)) {
        chat_emit_lit(R, "<|im_start|>assistant\n");
        if (chat_is_defined(V->enable_thinking) && chat_is_false(V->enable_thinking))
            chat_emit_lit(R, "<think>\n\n</think>\n\n");
    }
}

/* ---- Qwen3.5 (Qwen/Qwen3.5-4B) -------------------------------------------- */

static const char QWEN35_TOOLS_HEAD[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> "
    "block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be "
    "specified\n- You may provide optional reasoning for your function call in natural language "
    "BEFORE the function call, but NOT after\n- If there is no function call available, answer the "
    "question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";

/* The template's namespaces image_count and video_count. */
typedef struct {
    long image_count, video_count;
} qwen35_counts;

/* {%- macro render_content(content, do_vision_count, is_system_content=false) %}
 * A string as is; a list of content parts as text and vision placeholders;
 * None or undefined as ''; anything else raises. Returns the macro's output. */
static chat_val *render_content(chat_rt *R, const chat_vars *V, qwen35_counts *cnt, const chat_val *content,
                                int do_vision_count, int is_system_content) {
    chat_capture cap;
    chat_capture_begin(R, &cap);
    if (chat_is_string(content)) {
        chat_emit(R, content);
    } else if (chat_is_iterable(content) && !chat_is_mapping(content)) {
        chat_val *parts;
        size_t np;
        chat_iter(R, content, &parts, &np);
        for (size_t k = 0; k < np && R->status == NX_OK; k++) {
            const chat_val *item = &parts[k];
            char label[48];
            /* {%- if 'image' in item or 'image_url' in item or item.type == 'image' %} */
            if (chat_in(R, "image", item) || chat_in(R, "image_url", item) ||
                chat_eq_str(chat_attr(R, item, "type"), "image")) {
                if (is_system_content) chat_template_error(R, "System message cannot contain images.");
                if (do_vision_count) cnt->image_count++;
                if (chat_truthy(V->add_vision_id)) {   /* 'Picture ' ~ image_count.value ~ ': ' */
                    snprintf(label, sizeof label, "Picture %ld: ", cnt->image_count);
                    chat_emit_lit(R, label);
                }
                chat_emit_lit(R, "<|vision_start|><|image_pad|><|vision_end|>");
            } else if (chat_in(R, "video", item) || chat_eq_str(chat_attr(R, item, "type"), "video")) {
                if (is_system_content) chat_template_error(R, "System message cannot contain videos.");
                if (do_vision_count) cnt->video_count++;
                if (chat_truthy(V->add_vision_id)) {
                    snprintf(label, sizeof label, "Video %ld: ", cnt->video_count);
                    chat_emit_lit(R, label);
                }
                chat_emit_lit(R, "<|vision_start|><|video_pad|><|vision_end|>");
            } else if (chat_in(R, "text", item)) {
                chat_emit(R, chat_attr(R, item, "text"));
            } else {
                chat_template_error(R, "Unexpected item type in content.");
            }
        }
    } else if (!(chat_is_none(content) || !chat_is_defined(content))) {
        chat_template_error(R, "Unexpected content type.");
    }
    return chat_capture_end(R, &cap);
}

/* render_content(...)|trim */
static chat_val *content_trimmed(chat_rt *R, const chat_vars *V, qwen35_counts *cnt, const chat_val *msg,
                                 int do_vision_count, int is_system_content) {
    chat_val *c = chat_attr(R, msg, "content");
    return chat_trim(R, render_content(R, V, cnt, c, do_vision_count, is_system_content));
}

/* One tool call in the XML-ish format: <function=name> and one
 * <parameter=key> block per argument. */
static void qwen35_tool_call(chat_rt *R, const chat_val *tc, int first, const chat_val *content) {
    /* {%- if tool_call.function is defined %} {%- set tool_call = tool_call.function %} */
    chat_val *fn = chat_attr(R, tc, "function");
    if (chat_is_defined(fn)) tc = fn;
    /* {%- if loop.first %} {%- if content|trim %} '\n\n<tool_call>...' */
    const char *open = !first ? "\n<tool_call>\n<function="
                       : chat_truthy(chat_trim(R, content)) ? "\n\n<tool_call>\n<function="
                                                            : "<tool_call>\n<function=";
    chat_emit(R, chat_cat(R, S(open), chat_attr(R, tc, "name"), S(">\n"), CHAT_END));
    /* {%- if tool_call.arguments is defined %} {%- for args_name, args_value in ...|items %} */
    chat_val *args = chat_attr(R, tc, "arguments");
    if (chat_is_defined(args)) {
        chat_val *keys, *vals;
        size_t na;
        chat_items(R, args, &keys, &vals, &na);
        for (size_t a = 0; a < na && R->status == NX_OK; a++) {
            chat_emit(R, chat_cat(R, S("<parameter="), &keys[a], S(">\n"), CHAT_END));
            /* mappings and non-string sequences as JSON, everything else as str() */
            const chat_val *v = &vals[a];
            int as_json = chat_is_mapping(v) || (chat_is_sequence(v) && !chat_is_string(v));
            chat_emit(R, as_json ? chat_tojson(R, v) : chat_string(R, v));
            chat_emit_lit(R, "\n</parameter>\n");
        }
    }
    chat_emit_lit(R, "</function>\n</tool_call>");
}

static void qwen35_assistant(chat_rt *R, const chat_val *msg, const chat_val *role, chat_val *content,
                             int after_query) {
    /* {%- if message.reasoning_content is string %} ... {%- else %} split on </think> */
    chat_val *reasoning = S("");
    chat_val *rc = chat_attr(R, msg, "reasoning_content");
    if (chat_is_string(rc)) {
        reasoning = rc;
    } else if (chat_in(R, "</think>", content)) {
        reasoning = chat_lstrip(
            R, chat_split_last(R, chat_rstrip(R, chat_split_first(R, content, "</think>"), "\n"), "<think>"),
            "\n");
        content = chat_lstrip(R, chat_split_last(R, content, "</think>"), "\n");
    }
    reasoning = chat_trim(R, reasoning);
    if (after_query)
        chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n<think>\n"), reasoning, S("\n</think>\n\n"),
                              content, CHAT_END));
    else
        chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n"), content, CHAT_END));
    /* {%- if message.tool_calls and message.tool_calls is iterable and ... is not mapping %} */
    chat_val *tcs = chat_attr(R, msg, "tool_calls");
    if (chat_truthy(tcs) && chat_is_iterable(tcs) && !chat_is_mapping(tcs)) {
        chat_val *calls;
        size_t nc;
        chat_iter(R, tcs, &calls, &nc);
        for (size_t j = 0; j < nc && R->status == NX_OK; j++) qwen35_tool_call(R, &calls[j], j == 0, content);
    }
    chat_emit_lit(R, "<|im_end|>\n");
}

void chat_render_qwen35(chat_rt *R, const chat_vars *V) {
    const chat_val *messages = V->messages;
    long n = (long)messages->n;
    qwen35_counts cnt = {0, 0};

    if (!chat_truthy(messages)) {
        chat_template_error(R, "No messages provided.");
        return;
    }
    chat_val *m0 = chat_item(R, messages, 0);

    /* {%- if tools and tools is iterable and tools is not mapping %} */
    chat_val *tools = V->tools;
    if (chat_truthy(tools) && chat_is_iterable(tools) && !chat_is_mapping(tools)) {
        chat_emit_lit(R, "<|im_start|>system\n");
        chat_emit_lit(R, QWEN35_TOOLS_HEAD);
        chat_val *list;
        size_t nt;
        chat_iter(R, tools, &list, &nt);
        for (size_t k = 0; k < nt; k++) {
            chat_emit_lit(R, "\n");
            chat_emit(R, chat_tojson(R, &list[k]));
        }
        chat_emit_lit(R, QWEN35_TOOLS_TAIL);
        if (chat_eq_str(chat_attr(R, m0, "role"), "system")) {
            chat_val *content = content_trimmed(R, V, &cnt, m0, 0, 1);
            if (chat_truthy(content)) chat_emit(R, chat_cat(R, S("\n\n"), content, CHAT_END));
        }
        chat_emit_lit(R, "<|im_end|>\n");
    } else if (chat_eq_str(chat_attr(R, m0, "role"), "system")) {
        chat_val *content = content_trimmed(R, V, &cnt, m0, 0, 1);
        chat_emit(R, chat_cat(R, S("<|im_start|>system\n"), content, S("<|im_end|>\n"), CHAT_END));
    }

    /* {%- for message in messages[::-1] %}: find the last real user query;
     * unlike Qwen3, having none is an error. */
    int multi_step_tool = 1;
    long last_query_index = n - 1;
    for (long k = 0; k < n && R->status == NX_OK; k++) {
        long index = n - 1 - k;
        const chat_val *msg = &messages->items[index];
        if (!multi_step_tool || !chat_eq_str(chat_attr(R, msg, "role"), "user")) continue;
        chat_val *content = content_trimmed(R, V, &cnt, msg, 0, 0);
        int wrapped = chat_startswith(R, content, "<tool_response>") &&
                      chat_endswith(R, content, "</tool_response>");
        if (R->status == NX_OK && !wrapped) {
            multi_step_tool = 0;
            last_query_index = index;
        }
    }
    if (multi_step_tool) chat_template_error(R, "No user query found in messages.");

    for (long i = 0; i < n && R->status == NX_OK; i++) {
        const chat_val *msg = &messages->items[i];
        /* Every message's content is rendered (and vision-counted) before its role is looked at. */
        chat_val *content = content_trimmed(R, V, &cnt, msg, 1, 0);
        chat_val *role = chat_attr(R, msg, "role");
        int last = i == n - 1;
        if (chat_eq_str(role, "system")) {
            if (i != 0) chat_template_error(R, "System message must be at the beginning.");
        } else if (chat_eq_str(role, "user")) {
            chat_emit(R, chat_cat(R, S("<|im_start|>"), role, S("\n"), content, S("<|im_end|>"), S("\n"), CHAT_END));
        } else if (chat_eq_str(role, "assistant")) {
            qwen35_assistant(R, msg, role, content, i > last_query_index);
        } else if (chat_eq_str(role, "tool")) {
            /* {%- if loop.previtem and loop.previtem.role != "tool" %}: a tool message
             * that opens the conversation has no previtem and so no user header. */
            if (i > 0 && !chat_eq_str(chat_attr(R, &messages->items[i - 1], "role"), "tool"))
                chat_emit_lit(R, "<|im_start|>user");
            chat_emit_lit(R, "\n<tool_response>\n");
            chat_emit(R, content);
            chat_emit_lit(R, "\n</tool_response>");
            if (last || !chat_eq_str(chat_attr(R, &messages->items[i + 1], "role"), "tool"))
                chat_emit_lit(R, "<|im_end|>\n");
        } else {
            chat_template_error(R, "Unexpected message role.");
        }
    }

    /* The generation prompt opens a think block unless enable_thinking is false. */
    if (chat_truthy(V->add_generation_prompt)) {
        chat_emit_lit(R, "<|im_start|>assistant\n");
        if (chat_is_defined(V->enable_thinking) && chat_is_false(V->enable_thinking))
            chat_emit_lit(R, "<think>\n\n</think>\n\n");
        else
            chat_emit_lit(R, "<think>\n");
    }
}
