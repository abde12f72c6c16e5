/**
 * vLLM's chat template and tokenizer through its routes (vllm/entrypoints/serve/tokenize, vLLM 0.33.0):
 * `/tokenize` with `messages` renders them with the served template (TokenizeChatRequest:
 * add_generation_prompt true, add_special_tokens false by default, as the chat route tokenizes) and answers
 * `{count, max_model_len, tokens}`; `/tokenize` with `prompt` tokenizes text (special tokens' text read as
 * those tokens); `/detokenize` answers `{prompt}` with special tokens written out. No route returns the
 * rendered text itself, so the text is the rendered ids detokenized.
 */
import type { PromptRenderer, UpstreamJson } from "./engine.ts";

type Json = Record<string, unknown>;

function ids(answer: unknown, route: string): Int32Array {
  const tokens = (answer as Json | null)?.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t)))
    throw new Error(`vLLM ${route} answered without a tokens array`);
  return Int32Array.from(tokens as number[]);
}

async function detokenize(
  upstream: UpstreamJson,
  model: unknown,
  tokens: ArrayLike<number>,
  signal?: AbortSignal,
) {
  const answer = (await upstream(
    "/detokenize",
    { model, tokens: Array.from(tokens) },
    signal,
  )) as Json | null;
  if (typeof answer?.prompt !== "string") throw new Error("vLLM /detokenize answered without a prompt");
  return answer.prompt;
}

/** The chat form of /tokenize for a chat body: what the chat route renders. */
function chatTokenize(body: Json): Json {
  const { model, messages, tools, chat_template_kwargs: kwargs } = body;
  return {
    model,
    messages,
    ...(tools !== undefined ? { tools } : {}),
    ...(kwargs !== undefined ? { chat_template_kwargs: kwargs } : {}),
  };
}

/** vLLM's routes as a PromptRenderer (prompt mode tokens). */
export const vllmRenderer: PromptRenderer = {
  async renderIds(body, upstream, signal) {
    return ids(await upstream("/tokenize", chatTokenize(body), signal), "/tokenize");
  },
  async renderText(body, upstream, signal) {
    const rendered = ids(await upstream("/tokenize", chatTokenize(body), signal), "/tokenize");
    return detokenize(upstream, body.model, rendered, signal);
  },
  async tokenize(text, upstream, signal) {
    return ids(await upstream("/tokenize", { prompt: text, add_special_tokens: false }, signal), "/tokenize");
  },
};
