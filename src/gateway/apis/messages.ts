/**
 * Anthropic Messages (`POST /v1/messages`): requests translated in messages-request.ts; answers built
 * here from the canonical chat answer, whole or streamed in Anthropic's event sequence (message_start,
 * content_block_start / content_block_delta (text_delta, thinking_delta, signature_delta, input_json_delta)
 * / content_block_stop, message_delta, message_stop), errors as `{"type": "error", "error": {"type",
 * "message"}}`.
 *
 * Content blocks: thinking (the engine's reasoning output), text, tool_use (each tool call, its arguments
 * parsed into `input`). Stop reasons from the engine's raw finish reason, which the events keep beside it:
 * stop → end_turn (stop_sequence when the engine names the stop string that matched), tool_calls → tool_use,
 * length → max_tokens, content_filter → refusal. `abort` (the engine cut the call short, e.g. for a weight
 * update) has no Anthropic stop reason and is never passed off as a finished turn: the agent gets an error
 * (503, overloaded_error) it retries, while the events record what was sampled.
 */
import type { Capture } from "../engines/engine.ts";
import type { GatewayErrorCode } from "../http.ts";
import {
  ApiProblem,
  canonicalChoice,
  chunkPart,
  isObject,
  namedEvent,
  parseArguments,
  usageCounts,
  type AgentApi,
  type ApiCall,
  type ApiStream,
  type CallOutcome,
  type Json,
  type RequestContext,
  type StreamText,
} from "./api.ts";
import { messagesToChat } from "./messages-request.ts";

/** Anthropic's error `type` for an HTTP status. */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
    case 409:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

export function anthropicErrorBody(status: number, _code: string, message: string): Json {
  return { type: "error", error: { type: anthropicErrorType(status), message } };
}

/** What the gateway signs its thinking blocks with: its own call id (it verifies nothing that comes back). */
const signature = (callId: string) => `trajflow:${callId}`;

/** The Messages stop reason of a finished call, or null for an abort (the agent gets an error instead). */
export function messagesStopReason(finish: string, toolUses: number, stopSequence?: string): string | null {
  switch (finish) {
    case "abort":
      return null;
    case "length":
      return "max_tokens";
    case "content_filter":
      return "refusal";
    case "tool_calls":
      return toolUses > 0 ? "tool_use" : "end_turn";
    default:
      // A parsed tool call is what the agent must act on, whatever stopped the output after it.
      if (toolUses > 0) return "tool_use";
      return stopSequence !== undefined ? "stop_sequence" : "end_turn";
  }
}

const ABORTED =
  "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call";

/** Anthropic's usage from the engine's: input_tokens without the prefix-cache hits, which are reported apart. */
function usageOf(usage: unknown, outcome: CallOutcome): Json {
  const u = usageCounts(usage, outcome);
  if (u.cached === null) return { input_tokens: u.prompt, output_tokens: u.completion };
  return {
    input_tokens: u.prompt - u.cached,
    output_tokens: u.completion,
    cache_read_input_tokens: u.cached,
    cache_creation_input_tokens: 0,
  };
}

class MessagesCall implements ApiCall {
  readonly api = "messages" as const;
  readonly route = "chat" as const;
  readonly body: Json;
  readonly stream: boolean;
  readonly passesEngineErrors = false;
  readonly agentModel: string;
  details(): undefined {
    return undefined;
  }
  readonly ctx: RequestContext;

  /** The stop strings the agent asked for (the engine may stop on its template's own, never reported). */
  private readonly stops: readonly string[];

  constructor(body: Json, chat: Json, ctx: RequestContext) {
    this.body = chat;
    this.stops = Array.isArray(body.stop_sequences) ? (body.stop_sequences as string[]) : [];
    this.stream = body.stream === true;
    this.agentModel = body.model as string;
    this.ctx = ctx;
  }

  /** The stop string that ended the output, if it is one the agent asked for. */
  asked(stopSequence: string | undefined): string | undefined {
    return stopSequence !== undefined && this.stops.includes(stopSequence) ? stopSequence : undefined;
  }

  stopReason(capture: Capture): string {
    const toolUses = (capture.toolCalls ?? []).filter((t) => {
      const fn = isObject(t) && isObject(t.function) ? t.function : {};
      return typeof fn.arguments === "string" && parseArguments(fn.arguments) !== null;
    }).length;
    return messagesStopReason(capture.finishReason, toolUses, this.asked(capture.stopSequence)) ?? "error";
  }

  answer(canonical: Json, outcome: CallOutcome): { status: number; body: Json } {
    const capture = outcome.captures[0]!;
    const choice = canonicalChoice(canonical);
    const stopSequence = this.asked(capture.stopSequence);
    const stop = messagesStopReason(capture.finishReason, 0, stopSequence);
    if (stop === null) return { status: 503, body: anthropicErrorBody(503, "call_aborted", ABORTED) };
    const content: Json[] = [];
    if (choice.reasoning !== "")
      content.push({
        type: "thinking",
        thinking: choice.reasoning,
        signature: signature(outcome.callIds[0]!),
      });
    if (choice.text !== "") content.push({ type: "text", text: choice.text });
    let toolUses = 0;
    for (const call of choice.toolCalls) {
      const input = parseArguments(call.arguments);
      if (input === null) {
        this.ctx.metrics.inc("gateway_malformed_tool_calls", "messages");
        content.push({ type: "text", text: call.arguments });
        continue;
      }
      toolUses++;
      content.push({ type: "tool_use", id: call.id, name: call.name, input });
    }
    const stopReason = messagesStopReason(capture.finishReason, toolUses, stopSequence)!;
    return {
      status: 200,
      body: {
        id: `msg_${outcome.callIds[0]}`,
        type: "message",
        role: "assistant",
        model: this.agentModel,
        content,
        stop_reason: stopReason,
        stop_sequence: stopReason === "stop_sequence" ? (stopSequence ?? null) : null,
        usage: usageOf(canonical.usage, outcome),
      },
    };
  }

  streamer(callId: string): ApiStream {
    return new MessagesStream(this, callId);
  }
}

type Block = { kind: "thinking" | "text" | "tool" };

/** Chat chunks → Anthropic's events, one content block open at a time. */
/**
 * Chat chunks → Anthropic's events, one content block open at a time. Thinking and text stream as they
 * come. A tool call is an action the agent may take as soon as its block closes, so from its first piece on
 * everything is held until the call is recorded (`finishes`), and the call is sent whole when it closes:
 * a tool_use block with its input, or, if its arguments are not a JSON object (cut off), a text block, as
 * a whole answer gives it.
 */
class MessagesStream implements ApiStream {
  private readonly call: MessagesCall;
  private readonly callId: string;
  private started = false;
  private index = -1;
  private open: Block | null = null;
  /** The tool call being gathered (sent when it closes). */
  private tool: { toolIndex: number; id: string; name: string; args: string } | null = null;
  private usage: unknown;
  private toolUses = 0;
  private acting = false;

  constructor(call: MessagesCall, callId: string) {
    this.call = call;
    this.callId = callId;
  }

  chunk(chunk: Json): StreamText {
    const out: string[] = [];
    this.start(out);
    const part = chunkPart(chunk);
    if (part.usage !== undefined) this.usage = part.usage;
    if (part.reasoning !== "")
      this.delta(out, { kind: "thinking" }, { type: "thinking_delta", thinking: part.reasoning });
    if (part.content !== "") this.delta(out, { kind: "text" }, { type: "text_delta", text: part.content });
    for (const piece of part.toolPieces) this.toolPiece(out, piece);
    if (part.finishes) this.close(out);
    return { text: out.join(""), finishes: part.finishes || this.acting };
  }

  private start(out: string[]): void {
    if (this.started) return;
    this.started = true;
    out.push(
      namedEvent("message_start", {
        type: "message_start",
        message: {
          id: `msg_${this.callId}`,
          type: "message",
          role: "assistant",
          model: this.call.agentModel,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      }),
    );
  }

  /** A delta for a thinking or text block, opening one when another kind is open. */
  private delta(out: string[], block: Block, delta: Json): void {
    if (this.open?.kind !== block.kind) {
      this.close(out);
      const start =
        block.kind === "text"
          ? { type: "text", text: "" }
          : { type: "thinking", thinking: "", signature: "" };
      this.begin(out, block, start);
    }
    out.push(namedEvent("content_block_delta", { type: "content_block_delta", index: this.index, delta }));
  }

  private toolPiece(out: string[], piece: unknown): void {
    if (!isObject(piece)) return;
    const toolIndex = typeof piece.index === "number" ? piece.index : 0;
    const fn = isObject(piece.function) ? piece.function : {};
    if (this.tool === null || this.tool.toolIndex !== toolIndex) {
      this.close(out);
      this.acting = true;
      const id = typeof piece.id === "string" && piece.id !== "" ? piece.id : `call_${toolIndex}`;
      this.tool = { toolIndex, id, name: typeof fn.name === "string" ? fn.name : "", args: "" };
    }
    if (typeof fn.arguments === "string") this.tool.args += fn.arguments;
  }

  private begin(out: string[], block: Block, contentBlock: Json): void {
    this.index++;
    this.open = block;
    out.push(
      namedEvent("content_block_start", {
        type: "content_block_start",
        index: this.index,
        content_block: contentBlock,
      }),
    );
  }

  private close(out: string[]): void {
    this.closeBlock(out);
    const tool = this.tool;
    if (tool === null) return;
    this.tool = null;
    const input = parseArguments(tool.args);
    if (input === null) {
      this.call.ctx.metrics.inc("gateway_malformed_tool_calls", "messages");
      this.delta(out, { kind: "text" }, { type: "text_delta", text: tool.args });
      this.closeBlock(out);
      return;
    }
    this.toolUses++;
    this.begin(out, { kind: "tool" }, { type: "tool_use", id: tool.id, name: tool.name, input: {} });
    out.push(
      namedEvent("content_block_delta", {
        type: "content_block_delta",
        index: this.index,
        delta: { type: "input_json_delta", partial_json: JSON.stringify(input) },
      }),
    );
    this.closeBlock(out);
  }

  private closeBlock(out: string[]): void {
    const open = this.open;
    if (open === null) return;
    if (open.kind === "thinking")
      out.push(
        namedEvent("content_block_delta", {
          type: "content_block_delta",
          index: this.index,
          delta: { type: "signature_delta", signature: signature(this.callId) },
        }),
      );
    out.push(namedEvent("content_block_stop", { type: "content_block_stop", index: this.index }));
    this.open = null;
  }

  other(): string {
    return "";
  }

  end(outcome: CallOutcome, finished: boolean): string {
    // The engine's stream ended without its end: the call is recorded as an abort, never a finished turn.
    if (!finished) return this.error("call_aborted", ABORTED);
    const out: string[] = [];
    this.start(out);
    this.close(out);
    const capture = outcome.captures[0]!;
    const stopSequence = this.call.asked(capture.stopSequence);
    const stop = messagesStopReason(capture.finishReason, this.toolUses, stopSequence);
    if (stop === null) return out.join("") + this.error("call_aborted", ABORTED);
    out.push(
      namedEvent("message_delta", {
        type: "message_delta",
        delta: { stop_reason: stop, stop_sequence: stop === "stop_sequence" ? stopSequence : null },
        usage: usageOf(this.usage, outcome),
      }),
      namedEvent("message_stop", { type: "message_stop" }),
    );
    return out.join("");
  }

  error(code: GatewayErrorCode, message: string): string {
    const status = code === "call_aborted" || code === "output_unavailable" ? 503 : 500;
    return namedEvent("error", anthropicErrorBody(status, code, message));
  }
}

export const messagesApi: AgentApi = {
  name: "messages",
  request(body, ctx) {
    try {
      return new MessagesCall(body, messagesToChat(body, ctx), ctx);
    } catch (err) {
      if (err instanceof ApiProblem) return err;
      throw err;
    }
  },
  errorBody: anthropicErrorBody,
};
