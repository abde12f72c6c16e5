/**
 * Reading llama-server's answers: its logprob entries, where they go among the sampled ids (llama.cpp
 * skips some, see llamacpp.ts), its prompt count, a choice's text and tool calls. Shared by the whole-answer
 * path (llamacpp.ts) and the stream reader (llamacpp-stream.ts).
 */
import type { AgentRoute, Capture } from "./engine.ts";

export type Json = Record<string, unknown>;

/** What `prepare` decided, carried to reading the answer. */
export interface LlamaState {
  route: AgentRoute;
  stream: boolean;
  /** The agent asked chat `logprobs: true` without `top_logprobs`: the entries' 20 alternatives are cut. */
  trimTop: boolean;
  /** The gateway added `n_probs` (the agent asked no logprobs): logprob entries are stripped. */
  addedProbs: boolean;
  /** The gateway added `verbose` and `response_fields` (whole answers): `__verbose` is stripped. */
  addedVerbose: boolean;
  /**
   * The gateway added `return_tokens` to a call whose `__verbose` the agent asked for: its `tokens` go back
   * to the empty array the server writes without the flag.
   */
  addedTokensToVerbose: boolean;
  /** The gateway added `timings_per_token` (streams): partial chunks' `timings` are stripped. */
  addedTimings: boolean;
  /** The prompt ids by prompt (one, unless a completions call sent several prompts), before verification. */
  prompts: Int32Array[];
  /** Choices per prompt (`n`). */
  n: number;
  /** Captures whose logprob entries could not be placed from ids alone (see `complete`). */
  unplaced: Map<Capture, Entry[]>;
}

/** One logprob entry as llama-server writes it. */
export interface Entry {
  id: number;
  logprob: number;
}

export function asObject(value: unknown): Json | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

/** The engine's logprob of an entry: `logprob`, or the log of `prob` when the agent asked post-sampling probs. */
export function entryOf(raw: unknown): Entry | undefined {
  const e = asObject(raw);
  if (e === undefined || typeof e.id !== "number") return undefined;
  if (typeof e.logprob === "number") return { id: e.id, logprob: e.logprob };
  if (typeof e.prob === "number") return { id: e.id, logprob: Math.log(e.prob) };
  return { id: e.id, logprob: Number.NaN };
}

export function entriesOf(choice: Json): Entry[] {
  const content = asObject(choice.logprobs)?.content;
  if (!Array.isArray(content)) return [];
  const out: Entry[] = [];
  for (const raw of content) {
    const e = entryOf(raw);
    if (e !== undefined) out.push(e);
  }
  return out;
}

export function int32(values: unknown): Int32Array | undefined {
  if (!Array.isArray(values)) return undefined;
  const out = new Int32Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as unknown;
    if (typeof v !== "number" || !Number.isInteger(v)) return undefined;
    out[i] = v;
  }
  return out;
}

/**
 * Places logprob entries on the sampled ids. Entries are a subsequence of the ids (see the file comment);
 * an entry sits at the same position in the leftmost and in the rightmost embedding of that subsequence
 * exactly when no other placement is consistent with the ids, and only such entries are placed here. The
 * others (a repeated id inside a cut UTF-8 character, e.g. bytes E4 B8 B8 sampled one by one) return -1 and
 * wait for `placeByPieces`.
 */
export function placeEntries(ids: Int32Array, entries: readonly Entry[]): Int32Array {
  const m = entries.length;
  const left = new Int32Array(m).fill(-1);
  const right = new Int32Array(m).fill(-1);
  let j = 0;
  for (let i = 0; i < ids.length && j < m; i++) if (ids[i] === entries[j]!.id) left[j++] = i;
  if (j < m) return new Int32Array(m).fill(-1); // not a subsequence: nothing can be placed honestly
  j = m - 1;
  for (let i = ids.length - 1; i >= 0 && j >= 0; i--) if (ids[i] === entries[j]!.id) right[j--] = i;
  const out = new Int32Array(m);
  for (let k = 0; k < m; k++) out[k] = left[k] === right[k] ? left[k]! : -1;
  return out;
}

/** llama.cpp's validate_utf8 (server-common.cpp): the length up to a multi-byte character cut at the end. */
export function validUtf8Length(bytes: Uint8Array, length: number): number {
  for (let i = 1; i <= 4 && i <= length; i++) {
    const c = bytes[length - i]!;
    if ((c & 0xe0) === 0xc0) {
      if (i < 2) return length - i;
    } else if ((c & 0xf0) === 0xe0) {
      if (i < 3) return length - i;
    } else if ((c & 0xf8) === 0xf0) {
      if (i < 4) return length - i;
    }
  }
  return length;
}

/**
 * Places entries by replaying the server's rule with each sampled token's bytes: a token gets an entry when
 * the output so far ends on a whole character. Returns the positions, or undefined when the replay does not
 * reproduce the entries' ids (a control token's text differs between /tokenize and sampling, say): then the
 * entries that ids alone could not place stay unplaced.
 */
export function placeByPieces(
  ids: Int32Array,
  pieces: readonly Uint8Array[],
  entries: readonly Entry[],
): Int32Array | undefined {
  let total = 0;
  for (const p of pieces) total += p.length;
  const text = new Uint8Array(total);
  const positions: number[] = [];
  let length = 0;
  for (let i = 0; i < ids.length && positions.length < entries.length; i++) {
    text.set(pieces[i]!, length);
    length += pieces[i]!.length;
    if (validUtf8Length(text, length) === length) positions.push(i);
  }
  // A stop word trims entries from the end only, so the first entries.length candidates are the entries.
  if (positions.length !== entries.length) return undefined;
  for (let k = 0; k < entries.length; k++) if (ids[positions[k]!] !== entries[k]!.id) return undefined;
  return Int32Array.from(positions);
}

/** Logprobs aligned to ids: the entries' values where placed, NaN elsewhere. */
export function alignedLogprobs(
  ids: Int32Array,
  entries: readonly Entry[],
  positions: Int32Array,
): Float32Array {
  const out = new Float32Array(ids.length).fill(Number.NaN);
  for (let k = 0; k < entries.length; k++) if (positions[k]! >= 0) out[positions[k]!] = entries[k]!.logprob;
  return out;
}

/** A piece from `/tokenize` `with_pieces`: a string, or the byte values when it is not valid UTF-8. */
export function pieceBytes(piece: unknown): Uint8Array | undefined {
  if (typeof piece === "string") return new TextEncoder().encode(piece);
  if (Array.isArray(piece) && piece.every((b) => typeof b === "number"))
    return Uint8Array.from(piece as number[]);
  return undefined;
}

/** Sums of the prompt as the engine counted it: usage.prompt_tokens, else cache_n + prompt_n of timings. */
export function enginePromptCount(json: Json): number | undefined {
  const usage = asObject(json.usage);
  if (typeof usage?.prompt_tokens === "number") return usage.prompt_tokens;
  const timings = asObject(json.timings);
  if (typeof timings?.cache_n === "number" && typeof timings.prompt_n === "number") {
    return timings.cache_n + timings.prompt_n;
  }
  return undefined;
}

export function textAndTools(route: AgentRoute, choice: Json): { text?: string; toolCalls?: unknown[] } {
  if (route === "completions") return typeof choice.text === "string" ? { text: choice.text } : {};
  const message = asObject(choice.message);
  const out: { text?: string; toolCalls?: unknown[] } = {};
  if (typeof message?.content === "string") out.text = message.content;
  if (Array.isArray(message?.tool_calls) && message.tool_calls.length > 0) out.toolCalls = message.tool_calls;
  return out;
}

/** Merges one streamed tool-call delta into the calls so far (OpenAI's streaming shape). */
export function mergeToolCall(calls: Json[], raw: unknown): void {
  const t = asObject(raw);
  if (t === undefined) return;
  const index = typeof t.index === "number" ? t.index : calls.length;
  const call = (calls[index] ??= { type: "function", function: { name: "", arguments: "" } });
  if (typeof t.id === "string") call.id = t.id;
  if (typeof t.type === "string") call.type = t.type;
  const f = asObject(t.function);
  const target = call.function as Json;
  if (typeof f?.name === "string") target.name = (target.name as string) + f.name;
  if (typeof f?.arguments === "string") target.arguments = (target.arguments as string) + f.arguments;
}

/** The prompt ids of a choice: its prompt's (choices are numbered prompt by prompt, `n` each). */
export function promptFor(state: LlamaState, choiceIndex: number): Int32Array | undefined {
  return state.prompts[Math.floor(choiceIndex / state.n)];
}
