"""Drive a running `gauge serve` with the real `openai` Python client.

Usage: python3 openai_client.py BASE_URL MODEL    (BASE_URL like http://127.0.0.1:PORT/v1)

Run by tests/openai_client.rs; exits non-zero on the first failed check.
"""

import json
import sys

import openai
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


messages = [{"role": "user", "content": "Name three colours."}]

# /v1/models
ids = [m.id for m in client.models.list().data]
check(ids == [model], f"models.list: {ids}")

# chat
r = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
c = r.choices[0]
check(isinstance(c.message.content, str) and c.message.role == "assistant", f"chat message: {c}")
check(c.finish_reason in ("stop", "length"), f"finish_reason: {c.finish_reason}")
check(r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0, f"usage: {r.usage}")
check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")

# legacy completion with logprobs
r = client.completions.create(
    model=model,
    prompt="The capital of France is",
    max_tokens=4,
    temperature=0,
    logprobs=2,
    extra_body={"ignore_eos": True},
)
lp = r.choices[0].logprobs
check(len(lp.tokens) == 4 and len(lp.token_logprobs) == 4, f"completion logprobs: {lp}")
check(all(len(t) <= 2 for t in lp.top_logprobs), "top_logprobs size")
check("".join(lp.tokens) == r.choices[0].text, f"tokens {lp.tokens} vs text {r.choices[0].text!r}")
check(r.usage.completion_tokens == 4, f"completion usage: {r.usage}")

# streaming chat, with the usage chunk
pieces, finish, usage = [], None, None
stream = client.chat.completions.create(
    model=model,
    messages=messages,
    max_tokens=10,
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"ignore_eos": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for ch in chunk.choices:
        if ch.delta.content:
            pieces.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
check(len(pieces) > 0, "stream produced text")
check(finish == "length", f"stream finish_reason: {finish}")
check(usage is not None and usage.completion_tokens == 10, f"stream usage: {usage}")

# streaming legacy completion
text = "".join(
    ch.choices[0].text
    for ch in client.completions.create(
        model=model,
        prompt="Once upon a time",
        max_tokens=5,
        stream=True,
        temperature=0,
    )
    if ch.choices
)
check(isinstance(text, str) and len(text) > 0, f"completion stream text {text!r}")

# chat logprobs
r = client.chat.completions.create(
    model=model,
    messages=messages,
    max_tokens=3,
    logprobs=True,
    top_logprobs=3,
)
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens, "one logprob entry per token")
for t in content:
    check(len(t.top_logprobs) == 3, f"top_logprobs: {t.top_logprobs}")
    check(t.logprob <= 0.0, f"logprob {t.logprob}")
    tops = [x.logprob for x in t.top_logprobs]
    check(tops == sorted(tops, reverse=True), f"sorted alternatives {tops}")

# a per-request normalized repeat penalty, echoed back
r = client.chat.completions.create(
    model=model,
    messages=messages,
    max_tokens=8,
    seed=7,
    extra_body={"repeat_penalty": 1.5, "repeat_penalty_mode": "normalized", "echo_chain": True},
)
g = r.model_extra["gauge"]
check(g["params"]["repeat_penalty_mode"] == "normalized", f"echoed params: {g['params']}")
check(g["chain"].startswith("logits -> penalties -> "), f"chain: {g['chain']}")
check(g["seed"] == 7, f"seed: {g['seed']}")

# an invalid field comes back as a 400 naming it
try:
    client.chat.completions.create(model=model, messages=messages, max_tokens=4, top_p=1.5)
    check(False, "top_p = 1.5 was accepted")
except openai.BadRequestError as e:
    check(e.status_code == 400, f"status {e.status_code}")
    check(e.param == "top_p", f"param {e.param!r}")
    check("top_p" in str(e) and "[0, 1]" in str(e), f"message {e}")

try:
    client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=4,
        extra_body={"repeat_penalty_mode": "sideways"},
    )
    check(False, "repeat_penalty_mode = sideways was accepted")
except openai.BadRequestError as e:
    check(e.param == "repeat_penalty_mode", f"param {e.param!r}")

# tools: a named tool_choice, parsed by the client into `tool_calls`, streamed and not
weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
named = {"type": "function", "function": {"name": "get_weather"}}
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Weather in Lisbon?"}],
    tools=[weather],
    tool_choice=named,
    seed=5,
)
c = r.choices[0]
check(c.finish_reason == "tool_calls", f"tool finish_reason: {c.finish_reason}")
check(c.message.content is None, f"tool message content: {c.message.content!r}")
calls = c.message.tool_calls
check(len(calls) == 1 and calls[0].type == "function", f"tool_calls: {calls}")
check(calls[0].function.name == "get_weather" and calls[0].id.startswith("call_"), f"call: {calls[0]}")
args = json.loads(calls[0].function.arguments)
check(set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"), f"arguments: {args}")

parts, name, finish = [], None, None
for chunk in client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Weather in Lisbon?"}],
    tools=[weather],
    tool_choice="required",
    parallel_tool_calls=False,
    seed=5,
    stream=True,
):
    for ch in chunk.choices:
        for t in ch.delta.tool_calls or []:
            check(t.index == 0, f"one call: {t}")
            name = t.function.name or name
            parts.append(t.function.arguments or "")
        if ch.finish_reason:
            finish = ch.finish_reason
check(finish == "tool_calls" and name == "get_weather", f"streamed call {name} {finish}")
args = json.loads("".join(parts))
check(set(args) == {"city", "unit"}, f"streamed arguments: {args}")

try:
    client.chat.completions.create(
        model=model,
        messages=messages,
        tools=[weather],
        tool_choice="auto",
        max_tokens=4,
    )
    check(False, "tool_choice = auto was accepted")
except openai.BadRequestError as e:
    check(e.param == "tool_choice", f"param {e.param!r}")

print(f"openai {openai.__version__}: {checks} checks passed")
