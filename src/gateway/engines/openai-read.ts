/**
 * What the vLLM and SGLang adapters share: both answer in the OpenAI chat and completions shapes, so reading
 * token ids and logprobs out of them, keeping a choice's captures across streamed chunks, and taking the
 * gateway's fields out again for the agent live here once. Engine-specific field names stay in the adapters.
 *
 * Token ids and logprobs go straight from the parsed JSON into growable typed arrays: no per-token object
 * outlives the chunk it came in.
 */
import type { Capture } from "./engine.ts";
import { DTYPE_BYTES, type RoutedExpertDtype, type RoutedExperts } from "../../schemas/routed-experts.ts";

export type Json = Record<string, unknown>;

export const isRecord = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** A typed array that grows by doubling; `view()` is the filled part (no copy), `take()` a tight copy. */
class Growable<T extends Int32Array | Float32Array> {
  private data: T;
  length = 0;
  private readonly make: (n: number) => T;

  constructor(make: (n: number) => T) {
    this.make = make;
    this.data = make(64);
  }

  private reserve(extra: number): void {
    const need = this.length + extra;
    if (need <= this.data.length) return;
    let size = this.data.length * 2;
    while (size < need) size *= 2;
    const next = this.make(size);
    next.set(this.data.subarray(0, this.length) as never);
    this.data = next;
  }

  push(v: number): void {
    this.reserve(1);
    this.data[this.length++] = v;
  }

  fill(v: number, count: number): void {
    if (count <= 0) return;
    this.reserve(count);
    this.data.fill(v, this.length, this.length + count);
    this.length += count;
  }

  /** A copy of exactly the filled part, in a buffer of its own. */
  take(): T {
    return this.data.slice(0, this.length) as T;
  }
}

export const int32Builder = () => new Growable<Int32Array>((n) => new Int32Array(n));
export const float32Builder = () => new Growable<Float32Array>((n) => new Float32Array(n));
export type IntBuilder = ReturnType<typeof int32Builder>;
export type FloatBuilder = ReturnType<typeof float32Builder>;

/** Token ids from a JSON array of integers, in one loop; undefined when `value` is not an array. */
export function readIds(value: unknown): Int32Array | undefined {
  if (!Array.isArray(value)) return undefined;
  const out = new Int32Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (!Number.isInteger(v))
      throw new Error(`token id at position ${i} is ${JSON.stringify(v)}, not an integer`);
    out[i] = v as number;
  }
  return out;
}

/** Appends a JSON array of integers to `into`; returns how many it appended (0 when not an array). */
export function appendIds(value: unknown, into: IntBuilder): number {
  if (!Array.isArray(value)) return 0;
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (!Number.isInteger(v))
      throw new Error(`token id at position ${i} is ${JSON.stringify(v)}, not an integer`);
    into.push(v as number);
  }
  return value.length;
}

/**
 * A logprob as the engine wrote it: a finite number is kept; null, a missing entry, or an engine's "no value"
 * sentinel (`missing`, vLLM's -9999.0) becomes NaN: never 0, which would mean probability 1.
 */
const logprobValue = (v: unknown, missing: number | undefined): number =>
  typeof v === "number" && Number.isFinite(v) && v !== missing ? v : NaN;

/**
 * The sampled tokens' logprobs of one choice (or one chunk of it): `logprobs.content[].logprob` for chat,
 * `logprobs.token_logprobs[]` for completions. Returns the entries as an array-like to read by position,
 * or undefined when the choice carries no logprobs at all.
 */
export function logprobEntries(
  route: "chat" | "completions",
  logprobs: unknown,
): readonly unknown[] | undefined {
  if (!isRecord(logprobs)) return undefined;
  if (route === "chat") {
    const content = logprobs.content;
    return Array.isArray(content) ? content : undefined;
  }
  const values = logprobs.token_logprobs;
  return Array.isArray(values) ? values : undefined;
}

/**
 * Appends `count` logprobs from `entries` (NaN past their end or for an entry without a value). When there are
 * more entries than tokens, the last `count` are the tokens': vLLM's completions `echo` puts the prompt's
 * logprobs first, before the sampled tokens' (completion/serving.py).
 */
export function appendLogprobs(
  route: "chat" | "completions",
  entries: readonly unknown[] | undefined,
  count: number,
  into: FloatBuilder,
  missing?: number,
): void {
  if (entries === undefined) {
    into.fill(NaN, count);
    return;
  }
  const n = Math.min(count, entries.length);
  const skip = entries.length - n;
  for (let i = 0; i < n; i++) {
    const e = entries[skip + i];
    into.push(logprobValue(route === "chat" ? (isRecord(e) ? e.logprob : undefined) : e, missing));
  }
  into.fill(NaN, count - n);
}

/** Merges streamed `delta.tool_calls` pieces into whole OpenAI tool calls, as clients do. */
export class ToolCallMerger {
  private readonly calls: Json[] = [];

  add(pieces: unknown): void {
    if (!Array.isArray(pieces)) return;
    for (const piece of pieces) {
      if (!isRecord(piece)) continue;
      const at = typeof piece.index === "number" ? piece.index : this.calls.length;
      let call = this.calls[at];
      if (call === undefined) {
        call = { type: "function", function: { name: "", arguments: "" } };
        this.calls[at] = call;
      }
      if (typeof piece.id === "string") call.id = piece.id;
      if (typeof piece.type === "string") call.type = piece.type;
      const fn = piece.function;
      const into = call.function as Json;
      if (isRecord(fn)) {
        if (typeof fn.name === "string") into.name = (into.name as string) + fn.name;
        if (typeof fn.arguments === "string") into.arguments = (into.arguments as string) + fn.arguments;
      }
    }
  }

  get(): unknown[] | undefined {
    const calls = this.calls.filter((c) => c !== undefined);
    return calls.length > 0 ? calls : undefined;
  }
}

/** One choice's captures, kept across chunks. */
export class ChoiceState {
  readonly index: number;
  readonly ids = int32Builder();
  readonly logprobs = float32Builder();
  /** Whether any chunk of this choice carried logprobs (none at all: the capture's logprobs are undefined). */
  sawLogprobs = false;
  finishReason: string | undefined;
  /** The stop string that ended the choice, where the engine named one. */
  stopSequence: string | undefined;
  promptIds: Int32Array | undefined;
  private readonly text: string[] = [];
  readonly toolCalls = new ToolCallMerger();

  constructor(index: number) {
    this.index = index;
  }

  addText(t: unknown): void {
    if (typeof t === "string" && t.length > 0) this.text.push(t);
  }

  /**
   * The capture. A choice that never got its finish reason was cut off (client gone, upstream broken):
   * that is an `abort`, whatever the tokens so far look like.
   */
  capture(): Capture {
    const c: Capture = {
      choiceIndex: this.index,
      outputIds: this.ids.take(),
      finishReason: this.finishReason ?? "abort",
    };
    if (this.promptIds !== undefined) c.promptIds = this.promptIds;
    if (this.stopSequence !== undefined) c.stopSequence = this.stopSequence;
    if (this.sawLogprobs) c.logprobs = this.logprobs.take();
    if (this.text.length > 0) c.text = this.text.join("");
    const calls = this.toolCalls.get();
    if (calls !== undefined) c.toolCalls = calls;
    return c;
  }
}

/** The choices of one streamed answer by their `index`, in order of first appearance. */
export class Choices {
  private readonly byIndex = new Map<number, ChoiceState>();

  get(index: unknown): ChoiceState {
    const i = typeof index === "number" ? index : 0;
    let s = this.byIndex.get(i);
    if (s === undefined) {
      s = new ChoiceState(i);
      this.byIndex.set(i, s);
    }
    return s;
  }

  all(): ChoiceState[] {
    return [...this.byIndex.values()].sort((a, b) => a.index - b.index);
  }
}

/**
 * Replaces or removes `keys` of `obj` for the agent, copying `obj` once only if one of them is there.
 * `mode` says what the engine writes for a field nobody asked for: `null` (vLLM dumps every field) or
 * `delete` (SGLang's serializers pop them).
 */
export function hide(obj: Json, keys: readonly string[], mode: "null" | "delete"): Json {
  let out: Json | undefined;
  for (const k of keys) {
    if (!(k in obj)) continue;
    if (mode === "null" && obj[k] === null) continue;
    out ??= { ...obj };
    if (mode === "null") out[k] = null;
    else delete out[k];
  }
  return out ?? obj;
}

/**
 * A streamed choice that is left with nothing for the agent once the gateway's fields are hidden: an empty
 * delta and no finish reason. The engines send such chunks only because ids or logprobs were asked for
 * (vLLM's "still need to send a chunk" branch, SGLang's logprob flush), so the agent would never have seen
 * them.
 */
export function emptyStreamChoice(choice: Json): boolean {
  const delta = choice.delta;
  if (!isRecord(delta) || Object.keys(delta).length > 0) return false;
  if (choice.finish_reason !== null && choice.finish_reason !== undefined) return false;
  for (const [k, v] of Object.entries(choice)) {
    if (k === "index" || k === "delta" || k === "finish_reason") continue;
    if (v !== null && v !== undefined) return false;
  }
  return true;
}

/**
 * Splits routed experts covering the positions `[start, prompt + output - 1)` (the engines' layout: the last
 * sampled token was never an input) into the prompt's rows and the output's, each copied into a buffer of its
 * own. `bytes` is row-major `[tokens, layers, topK]` little-endian ids of `dtype`.
 */
export function splitRoutedExperts(
  bytes: Uint8Array,
  dtype: RoutedExpertDtype,
  layers: number,
  topK: number,
  promptRows: number,
): { prompt?: RoutedExperts; output?: RoutedExperts } {
  const stride = layers * topK * DTYPE_BYTES[dtype];
  const tokens = Math.floor(bytes.length / stride);
  const p = Math.max(0, Math.min(promptRows, tokens));
  const part = (from: number, to: number): RoutedExperts => ({
    dtype,
    tokens: to - from,
    layers,
    top_k: topK,
    data: bytes.slice(from * stride, to * stride),
  });
  const out: { prompt?: RoutedExperts; output?: RoutedExperts } = {};
  if (p > 0) out.prompt = part(0, p);
  if (tokens > p) out.output = part(p, tokens);
  return out;
}

/**
 * The stop string that ended a choice: vLLM's `stop_reason` and SGLang's `matched_stop` are the matched stop
 * string, or a stop token's id (a number: not a stop sequence), or null (end of sequence).
 */
export function stopStringOf(choice: Json): string | undefined {
  const v = choice.stop_reason ?? choice.matched_stop;
  return typeof v === "string" ? v : undefined;
}
