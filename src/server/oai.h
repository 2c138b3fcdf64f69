/* oai.h — the OpenAI wire format for `nextn serve`: request bodies in,
 * response bodies out, and the assembly of generated text in between.
 *
 * The module does no I/O and no threading; every object belongs to the one
 * request (one thread) that made it. Three parts, in the order a request
 * meets them:
 *
 *   1. oai_parse_request  a POST /v1/chat/completions or /v1/completions body
 *                         -> oai_request (validated, defaults filled in), or
 *                         a 400 with a message that names the field.
 *   2. oai_output         the server pushes decoded text pieces; the assembler
 *                         cuts at stop strings, splits <think> reasoning from
 *                         the answer and turns <tool_call> blocks into tool
 *                         calls. Each push returns what may be sent now.
 *   3. oai_*_json         the response bodies and stream chunks, exactly as
 *                         OpenAI spells them. SSE framing ("data: ...\n\n",
 *                         "data: [DONE]\n\n") belongs to the HTTP layer.
 *
 * Ownership: every char * these functions return is malloc'd and the caller
 * frees it with free(), except where a comment says the object owns it.
 * Text is UTF-8 throughout (nx_detok_stream never yields a partial sequence);
 * a builder given invalid UTF-8 returns NULL, as it does when out of memory.
 */
#ifndef NX_SERVER_OAI_H
#define NX_SERVER_OAI_H

#include <stddef.h>
#include <stdint.h>

#include "nextn.h"

/* ---- Request ------------------------------------------------------------ */

typedef struct {
    int chat;                 /* 1: POST /v1/chat/completions, 0: POST /v1/completions */
    char *model;              /* as sent, or NULL */
    char *messages_json;      /* chat: the "messages" array, re-serialized compactly (the
                                 chat renderer takes a JSON array string); content strings
                                 and content-part arrays are left as sent; role "developer"
                                 becomes "system", and a tool call's arguments sent as a
                                 string holding a JSON object become that object */
    int odd_arguments[2];     /* {message, call} of the first tool call whose arguments
                                 are a string not holding a JSON object (left as sent), or
                                 {-1, -1}; arguments of another type are refused */
    char *tools_json;         /* the "tools" array serialized; NULL when absent or null, and
                                 NULL too when tool_choice is "none" */
    char *prompt;             /* completions: "prompt" (a string, or an array of one string) */
    int32_t *prompt_ids;      /* completions: "prompt" as token ids (an array of integers, or an
                                 array of one such array); prompt is then NULL */
    int n_prompt_ids;
    int max_tokens;           /* max_completion_tokens, else max_tokens; -1 when absent */
    const char *max_tokens_name; /* the field max_tokens came from (static), for messages */
    nx_sampling sampling;     /* OpenAI's defaults: temperature 1, top_p 1, top_k 0 (off),
                                 min_p 0, presence/frequency_penalty 0, repetition_penalty 1;
                                 logit_bias points into bias */
    nx_logit_bias *bias;      /* "logit_bias" {"id": -100..100}, NULL when absent or empty
                                 (ids are checked against the vocabulary by the engine) */
    int seed_given;           /* "seed" was sent (sampling.seed is then (uint64_t)seed) */
    char **stop; int n_stop;  /* "stop": a string or an array of up to 4 non-empty strings */
    int stream, include_usage;/* "stream", stream_options.include_usage */
    int enable_thinking;      /* chat_template_kwargs.enable_thinking: -1 absent, 0, 1 */
    int one_call;             /* "parallel_tool_calls": false: at most one tool call */
    int logprobs;             /* chat "logprobs": true, or completions "logprobs": N */
    int top_logprobs;         /* alternatives a token, 0..NX_MAX_TOP_LOGPROBS: chat's
                                 "top_logprobs", completions' N */
    int echo;                 /* completions: "echo": the prompt's text (and with
                                 logprobs its tokens' entries) before the output;
                                 max_tokens may then be 0 (scoring only) */
} oai_request;

/* Parses and validates a request body of len bytes (chat: 1 for chat
 * completions). "logprobs" is a boolean for chat and a count for
 * completions; either endpoint takes either spelling, true being a count of
 * 0, and false -- or chat's 0 -- off; "top_logprobs" (0..20) sets the count
 * too and needs logprobs on. Returns 0, or -1 with *status the HTTP status (400, or 500
 * when out of memory), err holding a message that names the field, e.g.
 * "max_tokens must be a non-negative integer" or "invalid JSON at line 1
 * column 5: ...", and *param (param may be NULL) the top-level field at
 * fault, OpenAI's "param" (a static string; NULL when the body as a whole is
 * at fault). Unknown fields are ignored, and a field sent as null counts as
 * absent; fields that ask for what nextn does not do (best_of > 1, a
 * suffix, a response_format other than text, a tool_choice other than
 * "auto" or "none", the legacy functions / function_call) are refused. On
 * failure *out is left zeroed with nothing to free; on success the caller
 * frees it with oai_request_free. */
int oai_parse_request(const char *body, size_t len, int chat, oai_request *out, int *status, const char **param,
                      char *err, size_t errlen);

/* A request body's top-level JSON object (the caller json_decref()s it), or
 * NULL with err holding "invalid JSON at line L column C: ..." or "the
 * request body must be a JSON object": the check every endpoint that takes a
 * JSON body makes first, so they all word it alike. */
struct json_t *oai_load_body(const char *body, size_t len, char *err, size_t errlen);

/* Frees what r holds and zeroes it. NULL-safe and idempotent. */
void oai_request_free(oai_request *r);

/* {"error":{"message":M,"type":T,"param":P,"code":C}} as OpenAI sends it;
 * param and code are null when NULL. type is e.g. "invalid_request_error". */
char *oai_error_json(const char *message, const char *type, const char *param, const char *code);

/* Replaces every byte of s outside printable ASCII (0x20-0x7f) with '?': for
 * messages that quote what a client sent, which may be any bytes, before
 * they go into JSON. */
void oai_ascii_only(char *s);

/* ---- Output assembly ----------------------------------------------------
 *
 * Text flows through three stages, each of which holds back only what it
 * cannot decide yet, so the totals never depend on how the text was cut into
 * pushes (one push, or one byte per push, gives the same result):
 *
 *   stop strings -> reasoning / answer -> tool calls (answer only)
 *
 * Stop strings. They are matched against the raw generated text (inside
 * reasoning and tool calls too, as vLLM does). The first stop string to be
 * completed ends the output: it and everything after it are dropped, and the
 * output is finished at once (the delta of that push carries everything that
 * was still held). Of two stops completed by the same byte the longer wins.
 * A tail that may be the start of a stop string is held back, so a stream
 * never shows part of a stop string.
 *
 * Reasoning. Text between <think> and </think> is reasoning, the rest is
 * content. think_open = 1: the prompt ended with "<think>\n", so the output
 * starts in reasoning; 0: a "<think>" at the very start of the output opens
 * it; -1: no reasoning split at all (text completions). Newlines are trimmed
 * the way the Qwen3 / Qwen3.5 chat templates trim them when an assistant
 * turn is rendered again: reasoning is strip('\n')-ed and the content after
 * </think> is lstrip('\n')-ed. vLLM's qwen3 parser keeps them verbatim; we
 * drop them because they are the template's framing, not the answer, and a
 * client that sends the turn back gets exactly the prompt the model saw.
 * Without </think> everything after <think> is reasoning.
 *
 * Tool calls (parse_tools = 1). Text from "<tool_call>" to "</tool_call>" is
 * held and becomes a tool call instead of content, in either form:
 *   Qwen3.5  <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...
 *            </function>\n</tool_call>
 *            (one leading and one trailing newline of VALUE are dropped. The
 *            template writes every value as text, so the type comes from the
 *            request's tools (oai_output_tools), as vLLM's Qwen3-Coder parser
 *            reads it: a parameter declared "string" is the text as it is; one
 *            declared "number", "integer", "boolean", "object" or "array" is
 *            the VALUE read as JSON if that is of the type or null (a boolean
 *            also as True / False), else the text. Without a declared type a
 *            VALUE that parses as a JSON number, bool, object, array or null
 *            is that JSON, anything else is a string)
 *   Qwen3    <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 * "arguments" is the object serialized compactly, as OpenAI sends it.
 * Whitespace right before a tool call and after one is dropped. A block that
 * does not parse, or is still open at finish, is returned as content.
 */

typedef struct {
    int index;                /* 0, 1, 2, ... in the order the calls were made */
    char *id;                 /* "call_" + 24 alphanumerics */
    char *name;
    char *arguments;          /* a JSON object, serialized; a string the model gave instead, as it was */
} oai_tool_call;

/* What one push or finish produced. Every pointer is owned by the assembler
 * and valid until its next call. reasoning and content are NUL-terminated
 * (empty when there is nothing). calls are the tool calls completed in this
 * step (NULL when n_calls is 0). */
typedef struct {
    char *reasoning; size_t reasoning_len;  /* emit as "reasoning_content" */
    char *content;   size_t content_len;    /* emit as "content" (or "text") */
    int n_calls;
    oai_tool_call *calls;
    int stopped;              /* a stop string was found: end generation (stays set) */
} oai_delta;

typedef struct oai_output oai_output;

/* stop[0..n_stop) are copied (empty strings are ignored). NULL when out of
 * memory. Free with oai_output_free (NULL-safe). */
oai_output *oai_output_new(char *const *stop, int n_stop, int think_open, int parse_tools);
void oai_output_free(oai_output *o);

/* Tool call ids are "call_" + 24 alphanumerics drawn from (seed, call index):
 * deterministic, so give each request its own seed. The default seed is 0. */
void oai_output_seed_ids(oai_output *o, uint64_t seed);

/* At most one tool call (OpenAI's parallel_tool_calls: false): the text of
 * later <tool_call> blocks is dropped, not turned into calls or content. */
void oai_output_one_call(oai_output *o);

/* The request's "tools" array (oai_request.tools_json; NULL: none): a
 * Qwen3.5 parameter value is typed by its parameter's declared type there
 * (see Tool calls above). Returns 0, or -1 when tools_json does not parse
 * (out of memory). */
int oai_output_tools(oai_output *o, const char *tools_json);

/* Text that precedes the output as it is (an echoed prompt): added to the
 * content and to *d without passing the stages -- no stop string, reasoning
 * or tool call is looked for in it. Call it before the first push. Returns 0,
 * or -1 when out of memory. */
int oai_output_echo(oai_output *o, const char *text, size_t len, oai_delta *d);
/* Feeds len bytes of generated text and fills *d with what can be sent now.
 * After a stop string (d->stopped) further pushes are ignored. Returns 0, or
 * -1 when out of memory (sticky: the output is then incomplete and *d empty). */
int oai_output_push(oai_output *o, const char *text, size_t len, oai_delta *d);
/* End of generation: flushes everything still held into *d. Later calls give
 * an empty delta. Returns 0, or -1 when out of memory. */
int oai_output_finish(oai_output *o, oai_delta *d);

/* 1 when the delta holds nothing to send. */
int oai_delta_empty(const oai_delta *d);

/* Accumulated totals, for a non-stream response. Owned by the assembler. */
int oai_output_n_calls(const oai_output *o);            /* tool calls so far */
const char *oai_output_content(const oai_output *o);    /* never NULL ("" when none) */
const char *oai_output_reasoning(const oai_output *o);  /* NULL when there was none */
/* OpenAI's "tool_calls" array [{"id","type":"function","function":{"name","arguments"}}];
 * caller frees; NULL when there are no calls. */
char *oai_output_tool_calls_json(const oai_output *o);

/* The finish_reason: "tool_calls" when there were tool calls, else "length"
 * when hit_limit (max_tokens or the context ran out) and no stop string ended
 * the output, else "stop". The string is static. */
const char *oai_finish_reason(const oai_output *o, int hit_limit);

/* ---- Response JSON ------------------------------------------------------
 *
 * Builders for exactly what OpenAI sends. Every one returns a malloc'd,
 * compact JSON object the caller frees, or NULL when out of memory. */

typedef struct {
    const char *id;           /* "chatcmpl-..." or "cmpl-..." (oai_make_id); the same for
                                 every chunk of one stream */
    long long created;        /* Unix time in seconds */
    const char *model;        /* echoed as "model" (null when NULL) */
    int include_usage;        /* stream only: every chunk carries "usage":null, and the
                                 stream ends with oai_usage_chunk_json */
} oai_meta;

typedef struct {
    int prompt_tokens, completion_tokens;   /* total_tokens is their sum */
    int cached_tokens;        /* of the prompt's, read from the prefix cache: sent as
                                 prompt_tokens_details.cached_tokens, as OpenAI does */
} oai_usage;

/* The log-probabilities of a run of output tokens: choices[0].logprobs of a
 * response or a chunk. Chat: {"content":[{"token","logprob","bytes",
 * "top_logprobs":[{"token","logprob","bytes"}, ...]}, ...],"refusal":null};
 * completions: {"tokens","token_logprobs","top_logprobs" (an object per
 * token: the n_top alternatives and the chosen token),"text_offset"}. A
 * token's text is its bytes as UTF-8 (a piece of a character becomes
 * U+FFFD in chat, where "bytes" has the exact bytes, and "bytes:\xNN..." in
 * completions, as OpenAI spells it); a logprob that is not finite is sent
 * as -9999.0, as OpenAI does for tokens it rates impossible. An entry with
 * n_top < 0 has no logprob -- an echoed prompt's first token, which nothing
 * precedes -- and completions send null for its logprob and its top. A
 * builder given NULL (or no tokenizer) sends "logprobs": null. */
typedef struct {
    const nx_tokenizer *tok;
    const nx_token_logprob *lp;   /* [n] */
    int n;
    const int *text_offset;       /* completions: [n] each token's offset in the
                                     output text, in characters */
} oai_logprobs;

/* Writes prefix + 24 alphanumerics drawn from seed into out (NUL-terminated,
 * truncated to outlen). E.g. oai_make_id(id, sizeof id, "chatcmpl-", seed). */
void oai_make_id(char *out, size_t outlen, const char *prefix, uint64_t seed);

/* Non-stream chat completion ("object":"chat.completion") from the totals of o:
 * message {"role":"assistant","content":C,"reasoning_content":R (only when
 * there is reasoning),"tool_calls":[...] (only when there are calls)};
 * content is null when there are tool calls and no content. */
char *oai_chat_completion_json(const oai_meta *m, const oai_output *o, const char *finish_reason, oai_usage u,
                               const oai_logprobs *lp);

/* One stream chunk ("object":"chat.completion.chunk"). first = 1 marks the
 * first chunk: its delta has "role":"assistant" and "content" ("" unless d has
 * content). d (may be NULL) adds "reasoning_content", "content" and
 * "tool_calls" ([{"index","id","type":"function","function":{"name","arguments"}}])
 * for what it holds. finish_reason NULL gives null; the last chunk is
 * oai_chat_chunk_json(m, NULL, 0, reason), an empty delta {}. */
char *oai_chat_chunk_json(const oai_meta *m, const oai_delta *d, int first, const char *finish_reason,
                          const oai_logprobs *lp);

/* Non-stream text completion ("object":"text_completion"), choices[0].text
 * from oai_output_content(o). */
char *oai_text_completion_json(const oai_meta *m, const oai_output *o, const char *finish_reason, oai_usage u,
                               const oai_logprobs *lp);

/* One text-completion stream chunk: choices[0].text is d's content ("" when
 * d is NULL). */
char *oai_text_chunk_json(const oai_meta *m, const oai_delta *d, const char *finish_reason, const oai_logprobs *lp);

/* The extra last chunk of a stream with include_usage: "choices":[] and
 * "usage":{...}. chat selects the object name ("chat.completion.chunk" or
 * "text_completion"). */
char *oai_usage_chunk_json(const oai_meta *m, int chat, oai_usage u);

#endif
