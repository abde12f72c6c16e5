/**
 * vLLM's renderer against the routes' shapes in vLLM 0.33.0 (vllm/entrypoints/serve/tokenize): the chat
 * form of /tokenize for the template's rendering, /detokenize for its text, the
 * prompt form with add_special_tokens false for a continuation's text.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import type { UpstreamJson } from "./engine.ts";
import { vllmRenderer } from "./vllm-render.ts";

function upstream(): { json: UpstreamJson; sent: Array<[string, unknown]> } {
  const sent: Array<[string, unknown]> = [];
  const json: UpstreamJson = async (path, body) => {
    sent.push([path, body]);
    const b = body as Record<string, unknown>;
    if (path === "/tokenize" && b.messages !== undefined)
      return { count: 3, max_model_len: 4096, tokens: [7, 8, 9] };
    if (path === "/tokenize") return { count: 2, max_model_len: 4096, tokens: [151645, 198] };
    if (path === "/detokenize")
      return { prompt: (b.tokens as number[]).length === 1 ? "<|im_end|>" : "<|im_start|>user\nhi" };
    throw new Error(path);
  };
  return { json, sent };
}

it("renders a chat body through /tokenize's chat form and reads its text back through /detokenize", async () => {
  const u = upstream();
  const body = {
    model: "Qwen/Qwen3-8B",
    messages: [{ role: "user", content: "hi" }],
    tools: [],
    chat_template_kwargs: { enable_thinking: false },
  };
  assert.deepEqual([...(await vllmRenderer.renderIds(body, u.json))], [7, 8, 9]);
  assert.equal(await vllmRenderer.renderText(body, u.json), "<|im_start|>user\nhi");
  const chatForm = {
    model: "Qwen/Qwen3-8B",
    messages: body.messages,
    tools: [],
    chat_template_kwargs: { enable_thinking: false },
  };
  assert.deepEqual(u.sent, [
    ["/tokenize", chatForm],
    ["/tokenize", chatForm],
    ["/detokenize", { model: "Qwen/Qwen3-8B", tokens: [7, 8, 9] }],
  ]);
});

it("tokenizes a continuation's text without special tokens added", async () => {
  const u = upstream();
  assert.deepEqual([...(await vllmRenderer.tokenize("<|im_end|>\n", u.json))], [151645, 198]);
  assert.deepEqual(u.sent, [["/tokenize", { prompt: "<|im_end|>\n", add_special_tokens: false }]]);
});

it("refuses an answer without tokens rather than guessing", async () => {
  await assert.rejects(
    vllmRenderer.renderIds({ messages: [] }, async () => ({ count: 0 })),
    /without a tokens array/,
  );
});
