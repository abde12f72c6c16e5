/**
 * The llama.cpp adapter: llama-server's OpenAI routes (`/v1/chat/completions`, `/v1/completions`), whole or
 * streamed. Facts from llama.cpp's source (llama-cpp-python 0.3.36's vendor/llama.cpp, commit 0c1e570) and
 * checked against the running server (test/llamacpp.test.ts); docs/engines.md has the long form.
 *
 * Where the sampled ids are:
 * - Each logprob entry (`choices[].logprobs.content[]`, with `n_probs` > 0) has the token's `id`, `logprob`,
 *   `token`, `bytes` (tools/server/server-task.cpp, completion_token_output::probs_vector_to_json). But a
 *   token that leaves the output ending inside a UTF-8 character gets no entry (server-context.cpp,
 *   process_token: `slot.add_token` only when `validate_utf8` finds the text complete), and a whole answer
 *   that stopped on a stop word loses its last entries (send_final_response trims as many as the stop word
 *   has tokens). Entries are therefore a subsequence of the sampled ids, never all of them for sure.
 * - `return_tokens: true` keeps every sampled id (process_token pushes each one into
 *   `slot.generated_tokens` before anything else) and a whole answer's non-OpenAI JSON carries them as
 *   `tokens`; the OpenAI routes show that JSON as `__verbose` when the request has `verbose: true`
 *   (server-task.cpp, to_json_oaicompat_chat), reduced to the keys in `response_fields`. So a whole answer
 *   gets `verbose`, `return_tokens` and `response_fields: ["tokens", "index"]`: `__verbose.tokens` is every
 *   id, as many as `usage.completion_tokens` (both count the final EOS).
 * - Streams have no such field: a streamed answer's final result has `tokens` emptied ("already in last
 *   partial chunk", send_final_response), a partial chunk carries only its own token, and there is no
 *   partial chunk for a token ending inside a UTF-8 character, nor, on the chat route, for one that changed
 *   no message delta (the end-of-turn token, a held-back stop word, tool-call markup being parsed:
 *   to_json_oaicompat_chat on a partial result sends nothing without a diff). With `timings_per_token: true`
 *   each partial chunk says how many tokens were sampled so far (`timings.predicted_n`), so the reader puts
 *   each reported id at its position and marks the rest missing (Capture.missingIds) instead of guessing.
 *
 * Logprobs are the raw model's (softmax of the logits before temperature and the other samplers,
 * server-common.cpp get_token_probabilities) unless the agent asks `post_sampling_probs` (then entries carry
 * `prob` after the sampler chain). The gateway asks `n_probs: 1` rather than `logprobs: true`: the latter
 * means 20 alternatives a token and is refused for streamed calls with tools (server-common.cpp,
 * oaicompat_chat_params_parse: "logprobs is not supported with tools + stream"); `n_probs` is copied through
 * as a llama.cpp field and works there.
 *
 * Prompt ids: no route returns them for a chat call, so `prepare` renders the prompt with `/apply-template`
 * (the same oaicompat_chat_params_parse the chat route runs) and tokenizes it with `/tokenize`,
 * `add_special: true, parse_special: true` (what the completion handler passes to tokenize_input_prompts).
 * They are kept only when the engine's own count agrees (`usage.prompt_tokens`, or `timings.cache_n +
 * timings.prompt_n` in a stream): a template that reads the clock, say, could render differently twice.
 *
 * Output ids are never recovered by tokenizing output text: retokenized text is not what the model sampled.
 */
import type {
  AgentRoute,
  Asked,
  Capture,
  EngineAdapter,
  PreparedCall,
  StreamReader,
  UpstreamJson,
} from "./engine.ts";

type Json = Record<string, unknown>;

/** What `prepare` decided, carried to reading the answer. */
interface LlamaState {
  route: AgentRoute;
  stream: boolean;
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
interface Entry {
  id: number;
  logprob: number;
}

function asObject(value: unknown): Json | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

/** The engine's logprob of an entry: `logprob`, or the log of `prob` when the agent asked post-sampling probs. */
function entryOf(raw: unknown): Entry | undefined {
  const e = asObject(raw);
  if (e === undefined || typeof e.id !== "number") return undefined;
  if (typeof e.logprob === "number") return { id: e.id, logprob: e.logprob };
  if (typeof e.prob === "number") return { id: e.id, logprob: Math.log(e.prob) };
  return { id: e.id, logprob: Number.NaN };
}

function entriesOf(choice: Json): Entry[] {
  const content = asObject(choice.logprobs)?.content;
  if (!Array.isArray(content)) return [];
  const out: Entry[] = [];
  for (const raw of content) {
    const e = entryOf(raw);
    if (e !== undefined) out.push(e);
  }
  return out;
}

function int32(values: unknown): Int32Array | undefined {
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
function alignedLogprobs(ids: Int32Array, entries: readonly Entry[], positions: Int32Array): Float32Array {
  const out = new Float32Array(ids.length).fill(Number.NaN);
  for (let k = 0; k < entries.length; k++) if (positions[k]! >= 0) out[positions[k]!] = entries[k]!.logprob;
  return out;
}

/** A piece from `/tokenize` `with_pieces`: a string, or the byte values when it is not valid UTF-8. */
function pieceBytes(piece: unknown): Uint8Array | undefined {
  if (typeof piece === "string") return new TextEncoder().encode(piece);
  if (Array.isArray(piece) && piece.every((b) => typeof b === "number"))
    return Uint8Array.from(piece as number[]);
  return undefined;
}

/** Sums of the prompt as the engine counted it: usage.prompt_tokens, else cache_n + prompt_n of timings. */
function enginePromptCount(json: Json): number | undefined {
  const usage = asObject(json.usage);
  if (typeof usage?.prompt_tokens === "number") return usage.prompt_tokens;
  const timings = asObject(json.timings);
  if (typeof timings?.cache_n === "number" && typeof timings.prompt_n === "number") {
    return timings.cache_n + timings.prompt_n;
  }
  return undefined;
}

function textAndTools(route: AgentRoute, choice: Json): { text?: string; toolCalls?: unknown[] } {
  if (route === "completions") return typeof choice.text === "string" ? { text: choice.text } : {};
  const message = asObject(choice.message);
  const out: { text?: string; toolCalls?: unknown[] } = {};
  if (typeof message?.content === "string") out.text = message.content;
  if (Array.isArray(message?.tool_calls) && message.tool_calls.length > 0) out.toolCalls = message.tool_calls;
  return out;
}

/** One choice of a stream, accumulated. */
interface StreamChoice {
  /** Reported ids by position (-1: not reported). */
  ids: number[];
  logprobs: number[];
  /** Tokens sampled so far as the engine counted them (`timings.predicted_n`, `usage.completion_tokens`). */
  sampled: number;
  finishReason?: string;
  text: string;
  /** Tool calls by index, merged from their deltas (name and id once, arguments in pieces). */
  toolCalls: Json[];
  promptCount?: number;
}

class LlamaStreamReader implements StreamReader {
  private readonly choices = new Map<number, StreamChoice>();
  private readonly state: LlamaState;

  constructor(state: LlamaState) {
    this.state = state;
  }

  private choice(index: number): StreamChoice {
    let c = this.choices.get(index);
    if (c === undefined) {
      c = { ids: [], logprobs: [], sampled: 0, text: "", toolCalls: [] };
      this.choices.set(index, c);
    }
    return c;
  }

  chunk(data: Json): Json | undefined {
    const choices = Array.isArray(data.choices) ? (data.choices as unknown[]) : [];
    const timings = asObject(data.timings);
    const predicted = typeof timings?.predicted_n === "number" ? timings.predicted_n : undefined;
    const promptCount = enginePromptCount(data);
    let partial = choices.length > 0;
    for (const raw of choices) {
      const choice = asObject(raw);
      if (choice === undefined) continue;
      const index = typeof choice.index === "number" ? choice.index : 0;
      const c = this.choice(index);
      if (promptCount !== undefined) c.promptCount = promptCount;
      // A partial chunk's one entry is the token sampled last: position predicted_n - 1 (every partial
      // chunk has timings, the gateway asked timings_per_token). Without timings, the next position.
      const entries = entriesOf(choice);
      for (const e of entries) {
        const at = predicted !== undefined && entries.length === 1 ? predicted - 1 : c.ids.length;
        while (c.ids.length < at) {
          c.ids.push(-1);
          c.logprobs.push(Number.NaN);
        }
        c.ids[at] = e.id;
        c.logprobs[at] = e.logprob;
      }
      if (predicted !== undefined) c.sampled = Math.max(c.sampled, predicted);
      c.sampled = Math.max(c.sampled, c.ids.length);
      if (typeof choice.finish_reason === "string") {
        c.finishReason = choice.finish_reason;
        partial = false;
      }
      if (this.state.route === "completions") {
        if (typeof choice.text === "string") c.text += choice.text;
      } else {
        const delta = asObject(choice.delta);
        if (typeof delta?.content === "string") c.text += delta.content;
        if (Array.isArray(delta?.tool_calls)) for (const t of delta.tool_calls) mergeToolCall(c.toolCalls, t);
      }
    }
    // The usage chunk (choices empty; the final timings ride on it when it is there) closes the count of a
    // single-choice call.
    if (choices.length === 0 && this.choices.size <= 1) {
      const c = this.choice(0);
      const usage = asObject(data.usage);
      if (typeof usage?.completion_tokens === "number")
        c.sampled = Math.max(c.sampled, usage.completion_tokens);
      if (predicted !== undefined) c.sampled = Math.max(c.sampled, predicted);
      if (promptCount !== undefined) c.promptCount = promptCount;
    }
    return this.forAgent(data, choices, partial);
  }

  /** The chunk without what the gateway added: logprob entries, and a partial chunk's timings. */
  private forAgent(data: Json, choices: unknown[], partial: boolean): Json {
    const stripTimings = this.state.addedTimings && partial && "timings" in data;
    if (!this.state.addedProbs && !stripTimings) return data;
    const out: Json = { ...data };
    if (stripTimings) delete out.timings;
    if (this.state.addedProbs && choices.length > 0) {
      out.choices = choices.map((raw) => {
        const choice = asObject(raw);
        if (choice === undefined || !("logprobs" in choice)) return raw;
        const copy: Json = { ...choice };
        // The completions route always writes `logprobs` (null without n_probs); the chat route only with.
        if (this.state.route === "completions") copy.logprobs = null;
        else delete copy.logprobs;
        return copy;
      });
    }
    return out;
  }

  captures(_finished: boolean): Capture[] {
    const out: Capture[] = [];
    for (const [index, c] of [...this.choices].sort((a, b) => a[0] - b[0])) {
      const n = Math.max(c.sampled, c.ids.length);
      const outputIds = new Int32Array(n).fill(-1);
      const logprobs = new Float32Array(n).fill(Number.NaN);
      outputIds.set(c.ids);
      logprobs.set(c.logprobs);
      const missing: number[] = [];
      for (let i = 0; i < n; i++) if (outputIds[i] === -1) missing.push(i);
      const capture: Capture = {
        choiceIndex: index,
        outputIds,
        logprobs,
        // A choice the engine finished keeps its reason even when the stream broke later; one it did not
        // finish was cut short (`finished` only says whether the stream ended normally).
        finishReason: c.finishReason ?? "abort",
        text: c.text,
      };
      if (missing.length > 0) capture.missingIds = Int32Array.from(missing);
      if (c.toolCalls.length > 0) capture.toolCalls = c.toolCalls;
      const prompt = promptFor(this.state, index);
      if (prompt !== undefined && c.promptCount === prompt.length) capture.promptIds = prompt;
      out.push(capture);
    }
    return out;
  }
}

/** Merges one streamed tool-call delta into the calls so far (OpenAI's streaming shape). */
function mergeToolCall(calls: Json[], raw: unknown): void {
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
function promptFor(state: LlamaState, choiceIndex: number): Int32Array | undefined {
  return state.prompts[Math.floor(choiceIndex / state.n)];
}

export interface LlamaCppAdapterOptions {
  /**
   * How a streamed call goes upstream. `whole` (the default): whole, and the gateway streams the whole
   * answer to the agent, because llama-server's streams leave some sampled ids unreported (see above) and
   * only exact ids are recorded. `relay`: streamed through chunk by chunk (a real time to first token), and a
   * call whose stream left an id unreported is not recorded (counted as not_recorded; the agent's stream
   * ends with an error event).
   */
  streams?: "whole" | "relay";
}

export class LlamaCppAdapter implements EngineAdapter {
  readonly name = "llamacpp" as const;
  private readonly streams: "whole" | "relay";

  constructor(options: LlamaCppAdapterOptions = {}) {
    this.streams = options.streams ?? "whole";
  }

  async prepare(
    route: AgentRoute,
    body: Record<string, unknown>,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<PreparedCall> {
    // A stream cannot carry every sampled id (see above): a streamed call goes upstream whole and the
    // gateway streams the whole answer to the agent (PreparedCall.wholeAsStream). Exact ids beat chunking.
    const stream = body.stream === true && this.streams === "relay";
    const wholeAsStream = body.stream === true && !stream;
    const nProbs = typeof body.n_probs === "number" ? body.n_probs : undefined;
    // The agent's own logprobs: chat `logprobs: true` (n_probs = top_logprobs, 20 by default); completions
    // `logprobs: N` (an alias of n_probs in llama.cpp, server-schema.cpp); or llama.cpp's own `n_probs`.
    const askedProbs =
      (nProbs ?? 0) > 0 ||
      (route === "chat" ? body.logprobs === true : typeof body.logprobs === "number" && body.logprobs > 0);
    const asked: Asked = {
      logprobs: askedProbs,
      topLogprobs:
        route === "chat"
          ? body.logprobs === true
            ? typeof body.top_logprobs === "number"
              ? body.top_logprobs
              : 20
            : (nProbs ?? 0)
          : (nProbs ?? (typeof body.logprobs === "number" ? body.logprobs : 0)),
      tokenIds: body.return_tokens === true,
    };
    const out: Record<string, unknown> = { ...body };
    if (wholeAsStream) {
      delete out.stream;
      delete out.stream_options;
    }
    const addedProbs = !askedProbs;
    // One alternative a token is the least that makes the server write entries (each entry still has
    // the sampled token's own id and logprob, whatever the alternatives).
    if (addedProbs) out.n_probs = 1;
    let addedVerbose = false;
    let addedTimings = false;
    let addedTokensToVerbose = false;
    if (stream) {
      if (body.timings_per_token !== true) {
        out.timings_per_token = true;
        addedTimings = true;
      }
    } else {
      out.return_tokens = true;
      addedTokensToVerbose = body.verbose === true && body.return_tokens !== true;
      if (body.verbose !== true) {
        out.verbose = true;
        // Only the ids and the choice they belong to; __verbose would otherwise repeat the prompt as text.
        out.response_fields = ["tokens", "index"];
        addedVerbose = true;
      }
    }
    const n = typeof body.n === "number" ? body.n : typeof body.n_cmpl === "number" ? body.n_cmpl : 1;
    const prompts = await promptIds(route, body, upstream, signal);
    const state: LlamaState = {
      route,
      stream,
      addedProbs,
      addedVerbose,
      addedTokensToVerbose,
      addedTimings,
      prompts,
      n,
      unplaced: new Map(),
    };
    return {
      path: route === "chat" ? "/v1/chat/completions" : "/v1/completions",
      body: out,
      asked,
      state,
      ...(wholeAsStream ? { wholeAsStream } : {}),
    };
  }

  answer(prepared: PreparedCall, json: Record<string, unknown>): { captures: Capture[]; forAgent: Json } {
    const state = prepared.state as LlamaState;
    const choices = Array.isArray(json.choices) ? (json.choices as unknown[]) : [];
    const verbose = asObject(json.__verbose);
    // With several choices llama-server keeps the first result's top-level fields only (server-context.cpp,
    // handle_completions_impl): __verbose and usage describe the choice __verbose.index names, and the
    // other choices' ids are not in the answer. Those choices are not captured.
    const verboseIndex = typeof verbose?.index === "number" ? verbose.index : 0;
    const ids = int32(verbose?.tokens);
    const captures: Capture[] = [];
    const promptCount = enginePromptCount(json);
    for (const raw of choices) {
      const choice = asObject(raw);
      if (choice === undefined) continue;
      const index = typeof choice.index === "number" ? choice.index : 0;
      if (ids === undefined || index !== verboseIndex) continue;
      const entries = entriesOf(choice);
      const positions = placeEntries(ids, entries);
      const capture: Capture = {
        choiceIndex: index,
        outputIds: ids,
        logprobs: alignedLogprobs(ids, entries, positions),
        finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "abort",
        ...textAndTools(state.route, choice),
      };
      if (positions.includes(-1)) state.unplaced.set(capture, entries);
      const prompt = promptFor(state, index);
      if (prompt !== undefined && promptCount === prompt.length) capture.promptIds = prompt;
      captures.push(capture);
    }
    return { captures, forAgent: this.strip(state, json, choices) };
  }

  /** The answer without what the gateway added: `__verbose`, and logprob entries the agent did not ask for. */
  private strip(state: LlamaState, json: Json, choices: unknown[]): Json {
    if (!state.addedVerbose && !state.addedProbs && !state.addedTokensToVerbose) return json;
    const out: Json = { ...json };
    if (state.addedVerbose) delete out.__verbose;
    const verbose = asObject(out.__verbose);
    if (state.addedTokensToVerbose && verbose !== undefined && "tokens" in verbose) {
      out.__verbose = { ...verbose, tokens: [] };
    }
    if (state.addedProbs) {
      out.choices = choices.map((raw) => {
        const choice = asObject(raw);
        if (choice === undefined || !("logprobs" in choice)) return raw;
        const copy: Json = { ...choice };
        // The completions route always writes `logprobs` (null without n_probs); the chat route only with.
        if (state.route === "completions") copy.logprobs = null;
        else delete copy.logprobs;
        return copy;
      });
    }
    return out;
  }

  stream(prepared: PreparedCall): StreamReader {
    return new LlamaStreamReader(prepared.state as LlamaState);
  }

  /**
   * Places the logprob entries `answer` could not place from ids alone: one `/tokenize` round trip with the
   * sampled ids as content (`tokenize_mixed` keeps numbers as they are) and `with_pieces`, which gives each
   * id's bytes, then the server's own rule (placeByPieces). Entries that still cannot be placed stay NaN.
   */
  async complete(prepared: PreparedCall, captures: Capture[], upstream: UpstreamJson): Promise<void> {
    const state = prepared.state as LlamaState;
    for (const capture of captures) {
      const entries = state.unplaced.get(capture);
      if (entries === undefined) continue;
      state.unplaced.delete(capture);
      const answer = asObject(
        await upstream("/tokenize", { content: Array.from(capture.outputIds), with_pieces: true }),
      );
      const tokens = Array.isArray(answer?.tokens) ? answer.tokens : [];
      const pieces: Uint8Array[] = [];
      for (const t of tokens) {
        const bytes = pieceBytes(asObject(t)?.piece);
        if (bytes === undefined) break;
        pieces.push(bytes);
      }
      if (pieces.length !== capture.outputIds.length) continue;
      const positions = placeByPieces(capture.outputIds, pieces, entries);
      if (positions !== undefined) capture.logprobs = alignedLogprobs(capture.outputIds, entries, positions);
    }
  }
}

/**
 * The prompt ids of the call, by prompt. Chat: `/apply-template` renders exactly what the chat route will
 * (same parser, same template), `/tokenize` with the chat route's flags. Completions: a prompt of ids is
 * used as it is; text (or text mixed with ids) goes through `/tokenize` with the same flags.
 */
async function promptIds(
  route: AgentRoute,
  body: Json,
  upstream: UpstreamJson,
  signal?: AbortSignal,
): Promise<Int32Array[]> {
  const tokenize = async (content: unknown): Promise<Int32Array> => {
    const answer = asObject(
      await upstream("/tokenize", { content, add_special: true, parse_special: true }, signal),
    );
    const ids = int32(answer?.tokens);
    if (ids === undefined) throw new Error("llama.cpp /tokenize answered without a tokens array");
    return ids;
  };
  if (route === "chat") {
    const rendered = asObject(await upstream("/apply-template", body, signal));
    if (typeof rendered?.prompt !== "string")
      throw new Error("llama.cpp /apply-template answered without a prompt");
    return [await tokenize(rendered.prompt)];
  }
  const prompt = body.prompt;
  if (typeof prompt === "string") return [await tokenize(prompt)];
  if (Array.isArray(prompt)) {
    const ids = int32(prompt);
    if (ids !== undefined) return [ids];
    // Numbers mixed with text are one prompt (json_is_array_and_contains_numbers); otherwise one per item.
    if (prompt.some((p) => typeof p === "number")) return [await tokenize(prompt)];
    const out: Int32Array[] = [];
    for (const p of prompt as unknown[]) {
      const one = int32(p);
      out.push(one ?? (await tokenize(p)));
    }
    return out;
  }
  return [];
}
