/**
 * The contract between the gateway and one inference engine's HTTP API (vLLM, SGLang, llama.cpp): what to
 * add to the agent's request so the engine returns token ids and logprobs, how to read them back from its
 * answer (whole or streamed), and what to take out of the answer again so the agent sees only what it asked
 * for. The gateway owns sessions, routing, the HTTP exchange and events; an adapter owns field names.
 *
 * A new engine is one file beside this one and its test.
 */
import type { RoutedExperts } from "../../schemas/routed-experts.ts";

export const ENGINE_NAMES = ["vllm", "sglang", "llamacpp"] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];

/** The OpenAI route the agent called. */
export type AgentRoute = "chat" | "completions";

/** What the agent asked for itself, so the gateway knows what to strip from the answer. */
export interface Asked {
  /** The agent set `logprobs` (chat: `logprobs: true`; completions: a number). */
  logprobs: boolean;
  /** The agent asked for top alternatives (chat `top_logprobs`, completions `logprobs` > 0). */
  topLogprobs: number;
  /** The agent set the engine's token-id flag itself (vLLM/SGLang `return_token_ids`). */
  tokenIds: boolean;
}

/** One HTTP exchange with the upstream beyond the call itself (llama.cpp's /tokenize, say). */
export type UpstreamJson = (path: string, body: unknown, signal?: AbortSignal) => Promise<unknown>;

/** The request to send upstream. */
export interface PreparedCall {
  /** Path on the upstream, e.g. `/v1/chat/completions`. */
  path: string;
  /** The JSON body to send (the agent's body with the capture fields added). */
  body: Record<string, unknown>;
  asked: Asked;
  /** Prompt ids the adapter already knows before the call (from a token prompt or a tokenize round trip). */
  promptIds?: Int32Array;
  /**
   * The agent asked for a stream but the call goes upstream whole, because this engine's streams cannot
   * report every sampled id (llama.cpp): the gateway gives the agent the whole answer as a stream.
   */
  wholeAsStream?: boolean;
  /** Adapter-private state carried from `prepare` to reading the answer. */
  state?: unknown;
  /** Prompt mode tokens: how the prompt was made and which branch it continues (continuation/plan.ts). */
  continuation?: ContinuationRecord;
}

/** How a call's prompt ids were made in prompt mode tokens, as its request event records it. */
export interface ContinuationRecord {
  /**
   * continued: the branch's sampled tokens plus the new messages rendered as a continuation; rendered: the
   * whole conversation rendered by the engine's template (no branch matched); engine: sent to the engine's
   * chat route, which rendered it (a call needing the chat route's features, e.g. response_format).
   */
  form: "continued" | "rendered" | "engine";
  /** continued: the branch's call, and how many of the call's messages its history covers. */
  parent?: string;
  messagesOffset?: number;
  /** The digest of the call's messages (and tools), and how many there are (continuation/history.ts). */
  promptDigest: string;
  messageCount: number;
  /** The call's template settings (continuation/history.ts settingsKey). */
  settings: string;
}

/**
 * The engine's own chat template and tokenizer, through its HTTP routes: what prompt mode tokens renders
 * with. Every method makes one or two round trips to the upstream.
 */
export interface PromptRenderer {
  /** The prompt ids the engine's chat route would render for a chat body (generation prompt added). */
  renderIds(body: Record<string, unknown>, upstream: UpstreamJson, signal?: AbortSignal): Promise<Int32Array>;
  /** The text the chat template renders for a chat body, generation prompt added. */
  renderText(body: Record<string, unknown>, upstream: UpstreamJson, signal?: AbortSignal): Promise<string>;
  /** The ids of a text, special tokens' text read as those tokens, nothing added (no BOS). */
  tokenize(text: string, upstream: UpstreamJson, signal?: AbortSignal): Promise<Int32Array>;
}

/** What one choice of one call sampled, as the engine reported it. */
export interface Capture {
  /** The choice's `index` in the answer (0 unless the agent asked for n > 1). */
  choiceIndex: number;
  /** The prompt's token ids, when the engine returned them (else the gateway uses PreparedCall.promptIds). */
  promptIds?: Int32Array;
  outputIds: Int32Array;
  /**
   * Positions in `outputIds` (ascending) of tokens the engine sampled but whose ids it did not report;
   * `outputIds` holds -1 there and `logprobs` NaN. Absent when every id is known. Only llama.cpp's streamed
   * routes leave such gaps (docs/engines.md): a gateway must not train on a capture that has them.
   */
  missingIds?: Int32Array;
  /**
   * One logprob per output id, or undefined when the engine gave none at all. NaN marks a token the engine
   * gave no logprob for (never filled in: the event builder turns it into a missing value).
   */
  logprobs?: Float32Array;
  /** The engine's raw finish reason (`stop`, `length`, `tool_calls`, `abort`, ...), never normalised. */
  finishReason: string;
  /**
   * The stop string that ended the output, when the engine says one did (vLLM's `stop_reason`, SGLang's
   * `matched_stop`, llama.cpp's `stopping_word`): an API with a stop_sequence reason reports it.
   */
  stopSequence?: string;
  /** The policy version the engine reports for this answer, when it reports one. */
  weightVersion?: number;
  /** Per output token versions, when the engine reports spans (a rollout resumed across an update). */
  outputVersions?: Int32Array;
  routedExperts?: RoutedExperts;
  promptRoutedExperts?: RoutedExperts;
  /** The decoded output text and parsed tool calls, as the agent sees them. */
  text?: string;
  toolCalls?: unknown[];
  /** Prompt mode tokens: tool-call blocks the parser could not read (their text went to the agent as content). */
  malformedToolCalls?: number;
}

/** Reads a streamed answer chunk by chunk. */
export interface StreamReader {
  /**
   * Takes one parsed SSE `data:` object; returns what to forward to the agent (the same object, possibly
   * with the capture fields removed), or undefined to forward nothing for this chunk.
   */
  chunk(data: Record<string, unknown>): Record<string, unknown> | undefined;
  /**
   * The captures so far. `finished` is false when the stream ended early (the agent disconnected, the
   * upstream broke): choices without a finish reason then get `abort`.
   */
  captures(finished: boolean): Capture[];
}

export interface EngineAdapter {
  readonly name: EngineName;
  /**
   * Adds what the engine needs to report token ids and logprobs to the agent's body (a fresh object; the
   * input is not changed). May call the upstream (`upstream`) first, e.g. to tokenize the prompt.
   */
  prepare(
    route: AgentRoute,
    body: Record<string, unknown>,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<PreparedCall>;
  /** Reads a whole (non-streamed) answer: the captures, and the answer to give the agent. */
  answer(
    prepared: PreparedCall,
    json: Record<string, unknown>,
  ): { captures: Capture[]; forAgent: Record<string, unknown> };
  /** A reader for one streamed answer. */
  stream(prepared: PreparedCall): StreamReader;
  /**
   * Completes captures after the answer when the engine needs another round trip (llama.cpp: the bytes of
   * the sampled ids, to place logprob entries the ids alone cannot; never ids from tokenizing output text,
   * which is not what the model sampled). Call it with the captures `answer` returned. Optional.
   */
  complete?(prepared: PreparedCall, captures: Capture[], upstream: UpstreamJson): Promise<void>;
  /**
   * The prompt length the engine renders for a chat body (Anthropic's count_tokens), from the engine's own
   * tokenizer routes. Optional: without it the gateway asks a one-token call's usage.
   */
  countTokens?(body: Record<string, unknown>, upstream: UpstreamJson, signal?: AbortSignal): Promise<number>;
  /** The engine's template and tokenizer routes (prompt mode tokens); absent: the engine cannot serve it. */
  readonly renderer?: PromptRenderer;
}
