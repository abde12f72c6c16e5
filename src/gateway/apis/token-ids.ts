/**
 * vLLM's `return_token_ids` for every engine and prompt mode: an agent that asks for it (Chat or Completions)
 * gets the prompt's ids and each choice's sampled ids in the answer, as vLLM writes them (chat:
 * `prompt_token_ids` at the top, completions: on each choice; `token_ids` on each choice), from what the
 * gateway captured. vLLM writes them itself in engine mode; llama.cpp has no such flag, and prompt mode tokens
 * rebuilds the chat answer from a completions one. The ids are the captured ones, never retokenized text.
 */
import type { AgentRoute, Capture } from "../engines/engine.ts";
import { isObject, type Json } from "./api.ts";

/** Whether the agent asked for the ids (vLLM's flag, on the Chat or Completions API). */
export const asksTokenIds = (body: Json): boolean => body.return_token_ids === true;

/**
 * The whole answer with the ids of `captures` (by choice index) and the prompt's, where known. A choice
 * without a capture (llama.cpp's extra choices) is left as it is.
 */
export function withTokenIds(
  route: AgentRoute,
  answer: Json,
  captures: readonly Capture[],
  promptIds: Int32Array | undefined,
): Json {
  const byIndex = new Map(captures.map((c) => [c.choiceIndex, c]));
  const prompt = (c: Capture | undefined) => c?.promptIds ?? promptIds;
  const choices = Array.isArray(answer.choices) ? answer.choices : [];
  const out: Json = {
    ...answer,
    choices: choices.map((raw: unknown) => {
      if (!isObject(raw)) return raw;
      const capture = byIndex.get(typeof raw.index === "number" ? raw.index : 0);
      if (capture === undefined) return raw;
      const ids: Json = { token_ids: Array.from(capture.outputIds) };
      const p = prompt(capture);
      if (route === "completions" && p !== undefined) ids.prompt_token_ids = Array.from(p);
      return { ...raw, ...ids };
    }),
  };
  const first = prompt(captures[0]);
  if (route === "chat" && first !== undefined) out.prompt_token_ids = Array.from(first);
  return out;
}
