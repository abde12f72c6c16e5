/**
 * SGLang's chat template and tokenizer through its routes (sglang 0.5.23, entrypoints/openai/
 * serving_tokenize.py and http_server.py): `/v1/tokenize` with `messages` renders them through the chat
 * pipeline (tools, chat_template_kwargs, reasoning_effort; add_generation_prompt) and answers
 * `{tokens, count, max_model_len}`; with `prompt` it tokenizes text (`add_special_tokens` false: no BOS);
 * `/v1/detokenize` answers `{text}`, special tokens written out only with `skip_special_tokens: false`
 * (SGLang hides them by default). No route returns the rendered text itself, so the text is the rendered
 * ids detokenized. Older SGLang releases take only `prompt` on /v1/tokenize: a chat body is then refused,
 * and so is the call (docs/gateway.md#prompt-modes).
 */
import type { PromptRenderer, UpstreamJson } from "./engine.ts";

type Json = Record<string, unknown>;

function ids(answer: unknown): Int32Array {
  const tokens = (answer as Json | null)?.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t)))
    throw new Error("SGLang /v1/tokenize answered without a tokens array");
  return Int32Array.from(tokens as number[]);
}

function chatTokenize(body: Json): Json {
  const out: Json = { messages: body.messages, add_generation_prompt: true };
  for (const k of ["model", "tools", "chat_template_kwargs", "reasoning_effort"])
    if (body[k] !== undefined) out[k] = body[k];
  return out;
}

async function rendered(body: Json, upstream: UpstreamJson, signal?: AbortSignal): Promise<Int32Array> {
  return ids(await upstream("/v1/tokenize", chatTokenize(body), signal));
}

export const sglangRenderer: PromptRenderer = {
  renderIds: rendered,
  async renderText(body, upstream, signal) {
    const tokens = Array.from(await rendered(body, upstream, signal));
    const answer = (await upstream(
      "/v1/detokenize",
      { tokens, skip_special_tokens: false },
      signal,
    )) as Json | null;
    if (typeof answer?.text !== "string") throw new Error("SGLang /v1/detokenize answered without a text");
    return answer.text;
  },
  async tokenize(text, upstream, signal) {
    return ids(await upstream("/v1/tokenize", { prompt: text, add_special_tokens: false }, signal));
  },
};
