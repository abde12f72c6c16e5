/**
 * A streamed Responses answer: canonical chat chunks → the Responses event sequence, one output item open
 * at a time (reasoning, message, then each tool call), every event numbered by `sequence_number`. The
 * closing event (response.completed / incomplete / failed) carries the whole Response and is sent once the
 * call is recorded.
 */
import type { GatewayErrorCode } from "../http.ts";
import {
  isObject,
  namedEvent,
  parseArguments,
  chunkPart,
  type ApiStream,
  type CallOutcome,
  type Json,
  type StreamText,
} from "./api.ts";
import { assistantTurn } from "./response-store.ts";
import {
  ABORTED_MESSAGE,
  responsesUsage,
  responseStatus,
  textLogprobs,
  toolCallItem,
  type ResponseBuilder,
} from "./responses-output.ts";

/** A message item's status for a response status: incomplete at the token limit, as a whole answer has it. */
const messageStatus = (status: string | null): "completed" | "incomplete" =>
  status === "incomplete" ? "incomplete" : "completed";

interface OpenItem {
  kind: "reasoning" | "message" | "tool";
  index: number;
  id: string;
  text: string;
  logprobs: Json[];
  /** A tool call's chat index, id and name. */
  toolIndex?: number;
  callId?: string;
  name?: string;
}

export class ResponsesStream implements ApiStream {
  private readonly call: ResponseBuilder;
  private readonly callId: string;
  private seq = 0;
  private started = false;
  private open: OpenItem | null = null;
  private readonly output: Json[] = [];
  private usage: unknown;
  private text = "";
  private reasoning = "";
  private readonly calls: Array<{ id: string; name: string; arguments: string }> = [];
  /** The tool call being gathered: sent whole when it closes (an agent acts on an item as soon as it is done). */
  private pending: OpenItem | null = null;
  /** A tool call began: everything from then on is held until the call is recorded. */
  private acting = false;

  constructor(call: ResponseBuilder, callId: string) {
    this.call = call;
    this.callId = callId;
  }

  private event(type: string, fields: Json): string {
    return namedEvent(type, { type, sequence_number: this.seq++, ...fields });
  }

  /** An event carrying the whole Response, written with its call's cached settings. */
  private responseEvent(type: string, response: Json): string {
    const head = JSON.stringify({ type, sequence_number: this.seq++ });
    return `event: ${type}\ndata: ${head.slice(0, -1)},"response":${this.call.responseText(response)}}\n\n`;
  }

  chunk(chunk: Json): StreamText {
    const out: string[] = [];
    this.start(out);
    const part = chunkPart(chunk);
    if (part.usage !== undefined) this.usage = part.usage;
    if (part.reasoning !== "") this.textDelta(out, "reasoning", part.reasoning, []);
    if (part.content !== "") {
      const logprobs = this.call.translated.logprobs ? textLogprobs(part.choice?.logprobs) : [];
      this.textDelta(out, "message", part.content, logprobs);
    }
    for (const piece of part.toolPieces) this.toolPiece(out, piece);
    if (part.finishes)
      this.close(out, messageStatus(responseStatus(String(part.choice!.finish_reason)).status));
    return { text: out.join(""), finishes: part.finishes || this.acting };
  }

  private start(out: string[]): void {
    if (this.started) return;
    this.started = true;
    const response = this.call.response(this.callId, "in_progress", [], {});
    out.push(
      this.responseEvent("response.created", response),
      this.responseEvent("response.in_progress", response),
    );
  }

  private textDelta(out: string[], kind: "reasoning" | "message", delta: string, logprobs: Json[]): void {
    if (this.open?.kind !== kind) {
      this.close(out);
      const prefix = kind === "reasoning" ? "rs" : "msg";
      const item = this.begin(out, { kind, id: `${prefix}_${this.callId}`, text: "", logprobs: [] });
      out.push(
        this.event("response.content_part.added", {
          item_id: item.id,
          output_index: item.index,
          content_index: 0,
          part: this.part(item),
        }),
      );
    }
    const item = this.open!;
    item.text += delta;
    item.logprobs.push(...logprobs);
    const type = kind === "reasoning" ? "response.reasoning_text.delta" : "response.output_text.delta";
    out.push(
      this.event(type, {
        item_id: item.id,
        output_index: item.index,
        content_index: 0,
        delta,
        ...(kind === "message" ? { logprobs } : {}),
      }),
    );
  }

  private part(item: OpenItem): Json {
    return item.kind === "reasoning"
      ? { type: "reasoning_text", text: item.text }
      : { type: "output_text", text: item.text, annotations: [], logprobs: item.logprobs };
  }

  private item(item: OpenItem, status: string): Json {
    if (item.kind === "reasoning")
      return {
        type: "reasoning",
        id: item.id,
        summary: [],
        content: status === "in_progress" ? [] : [this.part(item)],
      };
    if (item.kind === "message")
      return {
        type: "message",
        id: item.id,
        status,
        role: "assistant",
        content: status === "in_progress" ? [] : [this.part(item)],
      };
    const call = { id: item.callId!, name: item.name!, arguments: item.text };
    const done = toolCallItem(this.call.translated.tools, `${this.callId}_${item.toolIndex!}`, call);
    // A custom tool call has no status (as the whole answer gives it).
    return done.type === "function_call" ? { ...done, status } : done;
  }

  private begin(out: string[], fields: Omit<OpenItem, "index">): OpenItem {
    const item: OpenItem = { ...fields, index: this.output.length };
    this.output.push({});
    this.open = item;
    out.push(
      this.event("response.output_item.added", {
        output_index: item.index,
        item: this.item(item, "in_progress"),
      }),
    );
    return item;
  }

  private toolPiece(out: string[], piece: unknown): void {
    if (!isObject(piece)) return;
    const toolIndex = typeof piece.index === "number" ? piece.index : 0;
    const fn = isObject(piece.function) ? piece.function : {};
    if (this.pending?.toolIndex !== toolIndex) {
      this.close(out);
      this.acting = true;
      const name = typeof fn.name === "string" ? fn.name : "";
      // The item's own id, as toolCallItem gives it (ctc_ for a custom tool's call).
      const prefix = this.call.translated.tools.custom.has(name) ? "ctc" : "fc";
      this.pending = {
        kind: "tool",
        index: -1,
        id: `${prefix}_${this.callId}_${toolIndex}`,
        text: "",
        logprobs: [],
        toolIndex,
        callId: typeof piece.id === "string" && piece.id !== "" ? piece.id : `call_${toolIndex}`,
        name,
      };
    }
    if (typeof fn.arguments === "string") this.pending!.text += fn.arguments;
  }

  /**
   * Sends the gathered tool call whole: its item, arguments and done events; or, when its arguments are
   * not a JSON object (a call cut off), its text as a message, counted, as a whole answer gives it.
   */
  private flushTool(out: string[], status: "completed" | "incomplete"): void {
    const tool = this.pending;
    if (tool === null) return;
    this.pending = null;
    const custom = this.call.translated.tools.custom.has(tool.name!);
    if (!custom && parseArguments(tool.text) === null) {
      this.call.ctx.metrics.inc("gateway_malformed_tool_calls", "responses");
      this.textDelta(out, "message", tool.text, []);
      this.closeItem(out, status);
      return;
    }
    // Added as the API adds an item (its arguments empty), then given whole.
    const item = this.begin(out, { ...tool, text: "" });
    item.text = tool.text;
    if (!custom && item.text !== "")
      out.push(
        this.event("response.function_call_arguments.delta", {
          item_id: item.id,
          output_index: item.index,
          delta: item.text,
        }),
      );
    this.closeItem(out, status);
  }

  /** Closes the open item, then sends a gathered tool call. */
  private close(out: string[], status: "completed" | "incomplete" = "completed"): void {
    this.closeItem(out, status);
    this.flushTool(out, status);
  }

  /** Closes the open item; a message closes with `status` (incomplete at the token limit). */
  private closeItem(out: string[], status: "completed" | "incomplete" = "completed"): void {
    const item = this.open;
    if (item === null) return;
    this.open = null;
    if (item.kind === "tool") {
      const call = { id: item.callId!, name: item.name!, arguments: item.text };
      this.calls.push(call);
      const custom = this.call.translated.tools.custom.has(call.name);
      if (custom) {
        const done = this.item(item, "completed");
        out.push(
          this.event("response.custom_tool_call_input.done", {
            item_id: item.id,
            output_index: item.index,
            input: done.input,
          }),
        );
      } else
        out.push(
          this.event("response.function_call_arguments.done", {
            item_id: item.id,
            output_index: item.index,
            arguments: call.arguments,
            name: call.name,
          }),
        );
    } else {
      if (item.kind === "message") this.text += item.text;
      else this.reasoning += item.text;
      const done = item.kind === "reasoning" ? "response.reasoning_text.done" : "response.output_text.done";
      out.push(
        this.event(done, {
          item_id: item.id,
          output_index: item.index,
          content_index: 0,
          text: item.text,
          ...(item.kind === "message" ? { logprobs: item.logprobs } : {}),
        }),
        this.event("response.content_part.done", {
          item_id: item.id,
          output_index: item.index,
          content_index: 0,
          part: this.part(item),
        }),
      );
    }
    const finished = this.item(item, item.kind === "message" ? status : "completed");
    this.output[item.index] = finished;
    out.push(this.event("response.output_item.done", { output_index: item.index, item: finished }));
  }

  other(): string {
    return "";
  }

  end(outcome: CallOutcome, finished: boolean): string {
    // The engine's stream ended without its end: the call is recorded as an abort, never a completed one.
    if (!finished) return this.error("call_aborted", ABORTED_MESSAGE);
    const out: string[] = [];
    this.start(out);
    const capture = outcome.captures[0]!;
    const { status } = responseStatus(capture.finishReason);
    this.close(out, messageStatus(status));
    // An answer without text or tool calls (nothing, or reasoning only) still has a message, as a whole
    // answer gives it.
    if (status !== null && this.output.every((o) => o.type === "reasoning")) {
      this.textDelta(out, "message", "", []);
      this.close(out, messageStatus(status));
    }
    const usage = responsesUsage(this.usage, outcome);
    const assistant = assistantTurn(
      this.text,
      this.reasoning,
      this.calls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: c.arguments },
      })),
    );
    const response = this.call.finish(this.callId, capture, this.output, usage, assistant);
    const type =
      status === null
        ? "response.failed"
        : status === "incomplete"
          ? "response.incomplete"
          : "response.completed";
    out.push(this.responseEvent(type, response));
    return out.join("");
  }

  error(code: GatewayErrorCode, message: string): string {
    return this.event("error", { code, message, param: null });
  }
}
