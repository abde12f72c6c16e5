import type { FinishReason } from "../../schemas/trajectory.ts";

// Raw spellings seen from vLLM, SGLang, OpenAI, Anthropic-style gateways and TGI. Anything else is
// "unknown": guessing would put truncated or aborted turns into training as if they were complete.
// A Map, not an object: a raw reason of "constructor" or "__proto__" must not reach Object.prototype.
const NORMALISED = new Map<string, FinishReason>(
  Object.entries({
    stop: "stop",
    eos: "stop",
    eos_token: "stop",
    end_turn: "stop",
    stop_sequence: "stop",
    length: "length",
    max_tokens: "length",
    model_length: "length",
    tool_calls: "tool_calls",
    function_call: "tool_calls",
    tool_use: "tool_calls",
    abort: "abort",
    aborted: "abort",
    cancelled: "abort",
    canceled: "abort",
    preempted: "abort",
    // vLLM's `completed` does not say whether the model stopped or hit a limit.
    completed: "unknown",
  } satisfies Record<string, FinishReason>),
);

/** Normalises a backend's raw finish reason. `abort` is never turned into `stop`. */
export function normaliseFinishReason(raw: string): FinishReason {
  return NORMALISED.get(raw.trim().toLowerCase()) ?? "unknown";
}
