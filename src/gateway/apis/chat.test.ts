/**
 * OpenAI Chat Completions and Completions: the canonical calls themselves, so the codec passes bodies,
 * answers and chunks through, renaming the model where model_map mapped it, and writes OpenAI's errors.
 */
import { strict as assert } from "node:assert";
import { codecContext } from "../../../test/helpers/api-codecs.ts";
import { it } from "node:test";
import { ApiProblem, type ApiCall, type CallOutcome, type Json } from "./api.ts";
import { chatApi, completionsApi, finishesAChoice } from "./chat.ts";

const context = (upstreamModel = (m: string) => m) => codecContext({ upstreamModel });

function call(body: Json, ctx = context()): ApiCall {
  const c = chatApi.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

const OUTCOME: CallOutcome = {
  callIds: ["c1"],
  captures: [{ choiceIndex: 0, outputIds: Int32Array.from([5, 6]), finishReason: "stop" }],
  promptLengths: [3],
};
const messages = [{ role: "user", content: "hi" }];
const answer = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1700000000,
  model: "qwen3-8b",
  choices: [
    { index: 0, message: { role: "assistant", content: "Hello" }, logprobs: null, finish_reason: "stop" },
  ],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};
const chunk = (finish: string | null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1700000000,
  model: "qwen3-8b",
  choices: [
    { index: 0, delta: finish === null ? { content: "Hello" } : {}, logprobs: null, finish_reason: finish },
  ],
});

it("passes the body, the answer and the chunks through as they are", () => {
  const body = {
    model: "qwen3-8b",
    messages,
    stream: true,
    stream_options: { include_usage: true },
    seed: 1,
  };
  const c = call(body);
  assert.equal(c.body, body);
  assert.deepEqual(
    { api: c.api, route: c.route, stream: c.stream, passes: c.passesEngineErrors, model: c.agentModel },
    { api: "chat", route: "chat", stream: true, passes: true, model: "qwen3-8b" },
  );
  assert.deepEqual([c.details("c1"), c.stopReason(OUTCOME.captures[0]!)], [undefined, undefined]);
  assert.deepEqual(c.answer(answer, OUTCOME), { status: 200, body: answer });
  const s = c.streamer("c1");
  assert.deepEqual(s.chunk(chunk(null)), {
    text: `data: ${JSON.stringify(chunk(null))}\n\n`,
    finishes: false,
  });
  assert.deepEqual(s.chunk(chunk("stop")), {
    text: `data: ${JSON.stringify(chunk("stop"))}\n\n`,
    finishes: true,
  });
  assert.equal(s.other(": keep-alive\n\n"), ": keep-alive\n\n");
  assert.equal(s.end(OUTCOME, true), "data: [DONE]\n\n");
  assert.equal(s.end(OUTCOME, false), "");
});

it("sends the upstream's model name and gives the agent's back", () => {
  const c = call(
    { model: "gpt-4o", messages },
    context(() => "qwen3-8b"),
  );
  assert.deepEqual(c.body, { model: "qwen3-8b", messages });
  assert.equal(c.agentModel, "gpt-4o");
  assert.deepEqual(c.answer(answer, OUTCOME).body, { ...answer, model: "gpt-4o" });
  assert.equal(
    c.streamer("c1").chunk(chunk(null)).text,
    `data: ${JSON.stringify({ ...chunk(null), model: "gpt-4o" })}\n\n`,
  );
});

it("refuses empty messages, a message without a role and tools that are not an array", () => {
  const refused = (body: Json, message: string) =>
    assert.deepEqual(chatApi.request(body, context()), new ApiProblem(message));
  refused({ model: "m", messages: [] }, "messages must be a non-empty array");
  refused({ model: "m", messages: [{ content: "x" }] }, "messages[0] must be an object with a role");
  refused({ model: "m", messages, tools: {} }, "tools must be an array");
});

it("writes errors in OpenAI's shape, in a stream too", () => {
  assert.deepEqual(chatApi.errorBody(400, "invalid_request", "bad", "messages"), {
    error: { message: "bad", type: "invalid_request_error", param: "messages", code: "invalid_request" },
  });
  const text = call({ messages }).streamer("c1").error("not_recorded", "no ids");
  assert.equal(
    text,
    `data: ${JSON.stringify({ error: { message: "no ids", type: "server_error", param: null, code: "not_recorded" } })}\n\n`,
  );
});

it("tells a finishing chunk by any choice's finish reason", () => {
  assert.deepEqual(
    [
      chunk(null),
      chunk("length"),
      { choices: [] },
      {},
      { choices: [{ index: 1, finish_reason: "stop" }] },
    ].map(finishesAChoice),
    [false, true, false, false, true],
  );
});

it("takes a string or token-id prompt and routes to completions", () => {
  for (const prompt of ["Once upon", [1, 2, 3]]) {
    const c = completionsApi.request({ model: "m", prompt }, context());
    if (c instanceof ApiProblem) assert.fail(c.message);
    assert.deepEqual([c.api, c.route, c.body], ["completions", "completions", { model: "m", prompt }]);
  }
});

it("refuses several prompts and negative ids", () => {
  const message = "prompt must be a string or an array of token ids (one prompt per call)";
  for (const prompt of [["a", "b"], [1, -2], [], undefined])
    assert.deepEqual(completionsApi.request({ model: "m", prompt }, context()), new ApiProblem(message));
});
