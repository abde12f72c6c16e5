/**
 * Hand-built sessions for tests: small fake token ids, events produced as wire JSON and decoded through
 * the real decoder, then assembled. Expected rows can be written out in full.
 */
import { MemoryDeadLetters } from "./dead-letters.ts";
import { Metrics } from "../../src/core/metrics.ts";
import type { DeadLetter } from "../../src/schemas/dead-letter.ts";
import type { TrajectoryRow } from "../../src/schemas/trajectory.ts";
import { Assembler, type SessionOutput } from "../../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema, type AssembleConfigInput } from "../../src/transforms/assemble/config.ts";
import { decodeEvent } from "../../src/transforms/assemble/decode/decode.ts";

/** The logprob tests give token `t`: recognisable, and exact in float32 after Math.fround. */
export const lp = (t: number): number => Math.fround(-t / 64);

type Extra = Record<string, unknown>;

export class SessionScript {
  readonly uid: string;
  readonly sessionId: string;
  ts: number;
  private seq = 0;
  readonly events: Extra[] = [];

  constructor(uid = "u1", sessionId = "s1", ts = 1_000) {
    this.uid = uid;
    this.sessionId = sessionId;
    this.ts = ts;
  }

  private push(type: string, fields: Extra): Extra {
    const ev = {
      v: 1,
      type,
      session_id: this.sessionId,
      uid: this.uid,
      seq: this.seq++,
      ts: this.ts,
      ...fields,
    };
    this.ts += 10;
    this.events.push(ev);
    return ev;
  }

  start(fields: Extra = {}): this {
    this.push("session.start", fields);
    return this;
  }

  request(callId: string, promptIds: number[], fields: Extra = {}): this {
    this.push("request", { call_id: callId, prompt_ids: promptIds, ...fields });
    return this;
  }

  requestDelta(callId: string, parent: string, delta: number[], fields: Extra = {}): this {
    this.push("request", { call_id: callId, parent_call_id: parent, prompt_delta_ids: delta, ...fields });
    return this;
  }

  response(callId: string, outputIds: number[], fields: Extra = {}): this {
    this.push("response", {
      call_id: callId,
      output_ids: outputIds,
      logprobs: outputIds.map(lp),
      finish_reason: "stop",
      ...fields,
    });
    return this;
  }

  /** A request and its response. */
  call(
    callId: string,
    promptIds: number[],
    outputIds: number[],
    response: Extra = {},
    request: Extra = {},
  ): this {
    return this.request(callId, promptIds, request).response(callId, outputIds, response);
  }

  reward(value: number, fields: Extra = {}): this {
    this.push("reward", { value, ...fields });
    return this;
  }

  end(status = "ok"): this {
    this.push("session.end", { status });
    return this;
  }

  lines(): string[] {
    return this.events.map((e) => JSON.stringify(e));
  }
}

export interface AssemblyResult {
  rows: TrajectoryRow[];
  deadLetters: DeadLetter[];
  metrics: Metrics;
  /** Finalized sessions, in finalization order. */
  sessions: SessionOutput[];
  /** For each finalized session, the index of the input step that finalized it (the end of input: -1). */
  finalizedAt: number[];
}

/** A step of input: a JSON line, or a quiet live lane's clock moved on to `advanceTo` (wall-clock time). */
export type AssemblyStep = string | { advanceTo: number };

/** Decodes and assembles JSON lines (in the given order), flushing at the end of input. */
export function assemble(steps: AssemblyStep[], config: AssembleConfigInput = {}): AssemblyResult {
  const metrics = new Metrics();
  const deadLetters = new MemoryDeadLetters(metrics);
  const assembler = new Assembler({ config: assembleConfigSchema.parse(config), deadLetters, metrics });
  const sessions: AssemblyResult["sessions"] = [];
  const finalizedAt: number[] = [];
  const took = (step: number, out: SessionOutput[]) => {
    sessions.push(...out);
    for (let k = 0; k < out.length; k++) finalizedAt.push(step);
  };
  steps.forEach((raw, i) => {
    if (typeof raw !== "string") return took(i, assembler.advanceTo(raw.advanceTo));
    const decoded = decodeEvent({ raw, origin: { kind: "file", file: "test.jsonl", line: i + 1 } });
    if (decoded.kind === "control") return;
    if (decoded.kind === "rejected") {
      deadLetters.write(decoded.deadLetter);
      if (decoded.envelope !== undefined) took(i, assembler.pushRejected(decoded.envelope));
      return;
    }
    took(i, assembler.push(decoded.value));
  });
  took(-1, assembler.flush());
  return {
    rows: sessions.flatMap((s) => s.rows),
    deadLetters: deadLetters.letters,
    metrics,
    sessions,
    finalizedAt,
  };
}

/** Stands for `ended_at_ms` in expectations: event times are incidental to most tests. */
const IGNORED = "(ignored)";

/** A row with typed arrays turned into plain arrays, for deepEqual against a written-out expectation. */
export function plain(row: TrajectoryRow): Record<string, unknown> {
  return { ...plainWithTimes(row), ended_at_ms: IGNORED };
}

/** Like `plain`, keeping `ended_at_ms`. */
export function plainWithTimes(row: TrajectoryRow): Record<string, unknown> {
  const out: Record<string, unknown> = { ...row };
  for (const [name, value] of Object.entries(out)) {
    if (ArrayBuffer.isView(value)) out[name] = [...(value as Int32Array)];
  }
  return out;
}

/** Logprobs for a response: lp(t) at trained positions, 0 elsewhere. */
export function logprobsFor(ids: number[], mask: number[]): number[] {
  return ids.map((t, i) => (mask[i] === 1 ? lp(t) : 0));
}

/** The defaults of a row, so a test writes out only what the scenario decides. */
export function row(fields: Partial<Record<keyof TrajectoryRow, unknown>>): Record<string, unknown> {
  const responseIds = (fields.response_ids as number[]) ?? [];
  const mask = (fields.response_mask as number[]) ?? [];
  const uid = (fields.uid as string) ?? "u1";
  const sessionId = (fields.session_id as string) ?? "s1";
  const index = (fields.index as number) ?? 0;
  return {
    key: `${uid}_${sessionId}_${index}`,
    uid,
    session_id: sessionId,
    index,
    sample_index: null,
    group_size: null,
    prompt_ids: [],
    response_ids: responseIds,
    response_mask: mask,
    rollout_log_probs: logprobsFor(responseIds, mask),
    reward: null,
    episode_finished: null,
    finish_reasons: ["stop"],
    finish_reasons_raw: ["stop"],
    weight_version_min: null,
    weight_version_max: null,
    num_turns: 1,
    num_trained_tokens: mask.filter((m) => m === 1).length,
    status: "ok",
    flags: [],
    parent_index: null,
    shared_prefix_len: 0,
    sample_mask: 1,
    ended_at_ms: IGNORED,
    last_trained_index: mask.lastIndexOf(1) < 0 ? null : mask.lastIndexOf(1),
    reward_names: [],
    reward_values: [],
    reward_info: null,
    // One trained turn per run of mask 1 (scenarios here always put context between turns).
    turn_end_indices: mask.flatMap((m, i) => (m === 1 && mask[i + 1] !== 1 ? [i] : [])),
    turn_rewards: null,
    // Versions known only where the scenario gives weight_version: then token_policy_versions is given too.
    token_policy_versions: null,
    policy_version_min: null,
    policy_version_max: null,
    routed_experts: null,
    routed_experts_dtype: "",
    routed_experts_layers: 0,
    routed_experts_top_k: 0,
    routed_experts_missing: 0,
    // One per trained turn (turn_end_indices); null where the scenario sends no settings.
    sampling: mask.flatMap((m, i) => (m === 1 && mask[i + 1] !== 1 ? [null] : [])),
    ...fields,
  };
}
