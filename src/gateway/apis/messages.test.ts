/**
 * Anthropic Messages answers: the canonical chat answer (shaped as vLLM's ChatCompletionResponse and
 * llama.cpp's /v1/chat/completions give it) and a recorded CallOutcome → the Message body the Messages API
 * reference documents (anthropic SDK types: Message, ContentBlock, StopReason, Usage), and the error shape.
 */
import { strict as assert } from "node:assert";
import { codecContext } from "../../../test/helpers/api-codecs.ts";
import { it } from "node:test";
import type { Capture } from "../engines/engine.ts";
import { ApiProblem, type ApiCall, type CallOutcome, type Json } from "./api.ts";
import { anthropicErrorBody, messagesApi, messagesStopReason } from "./messages.ts";

const context = codecContext;

function call(ctx = context(), extra: Json = {}): ApiCall {
  const c = messagesApi.request(
    {
      model: "claude-sonnet-4-5",
      max_tokens: 256,
      messages: [{ role: "user", content: "List the files." }],
      ...extra,
    },
    ctx,
  );
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

const capture = (finishReason: string, extra: Partial<Capture> = {}): Capture => ({
  choiceIndex: 0,
  outputIds: Int32Array.from([101, 102, 103, 104, 105]),
  finishReason,
  ...extra,
});

const outcome = (c: Capture): CallOutcome => ({ callIds: ["c7"], captures: [c], promptLengths: [20] });

/** vLLM's ChatCompletionResponse (model_dump) for one choice. */
function canonical(message: Json, finish: string, usage: Json | null = USAGE): Json {
  return {
    id: "chatcmpl-8f2",
    object: "chat.completion",
    created: 1700000000,
    model: "qwen3-8b",
    choices: [
      {
        index: 0,
        message: { role: "assistant", refusal: null, annotations: null, audio: null, ...message },
        logprobs: null,
        finish_reason: finish,
        stop_reason: null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage,
    prompt_logprobs: null,
    kv_transfer_params: null,
  };
}

const USAGE = {
  prompt_tokens: 20,
  total_tokens: 25,
  completion_tokens: 5,
  prompt_tokens_details: { cached_tokens: 16 },
};

const LS_CALL = {
  id: "chatcmpl-tool-5b1",
  type: "function",
  function: { name: "ls", arguments: '{"path": "."}' },
};

/** A Message body around `content`. */
function message(content: Json[], stop: string, usage: Json, stopSequence: string | null = null): Json {
  return {
    id: "msg_c7",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content,
    stop_reason: stop,
    stop_sequence: stopSequence,
    usage,
  };
}

const CACHED_USAGE = {
  input_tokens: 4,
  output_tokens: 5,
  cache_read_input_tokens: 16,
  cache_creation_input_tokens: 0,
};

it("gives thinking (signed with the call id), text and tool_use blocks in that order", () => {
  const c = call();
  const answer = canonical(
    { content: "Here they are.", reasoning_content: "The user wants files.", tool_calls: [LS_CALL] },
    "tool_calls",
  );
  const cap = capture("tool_calls", { toolCalls: [LS_CALL] });
  assert.deepEqual(c.answer(answer, outcome(cap)), {
    status: 200,
    body: message(
      [
        { type: "thinking", thinking: "The user wants files.", signature: "trajflow:c7" },
        { type: "text", text: "Here they are." },
        { type: "tool_use", id: "chatcmpl-tool-5b1", name: "ls", input: { path: "." } },
      ],
      "tool_use",
      CACHED_USAGE,
    ),
  });
  assert.equal(c.stopReason(cap), "tool_use");
});

it("reads vLLM's `reasoning` field and gives usage without cache fields when none are reported", () => {
  const answer = canonical({ content: "Done.", reasoning: "Easy." }, "stop", {
    prompt_tokens: 12,
    completion_tokens: 3,
    total_tokens: 15,
    prompt_tokens_details: null,
  });
  assert.deepEqual(call().answer(answer, outcome(capture("stop"))).body, {
    ...message(
      [
        { type: "thinking", thinking: "Easy.", signature: "trajflow:c7" },
        { type: "text", text: "Done." },
      ],
      "end_turn",
      { input_tokens: 12, output_tokens: 3 },
    ),
  });
});

it("counts from the outcome when the engine gave no usage", () => {
  const answer = canonical({ content: "Hi." }, "stop", null);
  assert.deepEqual(
    call().answer(answer, outcome(capture("stop"))).body,
    message([{ type: "text", text: "Hi." }], "end_turn", { input_tokens: 20, output_tokens: 5 }),
  );
});

it("names the stop sequence the engine matched when the agent asked for it, never the engine's own", () => {
  const c = call(context(), { stop_sequences: ["</done>"] });
  const cap = capture("stop", { stopSequence: "</done>" });
  assert.deepEqual(
    c.answer(canonical({ content: "All done" }, "stop"), outcome(cap)).body,
    message([{ type: "text", text: "All done" }], "stop_sequence", CACHED_USAGE, "</done>"),
  );
  assert.equal(c.stopReason(cap), "stop_sequence");
  // llama.cpp adds its chat template's stop strings and reports the one that matched.
  const own = capture("stop", { stopSequence: "<|eom_id|>" });
  assert.equal(c.stopReason(own), "end_turn");
  assert.equal(call().stopReason(cap), "end_turn");
});

it("maps length to max_tokens and content_filter to refusal", () => {
  const c = call();
  for (const [finish, stop] of [
    ["length", "max_tokens"],
    ["content_filter", "refusal"],
    ["stop", "end_turn"],
  ] as const) {
    const cap = capture(finish);
    assert.deepEqual(
      c.answer(canonical({ content: "Partial" }, finish), outcome(cap)).body,
      message([{ type: "text", text: "Partial" }], stop, CACHED_USAGE),
    );
    assert.equal(c.stopReason(cap), stop);
  }
});

it("answers an aborted call with a 503 overloaded_error, never a finished turn", () => {
  const c = call();
  const cap = capture("abort");
  assert.deepEqual(c.answer(canonical({ content: "Half" }, "abort"), outcome(cap)), {
    status: 503,
    body: {
      type: "error",
      error: {
        type: "overloaded_error",
        message:
          "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call",
      },
    },
  });
  assert.equal(c.stopReason(cap), "error");
});

it("gives malformed tool arguments as text, counted, and ends the turn", () => {
  const ctx = context();
  const c = call(ctx);
  const bad = { id: "call_2", type: "function", function: { name: "ls", arguments: '{"path": "' } };
  const answer = canonical({ content: "", tool_calls: [LS_CALL, bad] }, "tool_calls");
  const cap = capture("tool_calls", { toolCalls: [LS_CALL, bad] });
  assert.deepEqual(
    c.answer(answer, outcome(cap)).body,
    message(
      [
        { type: "tool_use", id: "chatcmpl-tool-5b1", name: "ls", input: { path: "." } },
        { type: "text", text: '{"path": "' },
      ],
      "tool_use",
      CACHED_USAGE,
    ),
  );
  assert.deepEqual(ctx.metrics.byLabel("gateway_malformed_tool_calls"), [["messages", 1]]);
  assert.equal(c.stopReason(capture("tool_calls", { toolCalls: [bad] })), "end_turn");
  const onlyBad = c.answer(canonical({ content: null, tool_calls: [bad] }, "tool_calls"), outcome(cap));
  assert.deepEqual(onlyBad.body, message([{ type: "text", text: '{"path": "' }], "end_turn", CACHED_USAGE));
});

it("gives llama.cpp's answer (tool arguments as an object, no id) as tool_use", () => {
  const answer = canonical(
    {
      content: null,
      tool_calls: [{ type: "function", function: { name: "ls", arguments: { path: "/" } } }],
    },
    "tool_calls",
  );
  assert.deepEqual(
    call().answer(answer, outcome(capture("tool_calls"))).body,
    message([{ type: "tool_use", id: "call_0", name: "ls", input: { path: "/" } }], "tool_use", CACHED_USAGE),
  );
});

it("maps every finish reason", () => {
  assert.deepEqual(
    [
      messagesStopReason("stop", 0),
      messagesStopReason("stop", 1),
      messagesStopReason("stop", 0, "###"),
      messagesStopReason("tool_calls", 0),
      messagesStopReason("tool_calls", 2),
      messagesStopReason("length", 1),
      messagesStopReason("content_filter", 0),
      messagesStopReason("abort", 1),
    ],
    ["end_turn", "tool_use", "stop_sequence", "end_turn", "tool_use", "max_tokens", "refusal", null],
  );
});

it("writes errors in Anthropic's shape, typed by status", () => {
  const types = [400, 401, 403, 404, 413, 422, 429, 500, 502, 503, 504, 529].map(
    (s) => (anthropicErrorBody(s, "x", "m").error as Json).type,
  );
  assert.deepEqual(types, [
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "invalid_request_error",
    "rate_limit_error",
    "api_error",
    "api_error",
    "overloaded_error",
    "timeout_error",
    "overloaded_error",
  ]);
  assert.deepEqual(messagesApi.errorBody(400, "invalid_request", "max_tokens: required"), {
    type: "error",
    error: { type: "invalid_request_error", message: "max_tokens: required" },
  });
});
