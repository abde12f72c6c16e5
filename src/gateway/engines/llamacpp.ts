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
import {
  type Json,
  type LlamaState,
  alignedLogprobs,
  asObject,
  enginePromptCount,
  entriesOf,
  int32,
  pieceBytes,
  placeByPieces,
  placeEntries,
  promptFor,
  textAndTools,
} from "./llamacpp-read.ts";
import { LlamaStreamReader } from "./llamacpp-stream.ts";
import { llamaRenderer, promptIds } from "./llamacpp-render.ts";

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

/** What the agent asked for itself, in llama.cpp's terms. */
export function llamaAsked(route: AgentRoute, body: Record<string, unknown>): Asked {
  const nProbs = typeof body.n_probs === "number" ? body.n_probs : undefined;
  // The agent's own logprobs: chat `logprobs: true` (n_probs = top_logprobs, 20 by default); completions
  // `logprobs: N` (an alias of n_probs in llama.cpp, server-schema.cpp); or llama.cpp's own `n_probs`.
  const logprobs =
    (nProbs ?? 0) > 0 ||
    (route === "chat" ? body.logprobs === true : typeof body.logprobs === "number" && body.logprobs > 0);
  // Chat `logprobs: true` alone asks for no alternatives (OpenAI's meaning), though llama-server then writes
  // 20 a token: the answer is cut back to what was asked (strip).
  const chatTop =
    body.logprobs === true ? (typeof body.top_logprobs === "number" ? body.top_logprobs : 0) : (nProbs ?? 0);
  const completionsTop = nProbs ?? (typeof body.logprobs === "number" ? body.logprobs : 0);
  return {
    logprobs,
    topLogprobs: route === "chat" ? chatTop : completionsTop,
    tokenIds: body.return_tokens === true,
  };
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
    const asked = llamaAsked(route, body);
    const askedProbs = asked.logprobs;
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
        // Only the ids, the choice they belong to and what stopped it; __verbose would otherwise repeat
        // the prompt as text.
        out.response_fields = ["tokens", "index", "stop_type", "stopping_word"];
        addedVerbose = true;
      }
    }
    const n = typeof body.n === "number" ? body.n : typeof body.n_cmpl === "number" ? body.n_cmpl : 1;
    const prompts = await promptIds(route, body, upstream, signal);
    // The chat route's alternatives beyond what the agent asked (logprobs: true without top_logprobs).
    const trimTop =
      route === "chat" &&
      body.logprobs === true &&
      typeof body.top_logprobs !== "number" &&
      typeof body.n_probs !== "number";
    const state: LlamaState = {
      route,
      stream,
      trimTop,
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
      // A stop word (the agent's `stop`) ended it: server-task.cpp writes stop_type "word" and the word.
      if (
        verbose?.stop_type === "word" &&
        typeof verbose.stopping_word === "string" &&
        verbose.stopping_word !== ""
      )
        capture.stopSequence = verbose.stopping_word;
      if (positions.includes(-1)) state.unplaced.set(capture, entries);
      const prompt = promptFor(state, index);
      if (prompt !== undefined && promptCount === prompt.length) capture.promptIds = prompt;
      captures.push(capture);
    }
    return { captures, forAgent: this.strip(state, json, choices) };
  }

  /**
   * The answer without what the gateway added: `__verbose`, logprob entries the agent did not ask for, and
   * alternatives beyond those it asked for.
   */
  private strip(state: LlamaState, json: Json, choices: unknown[]): Json {
    if (!state.addedVerbose && !state.addedProbs && !state.addedTokensToVerbose && !state.trimTop)
      return json;
    const out: Json = { ...json };
    if (state.trimTop) out.choices = choices = choices.map(withoutAlternatives);
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

  /** The prompt's length as the chat route renders it: /apply-template, then /tokenize (see promptIds). */
  async countTokens(
    body: Record<string, unknown>,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<number> {
    const [ids] = await promptIds("chat", body, upstream, signal);
    return ids!.length;
  }

  readonly renderer = llamaRenderer;

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

/** A chat choice whose logprob entries carry no alternatives (`top_logprobs: []`, as OpenAI writes them). */
function withoutAlternatives(raw: unknown): unknown {
  const choice = asObject(raw);
  const content = asObject(choice?.logprobs)?.content;
  if (choice === undefined || !Array.isArray(content)) return raw;
  const entries = content.map((e: unknown) => {
    const entry = asObject(e);
    return entry === undefined ? e : { ...entry, top_logprobs: [] };
  });
  return { ...choice, logprobs: { ...asObject(choice.logprobs), content: entries } };
}
