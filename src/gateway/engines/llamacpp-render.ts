/**
 * llama.cpp's chat template and tokenizer through llama-server's routes: `/apply-template` renders a chat
 * body exactly as the chat route will (the same oaicompat_chat_params_parse), `/tokenize` turns text into
 * ids (`parse_special` reads `<|im_end|>` as its token).
 */
import type { AgentRoute, PromptRenderer, UpstreamJson } from "./engine.ts";
import { type Json, asObject, int32 } from "./llamacpp-read.ts";

async function tokenize(
  upstream: UpstreamJson,
  content: unknown,
  addSpecial: boolean,
  signal?: AbortSignal,
): Promise<Int32Array> {
  const answer = asObject(
    await upstream("/tokenize", { content, add_special: addSpecial, parse_special: true }, signal),
  );
  const ids = int32(answer?.tokens);
  if (ids === undefined) throw new Error("llama.cpp /tokenize answered without a tokens array");
  return ids;
}

async function applyTemplate(upstream: UpstreamJson, body: Json, signal?: AbortSignal): Promise<string> {
  const rendered = asObject(await upstream("/apply-template", body, signal));
  if (typeof rendered?.prompt !== "string")
    throw new Error("llama.cpp /apply-template answered without a prompt");
  return rendered.prompt;
}

export const llamaRenderer: PromptRenderer = {
  async renderIds(body, upstream, signal) {
    const [ids] = await promptIds("chat", body, upstream, signal);
    return ids!;
  },
  renderText: (body, upstream, signal) => applyTemplate(upstream, body, signal),
  tokenize: (text, upstream, signal) => tokenize(upstream, text, false, signal),
};

/**
 * The prompt ids of the call, by prompt. Chat: `/apply-template` renders exactly what the chat route will
 * (same parser, same template), `/tokenize` with the chat route's flags. Completions: a prompt of ids is
 * used as it is; text (or text mixed with ids) goes through `/tokenize` with the same flags.
 */
export async function promptIds(
  route: AgentRoute,
  body: Json,
  upstream: UpstreamJson,
  signal?: AbortSignal,
): Promise<Int32Array[]> {
  // The chat and completion handlers tokenize with add_special and parse_special (tokenize_input_prompts).
  const tokenizeAll = (content: unknown) => tokenize(upstream, content, true, signal);
  if (route === "chat") return [await tokenizeAll(await applyTemplate(upstream, body, signal))];
  const prompt = body.prompt;
  if (typeof prompt === "string") return [await tokenizeAll(prompt)];
  if (Array.isArray(prompt)) {
    const ids = int32(prompt);
    if (ids !== undefined) return [ids];
    // Numbers mixed with text are one prompt (json_is_array_and_contains_numbers); otherwise one per item.
    if (prompt.some((p) => typeof p === "number")) return [await tokenizeAll(prompt)];
    const out: Int32Array[] = [];
    for (const p of prompt as unknown[]) {
      const one = int32(p);
      out.push(one ?? (await tokenizeAll(p)));
    }
    return out;
  }
  return [];
}
