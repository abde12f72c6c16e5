/**
 * A call as a session keeps it once its response came: what the trie, the row builder and drift
 * detection read, and how a response (with its request, or its own prompt fields) becomes one.
 */
import type { RequestEvent, ResponseEvent, SamplingSettings } from "../../schemas/events.ts";
import type { RoutedExperts } from "../../schemas/routed-experts.ts";
import { RowFlags, type FinishReason, type RowFlag } from "../../schemas/trajectory.ts";
import { normaliseFinishReason } from "./finish-reason.ts";
import type { CallHandle, TrieNode } from "./trie.ts";

/** A call with a response, as the trie and row builder see it. */
export interface CallState extends CallHandle {
  id: string;
  /** Order of insertion within the session. */
  ordinal: number;
  seq: number;
  finishRaw: string;
  finish: FinishReason;
  weightVersion: number | null;
  /**
   * Per output token, the policy version that sampled it, when the response said and not every token has
   * `weightVersion` (a rollout resumed after a weight update); null: every token has `weightVersion`.
   */
  outputVersions: Int32Array | null;
  /**
   * Routed experts of the prompt's last `tokens` positions and of the output's first `tokens` (the
   * event's own buffers, kept without a copy); null: the call carried none.
   */
  promptRouting: RoutedExperts | null;
  outputRouting: RoutedExperts | null;
  /** The sampling settings the call was sent with; null when the gateway did not say. */
  sampling: SamplingSettings | null;
  hasLogprobs: boolean;
  choiceIndex: number | undefined;
  /** First node of the output; null for an empty output. */
  outStart: TrieNode | null;
  outputLength: number;
  /** Few and rarely any: an array, not a Set (an open session's every byte counts, issue 27 item 9). */
  flags: RowFlag[];
  /** Realigned drift, or a call recorded with train: false: its tokens are context (mask 0) in every row. */
  demoted: boolean;
  hasMessages: boolean;
  /** The decoded output and parsed tool calls, when the gateway sent them (rule and judge stages read them). */
  text: string | null;
  toolCalls: unknown[] | null;
}

/**
 * A response's per-token versions as the call keeps them: null when they all equal the call's version
 * (nothing to keep), else a copy (the decoded array may share its buffer with other events).
 */
function ownVersions(versions: Int32Array, weightVersion: number | null): Int32Array | null {
  if (weightVersion !== null && versions.every((v) => v === weightVersion)) return null;
  return versions.slice();
}

/** Where a call's prompt comes from: its request event, or the prompt fields repeated on its response. */
export type PromptSource = Pick<
  RequestEvent,
  "prompt_ids" | "parent_call_id" | "prompt_delta_ids" | "messages"
> & {
  choice_index?: number | undefined;
  weight_version?: number | undefined;
};

/** Adds `flag` to `flags` once. */
export function addFlag(flags: RowFlag[], flag: RowFlag): void {
  if (!flags.includes(flag)) flags.push(flag);
}

/** A new call from its response and where its prompt came from; not yet in the trie. */
export function newCall(
  ev: ResponseEvent,
  request: RequestEvent | undefined,
  prompt: PromptSource,
  routing: { prompt: RoutedExperts | null; output: RoutedExperts | null },
  ordinal: number,
): CallState {
  const call: CallState = {
    id: ev.call_id,
    ordinal,
    seq: ev.seq,
    finishRaw: ev.finish_reason,
    finish: normaliseFinishReason(ev.finish_reason),
    weightVersion: ev.weight_version ?? prompt.weight_version ?? null,
    outputVersions: null,
    promptRouting: routing.prompt,
    outputRouting: routing.output,
    sampling: request?.sampling ?? ev.sampling ?? null,
    hasLogprobs: ev.logprobs !== undefined,
    choiceIndex: prompt.choice_index,
    outStart: null,
    outputLength: ev.output_ids.length,
    // A call recorded with train: false (a side call) is context wherever its tokens appear.
    flags: request?.train === false ? [RowFlags.UNTRAINED_TURN] : [],
    demoted: request?.train === false,
    hasMessages: prompt.messages !== undefined,
    text: ev.text ?? null,
    toolCalls: ev.tool_calls ?? null,
    continued: false,
    end: null,
  };
  if (ev.output_versions !== undefined)
    call.outputVersions = ownVersions(ev.output_versions, call.weightVersion);
  return call;
}
