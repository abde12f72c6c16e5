/**
 * The shared test vector (test/vectors/gateway-events.json): hand-built calls and the exact events both
 * trajflow's gateway and the Python emitter (trajflow.emit) must write for them. This runs the gateway's
 * event builder on a vector session; python/tests/test_emit_vectors.py runs trajflow.emit on the same.
 */
import { readFileSync } from "node:fs";
import { callEvents, endEvent, rewardEvent, startEvent } from "../../src/gateway/call-events.ts";
import { GatewaySession } from "../../src/gateway/sessions.ts";
import type { RoutedExpertDtype, RoutedExperts } from "../../src/schemas/routed-experts.ts";

export const VECTOR_PATH = new URL("../vectors/gateway-events.json", import.meta.url).pathname;

interface VectorExperts {
  dtype: RoutedExpertDtype;
  shape: [number, number, number];
  ids: number[];
}

export interface VectorStep {
  op: "start" | "call" | "reward" | "end";
  ts?: number;
  call_id?: string;
  choice_index?: number;
  prompt_ids?: number[];
  output_ids?: number[];
  /** null: a token the engine gave no logprob for. */
  logprobs?: Array<number | null>;
  finish_reason?: string;
  messages?: unknown[];
  tools?: unknown[];
  sampling?: Record<string, unknown>;
  weight_version?: number;
  completion_version?: number;
  text?: string;
  tool_calls?: unknown[];
  output_versions?: number[];
  routed_experts?: VectorExperts;
  prompt_routed_experts?: VectorExperts;
  sent_at?: number;
  done_at?: number;
  value?: number;
  target?: string;
  stage?: string;
  key?: string;
  finished?: boolean;
  info?: Record<string, unknown>;
  status?: "ok" | "aborted" | "failed";
  /** What the step must append: the events' exact text, and for calls what recording counted. */
  events?: string[];
  missing_logprobs?: number;
  delta?: boolean;
}

export interface VectorSession {
  comment: string;
  uid: string;
  session_id: string;
  sample_index?: number;
  group_size?: number;
  metadata?: Record<string, unknown>;
  max_tips: number;
  steps: VectorStep[];
}

export function readVector(): { description: string; sessions: VectorSession[] } {
  return JSON.parse(readFileSync(VECTOR_PATH, "utf8")) as { description: string; sessions: VectorSession[] };
}

const BYTES: Record<RoutedExpertDtype, number> = { uint8: 1, uint16: 2, int16: 2, int32: 4 };

function experts(v: VectorExperts): RoutedExperts {
  const data = new Uint8Array(v.ids.length * BYTES[v.dtype]);
  const view = new DataView(data.buffer);
  v.ids.forEach((id, i) => {
    if (v.dtype === "uint8") view.setUint8(i, id);
    else if (v.dtype === "uint16") view.setUint16(i * 2, id, true);
    else if (v.dtype === "int16") view.setInt16(i * 2, id, true);
    else view.setInt32(i * 4, id, true);
  });
  const [tokens, layers, top_k] = v.shape;
  return { dtype: v.dtype, tokens, layers, top_k, data };
}

/** What the gateway's event builder appends for each step of a vector session. */
export function gatewaySteps(
  v: VectorSession,
): Array<Pick<VectorStep, "events" | "missing_logprobs" | "delta">> {
  const s = new GatewaySession(
    {
      uid: v.uid,
      sessionId: v.session_id,
      ...(v.sample_index !== undefined ? { sampleIndex: v.sample_index } : {}),
      ...(v.group_size !== undefined ? { groupSize: v.group_size } : {}),
      ...(v.metadata !== undefined ? { metadata: v.metadata } : {}),
    },
    v.max_tips,
  );
  return v.steps.map((step) => {
    if (step.op === "start") return { events: [startEvent(s, step.ts!).value] };
    if (step.op === "reward") {
      const fields = {
        value: step.value!,
        ...(step.target !== undefined ? { target: step.target } : {}),
        ...(step.stage !== undefined ? { stage: step.stage } : {}),
        ...(step.key !== undefined ? { key: step.key } : {}),
        ...(step.finished !== undefined ? { finished: step.finished } : {}),
        ...(step.info !== undefined ? { info: step.info } : {}),
      };
      return { events: rewardEvent(s, step.ts!, fields).map((r) => r.value) };
    }
    if (step.op === "end") return { events: endEvent(s, step.ts!, step.status!).map((r) => r.value) };
    const built = callEvents(s, {
      callId: step.call_id!,
      ...(step.choice_index !== undefined ? { choiceIndex: step.choice_index } : {}),
      prompt: Int32Array.from(step.prompt_ids!),
      capture: {
        choiceIndex: step.choice_index ?? 0,
        outputIds: Int32Array.from(step.output_ids!),
        ...(step.logprobs !== undefined
          ? { logprobs: Float32Array.from(step.logprobs, (x) => (x === null ? NaN : x)) }
          : {}),
        finishReason: step.finish_reason!,
        ...(step.output_versions !== undefined
          ? { outputVersions: Int32Array.from(step.output_versions) }
          : {}),
        ...(step.routed_experts !== undefined ? { routedExperts: experts(step.routed_experts) } : {}),
        ...(step.prompt_routed_experts !== undefined
          ? { promptRoutedExperts: experts(step.prompt_routed_experts) }
          : {}),
        ...(step.text !== undefined ? { text: step.text } : {}),
        ...(step.tool_calls !== undefined ? { toolCalls: step.tool_calls } : {}),
      },
      ...(step.messages !== undefined ? { messages: step.messages } : {}),
      ...(step.tools !== undefined ? { tools: step.tools } : {}),
      ...(step.sampling !== undefined ? { sampling: step.sampling } : {}),
      ...(step.weight_version !== undefined ? { dispatchVersion: step.weight_version } : {}),
      ...(step.completion_version !== undefined ? { completionVersion: step.completion_version } : {}),
      sentAt: step.sent_at!,
      doneAt: step.done_at!,
    });
    return {
      events: built.records.map((r) => r.value),
      missing_logprobs: built.missingLogprobs,
      delta: built.delta,
    };
  });
}
