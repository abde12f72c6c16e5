import type { FinishReason } from "../../schemas/trajectory.ts";

// Raw spellings seen from vLLM, SGLang, OpenAI, Anthropic-style gateways and TGI. Anything else is
// "unknown": guessing would put truncated or aborted turns into training as if they were complete.
const NORMALISED: Record<string, FinishReason> = {
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
};

/** Normalises a backend's raw finish reason. `abort` is never turned into `stop`. */
export function normaliseFinishReason(raw: string): FinishReason {
  return NORMALISED[raw.trim().toLowerCase()] ?? "unknown";
}
