/**
 * Streamed OpenAI Responses answers: canonical chat chunks (as vLLM's chat_completion_stream_generator sends
 * them) → the event sequence the Responses streaming reference documents: response.created,
 * response.in_progress, then per output item response.output_item.added, response.content_part.added,
 * response.output_text.delta (reasoning_text.delta) ..., response.output_text.done, response.content_part.done,
 * response.output_item.done (function calls: function_call_arguments.delta ... / done), and
 * response.completed (incomplete, failed) with the whole Response; sequence_number 0, 1, 2, ...
 */
import { strict as assert } from "node:assert";
import { afterEach, beforeEach, it, mock } from "node:test";
import { ApiProblem, type ApiCall, type CallOutcome, type Json } from "./api.ts";
import { responsesApi, responseId } from "./responses.ts";
import {
  CACHED_USAGE as USAGE,
  chunk,
  codecContext,
  outcomeOf as outcome,
  piece,
  usageChunk,
} from "../../../test/helpers/api-codecs.ts";
import { wholeAsChunks } from "./whole-as-chunks.ts";

const context = codecContext;

const TOOLS = [
  { type: "function", name: "shell", parameters: { type: "object", properties: {} } },
  { type: "custom", name: "apply_patch", description: "Applies a patch" },
];

function call(ctx = context(), extra: Json = {}): ApiCall {
  const body = { model: "gpt-5-codex", input: "List the files.", tools: TOOLS, stream: true, ...extra };
  const c = responsesApi.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

/** Named SSE events as their data; each name is its data's type, sequence numbers count up from `from`. */
function events(text: string, from = 0): Json[] {
  if (text === "") return [];
  const out = text
    .slice(0, -2)
    .split("\n\n")
    .map((e) => {
      const m = /^event: (.+)\ndata: (.+)$/.exec(e);
      assert.ok(m !== null, `not a named SSE event: ${e}`);
      const data = JSON.parse(m[2]!) as Json;
      assert.equal(data.type, m[1]);
      return data;
    });
  assert.deepEqual(
    out.map((e) => e.sequence_number),
    out.map((_, i) => from + i),
  );
  return out;
}

const CHUNKS: Json[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ reasoning_content: "The user " }),
  chunk({ reasoning_content: "wants files." }),
  chunk({ content: "Here they" }),
  chunk({ content: " are." }),
  piece({ index: 0, id: "call_a", type: "function", function: { name: "shell", arguments: "" } }),
  piece({ index: 0, function: { arguments: '{"cmd": ' } }),
  piece({ index: 0, function: { arguments: '["ls"]}' } }),
  chunk({}, "tool_calls"),
  usageChunk(USAGE),
];

const WHOLE: Json = {
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
          { id: "call_a", type: "function", function: { name: "shell", arguments: '{"cmd": ["ls"]}' } },
        ],
      },
      logprobs: null,
      finish_reason: "tool_calls",
    },
  ],
  usage: USAGE,
};

/** Each event's type and fields but its sequence number, the response events' response left out. */
const brief = (e: Json) => {
  const { sequence_number: _, response: __, ...rest } = e;
  return rest;
};

const at = (output_index: number, item_id: string) => ({ item_id, output_index });
const reasoning = (t: string | null) => ({
  type: "reasoning",
  id: "rs_c7",
  summary: [],
  content: t === null ? [] : [{ type: "reasoning_text", text: t }],
});
const messageItem = (t: string | null, status = "completed") => ({
  type: "message",
  id: "msg_c7",
  status,
  role: "assistant",
  content: t === null ? [] : [{ type: "output_text", text: t, annotations: [], logprobs: [] }],
});
const shell = (args: string, status: string) => ({
  type: "function_call",
  id: "fc_c7_0",
  call_id: "call_a",
  name: "shell",
  arguments: args,
  status,
});

function run(
  c: ApiCall,
  chunks: Json[],
  end: CallOutcome,
): { parts: Array<{ text: string; finishes: boolean }>; all: Json[] } {
  const stream = c.streamer("c7");
  const parts = chunks.map((x) => stream.chunk(x));
  return { parts, all: events(parts.map((p) => p.text).join("") + stream.end(end, true)) };
}

beforeEach(() => mock.timers.enable({ apis: ["Date"], now: 1_700_000_000_000 }));
afterEach(() => mock.timers.reset());

it("sends the Responses event sequence for reasoning, text and a function call, the call held and whole", () => {
  const { parts, all } = run(call(), CHUNKS, outcome("tool_calls"));
  // From the call's first piece on, everything is held until the call is recorded: Codex runs a function
  // call as soon as its item is done.
  assert.deepEqual(
    parts.map((p) => p.finishes),
    [false, false, false, false, false, true, true, true, true, true],
  );
  const rs = at(0, "rs_c7");
  const msg = at(1, "msg_c7");
  const fc = at(2, "fc_c7_0");
  const part = (t: string) => ({ type: "output_text", text: t, annotations: [], logprobs: [] });
  assert.deepEqual(all.map(brief), [
    { type: "response.created" },
    { type: "response.in_progress" },
    { type: "response.output_item.added", output_index: 0, item: reasoning(null) },
    {
      type: "response.content_part.added",
      ...rs,
      content_index: 0,
      part: { type: "reasoning_text", text: "" },
    },
    { type: "response.reasoning_text.delta", ...rs, content_index: 0, delta: "The user " },
    { type: "response.reasoning_text.delta", ...rs, content_index: 0, delta: "wants files." },
    { type: "response.reasoning_text.done", ...rs, content_index: 0, text: "The user wants files." },
    {
      type: "response.content_part.done",
      ...rs,
      content_index: 0,
      part: { type: "reasoning_text", text: "The user wants files." },
    },
    { type: "response.output_item.done", output_index: 0, item: reasoning("The user wants files.") },
    { type: "response.output_item.added", output_index: 1, item: messageItem(null, "in_progress") },
    { type: "response.content_part.added", ...msg, content_index: 0, part: part("") },
    { type: "response.output_text.delta", ...msg, content_index: 0, delta: "Here they", logprobs: [] },
    { type: "response.output_text.delta", ...msg, content_index: 0, delta: " are.", logprobs: [] },
    { type: "response.output_text.done", ...msg, content_index: 0, text: "Here they are.", logprobs: [] },
    { type: "response.content_part.done", ...msg, content_index: 0, part: part("Here they are.") },
    { type: "response.output_item.done", output_index: 1, item: messageItem("Here they are.") },
    { type: "response.output_item.added", output_index: 2, item: shell("", "in_progress") },
    { type: "response.function_call_arguments.delta", ...fc, delta: '{"cmd": ["ls"]}' },
    { type: "response.function_call_arguments.done", ...fc, arguments: '{"cmd": ["ls"]}', name: "shell" },
    { type: "response.output_item.done", output_index: 2, item: shell('{"cmd": ["ls"]}', "completed") },
    { type: "response.completed" },
  ]);
  assert.equal(parts[9]!.text, "");
});

it("opens with an in-progress response and closes with the whole answer's response, stored", () => {
  const ctx = context();
  const { all } = run(call(ctx), CHUNKS, outcome("tool_calls"));
  const expected = call().answer(WHOLE, outcome("tool_calls")).body as Json;
  const { usage: _, ...before } = expected;
  const inProgress = { ...before, status: "in_progress", output: [] };
  assert.deepEqual(all[0]!.response, inProgress);
  assert.deepEqual(all[1]!.response, inProgress);
  assert.deepEqual(all.at(-1)!.response, expected);
  assert.deepEqual(ctx.session.responses?.get(responseId("c7")), {
    response: expected,
    conversation: [
      { role: "user", content: "List the files." },
      {
        role: "assistant",
        content: "Here they are.",
        reasoning_content: "The user wants files.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "shell", arguments: '{"cmd": ["ls"]}' } },
        ],
      },
    ],
  });
  // A whole answer given as a stream (llama.cpp) ends with the same response.
  const replayed = run(call(), wholeAsChunks("chat", WHOLE, true), outcome("tool_calls")).all;
  assert.deepEqual(replayed.at(-1)!.response, expected);
});

it("gives a custom tool's input whole, under the item's own id", () => {
  const chunks = [
    piece({ index: 0, id: "call_b", function: { name: "apply_patch", arguments: '{"input": "*** Begin' } }),
    piece({ index: 0, function: { arguments: ' Patch"}' } }),
    chunk({}, "tool_calls"),
  ];
  const { all } = run(call(), chunks, outcome("tool_calls"));
  const item = { type: "custom_tool_call", id: "ctc_c7_0", call_id: "call_b", name: "apply_patch" };
  assert.deepEqual(all.slice(2, -1).map(brief), [
    { type: "response.output_item.added", output_index: 0, item: { ...item, input: "" } },
    { type: "response.custom_tool_call_input.done", ...at(0, "ctc_c7_0"), input: "*** Begin Patch" },
    { type: "response.output_item.done", output_index: 0, item: { ...item, input: "*** Begin Patch" } },
  ]);
  const whole = {
    ...WHOLE,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "call_b",
              type: "function",
              function: { name: "apply_patch", arguments: '{"input": "*** Begin Patch"}' },
            },
          ],
        },
        finish_reason: "tool_calls",
      },
    ],
  };
  assert.deepEqual(
    (all.at(-1)!.response as Json).output,
    (call().answer(whole, outcome("tool_calls")).body as Json).output,
  );
});

it("ends incomplete at the token limit, as the whole answer does", () => {
  const c = call(context(), { max_output_tokens: 2 });
  const chunks = [chunk({ content: "Part" }), chunk({}, "length"), usageChunk(USAGE)];
  const { all } = run(c, chunks, outcome("length"));
  const whole = {
    ...WHOLE,
    choices: [{ index: 0, message: { role: "assistant", content: "Part" }, finish_reason: "length" }],
  };
  const expected = c.answer(whole, outcome("length")).body as Json;
  assert.deepEqual(expected.incomplete_details, { reason: "max_output_tokens" });
  const n = all.length;
  assert.deepEqual(all.slice(-2), [
    {
      type: "response.output_item.done",
      sequence_number: n - 2,
      output_index: 0,
      item: messageItem("Part", "incomplete"),
    },
    { type: "response.incomplete", sequence_number: n - 1, response: expected },
  ]);
});

it("gives reasoning-only and empty answers an empty message, as the whole answer does", () => {
  const thinkOnly = run(
    call(),
    [chunk({ reasoning_content: "Hmm" }), chunk({}, "stop")],
    outcome("stop"),
  ).all;
  const whole = {
    ...WHOLE,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: null, reasoning_content: "Hmm" },
        finish_reason: "stop",
      },
    ],
  };
  assert.deepEqual(
    (thinkOnly.at(-1)!.response as Json).output,
    (call().answer(whole, outcome("stop")).body as Json).output,
  );
  const empty = run(call(), [], outcome("stop")).all;
  assert.deepEqual(
    empty.map((e) => e.type),
    [
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ],
  );
  assert.deepEqual((empty.at(-1)!.response as Json).output, [messageItem("")]);
});

it("ends an aborted call with response.failed and stores nothing; a broken stream with an error event", () => {
  const ctx = context();
  const { all } = run(call(ctx), [chunk({ content: "Half" })], outcome("abort"));
  const failed = all.at(-1)!;
  assert.equal(failed.type, "response.failed");
  assert.deepEqual(
    {
      status: (failed.response as Json).status,
      error: (failed.response as Json).error,
      output: (failed.response as Json).output,
    },
    {
      status: "failed",
      error: {
        code: "server_error",
        message:
          "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call",
      },
      output: [messageItem("Half")],
    },
  );
  assert.equal(ctx.session.responses?.size, 0);
  const broken = call().streamer("c7");
  const sent = events(broken.chunk(chunk({ content: "Half" })).text).length;
  assert.deepEqual(
    events(broken.end(outcome("abort"), false), sent).map((e) => [e.type, e.code]),
    [["error", "call_aborted"]],
  );
});

it("gives logprobs on text deltas when asked, and errors as numbered error events", () => {
  const entry = { token: "Hi", logprob: -0.5, bytes: [72, 105], top_logprobs: [] };
  const c = call(context(), { include: ["message.output_text.logprobs"] });
  const stream = c.streamer("c7");
  const first = events(stream.chunk(chunk({ content: "Hi" }, null, { content: [entry] })).text);
  assert.deepEqual(first.at(-1), {
    type: "response.output_text.delta",
    sequence_number: 4,
    ...at(0, "msg_c7"),
    content_index: 0,
    delta: "Hi",
    logprobs: [entry],
  });
  assert.deepEqual(events(stream.error("output_unavailable", "not recorded"), 5), [
    { type: "error", sequence_number: 5, code: "output_unavailable", message: "not recorded", param: null },
  ]);
  assert.equal(stream.other(": keep-alive\n\n"), "");
});

it("counts a malformed function call in a stream", () => {
  const ctx = context();
  run(
    call(ctx),
    [
      piece({ index: 0, id: "call_a", function: { name: "shell", arguments: '{"cmd' } }),
      chunk({}, "tool_calls"),
    ],
    outcome("tool_calls"),
  );
  assert.deepEqual(ctx.metrics.byLabel("gateway_malformed_tool_calls"), [["responses", 1]]);
});
