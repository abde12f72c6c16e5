/**
 * A whole OpenAI answer written as the stream of chunks the agent asked for: used when the call went
 * upstream whole because the engine's streams cannot report every sampled id (llama.cpp). The agent's
 * client reads the same message it would have assembled from a real stream: the content (and reasoning,
 * tool calls, logprobs) in one chunk per choice, then each choice's finish reason, then the usage when
 * `stream_options.include_usage` asked for it, then `[DONE]`.
 */
import { sseData } from "./http.ts";
import type { AgentRoute } from "./engines/engine.ts";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** The SSE text of `answer` as a stream (ending with `data: [DONE]`). */
export function wholeAsStream(route: AgentRoute, answer: Json, includeUsage: boolean): string {
  const base = {
    id: answer.id,
    object: route === "chat" ? "chat.completion.chunk" : "text_completion",
    created: answer.created,
    model: answer.model,
    ...(answer.system_fingerprint !== undefined ? { system_fingerprint: answer.system_fingerprint } : {}),
  };
  const choices = Array.isArray(answer.choices) ? answer.choices.filter(isObject) : [];
  const out: string[] = [];
  for (const c of choices) {
    const index = c.index ?? 0;
    const logprobs = c.logprobs ?? null;
    if (route === "chat") {
      const m = isObject(c.message) ? c.message : {};
      const delta: Json = { role: m.role ?? "assistant", content: m.content ?? null };
      if (m.reasoning_content !== undefined) delta.reasoning_content = m.reasoning_content;
      if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0)
        delta.tool_calls = m.tool_calls.map((t, i) => (isObject(t) ? { index: i, ...t } : t));
      out.push(
        sseData(JSON.stringify({ ...base, choices: [{ index, delta, logprobs, finish_reason: null }] })),
      );
      out.push(
        sseData(
          JSON.stringify({
            ...base,
            choices: [{ index, delta: {}, logprobs: null, finish_reason: c.finish_reason ?? null }],
          }),
        ),
      );
    } else {
      out.push(
        sseData(
          JSON.stringify({
            ...base,
            choices: [{ index, text: c.text ?? "", logprobs, finish_reason: null }],
          }),
        ),
      );
      out.push(
        sseData(
          JSON.stringify({
            ...base,
            choices: [{ index, text: "", logprobs: null, finish_reason: c.finish_reason ?? null }],
          }),
        ),
      );
    }
  }
  if (includeUsage && answer.usage !== undefined)
    out.push(sseData(JSON.stringify({ ...base, choices: [], usage: answer.usage })));
  out.push("data: [DONE]\n\n");
  return out.join("");
}
