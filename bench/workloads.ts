/**
 * Deterministic synthetic agent sessions for benchmarks. Token ids are pseudo-random (seeded), so prompts
 * of different sessions share nothing but what the scenario says they share.
 */
import { mulberry32 } from "../test/helpers/prng.ts";
import { packLogprobs, packTokenIds } from "../src/schemas/tokens.ts";

export interface SessionShape {
  /** Tokens of the first prompt (system + task). */
  initialPrompt: number;
  /** Model calls in the session. */
  turns: number;
  /** Sampled tokens per call. */
  outputTokens: number;
  /** Tool/user/template tokens appended between calls. */
  observationTokens: number;
}

export type PromptForm = "full" | "delta";

/** Packed int16 routed experts for `tokens` positions, ids drawn uniformly from `experts`. */
function routedExperts(
  random: () => number,
  tokens: number,
  layers: number,
  topK: number,
  experts: number,
): Record<string, unknown> {
  const values = new Int16Array(tokens * layers * topK);
  for (let i = 0; i < values.length; i++) values[i] = Math.floor(random() * experts);
  return {
    b64: Buffer.from(values.buffer).toString("base64"),
    dtype: "int16",
    shape: [tokens, layers, topK],
    num_experts: experts,
  };
}

function ids(random: () => number, n: number): number[] {
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(random() * 150_000);
  return out;
}

/**
 * Wire events (objects) of one linear agent session: each prompt extends the previous prompt + output +
 * an observation. `packed` sends token arrays as base64.
 */
export function linearSession(
  shape: SessionShape,
  form: PromptForm,
  opts: {
    uid: string;
    sessionId: string;
    seed: number;
    packed?: boolean;
    t0?: number;
    /** MoE routing to send (int16, as vLLM returns it): prefill of each new prompt part, decode of outputs. */
    routing?: { layers: number; topK: number; experts: number };
  },
): Array<Record<string, unknown>> {
  const random = mulberry32(opts.seed);
  const routing = opts.routing;
  const routes = (tokens: number) =>
    routing === undefined ? {} : routedExperts(random, tokens, routing.layers, routing.topK, routing.experts);
  const pack = (a: number[]) => (opts.packed === true ? packTokenIds(a) : a);
  const packLp = (a: number[]) => (opts.packed === true ? packLogprobs(a) : a);
  const events: Array<Record<string, unknown>> = [];
  let seq = 0;
  let ts = opts.t0 ?? 1_767_225_600_000;
  const base = () => ({ v: 1, uid: opts.uid, session_id: opts.sessionId, seq: seq++, ts: (ts += 100) });
  events.push({ ...base(), type: "session.start", sample_index: 0, group_size: 1 });
  let prompt = ids(random, shape.initialPrompt);
  let previousObservation: number[] = [];
  for (let turn = 0; turn < shape.turns; turn++) {
    const callId = `c${turn}`;
    const output = ids(random, shape.outputTokens);
    const observation = ids(random, shape.observationTokens);
    if (form === "full" || turn === 0) {
      events.push({
        ...base(),
        type: "request",
        call_id: callId,
        prompt_ids: pack(prompt),
        weight_version: 1,
        ...(routing === undefined ? {} : { prompt_routed_experts: routes(prompt.length) }),
      });
    } else {
      events.push({
        ...base(),
        type: "request",
        call_id: callId,
        parent_call_id: `c${turn - 1}`,
        prompt_delta_ids: pack(previousObservation),
        weight_version: 1,
        // The engine computed the new tokens: the previous output's last token and the observation.
        ...(routing === undefined ? {} : { prompt_routed_experts: routes(previousObservation.length + 1) }),
      });
    }
    const logprobs = output.map(() => Math.fround(-random()));
    events.push({
      ...base(),
      type: "response",
      call_id: callId,
      output_ids: pack(output),
      logprobs: packLp(logprobs),
      finish_reason: "tool_calls",
      weight_version: 1,
      // Every output token but the last went through the model in this call.
      ...(routing === undefined ? {} : { routed_experts: routes(output.length - 1) }),
    });
    prompt = [...prompt, ...output, ...observation];
    previousObservation = observation;
  }
  events.push({ ...base(), type: "reward", value: 1 });
  events.push({ ...base(), type: "session.end", status: "ok" });
  return events;
}

/**
 * A branchy agent session (full prompts): a main agent whose third call is aborted and retried with the
 * same prompt (the orphan must not be trained), a sub-agent interleaved after the fourth call (its own
 * prompts), and two branches from the last main call (different tool results).
 */
export function branchySession(opts: { uid: string; sessionId: string; seed: number; t0?: number }) {
  const random = mulberry32(opts.seed);
  const events: Array<Record<string, unknown>> = [];
  let seq = 0;
  let ts = opts.t0 ?? 1_767_225_600_000;
  const base = () => ({ v: 1, uid: opts.uid, session_id: opts.sessionId, seq: seq++, ts: (ts += 100) });
  let calls = 0;
  const call = (prompt: number[], finish = "tool_calls") => {
    const callId = `c${calls++}`;
    const output = ids(random, 64);
    events.push({ ...base(), type: "request", call_id: callId, prompt_ids: prompt, weight_version: 1 });
    events.push({
      ...base(),
      type: "response",
      call_id: callId,
      output_ids: output,
      logprobs: output.map(() => Math.fround(-random())),
      finish_reason: finish,
      weight_version: 1,
    });
    return output;
  };
  events.push({ ...base(), type: "session.start", sample_index: 0, group_size: 1 });
  let main = ids(random, 512);
  for (let turn = 0; turn < 6; turn++) {
    if (turn === 2) call(main, "abort"); // preempted; retried below with the same prompt
    const output = call(main);
    main = [...main, ...output, ...ids(random, 32)];
    if (turn === 3) {
      let sub = ids(random, 256);
      for (let s = 0; s < 2; s++) sub = [...sub, ...call(sub), ...ids(random, 32)];
    }
  }
  for (let b = 0; b < 2; b++) call([...main, ...ids(random, 16)], "stop");
  events.push({ ...base(), type: "reward", value: 1 });
  events.push({ ...base(), type: "session.end", status: "ok" });
  return events;
}
