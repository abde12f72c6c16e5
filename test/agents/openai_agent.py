"""An agent written the way teams write them: the official `openai` Python client, pointed at trajflow's
gateway (base URL http://<gateway>/sessions/<id>/v1), in front of llama.cpp's or vLLM's server. It runs the sessions
test/gateway-engines.test.ts checks, and prints what the agent saw as JSON: every answered call with its
call id (the gateway's x-trajflow-call-id header), the usage's completion_tokens, the finish reason, and
whether logprobs came back.

usage: openai_agent.py <gateway base URL>

Sessions (uid "e2e"):
- tools:     a multi-turn tool loop (tools offered every call; a tool call is answered with a tool message)
- stream:    three streamed turns (stream=True, stream_options.include_usage)
- branch:    one turn, then two different continuations of it (two branches)
- retry:     a call the engine refuses (400), then the same turn again
- subagents: a main agent and two sub-agents (their own system prompts) interleaved in one session
- leave:     a streamed call the agent gives up on (at its first chunk, or a client timeout before one), then
             a normal turn
- logprobs:  one call that asks for logprobs (and gets them)
Every session gets a reward and an end. The policy version is 3, then 4 from the subagents session on.
"""

import json
import sys
import urllib.request

import openai

BASE = sys.argv[1].rstrip("/")
MAX_TOKENS = 12
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "adds two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]

calls = []
seed = [0]


def client(session, timeout=60.0):
    return openai.OpenAI(
        base_url=f"{BASE}/sessions/{session}/v1",
        api_key="not-needed",
        default_headers={"X-Trajflow-Uid": "e2e"},
        max_retries=0,
        timeout=timeout,
    )


def record(session, call_id, usage, finish_reason, logprobs, asked_logprobs):
    calls.append(
        {
            "session": session,
            "call_id": call_id,
            "completion_tokens": usage.completion_tokens,
            "finish_reason": finish_reason,
            "got_logprobs": logprobs is not None,
            "asked_logprobs": asked_logprobs,
        }
    )


def chat(session, messages, stream=False, tools=None, logprobs=False):
    """One call; returns the assistant message to append to the history."""
    seed[0] += 1
    kwargs = dict(model="tiny", messages=messages, max_tokens=MAX_TOKENS, temperature=1.0, seed=seed[0])
    if tools is not None:
        kwargs["tools"] = tools
    if logprobs:
        kwargs["logprobs"] = True
    c = client(session)
    if not stream:
        raw = c.chat.completions.with_raw_response.create(**kwargs)
        answer = raw.parse()
        choice = answer.choices[0]
        record(session, raw.headers["x-trajflow-call-id"], answer.usage, choice.finish_reason, choice.logprobs, logprobs)
        message = {"role": "assistant", "content": choice.message.content or ""}
        if choice.message.tool_calls:
            message["tool_calls"] = [t.model_dump() for t in choice.message.tool_calls]
        return message
    raw = c.chat.completions.with_raw_response.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    call_id = raw.headers["x-trajflow-call-id"]
    text, finish, usage, lp = "", None, None, None
    for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
            if ch.logprobs is not None:
                lp = ch.logprobs
    record(session, call_id, usage, finish, lp, logprobs)
    return {"role": "assistant", "content": text}


def follow_up(history, message, n):
    """The agent's next message: tool results for tool calls, else a user turn."""
    history.append(message)
    for t in message.get("tool_calls", []):
        history.append({"role": "tool", "tool_call_id": t["id"], "content": "5"})
    if not message.get("tool_calls"):
        history.append({"role": "user", "content": f"go on ({n})"})


def post(path, body):
    request = urllib.request.Request(
        f"{BASE}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def finish(session, reward):
    post(f"/sessions/{session}/reward", {"value": reward})
    post(f"/sessions/{session}/end", {"status": "ok"})


def main():
    post("/weights", {"version": 3})
    refused = 0

    h = [{"role": "system", "content": "You can call calc."}, {"role": "user", "content": "What is 2 + 3?"}]
    for n in range(3):
        follow_up(h, chat("tools", h, tools=TOOLS), n)
    finish("tools", 1.0)

    h = [{"role": "user", "content": "Tell me a story, in parts."}]
    for n in range(3):
        follow_up(h, chat("stream", h, stream=True), n)
    finish("stream", 0.5)

    h = [{"role": "user", "content": "Pick a number."}]
    h.append(chat("branch", h))
    chat("branch", h + [{"role": "user", "content": "Another one."}])
    chat("branch", h + [{"role": "user", "content": "Why that one?"}])
    finish("branch", 0.25)

    h = [{"role": "user", "content": "Answer as JSON."}]
    try:
        client("retry").chat.completions.create(
            model="tiny",
            messages=h,
            max_tokens=MAX_TOKENS,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
        )
    except openai.BadRequestError:
        refused += 1
    follow_up(h, chat("retry", h), 0)
    finish("retry", 0.0)

    post("/weights", {"version": 4})
    main_h = [{"role": "system", "content": "You are the main agent."}, {"role": "user", "content": "Plan the work."}]
    main_h.append(chat("subagents", main_h))
    a = [{"role": "system", "content": "You are sub-agent A, a researcher."}, {"role": "user", "content": "Find facts."}]
    b = [{"role": "system", "content": "You are sub-agent B, a coder."}, {"role": "user", "content": "Write code."}]
    a.append(chat("subagents", a))
    b.append(chat("subagents", b))
    a.append({"role": "user", "content": "More facts."})
    a.append(chat("subagents", a))
    main_h.append({"role": "user", "content": "Sub-agents said: " + a[-1]["content"][:20] + b[-1]["content"][:20]})
    main_h.append(chat("subagents", main_h))
    finish("subagents", 0.75)

    left = 0
    h = [{"role": "user", "content": "Talk for a long time."}]
    try:
        stream = client("leave", timeout=0.3).chat.completions.create(
            model="tiny", messages=h, stream=True, max_tokens=3500, extra_body={"ignore_eos": True}
        )
        # A relayed stream (vLLM) sends chunks sooner than the read timeout: the agent leaves at the first.
        for _ in stream:
            stream.close()
            left += 1
            break
    except (openai.APITimeoutError, openai.APIConnectionError):
        left += 1
    follow_up(h, chat("leave", h), 0)
    finish("leave", 0.1)

    h = [{"role": "user", "content": "How sure are you?"}]
    chat("logprobs", h, logprobs=True)
    finish("logprobs", 0.9)

    print(json.dumps({"calls": calls, "refused": refused, "left": left}))


if __name__ == "__main__":
    main()
