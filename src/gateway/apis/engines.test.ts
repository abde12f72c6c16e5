/**
 * Every engine under every API, with no adapter written for an API: a Messages and a Responses call
 * prepared by each engine adapter (what goes upstream), and each engine's whole answer, as the engine writes
 * it, read by its adapter and translated back by the codec. The engines' shapes differ where the codecs must
 * not care: vLLM's `reasoning` and `stop_reason`, SGLang's `reasoning_content`, `matched_stop` and a null
 * `prompt_tokens_details`, llama.cpp's `__verbose` and `timings`.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import { Metrics } from "../../core/metrics.ts";
import type { EngineAdapter, UpstreamJson } from "../engines/engine.ts";
import { LlamaCppAdapter } from "../engines/llamacpp.ts";
import { createSglangAdapter } from "../engines/sglang.ts";
import { createVllmAdapter } from "../engines/vllm.ts";
import type { ApiCall, Json } from "./api.ts";
import { messagesApi } from "./messages.ts";
import { responsesApi } from "./responses.ts";

const settings = { upstreamModel: () => "served", hostedTools: "refuse" as const, storedResponses: 4 };
const ctx = () => ({ session: { responses: null }, settings, metrics: new Metrics() });

/** llama.cpp's extra round trips for the prompt's ids: the rendered prompt and its 5 ids. */
const llamaUpstream: UpstreamJson = async (path) =>
  path === "/apply-template" ? { prompt: "<prompt>" } : { tokens: [1, 2, 3, 4, 5] };
const none: UpstreamJson = async () => {
  throw new Error("no extra call");
};

interface Engine {
  adapter: EngineAdapter;
  upstream: UpstreamJson;
  /** The engine's whole chat answer: reasoning, text, a tool call; the stop string "END" matched. */
  answer(): Json;
}

const message = {
  role: "assistant",
  content: "hi",
  tool_calls: [{ id: "c1", type: "function", function: { name: "ls", arguments: '{"p":"."}' } }],
};
const ENGINES: Record<string, Engine> = {
  vllm: {
    adapter: createVllmAdapter(),
    upstream: none,
    answer: () => ({
      id: "x",
      object: "chat.completion",
      created: 1,
      model: "served",
      prompt_token_ids: [1, 2, 3, 4, 5],
      choices: [
        {
          index: 0,
          message: { ...message, reasoning: "think" },
          logprobs: null,
          finish_reason: "stop",
          stop_reason: "END",
          token_ids: [7, 8, 9],
        },
      ],
      usage: {
        prompt_tokens: 5,
        completion_tokens: 3,
        total_tokens: 8,
        prompt_tokens_details: { cached_tokens: 2 },
      },
    }),
  },
  sglang: {
    adapter: createSglangAdapter(),
    upstream: none,
    answer: () => ({
      id: "x",
      object: "chat.completion",
      created: 1,
      model: "served",
      choices: [
        {
          index: 0,
          message: { ...message, reasoning_content: "think" },
          finish_reason: "stop",
          matched_stop: "END",
        },
      ],
      sglext: { input_ids: [1, 2, 3, 4, 5], output_ids: [[7, 8, 9]] },
      usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8, prompt_tokens_details: null },
    }),
  },
  llamacpp: {
    adapter: new LlamaCppAdapter(),
    upstream: llamaUpstream,
    answer: () => ({
      id: "x",
      object: "chat.completion",
      created: 1,
      model: "served",
      choices: [{ index: 0, message: { ...message, reasoning_content: "think" }, finish_reason: "stop" }],
      __verbose: { index: 0, tokens: [7, 8, 9], stop_type: "word", stopping_word: "END" },
      usage: {
        prompt_tokens: 5,
        completion_tokens: 3,
        total_tokens: 8,
        prompt_tokens_details: { cached_tokens: 2 },
      },
      timings: { cache_n: 2, prompt_n: 3 },
    }),
  },
};

const tools = { name: "ls", input_schema: { type: "object", properties: { p: { type: "string" } } } };

async function through(engine: Engine, call: ApiCall) {
  const prepared = await engine.adapter.prepare(call.route, call.body, engine.upstream);
  const { captures, forAgent } = engine.adapter.answer(prepared, engine.answer());
  const outcome = { callIds: ["k-1"], captures, promptLengths: [5] };
  return { prepared, captures, answer: call.answer(forAgent, outcome) };
}

for (const [name, engine] of Object.entries(ENGINES)) {
  it(`${name}: a Messages call goes up as a chat call and comes back as a Message with every block`, async () => {
    const call = messagesApi.request(
      {
        model: "claude-x",
        max_tokens: 16,
        stop_sequences: ["END"],
        tools: [tools],
        messages: [{ role: "user", content: "go" }],
      },
      ctx(),
    ) as ApiCall;
    const { prepared, captures, answer } = await through(engine, call);
    assert.equal(prepared.path, "/v1/chat/completions");
    assert.equal(prepared.body.model, "served");
    assert.deepEqual(prepared.body.stop, ["END"]);
    assert.deepEqual([...captures[0]!.outputIds], [7, 8, 9]);
    assert.equal(captures[0]!.stopSequence, "END");
    assert.equal(call.stopReason(captures[0]!), "tool_use");
    assert.deepEqual(answer.body.content, [
      { type: "thinking", thinking: "think", signature: "trajflow:k-1" },
      { type: "text", text: "hi" },
      { type: "tool_use", id: "c1", name: "ls", input: { p: "." } },
    ]);
    assert.equal(answer.body.stop_reason, "tool_use");
    assert.equal(answer.body.model, "claude-x");
    assert.equal((answer.body.usage as Json).output_tokens, 3);
  });

  it(`${name}: a Responses call goes up as a chat call and comes back as a Response with every item`, async () => {
    const call = responsesApi.request(
      {
        model: "gpt-x",
        input: "go",
        tools: [{ type: "function", name: "ls", parameters: tools.input_schema }],
      },
      ctx(),
    ) as ApiCall;
    const { answer } = await through(engine, call);
    assert.deepEqual(
      (answer.body.output as Json[]).map((o) => o.type),
      ["reasoning", "message", "function_call"],
    );
    assert.equal(answer.body.status, "completed");
    assert.equal((answer.body.usage as Json).output_tokens, 3);
  });
}
