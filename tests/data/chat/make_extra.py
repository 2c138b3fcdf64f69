#!/usr/bin/env python3
"""make_extra.py — renders hand-written conversations with Python Jinja2 to
chat-extra.jsonl, in the line format of chat-golden.jsonl.

The golden set covers the common paths; these conversations cover the branches
it does not: multi-step tool flows (ns.last_query_index), tool calls with and
without the "function" wrapper and with string, object or missing arguments,
content-part arrays with images and videos, null or missing content, odd
roles and value types, and the exceptions each template raises for them.

The environment is the one transformers' apply_chat_template builds (and the
golden README describes): ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, tojson = json.dumps(ensure_ascii=False), raise_exception ->
TemplateError. Errors are recorded as type(e).__name__ + ": " + str(e).

Usage (from the repository root): python3 tests/data/chat/make_extra.py
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
TEMPLATES = {
    "qwen3": ENV.from_string(open(os.path.join(HERE, "Qwen-Qwen3-0.6B.jinja")).read()),
    "qwen3.5": ENV.from_string(open(os.path.join(HERE, "Qwen3.5-4B.jinja")).read()),
}


def render(template, messages, tools, add_generation_prompt, enable_thinking, extra_kwargs):
    kw = dict(messages=messages, add_generation_prompt=add_generation_prompt)
    if tools is not None:
        kw["tools"] = tools
    if enable_thinking is not None:
        kw["enable_thinking"] = enable_thinking
    kw.update(extra_kwargs)
    try:
        return TEMPLATES[template].render(**kw), None
    except Exception as e:  # noqa: BLE001 - every exception is part of the reference
        return None, type(e).__name__ + ": " + str(e)


# ---- Building blocks -----------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                          "n": {"type": "integer", "default": 3}}}}}


def user(c):
    return {"role": "user", "content": c}


def asst(c, **kw):
    m = {"role": "assistant", "content": c}
    m.update(kw)
    return m


def tool(c):
    return {"role": "tool", "content": c}


def system(c):
    return {"role": "system", "content": c}


def call(name, args, wrapped=True):
    f = {"name": name, "arguments": args}
    return {"type": "function", "function": f} if wrapped else f


CASES = []


def case(name, messages, tools=None, gen=True, think=None, extra=None):
    CASES.append((name, messages, tools, gen, think, extra or {}))


# Multi-step tool flows: ns.last_query_index decides which assistant turns keep
# their reasoning.
flow = [
    user("Weather where the Eiffel Tower is?"),
    asst("", reasoning_content="Search first.", tool_calls=[call("search", {"q": "Eiffel Tower", "n": 1})]),
    tool("Paris, France"),
    asst("Found it.", reasoning_content="\nNow the weather.\n", tool_calls=[call("get_weather", {"city": "Paris"})]),
    tool("21C"),
    tool("sunny"),
    asst("It is 21C and sunny.", reasoning_content="Answer."),
]
case("multi-step-tool-flow", flow, [WEATHER, SEARCH], gen=False)
case("multi-step-tool-flow-open", flow[:-1], [WEATHER, SEARCH])
case("multi-step-tool-flow-second-query", flow + [user("And tomorrow?")], [WEATHER, SEARCH], think=False)
case("reasoning-dropped-before-last-query",
     [user("a"), asst("b", reasoning_content="r1"), user("c"), asst("<think>r2</think>d"), user("e"),
      asst("\n\nf", reasoning_content="  r3  ")], gen=False)
case("wrapped-tool-response-only-user", [user("<tool_response>\nx\n</tool_response>"), asst("ok")], gen=False)
case("wrapped-tool-response-after-query",
     [user("q"), asst("", tool_calls=[call("search", {"q": "x"})]), user("<tool_response>\nr\n</tool_response>")],
     [SEARCH])
case("system-only", [system("You are terse.")])
case("tool-first", [tool("orphan result"), user("hi")])
case("tool-last-with-gen", [user("hi"), asst("", tool_calls=[call("search", {"q": "hi"})]), tool("r1"), tool("r2")],
     [SEARCH], think=True)

# Tool-call shapes.
case("tool-call-unwrapped-object-args", [user("q"), asst("Calling.", tool_calls=[call("search", {"q": "x"}, False)])])
case("tool-call-string-args", [user("q"), asst("", tool_calls=[call("search", '{"q": "x"}')])])
case("tool-call-missing-args", [user("q"), asst("", tool_calls=[{"function": {"name": "now"}}])])
case("tool-call-null-args", [user("q"), asst("", tool_calls=[{"function": {"name": "now", "arguments": None}}])])
case("tool-calls-several", [user("q"), asst("Two calls.", tool_calls=[call("a", {"x": 1}), call("b", {"y": [1, 2.5]}),
                                                                      call("c", {})])], gen=False)
case("tool-calls-several-no-content", [user("q"), asst("", tool_calls=[call("a", {"x": 1}), call("b", {"y": 2})])])
case("tool-call-nested-args", [user("q"), asst("", tool_calls=[call("f", {"obj": {"k": [True, None, 1e-07]},
                                                                           "s": "multi\nline", "u": "é 😀",
                                                                           "big": 123456789012345678901234567890,
                                                                           "f": 1e22, "nf": -0.0})])])
case("tool-call-name-null", [user("q"), asst("", tool_calls=[{"function": {"name": None, "arguments": {}}}])])
case("tool-call-name-missing", [user("q"), asst("", tool_calls=[{"function": {"arguments": {"a": 1}}}])])
case("tool-call-function-null", [user("q"), asst("", tool_calls=[{"function": None, "name": "x", "arguments": {}}])])
case("tool-call-is-string", [user("q"), asst("", tool_calls=["search"])])
case("tool-calls-mapping", [user("q"), asst("x", tool_calls={"name": "f"})])
case("tool-calls-empty", [user("q"), asst("x", tool_calls=[])])
case("tool-calls-null", [user("q"), asst("x", tool_calls=None)])
case("assistant-content-null-with-tools", [user("q"), asst(None, tool_calls=[call("search", {"q": "x"})]),
                                           tool("r")], [SEARCH])
case("assistant-content-null-with-reasoning", [user("q"), asst(None, reasoning_content="hm",
                                                               tool_calls=[call("search", {"q": "x"})])])
case("assistant-content-missing", [user("q"), {"role": "assistant", "tool_calls": [call("search", {"q": "x"})]}])
case("assistant-content-missing-earlier", [user("q"), {"role": "assistant"}, user("again")])

# Reasoning inside content.
case("think-no-close", [user("q"), asst("<think>never closed")], gen=False)
case("think-twice", [user("q"), asst("<think>a</think>b</think>c")], gen=False)
case("think-with-reasoning-content", [user("q"), asst("<think>x</think>y", reasoning_content="rc")], gen=False)
case("think-only-close", [user("q"), asst("plan\n</think>\n\nanswer")], gen=False)
case("reasoning-number", [user("q"), asst("a", reasoning_content=42)], gen=False)
case("reasoning-number-earlier", [user("q"), asst("a", reasoning_content=42), user("q2")])
case("reasoning-list", [user("q"), asst("a", reasoning_content=["x"])], gen=False)
case("last-assistant-empty", [user("q"), asst("")], gen=False)
case("assistant-before-query-keeps-no-think", [system("s"), asst("<think>t</think>hello"), user("q")])

# Content parts, images and videos.
parts = [{"type": "text", "text": "Look at "}, {"type": "image", "image": "a.png"},
         {"type": "text", "text": " and "}, {"type": "video", "video": "b.mp4"},
         {"type": "image_url", "image_url": {"url": "data:x"}}]
case("content-parts-vision", [user(parts)])
case("content-parts-vision-ids", [user(parts), asst("ok"), user([{"type": "image"}, {"text": "again"}])],
     extra={"add_vision_id": True})
case("content-parts-text-only", [system([{"type": "text", "text": " sys "}]), user([{"type": "text", "text": "hi"}])])
case("content-parts-string-items", [user(["an image of", "text", "plain", "video"])])
case("content-parts-unknown-item", [user([{"type": "audio", "audio": "x"}])])
case("content-parts-number-item", [user([1])])
case("content-parts-null-item", [user([None])])
case("content-parts-list-item", [user([["image"]])])
case("content-parts-text-null", [user([{"type": "text", "text": None}])])
case("content-parts-text-number", [user([{"type": "text", "text": 2.5}])])
case("content-parts-assistant", [user("q"), asst([{"type": "text", "text": "<think>r</think>a"}])], gen=False)
case("content-parts-tool", [user("q"), asst("", tool_calls=[call("f", {})]), tool([{"type": "text", "text": "res"}])])
case("system-image", [system([{"type": "image"}]), user("q")])
case("system-video-with-tools", [system([{"type": "video"}]), user("q")], [SEARCH])
case("content-dict", [user({"type": "text", "text": "x"})])
case("content-number", [user(3)])
case("content-bool", [user(True)])
case("content-null-user", [user(None)])
case("content-missing-user", [{"role": "user"}])
case("system-null-content", [system(None), user("q")])
case("system-empty-with-tools", [system(""), user("q")], [WEATHER])
case("system-whitespace-with-tools", [system(" \n "), user("q")], [WEATHER])
case("system-list-content-with-tools", [system([{"type": "text", "text": "sys"}]), user("q")], [WEATHER])
case("tool-content-null", [user("q"), asst("", tool_calls=[call("f", {})]), tool(None)])
case("tool-content-list-repr", [user("q"), asst("", tool_calls=[call("f", {})]),
                                tool([{"type": "text", "text": "it's \"quoted\"\t\u00a0\u200d\x7f é"}, 1.5, None, True])])

# Roles and values.
case("unknown-role", [user("q"), {"role": "developer", "content": "d"}, asst("a")], gen=False)
case("extra-message-keys", [{"role": "user", "content": "q", "name": "bob", "id": 7}])
case("whitespace-trim-unicode", [user("\u3000\u00a0 padded \u2028\n"), asst(" \u2003answer\u205f")], gen=False)
case("empty-tools-list", [system("s"), user("q")], [])
case("tools-with-controls", [user("q")], [{"type": "function", "function": {
    "name": "ctl", "description": "a/b \u0001 \u001f \u007f \u2028 \\ \"q\" \b\f\r\t", "parameters": {}}}])
case("tools-numbers", [user("q")], [{"n": [0, -0, 1.0, -1.5, 1e-5, 1e16, 1e15, 123e-20, 3.14159, 2 ** 70]}])
case("tools-not-functions", [user("q")], ["just a string", 5, None, [1, 2], {"nested": {"x": True}}])
case("gen-false-think-false", [user("q")], gen=False, think=False)
case("gen-true-think-true", [system("s"), user("q")], think=True)
# Raw JSON text: json.loads keeps a repeated key's first position and last value.
case("duplicate-keys", '[{"content": "first", "role": "user", "content": "last"}]')
# Python semantics the renderers copy: iterating a string yields its characters;
# numbers and bools are not iterable; 0 and 0.0 are false; an attribute of a
# float, a dict's item called as a method, a dict added to a str.
case("tool-calls-string", [user("q"), asst("x", tool_calls="ab")])
case("tool-calls-int", [user("q"), asst("x", tool_calls=5)])
case("tool-calls-zero", [user("q"), asst("x", tool_calls=0)])
case("tool-calls-float", [user("q"), asst("x", tool_calls=1.5)])
case("tool-calls-float-zero", [user("q"), asst("x", tool_calls=0.0)])
case("tool-calls-true", [user("q"), asst("x", tool_calls=True)])
case("tool-call-is-float", [user("q"), asst("", tool_calls=[1.5])])
case("tools-string", [user("q")], "ab")
case("tools-int", [user("q")], 7)
case("user-content-dict-startswith", [user("q"), asst("a"), user({"startswith": "x"})])
case("system-dict-with-tools", [system({"a": 1}), user("q")], [WEATHER])
case("tool-content-repr-astral", [user("q"), asst("", tool_calls=[call("f", {})]),
                                  tool(["\U000e0001 \U0001f600", {"k": False}])])
# Raw JSON text: escapes json.loads reads (upper-case hex, 3-byte, surrogate pair, \/).
case("escapes", '[{"role": "user", "content": "\\u4E2D\\u6587 a\\/b \\uD83D\\uDE00 \\u00E9 \\u00e9"}]')
case("long-conversation", [system("sys")] + sum(([user("u%d" % k), asst("a%d" % k, reasoning_content="r%d" % k)]
                                                  for k in range(20)), []) + [user("last")])


def main():
    out_path = os.path.join(HERE, "chat-extra.jsonl")
    lines = []
    for name, messages, tools, gen, think, extra in CASES:
        raw = messages if isinstance(messages, str) else None
        if raw is not None:
            messages = json.loads(raw)
        for template in ("qwen3", "qwen3.5"):
            rendered, error = render(template, messages, tools, gen, think, extra)
            rec = {"id": "extra-" + name, "template": template, "messages": "@MESSAGES@" if raw else messages,
                   "tools": tools, "add_generation_prompt": gen, "enable_thinking": think,
                   "extra_kwargs": extra, "rendered": rendered, "error": error}
            line = json.dumps(rec, ensure_ascii=False)
            if raw is not None:
                line = line.replace('"@MESSAGES@"', raw)
            lines.append(line)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    n_err = sum(1 for line in lines if json.loads(line)["error"])
    print("%s: %d lines (%d errors), jinja2 %s, python %s" % (out_path, len(lines), n_err, jinja2.__version__,
                                                              sys.version.split()[0]))


if __name__ == "__main__":
    main()
