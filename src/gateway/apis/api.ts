/**
 * The agent APIs the gateway serves, as codecs on the listener side (Envoy's HTTP filters between its
 * listener and its router; LiteLLM's one adapter per provider format): OpenAI Chat Completions and
 * Completions, Anthropic Messages, OpenAI Responses. Each translates its request into the canonical call
 * every engine adapter captures (an OpenAI chat or completions body), and the canonical answer back into its
 * own shape: whole, streamed chunk by chunk in its own event sequence, and errors.
 *
 * The call path (call.ts) knows no API: it forwards the canonical body, records the captures, and asks the
 * call's codec for the bytes the agent gets. A new API is one module beside this one, its test, and one
 * route line in server.ts.
 */
import type { Metrics } from "../../core/metrics.ts";
import type { AgentRoute, Capture } from "../engines/engine.ts";
import type { GatewayErrorCode } from "../http.ts";
import { isObject, type Json } from "./json.ts";
import type { ResponseStore } from "./response-store.ts";

export { isObject, type Json };

/** The APIs, as the request event's `api` names them. */
export const API_NAMES = ["chat", "completions", "messages", "responses"] as const;
export type ApiName = (typeof API_NAMES)[number];

/** A request the gateway refuses before anything is forwarded: answered in the API's error shape. */
export class ApiProblem {
  readonly status: number;
  readonly code: GatewayErrorCode;
  readonly message: string;
  /** The request field at fault (OpenAI's `param`), when one is. */
  readonly param: string | null;
  /** The API's own error code where it has one (Responses: `previous_response_not_found`). */
  readonly apiCode: string | null;

  constructor(
    message: string,
    options: { status?: number; code?: GatewayErrorCode; param?: string; apiCode?: string } = {},
  ) {
    this.message = message;
    this.status = options.status ?? 400;
    this.code = options.code ?? "invalid_request";
    this.param = options.param ?? null;
    this.apiCode = options.apiCode ?? null;
  }
}

/** What the gateway's settings say about translating calls (config.ts). */
export interface ApiSettings {
  /** The upstream's model name for the model an agent named (model_map, --model; pass-through by default). */
  upstreamModel(agentModel: string): string;
  /** A hosted tool (web search, code interpreter...) in a request: refused with 400, or dropped and counted. */
  hostedTools: "refuse" | "drop";
  /** Responses kept per session for previous_response_id and GET /v1/responses/{id}. */
  storedResponses: number;
}

/** What a codec may read while translating a request. */
export interface RequestContext {
  /** The call's session: what a codec keeps per session (the Responses it stored). */
  session: { responses: ResponseStore | null };
  settings: ApiSettings;
  metrics: Metrics;
}

/** A recorded call, as its answer needs it. */
export interface CallOutcome {
  /** The gateway's call id (each choice's when there were several). */
  callIds: string[];
  captures: Capture[];
  /** The recorded prompt's length, per capture. */
  promptLengths: number[];
}

/** One SSE text to send, and whether it belongs to the finished answer (held until the call is recorded). */
export interface StreamText {
  text: string;
  finishes: boolean;
}

/** Translates a streamed canonical answer (OpenAI chat or completions chunks) into the API's events. */
export interface ApiStream {
  /** One canonical chunk (what the engine adapter forwards): the API's events for it ("" for none). */
  chunk(chunk: Json): StreamText;
  /** An upstream SSE event that is not a JSON object (a comment, a keep-alive): forwarded or dropped. */
  other(raw: string): string;
  /**
   * The closing events once the call is recorded. `finished`: the upstream's stream ended as it should
   * (`[DONE]`); otherwise the stream broke and the closing events are not sent.
   */
  end(outcome: CallOutcome, finished: boolean): string;
  /** An error as this API writes one inside a stream (the stream ends after it). */
  error(code: GatewayErrorCode, message: string): string;
}

/** One agent request, translated; its answer is written back through it. */
export interface ApiCall {
  readonly api: ApiName;
  /** The engine route the canonical body goes to. */
  readonly route: AgentRoute;
  /** The canonical body: an OpenAI chat (or completions) body the engine adapter prepares. */
  readonly body: Json;
  /** Whether the agent asked for a stream. */
  readonly stream: boolean;
  /** Whether an engine's error answer reaches the agent as it is (it speaks the engine's API). */
  readonly passesEngineErrors: boolean;
  /** The model the agent named (its answer carries this name), when it named one. */
  readonly agentModel: string | undefined;
  /** What the request event records of the API beyond the canonical messages (`api_details`), if anything. */
  details(callId: string): Json | undefined;
  /** The stop reason the agent is given for a capture, in the API's terms (recorded as `stop_reason`). */
  stopReason(capture: Capture): string | undefined;
  /** The whole answer, from the canonical one, once the call is recorded. */
  answer(canonical: Json, outcome: CallOutcome): { status: number; body: Json };
  /** A translator for the streamed answer; `callId` names the call before it is recorded. */
  streamer(callId: string): ApiStream;
}

/** An agent API: its requests translated, its errors shaped. */
export interface AgentApi {
  readonly name: ApiName;
  /** Checks and translates a request body; an ApiProblem is answered 400 (or its status) in this API's shape. */
  request(body: Json, ctx: RequestContext): ApiCall | ApiProblem;
  /** An error answer body in this API's shape. */
  errorBody(status: number, code: string, message: string, param?: string | null): Json;
}

/**
 * Fields an engine's chat route takes beyond what the agent's API has, passed through unchanged from a
 * Messages or Responses body (a test forcing a tool call with `logit_bias`, a team pinning `seed`), so the
 * engine's own sampling controls stay reachable through any API. Anything else unknown is not forwarded: an
 * API's own fields (Claude Code's `context_management`, Codex's `client_metadata`) mean nothing to an engine.
 */
export const ENGINE_EXTRAS = [
  "logit_bias",
  "seed",
  "min_p",
  "repetition_penalty",
  "presence_penalty",
  "frequency_penalty",
  "chat_template_kwargs",
] as const;

/** The hosted tools whose drops are counted by name; any other is counted as `other` (labels stay few). */
const HOSTED_TOOLS = new Set([
  "web_search",
  "web_search_preview",
  "web_fetch",
  "file_search",
  "code_interpreter",
  "code_execution",
  "image_generation",
  "computer",
  "computer_use",
  "computer_use_preview",
  "bash",
  "text_editor",
  "memory",
  "mcp",
  "local_shell",
  "shell",
  "apply_patch",
  "tool_search_tool_regex",
  "tool_search_tool_bm25",
]);

/** A dropped hosted tool's metric label: its type without Anthropic's date suffix, if a known one. */
export function hostedToolLabel(type: unknown): string {
  const base = String(type).replace(/_\d{8}$/, "");
  return HOSTED_TOOLS.has(base) ? base : "other";
}

/** Copies the engine extras `body` has into `into`. */
export function copyEngineExtras(body: Json, into: Json): void {
  for (const k of ENGINE_EXTRAS) if (body[k] !== undefined) into[k] = body[k];
}

/** The canonical answer's parts a codec reads: the first choice, its message (or chunk delta). */
export interface CanonicalChoice {
  text: string;
  reasoning: string;
  toolCalls: Array<{ id: string; name: string; arguments: string }>;
  finishReason: string | null;
}

/** Reads choice 0 of a whole canonical chat answer. */
export function canonicalChoice(answer: Json): CanonicalChoice {
  const choices = Array.isArray(answer.choices) ? answer.choices : [];
  const choice = choices.find((c) => isObject(c) && (c.index ?? 0) === 0) ?? choices[0];
  const c = isObject(choice) ? choice : {};
  const m = isObject(c.message) ? c.message : {};
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isObject) : [];
  return {
    text: typeof m.content === "string" ? m.content : "",
    reasoning: reasoningOf(m),
    toolCalls: calls.map((t, i) => {
      const fn = isObject(t.function) ? t.function : {};
      return {
        id: typeof t.id === "string" && t.id !== "" ? t.id : `call_${i}`,
        name: typeof fn.name === "string" ? fn.name : "",
        arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      };
    }),
    finishReason: typeof c.finish_reason === "string" ? c.finish_reason : null,
  };
}

/** The reasoning text of a chat message or delta: `reasoning_content` (llama.cpp, SGLang) or `reasoning` (vLLM). */
export function reasoningOf(m: Json): string {
  if (typeof m.reasoning_content === "string") return m.reasoning_content;
  if (typeof m.reasoning === "string") return m.reasoning;
  return "";
}

/** The longest model name an agent may send (a longer one is refused: names are kept in a cache). */
export const MAX_MODEL_NAME = 256;

/** The problem with an agent's model name, or null (absent is fine for Chat; each codec says if it needs one). */
export function modelNameProblem(model: unknown): string | null {
  if (model === undefined) return null;
  if (typeof model !== "string" || model === "") return "model: a model name is required";
  return model.length > MAX_MODEL_NAME ? `model: at most ${MAX_MODEL_NAME} characters` : null;
}

/** Throws the ApiProblem a request translator refuses with, naming the field (its codec answers it 400). */
export function refuseRequest(message: string, param?: string, apiCode?: string): never {
  throw new ApiProblem(message, {
    ...(param !== undefined ? { param } : {}),
    ...(apiCode !== undefined ? { apiCode } : {}),
  });
}

/** What a streamed canonical chunk holds for choice 0 (the only one the Messages and Responses APIs have). */
export interface ChunkPart {
  /** The chunk's usage (the last chunk of a stream with include_usage), when it has one. */
  usage: unknown;
  /** Choice 0, or null for a chunk without it (the usage chunk). */
  choice: Json | null;
  reasoning: string;
  content: string;
  toolPieces: unknown[];
  /** The choice's finish reason came in this chunk. */
  finishes: boolean;
}

export function chunkPart(chunk: Json): ChunkPart {
  const usage = chunk.usage === null ? undefined : chunk.usage;
  const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
  const choice = choices.find((c) => isObject(c) && (c.index ?? 0) === 0);
  if (!isObject(choice))
    return { usage, choice: null, reasoning: "", content: "", toolPieces: [], finishes: false };
  const delta = isObject(choice.delta) ? choice.delta : {};
  return {
    usage,
    choice,
    reasoning: reasoningOf(delta),
    content: typeof delta.content === "string" ? delta.content : "",
    toolPieces: Array.isArray(delta.tool_calls) ? delta.tool_calls : [],
    finishes: choice.finish_reason !== null && choice.finish_reason !== undefined,
  };
}

/** Token counts of a canonical answer's `usage` (what the engine reported). */
export interface UsageCounts {
  prompt: number;
  completion: number;
  /** Prompt tokens the engine served from its prefix cache, when it reports them. */
  cached: number | null;
}

export function usageCounts(usage: unknown, outcome: CallOutcome | null): UsageCounts {
  const u = isObject(usage) ? usage : {};
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const capture = outcome?.captures[0];
  return {
    prompt: typeof u.prompt_tokens === "number" ? u.prompt_tokens : (outcome?.promptLengths[0] ?? 0),
    // The engine's count; where it gave none, the ids it sampled (as many as it counts).
    completion:
      typeof u.completion_tokens === "number" ? u.completion_tokens : (capture?.outputIds.length ?? 0),
    cached: typeof details.cached_tokens === "number" ? details.cached_tokens : null,
  };
}

/**
 * A tool call's arguments as a JSON object, or null when they are not one (a truncated or malformed call:
 * the codecs give it to the agent as text, counted as gateway_malformed_tool_calls, never as a guessed
 * object).
 */
export function parseArguments(raw: string): Json | null {
  try {
    const v: unknown = JSON.parse(raw === "" ? "{}" : raw);
    return isObject(v) ? v : null;
  } catch {
    return null;
  }
}

/** An SSE event with a name (`event:` line) and JSON data, as Anthropic and OpenAI Responses write them. */
export function namedEvent(name: string, data: Json): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}
