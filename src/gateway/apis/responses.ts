/**
 * OpenAI Responses (`POST /v1/responses`): requests translated in responses-request.ts; answers built here
 * from the canonical chat answer, whole or streamed in the Responses event sequence (response.created,
 * response.in_progress, response.output_item.added, response.content_part.added, response.output_text.delta
 * / done, response.reasoning_text.delta / done, response.function_call_arguments.delta / done,
 * response.content_part.done, response.output_item.done, then response.completed, response.incomplete or
 * response.failed), every event with its `sequence_number`. Errors in OpenAI's shape.
 *
 * Output items: reasoning (the engine's reasoning output as reasoning_text), a message with output_text,
 * function_call (or custom_tool_call, or one in a namespace) per tool call with the engine's `call_id`.
 * Status: completed; incomplete with `incomplete_details.reason` max_output_tokens (finish length) or
 * content_filter; an `abort` is a failed response (a whole one answers 503), never a completed one.
 * A response with `store` left true is kept in its session (response-store.ts).
 */
import { createHmac, createSecretKey, randomBytes } from "node:crypto";
import type { Capture } from "../engines/engine.ts";
import {
  ApiProblem,
  canonicalChoice,
  isObject,
  parseArguments,
  type AgentApi,
  type ApiCall,
  type ApiStream,
  type CallOutcome,
  type Json,
  type RequestContext,
} from "./api.ts";
import { openAiErrorShape } from "../http.ts";
import { ResponseStore, assistantTurn } from "./response-store.ts";
import { responsesToChat, type TranslatedResponses } from "./responses-request.ts";
import {
  ABORTED_MESSAGE,
  responsesUsage,
  responseStatus,
  textLogprobs,
  toolCallItem,
  toolCallsOf,
  type ResponseBuilder,
} from "./responses-output.ts";
import { ResponsesStream } from "./responses-stream.ts";

export class ResponsesCall implements ApiCall, ResponseBuilder {
  readonly api = "responses" as const;
  readonly route = "chat" as const;
  readonly body: Json;
  readonly stream: boolean;
  readonly passesEngineErrors = false;
  readonly agentModel: string;
  readonly request: Json;
  readonly ctx: RequestContext;
  readonly translated: TranslatedResponses;
  private readonly store: ResponseStore | null;

  constructor(
    request: Json,
    translated: TranslatedResponses,
    ctx: RequestContext,
    store: ResponseStore | null,
  ) {
    this.request = request;
    this.translated = translated;
    this.body = translated.chat;
    this.stream = request.stream === true;
    this.agentModel = request.model as string;
    this.ctx = ctx;
    this.store = request.store === false ? null : store;
  }

  /** The response id of this call (made once: a stream writes it in several events). */
  private id: { callId: string; id: string } | undefined;

  private idOf(callId: string): string {
    if (this.id?.callId !== callId) this.id = { callId, id: responseId(callId) };
    return this.id.id;
  }

  details(callId: string): Json {
    const r = this.request;
    return {
      response_id: this.idOf(callId),
      model: this.agentModel,
      store: r.store !== false,
      instructions: typeof r.instructions === "string" && r.instructions !== "",
      ...(typeof r.previous_response_id === "string" ? { previous_response_id: r.previous_response_id } : {}),
    };
  }

  stopReason(capture: Capture): string {
    const { status, reason } = responseStatus(capture.finishReason);
    return status === null ? "failed" : (reason ?? status);
  }

  /** The Response object around `output` (status from the finish reason). */
  response(callId: string, status: string, output: Json[], extra: Json): Json {
    return {
      id: this.idOf(callId),
      object: "response",
      created_at: Math.floor(Date.now() / 1000),
      status,
      error: null,
      incomplete_details: null,
      model: this.agentModel,
      output,
      ...this.echo(),
      ...extra,
    };
  }

  /** The request's settings a Response repeats (its instructions and tools among them), made once. */
  private echoed: Json | undefined;
  private echoedText: string | undefined;

  private echo(): Json {
    const r = this.request;
    this.echoed ??= {
      instructions: r.instructions ?? null,
      max_output_tokens: r.max_output_tokens ?? null,
      parallel_tool_calls: r.parallel_tool_calls ?? true,
      previous_response_id: r.previous_response_id ?? null,
      reasoning: { effort: isObject(r.reasoning) ? (r.reasoning.effort ?? null) : null, summary: null },
      store: r.store ?? true,
      temperature: r.temperature ?? null,
      text: r.text ?? { format: { type: "text" } },
      tool_choice: r.tool_choice ?? "auto",
      tools: r.tools ?? [],
      top_p: r.top_p ?? null,
      truncation: "disabled",
      metadata: r.metadata ?? {},
    };
    return this.echoed;
  }

  /**
   * A Response as JSON text, its repeated request settings serialized once per call: a stream writes the
   * whole Response three times, and a harness's tools and instructions are tens of KB.
   */
  responseText(response: Json): string {
    const echo = this.echo();
    this.echoedText ??= JSON.stringify(echo).slice(1, -1);
    const own: Json = {};
    for (const k in response) {
      if (!(k in echo)) own[k] = response[k];
      else if (response[k] !== echo[k]) return JSON.stringify(response);
    }
    const head = JSON.stringify(own);
    return head === "{}" ? `{${this.echoedText}}` : `${head.slice(0, -1)},${this.echoedText}}`;
  }

  /** A finished response: its status and details, and kept in the session's store when stored. */
  finish(callId: string, capture: Capture, output: Json[], usage: Json, assistant: Json): Json {
    const { status, reason } = responseStatus(capture.finishReason);
    const response = this.response(callId, status ?? "failed", output, {
      usage,
      ...(reason !== null ? { incomplete_details: { reason } } : {}),
      ...(status === null ? { error: { code: "server_error", message: ABORTED_MESSAGE } } : {}),
    });
    if (this.store !== null && status !== null)
      this.store.put(response.id as string, {
        response,
        conversation: [...this.translated.conversation, assistant],
      });
    return response;
  }

  answer(canonical: Json, outcome: CallOutcome): { status: number; body: Json } {
    const callId = outcome.callIds[0]!;
    const capture = outcome.captures[0]!;
    if (capture.finishReason === "abort")
      return { status: 503, body: openAiErrorShape(503, "call_aborted", ABORTED_MESSAGE) };
    const choice = canonicalChoice(canonical);
    const { status } = responseStatus(capture.finishReason);
    const output: Json[] = [];
    if (choice.reasoning !== "")
      output.push({
        type: "reasoning",
        id: `rs_${callId}`,
        summary: [],
        content: [{ type: "reasoning_text", text: choice.reasoning }],
      });
    const calls: Json[] = [];
    // The turn a continuation takes up is the one the agent got: a malformed call is in its text only.
    const given: typeof choice.toolCalls = [];
    let text = choice.text;
    for (const [i, call] of choice.toolCalls.entries()) {
      if (!this.translated.tools.custom.has(call.name) && parseArguments(call.arguments) === null) {
        this.ctx.metrics.inc("gateway_malformed_tool_calls", "responses");
        text += call.arguments;
        continue;
      }
      given.push(call);
      calls.push(toolCallItem(this.translated.tools, `${callId}_${i}`, call));
    }
    if (text !== "" || calls.length === 0) {
      const choice0 =
        Array.isArray(canonical.choices) && isObject(canonical.choices[0]) ? canonical.choices[0] : {};
      const logprobs = this.translated.logprobs ? textLogprobs(choice0.logprobs) : [];
      output.push({
        type: "message",
        id: `msg_${callId}`,
        status: status === "incomplete" ? "incomplete" : "completed",
        role: "assistant",
        content: [{ type: "output_text", text, annotations: [], logprobs }],
      });
    }
    output.push(...calls);
    const assistant = assistantTurn(text, choice.reasoning, toolCallsOf(given));
    const usage = responsesUsage(canonical.usage, outcome);
    return { status: 200, body: this.finish(callId, capture, output, usage, assistant) };
  }

  streamer(callId: string): ApiStream {
    return new ResponsesStream(this, callId);
  }
}

/** The key response ids are signed with: new at each start (a restored response keeps its recorded id). */
const ID_KEY = createSecretKey(randomBytes(32));

/**
 * A response's id: the call's id and a tag only this gateway process can make, so an id cannot be guessed
 * from another (call ids count up): reading a stored response (GET /v1/responses/{id}) takes having been
 * given its id, whatever session path the reader names.
 */
export function responseId(callId: string): string {
  return `resp_${callId}_${createHmac("sha256", ID_KEY).update(callId).digest("hex").slice(0, 20)}`;
}

/** The store of a session, made on its first stored response. */
function storeOf(ctx: RequestContext): ResponseStore {
  const s = ctx.session;
  s.responses ??= new ResponseStore(ctx.settings.storedResponses);
  return s.responses;
}

export const responsesApi: AgentApi = {
  name: "responses",
  request(body, ctx) {
    try {
      const store = storeOf(ctx);
      return new ResponsesCall(body, responsesToChat(body, ctx, store), ctx, store);
    } catch (err) {
      if (err instanceof ApiProblem) return err;
      throw err;
    }
  },
  errorBody: openAiErrorShape,
};
