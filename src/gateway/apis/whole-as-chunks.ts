/**
 * A whole canonical answer as the stream of chunks an engine would have sent: used when a call went
 * upstream whole because the engine's streams cannot report every sampled id (llama.cpp), while the agent
 * asked for a stream. The chunks then go through the agent API's stream translator like real ones, so the
 * agent's client reads the same message it would have assembled from a real stream: per choice, the content
 * (and reasoning, tool calls, logprobs) in one chunk, then its finish reason; then the usage when
 * `includeUsage`. Token ids the answer carries (the agent asked `return_token_ids`) go where vLLM's stream
 * puts them: a choice's `token_ids` with its content, chat's `prompt_token_ids` in the first chunk,
 * completions' on the choice's first chunk.
 */
import type { AgentRoute } from "../engines/engine.ts";
import { isObject, type Json } from "./api.ts";

export function wholeAsChunks(route: AgentRoute, answer: Json, includeUsage: boolean): Json[] {
  const base = {
    id: answer.id,
    object: route === "chat" ? "chat.completion.chunk" : "text_completion",
    created: answer.created,
    model: answer.model,
    ...(answer.system_fingerprint !== undefined ? { system_fingerprint: answer.system_fingerprint } : {}),
  };
  const choices = Array.isArray(answer.choices) ? answer.choices.filter(isObject) : [];
  const out: Json[] = [];
  const ids = (c: Json): Json => {
    const o: Json = {};
    if (Array.isArray(c.token_ids)) o.token_ids = c.token_ids;
    if (route === "completions" && Array.isArray(c.prompt_token_ids)) o.prompt_token_ids = c.prompt_token_ids;
    return o;
  };
  for (const c of choices) {
    const index = c.index ?? 0;
    const logprobs = c.logprobs ?? null;
    const finish = c.finish_reason ?? null;
    const first =
      route === "chat" && out.length === 0 && Array.isArray(answer.prompt_token_ids)
        ? { prompt_token_ids: answer.prompt_token_ids }
        : {};
    if (route === "chat") {
      const m = isObject(c.message) ? c.message : {};
      const delta: Json = { role: m.role ?? "assistant", content: m.content ?? null };
      if (m.reasoning_content !== undefined) delta.reasoning_content = m.reasoning_content;
      if (m.reasoning !== undefined) delta.reasoning = m.reasoning;
      if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0)
        delta.tool_calls = m.tool_calls.map((t, i) => (isObject(t) ? { index: i, ...t } : t));
      out.push({ ...base, ...first, choices: [{ index, delta, logprobs, finish_reason: null, ...ids(c) }] });
      out.push({ ...base, choices: [{ index, delta: {}, logprobs: null, finish_reason: finish }] });
    } else {
      out.push({
        ...base,
        choices: [{ index, text: c.text ?? "", logprobs, finish_reason: null, ...ids(c) }],
      });
      out.push({ ...base, choices: [{ index, text: "", logprobs: null, finish_reason: finish }] });
    }
  }
  if (includeUsage && answer.usage !== undefined) out.push({ ...base, choices: [], usage: answer.usage });
  return out;
}
