/**
 * The events of one recorded call, as the gateway writes them: a `request` (the prompt, in the delta form
 * when it extends a branch tip of the session, the agent's API, the canonical messages and tools, the
 * sampling settings, the policy version at dispatch) and a `response` (the sampled ids, their logprobs, the
 * raw finish reason beside the API's stop reason, the version at completion, routed experts), token arrays
 * packed. Lifecycle events (start, reward, end) come
 * from here too, so every event the gateway writes has one shape and one seq counter.
 */
import type { SamplingSettings } from "../schemas/events.ts";
import { encodeRoutedExperts } from "../schemas/routed-experts.ts";
import { packLogprobs, packTokenIds } from "../schemas/tokens.ts";
import { withAnswer } from "./continuation/history.ts";
import type { Capture, ContinuationRecord } from "./engines/engine.ts";
import type { EventRecord } from "./outputs/output.ts";
import type { GatewaySession } from "./sessions.ts";

export interface RecordedCall {
  callId: string;
  /** The agent's API (chat, completions, messages, responses). */
  api?: string;
  /** What the request event records of the API beyond the canonical messages. */
  apiDetails?: Record<string, unknown>;
  /** False: recorded, never trained (a side call). */
  train?: false;
  /** The stop reason the agent was given, in its API's terms (beside the engine's raw finish reason). */
  stopReason?: string;
  /** Set when the agent asked for several choices (n > 1): each is a deliberate sample. */
  choiceIndex?: number;
  prompt: Int32Array;
  capture: Capture;
  messages?: unknown[];
  tools?: unknown[];
  sampling?: SamplingSettings;
  /** The policy version when the call was sent upstream. */
  dispatchVersion?: number;
  /** The policy version when its answer came back (the engine's own, where it reports one). */
  completionVersion?: number;
  /** Prompt mode tokens: how the prompt was made, and the conversation's digest (continuation/plan.ts). */
  continuation?: ContinuationRecord;
  /** When the call was sent upstream and when it came back (ms since the epoch). */
  sentAt: number;
  doneAt: number;
}

/** What recording one call found: the events, and how many logprobs the engine did not give. */
export interface CallEvents {
  records: EventRecord[];
  missingLogprobs: number;
  delta: boolean;
}

function record(s: GatewaySession, event: Record<string, unknown>): EventRecord {
  const value = JSON.stringify(event);
  if (s.fleet === null) return { key: s.uid, value };
  // A replica of a fleet: a takeover reads a session's events back by these, never parsing the others.
  return { key: s.uid, value, headers: { "trajflow-session": s.id, "trajflow-gen": String(s.gen) } };
}

function base(s: GatewaySession, type: string, ts: number) {
  const seq = s.takeSeq(1);
  return s.gen === 0
    ? { v: 1, type, uid: s.uid, session_id: s.id, seq, ts }
    : { v: 1, type, uid: s.uid, session_id: s.id, seq, ts, gen: s.gen };
}

/** session.start, written before a session's first other event. */
export function startEvent(s: GatewaySession, ts: number): EventRecord {
  s.started = true;
  return record(s, {
    ...base(s, "session.start", ts),
    ...(s.sampleIndex !== undefined ? { sample_index: s.sampleIndex } : {}),
    ...(s.groupSize !== undefined ? { group_size: s.groupSize } : {}),
    ...(s.metadata !== undefined ? { metadata: s.metadata } : {}),
    // The key's hash (never the key): a restarted gateway maps the key to its session again.
    ...(s.apiKeyHash !== null ? { api_key_sha256: s.apiKeyHash } : {}),
  });
}

/** policy.update: the trainer's new policy version (POST /weights), for the pipeline's staleness stage. */
export function policyUpdateEvent(version: number, ts: number): string {
  return JSON.stringify({ v: 1, type: "policy.update", weight_version: version, ts });
}

/**
 * The request and response events of one call (and the session.start before them when the session has
 * none yet). Updates the session's tips: call this in the order the events are appended.
 */
export function callEvents(s: GatewaySession, call: RecordedCall): CallEvents {
  const records: EventRecord[] = [];
  if (!s.started) records.push(startEvent(s, call.sentAt));
  const c = call.capture;
  const parent = s.parentOf(call.prompt);
  const prompt =
    parent === null
      ? { prompt_ids: packTokenIds(call.prompt) }
      : {
          parent_call_id: parent.callId,
          prompt_delta_ids: packTokenIds(call.prompt.subarray(parent.tokens.length)),
        };
  const k = call.continuation;
  // A continued call's messages in the delta form too: only those after the parent branch's (whose tools
  // they share), so a long session's requests stay small.
  const offset = k?.parent !== undefined && k.parent === parent?.callId ? k.messagesOffset : undefined;
  records.push(
    record(s, {
      ...base(s, "request", call.sentAt),
      call_id: call.callId,
      ...prompt,
      ...(call.api !== undefined ? { api: call.api } : {}),
      ...(call.apiDetails !== undefined ? { api_details: call.apiDetails } : {}),
      ...(call.train === false ? { train: false } : {}),
      ...(k !== undefined ? { prompt_mode: k.form } : {}),
      ...(call.messages !== undefined
        ? offset !== undefined
          ? { messages: call.messages.slice(offset), messages_offset: offset }
          : { messages: call.messages }
        : {}),
      ...(call.tools !== undefined && offset === undefined ? { tools: call.tools } : {}),
      ...(call.choiceIndex !== undefined ? { choice_index: call.choiceIndex } : {}),
      ...(call.dispatchVersion !== undefined ? { weight_version: call.dispatchVersion } : {}),
      ...(call.sampling !== undefined ? { sampling: call.sampling } : {}),
      ...(c.promptRoutedExperts !== undefined
        ? { prompt_routed_experts: encodeRoutedExperts(c.promptRoutedExperts) }
        : {}),
    }),
  );
  // A token the engine gave no logprob for stays NaN in the packed array (the protocol's "missing"): its
  // rows say `missing_logprobs` rather than carry a number nobody sampled.
  const missing = c.logprobs === undefined ? c.outputIds.length : countNaN(c.logprobs);
  const logprobs = c.logprobs !== undefined ? { logprobs: packLogprobs(c.logprobs) } : {};
  const version = c.weightVersion ?? call.completionVersion;
  records.push(
    record(s, {
      ...base(s, "response", call.doneAt),
      call_id: call.callId,
      output_ids: packTokenIds(c.outputIds),
      ...logprobs,
      finish_reason: c.finishReason,
      ...(call.stopReason !== undefined ? { stop_reason: call.stopReason } : {}),
      ...(c.malformedToolCalls !== undefined ? { malformed_tool_calls: c.malformedToolCalls } : {}),
      ...(version !== undefined ? { weight_version: version } : {}),
      ...(c.outputVersions !== undefined ? { output_versions: packTokenIds(c.outputVersions) } : {}),
      ...(c.routedExperts !== undefined ? { routed_experts: encodeRoutedExperts(c.routedExperts) } : {}),
      ...(c.text !== undefined ? { text: c.text } : {}),
      ...(c.toolCalls !== undefined && c.toolCalls.length > 0 ? { tool_calls: c.toolCalls } : {}),
    }),
  );
  const history =
    k === undefined
      ? undefined
      : {
          digest: withAnswer(k.promptDigest, c.text, c.toolCalls),
          count: k.messageCount + 1,
          promptDigest: k.promptDigest,
          settings: k.settings,
        };
  s.addTip(call.callId, call.prompt, c.outputIds, parent?.callId ?? null, history);
  s.calls++;
  s.sampledTokens += c.outputIds.length;
  return {
    records,
    missingLogprobs: c.logprobs === undefined ? c.outputIds.length : missing,
    delta: parent !== null,
  };
}

function countNaN(values: Float32Array): number {
  let n = 0;
  for (let i = 0; i < values.length; i++) if (values[i] !== values[i]) n++;
  return n;
}

/** A reward for the session or one of its calls. */
export function rewardEvent(
  s: GatewaySession,
  ts: number,
  fields: {
    value: number;
    target?: string;
    stage?: string;
    key?: string;
    finished?: boolean;
    info?: Record<string, unknown>;
  },
): EventRecord[] {
  const records = s.started ? [] : [startEvent(s, ts)];
  records.push(record(s, { ...base(s, "reward", ts), ...fields }));
  return records;
}

/** session.end. */
export function endEvent(s: GatewaySession, ts: number, status: "ok" | "aborted" | "failed"): EventRecord[] {
  const records = s.started ? [] : [startEvent(s, ts)];
  records.push(record(s, { ...base(s, "session.end", ts), status }));
  return records;
}

/**
 * The sampling settings the agent sent, as the protocol carries them: a value outside the protocol's range
 * is left out (the engine judged it; the pipeline would otherwise reject the whole call).
 */
export function samplingOf(body: Record<string, unknown>, engine: string): SamplingSettings {
  const out: SamplingSettings = { engine };
  const num = (k: string) =>
    typeof body[k] === "number" && Number.isFinite(body[k]) ? (body[k] as number) : undefined;
  const t = num("temperature");
  if (t !== undefined && t >= 0) out.temperature = t;
  const p = num("top_p");
  if (p !== undefined && p > 0 && p <= 1) out.top_p = p;
  const k = num("top_k");
  if (k !== undefined && Number.isInteger(k) && k >= -1) out.top_k = k;
  const m = num("min_p");
  if (m !== undefined && m >= 0 && m <= 1) out.min_p = m;
  const r = num("repetition_penalty");
  if (r !== undefined && r > 0) out.repetition_penalty = r;
  return out;
}
