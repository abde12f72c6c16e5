/**
 * The Responses a session stored (`store` left true): what `previous_response_id` continues and
 * `GET /v1/responses/{id}` returns. Per session, the latest `max` are kept (a continuation names the latest
 * one almost always; older ids are answered as not found, saying why). A stored response holds its
 * conversation without the instructions (OpenAI's rule: a continuation's instructions replace them), as chat
 * messages that share their objects with the conversation before them.
 *
 * After a restart, or when a session is restored from the events, the store is rebuilt from the session's
 * request and response events (`restoredResponse`): the request records the canonical messages and
 * `api_details` (the response id, whether the first message came from `instructions`), the response the
 * text and tool calls. The reasoning text is not in the events, so a restored response continues without it.
 */
import { isObject, type Json } from "./json.ts";

export interface StoredResponse {
  /** The Response object as the agent got it. */
  response: Json;
  /** The conversation up to and including the answer, as chat messages, instructions left out. */
  conversation: Json[];
}

export class ResponseStore {
  private readonly byId = new Map<string, StoredResponse>();
  private readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  get(id: string): StoredResponse | undefined {
    return this.byId.get(id);
  }

  put(id: string, stored: StoredResponse): void {
    this.byId.delete(id);
    this.byId.set(id, stored);
    while (this.byId.size > this.max) this.byId.delete(this.byId.keys().next().value!);
  }

  delete(id: string): boolean {
    return this.byId.delete(id);
  }

  get size(): number {
    return this.byId.size;
  }
}

/** The assistant turn a conversation continues with, from an answer's text, reasoning and tool calls. */
export function assistantTurn(text: string, reasoning: string, toolCalls: unknown[]): Json {
  const turn: Json = { role: "assistant", content: text === "" && toolCalls.length > 0 ? null : text };
  if (reasoning !== "") turn.reasoning_content = reasoning;
  if (toolCalls.length > 0) turn.tool_calls = toolCalls;
  return turn;
}

/**
 * A stored response rebuilt from a session's request and response events (null when they are not those of a
 * stored Responses call). Its Response object carries what the events hold: the id, model, output (message
 * text and function calls) and the token counts.
 */
export function restoredResponse(
  request: Json,
  response: Json,
): { id: string; stored: StoredResponse } | null {
  const details = isObject(request.api_details) ? request.api_details : null;
  if (request.api !== "responses" || details === null || typeof details.response_id !== "string") return null;
  if (details.store === false || !Array.isArray(request.messages) || response.stop_reason === "failed")
    return null;
  const messages = (request.messages as unknown[]).filter(isObject);
  const conversation = details.instructions === true ? messages.slice(1) : messages;
  const text = typeof response.text === "string" ? response.text : "";
  const calls = Array.isArray(response.tool_calls) ? response.tool_calls.filter(isObject) : [];
  const output: Json[] = [];
  if (text !== "" || calls.length === 0)
    output.push({
      type: "message",
      id: `msg_${response.call_id as string}`,
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text, annotations: [], logprobs: [] }],
    });
  for (const [i, c] of calls.entries()) {
    const fn = isObject(c.function) ? c.function : {};
    output.push({
      type: "function_call",
      id: `fc_${response.call_id as string}_${i}`,
      call_id: c.id,
      name: fn.name,
      arguments: fn.arguments,
      status: "completed",
    });
  }
  return {
    id: details.response_id,
    stored: {
      response: {
        id: details.response_id,
        object: "response",
        created_at: Math.floor((typeof response.ts === "number" ? response.ts : Date.now()) / 1000),
        status:
          response.stop_reason === "max_output_tokens" || response.stop_reason === "content_filter"
            ? "incomplete"
            : "completed",
        model: typeof details.model === "string" ? details.model : "",
        output,
        parallel_tool_calls: true,
        tool_choice: "auto",
        tools: [],
      },
      conversation: [...conversation, assistantTurn(text, "", calls)],
    },
  };
}
