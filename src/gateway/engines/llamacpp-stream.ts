/**
 * A streamed llama-server answer read chunk by chunk (`streams: relay`): each reported id at its position
 * (`timings.predicted_n`), the tokens the stream never reported marked missing (Capture.missingIds), since
 * llama-server's streams leave some sampled ids out (llamacpp.ts says which and why).
 */
import type { Capture, StreamReader } from "./engine.ts";
import {
  type Json,
  type LlamaState,
  asObject,
  enginePromptCount,
  entriesOf,
  mergeToolCall,
  promptFor,
} from "./llamacpp-read.ts";

/** One choice of a stream, accumulated. */
export interface StreamChoice {
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

export class LlamaStreamReader implements StreamReader {
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
