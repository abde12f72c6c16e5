/**
 * Streamed Anthropic Messages answers: canonical chat chunks (as vLLM's chat_completion_stream_generator
 * sends them: a role chunk, reasoning and content deltas, tool call pieces, a finishing chunk, a usage
 * chunk with `choices: []`) → the event sequence the Messages streaming reference documents: message_start,
 * per block content_block_start / content_block_delta... / content_block_stop (a thinking block's
 * signature_delta just before its stop), message_delta, message_stop.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import { ApiProblem, type ApiCall, type Json, type RequestContext } from "./api.ts";
import { messagesApi } from "./messages.ts";
import {
  CACHED_USAGE as USAGE,
  chunk,
  codecContext,
  outcomeOf as outcome,
  piece,
  usageChunk,
} from "../../../test/helpers/api-codecs.ts";

import { wholeAsChunks } from "./whole-as-chunks.ts";

function call(ctx: RequestContext = context(), extra: Json = {}): ApiCall {
  const body = {
    model: "claude-sonnet-4-5",
    max_tokens: 256,
    stream: true,
    messages: [{ role: "user", content: "ls" }],
    ...extra,
  };
  const c = messagesApi.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

const context = codecContext;

/** Named SSE events (`event: X\ndata: {...}\n\n`) as their data, checking each name is its data's type. */
function events(text: string): Json[] {
  if (text === "") return [];
  assert.ok(text.endsWith("\n\n"), "events end with a blank line");
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((e) => {
      const m = /^event: (.+)\ndata: (.+)$/.exec(e);
      assert.ok(m !== null, `not a named SSE event: ${e}`);
      const data = JSON.parse(m[2]!) as Json;
      assert.equal(data.type, m[1]);
      return data;
    });
}

/** A vLLM stream: thinking, text, one tool call in three pieces, the finish, the usage. */
const CHUNKS: Json[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ reasoning_content: "The user " }),
  chunk({ reasoning_content: "wants files." }),
  chunk({ content: "Here they" }),
  chunk({ content: " are." }),
  piece({ index: 0, id: "chatcmpl-tool-5b1", type: "function", function: { name: "ls", arguments: "" } }),
  piece({ index: 0, function: { arguments: '{"path": ' } }),
  piece({ index: 0, function: { arguments: '"."}' } }),
  chunk({}, "tool_calls"),
  usageChunk(USAGE),
];

const delta = (index: number, d: Json) => ({ type: "content_block_delta", index, delta: d });
const start = (index: number, block: Json) => ({ type: "content_block_start", index, content_block: block });
const stop = (index: number) => ({ type: "content_block_stop", index });

const MESSAGE_START = {
  type: "message_start",
  message: {
    id: "msg_c7",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 0, output_tokens: 0 },
  },
};

const CACHED = {
  input_tokens: 4,
  output_tokens: 5,
  cache_read_input_tokens: 16,
  cache_creation_input_tokens: 0,
};

/** A Message assembled from its events, as the SDK's stream accumulator builds it. */
function assemble(evs: Json[]): Json {
  const msg = structuredClone((evs[0] as { message: Json }).message);
  const content = msg.content as Json[];
  const partial: string[] = [];
  for (const e of evs.slice(1)) {
    if (e.type === "content_block_start") content.push(structuredClone(e.content_block as Json));
    if (e.type === "content_block_delta") {
      const b = content[e.index as number]!;
      const d = e.delta as Json;
      if (d.type === "text_delta") b.text = (b.text as string) + (d.text as string);
      if (d.type === "thinking_delta") b.thinking = (b.thinking as string) + (d.thinking as string);
      if (d.type === "signature_delta") b.signature = d.signature;
      if (d.type === "input_json_delta")
        partial[e.index as number] = (partial[e.index as number] ?? "") + (d.partial_json as string);
    }
    if (e.type === "content_block_stop" && content[e.index as number]!.type === "tool_use")
      content[e.index as number]!.input = JSON.parse(partial[e.index as number] ?? "{}");
    if (e.type === "message_delta") Object.assign(msg, e.delta, { usage: e.usage });
  }
  return msg;
}

it("sends Anthropic's event sequence for thinking, text and a tool call, the call held and whole", () => {
  const stream = call().streamer("c7");
  const parts = CHUNKS.map((c) => stream.chunk(c));
  // From the tool call's first piece on, everything is held until the call is recorded: an agent acts on a
  // tool_use as soon as its block closes.
  assert.deepEqual(
    parts.map((p) => p.finishes),
    [false, false, false, false, false, true, true, true, true, true],
  );
  const end = stream.end(outcome("tool_calls"), true);
  assert.deepEqual(events(parts.map((p) => p.text).join("") + end), [
    MESSAGE_START,
    start(0, { type: "thinking", thinking: "", signature: "" }),
    delta(0, { type: "thinking_delta", thinking: "The user " }),
    delta(0, { type: "thinking_delta", thinking: "wants files." }),
    delta(0, { type: "signature_delta", signature: "trajflow:c7" }),
    stop(0),
    start(1, { type: "text", text: "" }),
    delta(1, { type: "text_delta", text: "Here they" }),
    delta(1, { type: "text_delta", text: " are." }),
    stop(1),
    start(2, { type: "tool_use", id: "chatcmpl-tool-5b1", name: "ls", input: {} }),
    delta(2, { type: "input_json_delta", partial_json: '{"path":"."}' }),
    stop(2),
    { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: CACHED },
    { type: "message_stop" },
  ]);
  // The text block closes when the call begins; the call is written whole when it closes.
  assert.deepEqual(events(parts[5]!.text), [stop(1)]);
  assert.equal(parts[6]!.text + parts[7]!.text, "");
  assert.deepEqual(
    events(parts[8]!.text).map((e) => e.type),
    ["content_block_start", "content_block_delta", "content_block_stop"],
  );
  assert.equal(parts[9]!.text, "");
});

it("assembles to the whole answer for the same content", () => {
  const c = call();
  const whole: Json = {
    id: "chatcmpl-8f2",
    object: "chat.completion",
    created: 1700000000,
    model: "qwen3-8b",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: "Here they are.",
          reasoning_content: "The user wants files.",
          tool_calls: [
            {
              id: "chatcmpl-tool-5b1",
              type: "function",
              function: { name: "ls", arguments: '{"path": "."}' },
            },
          ],
        },
        logprobs: null,
        finish_reason: "tool_calls",
      },
    ],
    usage: USAGE,
  };
  const expected = c.answer(whole, outcome("tool_calls")).body;
  const stream = c.streamer("c7");
  const text = CHUNKS.map((x) => stream.chunk(x).text).join("") + stream.end(outcome("tool_calls"), true);
  assert.deepEqual(assemble(events(text)), expected);
  // A whole answer given as a stream (llama.cpp) assembles to the same message.
  const again = c.streamer("c7");
  const chunks = wholeAsChunks("chat", whole, true);
  const replayed = chunks.map((x) => again.chunk(x).text).join("") + again.end(outcome("tool_calls"), true);
  assert.deepEqual(assemble(events(replayed)), expected);
});

it("gives a stop sequence the agent asked for and max_tokens in message_delta", () => {
  for (const [finish, extra, want] of [
    ["stop", { stopSequence: "</done>" }, { stop_reason: "stop_sequence", stop_sequence: "</done>" }],
    // A stop string of the engine's own (a chat template's end token) is not the agent's stop sequence.
    ["stop", { stopSequence: "<|eom_id|>" }, { stop_reason: "end_turn", stop_sequence: null }],
    ["length", {}, { stop_reason: "max_tokens", stop_sequence: null }],
    ["stop", {}, { stop_reason: "end_turn", stop_sequence: null }],
  ] as const) {
    const stream = call(context(), { stop_sequences: ["</done>"] }).streamer("c7");
    const text =
      stream.chunk(chunk({ content: "ok" }, finish)).text + stream.end(outcome(finish, extra), true);
    assert.deepEqual(events(text).slice(-2), [
      { type: "message_delta", delta: want, usage: { input_tokens: 20, output_tokens: 5 } },
      { type: "message_stop" },
    ]);
  }
});

it("gives a malformed tool call as text, as a whole answer does, counted, and end_turn when it was the only one", () => {
  const ctx = context();
  const stream = call(ctx).streamer("c7");
  const text =
    stream.chunk(piece({ index: 0, id: "call_1", function: { name: "ls", arguments: '{"pa' } })).text +
    stream.chunk(chunk({}, "tool_calls")).text +
    stream.end(outcome("tool_calls"), true);
  assert.deepEqual(events(text), [
    MESSAGE_START,
    start(0, { type: "text", text: "" }),
    delta(0, { type: "text_delta", text: '{"pa' }),
    stop(0),
    {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { input_tokens: 20, output_tokens: 5 },
    },
    { type: "message_stop" },
  ]);
  assert.deepEqual(ctx.metrics.byLabel("gateway_malformed_tool_calls"), [["messages", 1]]);
});

it("opens one block per tool call, in the engine's order", () => {
  const stream = call().streamer("c7");
  const text = [
    piece({ index: 0, id: "a", function: { name: "ls", arguments: "{}" } }),
    piece({ index: 1, id: "b", function: { name: "cat", arguments: '{"p":1}' } }),
    chunk({}, "tool_calls"),
  ]
    .map((x) => stream.chunk(x).text)
    .join("");
  assert.deepEqual(events(text).slice(1), [
    start(0, { type: "tool_use", id: "a", name: "ls", input: {} }),
    delta(0, { type: "input_json_delta", partial_json: "{}" }),
    stop(0),
    start(1, { type: "tool_use", id: "b", name: "cat", input: {} }),
    delta(1, { type: "input_json_delta", partial_json: '{"p":1}' }),
    stop(1),
  ]);
});

it("ends an empty stream with message_start, message_delta and message_stop", () => {
  const stream = call().streamer("c7");
  assert.deepEqual(events(stream.end(outcome("stop"), true)), [
    MESSAGE_START,
    {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { input_tokens: 20, output_tokens: 5 },
    },
    { type: "message_stop" },
  ]);
});

it("ends an aborted call, and a stream that broke before its end, with an error event", () => {
  const stream = call().streamer("c7");
  const first = stream.chunk(chunk({ content: "Half" })).text;
  assert.deepEqual(events(first + stream.end(outcome("abort"), true)), [
    MESSAGE_START,
    start(0, { type: "text", text: "" }),
    delta(0, { type: "text_delta", text: "Half" }),
    stop(0),
    {
      type: "error",
      error: {
        type: "overloaded_error",
        message:
          "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call",
      },
    },
  ]);
  // The engine's stream ended without its end: never a finished turn (the call is recorded as an abort).
  const broken = call().streamer("c7");
  broken.chunk(chunk({ content: "Half" }));
  assert.deepEqual(
    events(broken.end(outcome("abort"), false)).map((e) => [e.type, (e.error as Json).type]),
    [["error", "overloaded_error"]],
  );
});

it("writes errors as error events and drops what is not JSON", () => {
  const stream = call().streamer("c7");
  assert.deepEqual(events(stream.error("output_unavailable", "not recorded")), [
    { type: "error", error: { type: "overloaded_error", message: "not recorded" } },
  ]);
  assert.deepEqual(events(stream.error("not_recorded", "no ids")), [
    { type: "error", error: { type: "api_error", message: "no ids" } },
  ]);
  assert.equal(stream.other(": keep-alive\n\n"), "");
});
