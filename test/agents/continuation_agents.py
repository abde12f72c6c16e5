"""Tool-loop agents for prompt mode tokens, written with the official SDKs against trajflow's gateway in
front of llama.cpp's server with the tiny test model. test/gateway-continuation.test.ts runs them through a
gateway in each prompt mode and checks the rows.

usage: continuation_agents.py <gateway base URL> <session prefix>

Sessions (uid "cont"), each an agent that keeps its history the way the SDK hands it back:
- <p>chat:      the openai client's chat completions, 8 turns: a forced tool call (tool_choice required),
                its tool result, a free answer (ended at once), a user turn; every third call streamed
- <p>messages:  the anthropic client, 6 turns: tool_use forced (tool_choice any) and its tool_result,
                free answers, a streamed call through the SDK's stream helper
- <p>responses: the openai client's Responses, 6 turns: the whole input sent again each turn (output items
                appended, then function_call_output or a user message), function_call forced on even turns
- <p>compact:   a chat agent that, after 4 turns, drops its old turns (keeps the system prompt and the last
                user message), as a harness compacting its context does, then goes on for 2 turns
It prints JSON: each answered call (session, call id, output tokens, the engine's cached prompt tokens).
"""

import json
import sys

import anthropic
import openai

BASE = sys.argv[1].rstrip("/")
PREFIX = sys.argv[2]
UID = {"X-Trajflow-Uid": "cont"}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "calc", "description": "adds", "parameters": SCHEMA}}]
calls = []


def record(session, call_id, output_tokens, cached):
    calls.append({"session": session, "call_id": call_id, "output_tokens": output_tokens, "cached": cached})


def chat_client(session):
    return openai.OpenAI(base_url=f"{BASE}/sessions/{session}/v1", api_key="unused", max_retries=6,
                         default_headers=UID, timeout=120)


def chat_turn(session, messages, turn, force):
    client = chat_client(session)
    body = dict(model="tiny", messages=messages, tools=CHAT_TOOLS, max_tokens=160 if force else 24, seed=turn,
                tool_choice="required" if force else "auto")
    if not force and session.endswith("chat"):
        # The free answers end at once (<|im_end|>, id 460): their text is plain, so llama.cpp reports a
        # logprob for every sampled token and this session's row keeps its logprobs.
        body["extra_body"] = {"logit_bias": {"460": 12}}
    if turn % 3 == 2:
        stream = client.chat.completions.with_raw_response.create(
            **body, stream=True, stream_options={"include_usage": True})
        content, calls_by_index, usage = "", {}, None
        for chunk in stream.parse():
            usage = chunk.usage or usage
            for c in chunk.choices:
                content += c.delta.content or ""
                for t in c.delta.tool_calls or []:
                    got = calls_by_index.setdefault(t.index, {"id": t.id, "type": "function",
                                                               "function": {"name": "", "arguments": ""}})
                    got["function"]["name"] += t.function.name or ""
                    got["function"]["arguments"] += t.function.arguments or ""
        message = {"role": "assistant", "content": content or None}
        if calls_by_index:
            message["tool_calls"] = [calls_by_index[i] for i in sorted(calls_by_index)]
        cached = (usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else None)
        record(session, stream.headers["x-trajflow-call-id"], usage.completion_tokens, cached)
        return message
    raw = client.chat.completions.with_raw_response.create(**body)
    answer = raw.parse()
    details = answer.usage.prompt_tokens_details
    record(session, raw.headers["x-trajflow-call-id"], answer.usage.completion_tokens,
           details.cached_tokens if details else None)
    return answer.choices[0].message.model_dump(exclude_none=True)


def chat_step(session, messages, turn, force):
    message = chat_turn(session, messages, turn, force)
    messages.append(message)
    if message.get("tool_calls"):
        for t in message["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": t["id"], "content": str(turn)})
    else:
        messages.append({"role": "user", "content": f"And now {turn}?"})


def chat_session():
    session = f"{PREFIX}chat"
    messages = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "Add 2 and 3."}]
    for turn in range(8):
        chat_step(session, messages, turn, turn % 2 == 0)


def compact_session():
    session = f"{PREFIX}compact"
    messages = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "Add 1 and 1."}]
    for turn in range(4):
        chat_step(session, messages, turn, turn % 2 == 0)
    last_user = next(m for m in reversed(messages) if m["role"] in ("user", "tool"))
    messages = [messages[0], {"role": "user", "content": f"Summary so far: added numbers. {last_user['content']}"}]
    for turn in range(4, 6):
        chat_step(session, messages, turn, turn % 2 == 0)


def messages_session():
    session = f"{PREFIX}messages"
    client = anthropic.Anthropic(base_url=f"{BASE}/sessions/{session}", api_key="unused", max_retries=6,
                                 default_headers=UID, timeout=120)
    tools = [{"name": "calc", "description": "adds", "input_schema": SCHEMA}]
    history = [{"role": "user", "content": "Add 4 and 5."}]
    for turn in range(6):
        body = dict(model="claude-sonnet-4-5", max_tokens=160 if turn % 2 == 0 else 24, system="You add numbers.", tools=tools,
                    messages=history, tool_choice={"type": "any"} if turn % 2 == 0 else {"type": "auto"})
        if turn == 3:
            with client.messages.stream(**body) as s:
                for _ in s:
                    pass
                message = s.get_final_message()
                call_id = s.response.headers["x-trajflow-call-id"]
        else:
            raw = client.messages.with_raw_response.create(**body)
            message = raw.parse()
            call_id = raw.headers["x-trajflow-call-id"]
        record(session, call_id, message.usage.output_tokens, message.usage.cache_read_input_tokens)
        content = [b.model_dump(exclude_none=True) for b in message.content]
        history.append({"role": "assistant", "content": content})
        uses = [b for b in message.content if b.type == "tool_use"]
        if uses:
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": str(turn)} for u in uses]})
        else:
            history.append({"role": "user", "content": f"And now {turn}?"})


def responses_session():
    session = f"{PREFIX}responses"
    client = chat_client(session)
    tools = [{"type": "function", "name": "calc", "description": "adds", "parameters": SCHEMA}]
    items = [{"role": "user", "content": "Add 6 and 7."}]
    for turn in range(6):
        raw = client.responses.with_raw_response.create(
            model="gpt-5-codex", instructions="You add numbers.", input=items, tools=tools, max_output_tokens=160 if turn % 2 == 0 else 24,
            tool_choice="required" if turn % 2 == 0 else "auto", store=False)
        response = raw.parse()
        details = response.usage.input_tokens_details
        record(session, raw.headers["x-trajflow-call-id"], response.usage.output_tokens,
               details.cached_tokens if details else None)
        items += [o.model_dump(exclude_none=True) for o in response.output]
        fn = [o for o in response.output if o.type == "function_call"]
        if fn:
            items += [{"type": "function_call_output", "call_id": f.call_id, "output": str(turn)} for f in fn]
        else:
            items.append({"role": "user", "content": f"And now {turn}?"})


chat_session()
messages_session()
responses_session()
compact_session()
print(json.dumps({"calls": calls}))
