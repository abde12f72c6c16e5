/**
 * Prompt mode tokens on SGLang: its renderer against the routes' shapes in sglang 0.5.23
 * (serving_tokenize.py: /v1/tokenize with messages or prompt, /v1/detokenize with skip_special_tokens), and
 * a call through the token adapter over the real SGLang adapter: the completions route with the ids as the
 * prompt, and SGLang's completions answer (choice token_ids, prompt_token_ids, OpenAI-shaped logprobs)
 * read back into a chat answer with its tool call parsed.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import { createLogger } from "../../core/logger.ts";
import { Metrics } from "../../core/metrics.ts";
import { TokenPrompts } from "../continuation/token-adapter.ts";
import { outputParser } from "../parsers/parser.ts";
import { GatewaySession } from "../sessions.ts";
import type { UpstreamJson } from "./engine.ts";
import { createSglangAdapter } from "./sglang.ts";
import { sglangRenderer } from "./sglang-render.ts";

const PROMPT = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198];
const TEXT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";

function upstream(): { json: UpstreamJson; sent: Array<[string, unknown]> } {
  const sent: Array<[string, unknown]> = [];
  const json: UpstreamJson = async (path, body) => {
    sent.push([path, body]);
    const b = body as Record<string, unknown>;
    if (path === "/v1/tokenize" && b.messages !== undefined)
      return { tokens: PROMPT, count: PROMPT.length, max_model_len: 32768 };
    if (path === "/v1/tokenize") return { tokens: [151645, 198], count: 2, max_model_len: 32768 };
    if (path === "/v1/detokenize") return { text: TEXT };
    throw new Error(path);
  };
  return { json, sent };
}

it("renders through /v1/tokenize's messages form and reads the text back with special tokens written out", async () => {
  const u = upstream();
  const body = {
    model: "Qwen/Qwen3-8B",
    messages: [{ role: "user", content: "hi" }],
    reasoning_effort: "low",
  };
  assert.deepEqual([...(await sglangRenderer.renderIds(body, u.json))], PROMPT);
  assert.equal(await sglangRenderer.renderText(body, u.json), TEXT);
  assert.deepEqual([...(await sglangRenderer.tokenize("<|im_end|>\n", u.json))], [151645, 198]);
  const chatForm = {
    messages: body.messages,
    add_generation_prompt: true,
    model: "Qwen/Qwen3-8B",
    reasoning_effort: "low",
  };
  assert.deepEqual(u.sent, [
    ["/v1/tokenize", chatForm],
    ["/v1/tokenize", chatForm],
    ["/v1/detokenize", { tokens: PROMPT, skip_special_tokens: false }],
    ["/v1/tokenize", { prompt: "<|im_end|>\n", add_special_tokens: false }],
  ]);
});

it("refuses a /v1/tokenize answer without tokens (an SGLang that takes only prompts there)", async () => {
  const refused: UpstreamJson = async () => ({ object: "error", message: "messages is not supported" });
  await assert.rejects(sglangRenderer.renderIds({ messages: [] }, refused), /without a tokens array/);
});

it("sends a chat call to SGLang's completions route as ids and reads its answer back as a chat answer", async () => {
  const metrics = new Metrics();
  const tokens = new TokenPrompts(
    createSglangAdapter(),
    { toolParser: "hermes", reasoningParser: "none", parser: outputParser("hermes", "none") },
    metrics,
    createLogger({ level: "silent" }),
  );
  const adapter = tokens.adapterFor(new GatewaySession({ uid: "u", sessionId: "s" }, 8));
  const u = upstream();
  const p = await adapter.prepare(
    "chat",
    { model: "m", messages: [{ role: "user", content: "hi" }] },
    u.json,
  );
  assert.equal(p.path, "/v1/completions");
  assert.deepEqual(p.body, { model: "m", prompt: PROMPT, return_token_ids: true, logprobs: 0 });
  const call = '<tool_call>{"name": "calc", "arguments": {"a": 1}}</tool_call>';
  const { captures, forAgent } = adapter.answer(p, {
    id: "req-1",
    object: "text_completion",
    created: 1700000000,
    model: "m",
    choices: [
      {
        index: 0,
        text: call,
        logprobs: {
          text_offset: [-1, -1],
          token_logprobs: [-0.5, -0.25],
          tokens: ["<tool_call>", "x"],
          top_logprobs: [{}, {}],
        },
        finish_reason: "stop",
        matched_stop: 151645,
        token_ids: [151657, 40, 151645],
        prompt_token_ids: PROMPT,
      },
    ],
    usage: { prompt_tokens: PROMPT.length, completion_tokens: 3, total_tokens: PROMPT.length + 3 },
  });
  const choice = (forAgent.choices as Array<Record<string, unknown>>)[0]!;
  const message = choice.message as Record<string, unknown>;
  assert.equal(forAgent.object, "chat.completion");
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(message.content, null);
  assert.deepEqual(
    (message.tool_calls as Array<{ function: unknown }>).map((t) => t.function),
    [{ name: "calc", arguments: '{"a":1}' }],
  );
  assert.equal(choice.logprobs, null, "the agent asked no logprobs");
  assert.deepEqual([...captures[0]!.outputIds], [151657, 40, 151645]);
  assert.deepEqual([...captures[0]!.promptIds!], PROMPT);
  assert.equal(captures[0]!.finishReason, "stop", "the engine's raw finish reason");
});
