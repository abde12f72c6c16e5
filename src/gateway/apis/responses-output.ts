/**
 * What whole and streamed Responses answers share: statuses from finish reasons, usage, logprobs, tool
 * call items, and what a streamed answer asks of its call (ResponseBuilder).
 */
import type { Capture } from "../engines/engine.ts";
import {
  isObject,
  parseArguments,
  usageCounts,
  type CallOutcome,
  type Json,
  type RequestContext,
} from "./api.ts";
import type { ToolNames, TranslatedResponses } from "./responses-request.ts";

/** What a streamed answer needs of its call: the translation, and building the Response object. */
export interface ResponseBuilder {
  readonly translated: TranslatedResponses;
  readonly ctx: RequestContext;
  /** The Response object around `output`. */
  response(callId: string, status: string, output: Json[], extra: Json): Json;
  /** A Response as JSON text (its repeated request settings serialized once per call). */
  responseText(response: Json): string;
  /** The finished Response (stored in the session when the agent asked). */
  finish(callId: string, capture: Capture, output: Json[], usage: Json, assistant: Json): Json;
}

export const ABORTED_MESSAGE =
  "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call";

/** The status a finished call's response has, and the incomplete reason; null status for an abort. */
export function responseStatus(finish: string): {
  status: "completed" | "incomplete" | null;
  reason: string | null;
} {
  if (finish === "abort") return { status: null, reason: null };
  if (finish === "length") return { status: "incomplete", reason: "max_output_tokens" };
  if (finish === "content_filter") return { status: "incomplete", reason: "content_filter" };
  return { status: "completed", reason: null };
}

/** The chat usage as Responses writes it (input_tokens include the cached ones, counted apart). */
export function responsesUsage(usage: unknown, outcome: CallOutcome): Json {
  const u = usageCounts(usage, outcome);
  return {
    input_tokens: u.prompt,
    input_tokens_details: { cached_tokens: u.cached ?? 0, cache_write_tokens: 0 },
    output_tokens: u.completion,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.prompt + u.completion,
  };
}

/** Chat logprob entries as output_text logprobs (the agent asked for them). */
export function textLogprobs(logprobs: unknown): Json[] {
  const content = isObject(logprobs) && Array.isArray(logprobs.content) ? logprobs.content : [];
  return content.filter(isObject).map((e) => ({
    token: e.token,
    logprob: e.logprob,
    bytes: e.bytes ?? [],
    top_logprobs: Array.isArray(e.top_logprobs)
      ? e.top_logprobs
          .filter(isObject)
          .map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes ?? [] }))
      : [],
  }));
}

/** A function or custom tool call item for a chat tool call. */
export function toolCallItem(
  tools: ToolNames,
  id: string,
  call: { id: string; name: string; arguments: string },
): Json {
  const ns = tools.namespaced.get(call.name);
  const names = ns === undefined ? { name: call.name } : { name: ns.name, namespace: ns.namespace };
  if (tools.custom.has(call.name)) {
    const input = parseArguments(call.arguments)?.input;
    return {
      type: "custom_tool_call",
      id: `ctc_${id}`,
      call_id: call.id,
      ...names,
      input: typeof input === "string" ? input : call.arguments,
    };
  }
  return {
    type: "function_call",
    id: `fc_${id}`,
    call_id: call.id,
    ...names,
    arguments: call.arguments,
    status: "completed",
  };
}

/** Chat tool calls (as the conversation keeps them) from the canonical ones. */
export function toolCallsOf(calls: Array<{ id: string; name: string; arguments: string }>): Json[] {
  return calls.map((c) => ({
    id: c.id,
    type: "function",
    function: { name: c.name, arguments: c.arguments },
  }));
}
