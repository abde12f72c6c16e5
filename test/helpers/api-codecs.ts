/**
 * What the API codecs' unit tests (src/gateway/apis/*.test.ts) share: the context a codec translates a
 * request in, a recorded call's outcome, and canonical chat chunks shaped as vLLM's
 * chat_completion_stream_generator sends them.
 */
import { Metrics } from "../../src/core/metrics.ts";
import type { CallOutcome, Json, RequestContext } from "../../src/gateway/apis/api.ts";
import type { ResponseStore } from "../../src/gateway/apis/response-store.ts";
import type { Capture } from "../../src/gateway/engines/engine.ts";

/** A codec's context: models pass through unless `upstreamModel` maps them, hosted tools refused. */
export function codecContext(
  options: {
    hostedTools?: "refuse" | "drop";
    upstreamModel?: (m: string) => string;
    responses?: ResponseStore | null;
  } = {},
): RequestContext {
  return {
    session: { responses: options.responses ?? null },
    settings: {
      upstreamModel: options.upstreamModel ?? ((m) => m),
      hostedTools: options.hostedTools ?? "refuse",
      storedResponses: 16,
    },
    metrics: new Metrics(),
  };
}

/** Call c7, recorded: 5 sampled ids after a 20-token prompt. */
export const outcomeOf = (finishReason: string, extra: Partial<Capture> = {}): CallOutcome => ({
  callIds: ["c7"],
  captures: [{ choiceIndex: 0, outputIds: Int32Array.from([1, 2, 3, 4, 5]), finishReason, ...extra }],
  promptLengths: [20],
});

const base = { id: "chatcmpl-8f2", object: "chat.completion.chunk", created: 1700000000, model: "qwen3-8b" };

/** A streamed chat chunk of choice 0 (vLLM adds `stop_reason` to the finishing one). */
export const chunk = (delta: Json, finish: string | null = null, logprobs: Json | null = null): Json => ({
  ...base,
  choices: [{ index: 0, delta, logprobs, finish_reason: finish, ...(finish ? { stop_reason: null } : {}) }],
});

/** A chunk carrying one tool call piece. */
export const piece = (p: Json) => chunk({ tool_calls: [p] });

/** The usage chunk at the end of a stream with include_usage. */
export const usageChunk = (usage: Json): Json => ({ ...base, choices: [], usage });

/** A usage with a prefix-cache hit: 20 prompt tokens, 16 of them cached, 5 sampled. */
export const CACHED_USAGE = {
  prompt_tokens: 20,
  total_tokens: 25,
  completion_tokens: 5,
  prompt_tokens_details: { cached_tokens: 16 },
};
