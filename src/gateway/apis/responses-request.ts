/**
 * An OpenAI Responses request (`POST /v1/responses`, platform.openai.com "Responses") as the canonical chat
 * call: `instructions` → a system message first; `input` (a string, or items) → chat messages (message items
 * with input_text / output_text / input_image parts; reasoning → the next assistant turn's
 * `reasoning_content`; function_call and custom_tool_call → assistant `tool_calls`; their outputs → `tool`
 * messages); a `previous_response_id` puts the stored conversation before the new input; function, custom and
 * namespace `tools` → functions (a namespace's tool is named `<namespace>.<name>`); `tool_choice`,
 * `max_output_tokens` → `max_tokens`, `parallel_tool_calls`, `text.format` → `response_format`,
 * `reasoning.effort` → `reasoning_effort`. Hosted tools (web_search, file_search, code_interpreter...) are
 * refused with a clear 400, or dropped with `hosted_tools: drop`.
 */
import {
  copyEngineExtras,
  hostedToolLabel,
  isObject,
  modelNameProblem,
  refuseRequest,
  type Json,
  type RequestContext,
} from "./api.ts";
import type { ResponseStore } from "./response-store.ts";

const fail = refuseRequest;

/** How the answer's tool calls map back to the agent's tools. */
export interface ToolNames {
  /** Chat function name → the namespace and the tool's own name. */
  namespaced: Map<string, { namespace: string; name: string }>;
  /** Chat function names of custom (freeform) tools: their one argument is `input`. */
  custom: Set<string>;
}

export interface TranslatedResponses {
  chat: Json;
  /** The conversation before the answer without the instructions: what a later previous_response_id continues. */
  conversation: Json[];
  tools: ToolNames;
  /** The agent asked for the output text's logprobs. */
  logprobs: boolean;
}

const EFFORT: Record<string, string> = {
  minimal: "low",
  low: "low",
  medium: "medium",
  high: "high",
  xhigh: "high",
};

export function responsesToChat(
  body: Json,
  ctx: RequestContext,
  store: ResponseStore | null,
): TranslatedResponses {
  const modelProblem = modelNameProblem(body.model ?? "");
  if (modelProblem !== null) fail(modelProblem, "model");
  for (const k of ["background", "conversation", "prompt"] as const)
    if (body[k] !== undefined && body[k] !== null && body[k] !== false)
      fail(`${k} is not supported by this gateway (it serves calls as they come, from its own sessions)`, k);
  const chat: Json = { model: ctx.settings.upstreamModel(body.model as string) };
  copyEngineExtras(body, chat);
  const conversation: Json[] = [...previous(body.previous_response_id, store)];
  const known = new Set<string>();
  for (const m of conversation)
    if (Array.isArray(m.tool_calls)) for (const t of m.tool_calls) if (isObject(t)) known.add(t.id as string);
  conversation.push(...inputMessages(body.input, known));
  const messages = [...conversation];
  if (typeof body.instructions === "string" && body.instructions !== "")
    messages.unshift({ role: "system", content: body.instructions });
  if (messages.length === 0) fail("input: there is nothing to answer", "input");
  chat.messages = messages;
  const tools: ToolNames = { namespaced: new Map(), custom: new Set() };
  const functions = translateTools(body.tools, ctx, tools);
  if (functions.length > 0) {
    chat.tools = functions;
    if (body.tool_choice !== undefined) chat.tool_choice = toolChoice(body.tool_choice, functions);
    if (typeof body.parallel_tool_calls === "boolean") chat.parallel_tool_calls = body.parallel_tool_calls;
  }
  const logprobs = options(body, chat);
  if (body.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return { chat, conversation, tools, logprobs };
}

/** Sampling, limits, format and reasoning settings; whether the agent asked for logprobs. */
function options(body: Json, chat: Json): boolean {
  if (body.max_output_tokens !== undefined && body.max_output_tokens !== null) {
    if (!(Number.isInteger(body.max_output_tokens) && (body.max_output_tokens as number) >= 1))
      fail("max_output_tokens: an integer of at least 1 is expected", "max_output_tokens");
    chat.max_tokens = body.max_output_tokens;
  }
  for (const k of ["temperature", "top_p"] as const) {
    if (body[k] === undefined || body[k] === null) continue;
    if (typeof body[k] !== "number") fail(`${k}: a number is expected`, k);
    chat[k] = body[k];
  }
  const format = isObject(body.text) && isObject(body.text.format) ? body.text.format : null;
  if (format?.type === "json_schema") {
    if (!isObject(format.schema)) fail("text.format.schema: an object is expected", "text.format");
    chat.response_format = {
      type: "json_schema",
      json_schema: {
        name: typeof format.name === "string" ? format.name : "output",
        schema: format.schema,
        ...(typeof format.strict === "boolean" ? { strict: format.strict } : {}),
      },
    };
  } else if (format?.type === "json_object") chat.response_format = { type: "json_object" };
  const effort = isObject(body.reasoning) ? body.reasoning.effort : undefined;
  if (effort === "none") {
    const kwargs = isObject(chat.chat_template_kwargs) ? chat.chat_template_kwargs : {};
    chat.chat_template_kwargs = { ...kwargs, enable_thinking: false };
  } else if (typeof effort === "string" && EFFORT[effort] !== undefined)
    chat.reasoning_effort = EFFORT[effort];
  const include = Array.isArray(body.include) ? body.include : [];
  const top = typeof body.top_logprobs === "number" ? body.top_logprobs : 0;
  const logprobs = include.includes("message.output_text.logprobs") || top > 0;
  if (logprobs) {
    chat.logprobs = true;
    chat.top_logprobs = top;
  }
  return logprobs;
}

function previous(id: unknown, store: ResponseStore | null): Json[] {
  if (id === undefined || id === null) return [];
  if (typeof id !== "string")
    return fail("previous_response_id: a string is expected", "previous_response_id");
  const stored = store?.get(id);
  if (stored === undefined)
    return fail(
      `Previous response with id '${id}' not found: this gateway continues only responses it gave in the same ` +
        "session with store left true, and keeps the latest stored_responses of each session",
      "previous_response_id",
      "previous_response_not_found",
    );
  return stored.conversation;
}

/** The input as chat messages; `known`: tool call ids the conversation has (outputs must answer one). */
function inputMessages(input: unknown, known: Set<string>): Json[] {
  if (input === undefined || input === null) return [];
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (!Array.isArray(input)) return fail("input: a string or an array of items is expected", "input");
  const out: Json[] = [];
  let assistant: Json | null = null;
  let reasoning = "";
  const openAssistant = (): Json => {
    if (assistant === null) {
      assistant = { role: "assistant", content: null };
      if (reasoning !== "") assistant.reasoning_content = reasoning;
      reasoning = "";
    }
    return assistant;
  };
  const flush = () => {
    // Reasoning no message or call followed is still the model's turn: kept as one, never dropped.
    if (assistant === null && reasoning !== "") openAssistant();
    if (assistant !== null) out.push(assistant);
    assistant = null;
  };
  for (const [i, item] of input.entries()) {
    const at = `input[${i}]`;
    if (!isObject(item)) return fail(`${at}: an item object is expected`, "input");
    const type = item.type ?? "message";
    if (type === "message") {
      const m = messageItem(item, at);
      if (m.role !== "assistant") {
        flush();
        out.push(m);
        continue;
      }
      const a = openAssistant();
      a.content = a.content === null ? m.content : `${a.content as string}${m.content as string}`;
    } else if (type === "reasoning") {
      if (assistant !== null) flush();
      reasoning += reasoningText(item);
    } else if (type === "function_call" || type === "custom_tool_call") {
      const a = openAssistant();
      const call = toolCallOf(item, at);
      known.add(call.id as string);
      ((a.tool_calls as Json[] | undefined) ?? (a.tool_calls = [])).push(call);
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      flush();
      out.push(toolOutput(item, at, known));
    } else
      return fail(
        `${at}: item type ${JSON.stringify(type)} is not supported (message, reasoning, function_call, ` +
          "function_call_output, custom_tool_call and custom_tool_call_output are)",
        "input",
      );
  }
  flush();
  for (const m of out)
    if (m.role === "assistant" && m.content === null && m.tool_calls === undefined) m.content = "";
  return out;
}

function messageItem(item: Json, at: string): Json {
  const role = item.role === "developer" ? "system" : item.role;
  if (role !== "user" && role !== "assistant" && role !== "system")
    return fail(`${at}.role: must be user, assistant, system or developer`, "input");
  const content = item.content;
  if (typeof content === "string") return { role, content };
  if (!Array.isArray(content))
    return fail(`${at}.content: a string or an array of parts is expected`, "input");
  const parts = content.map((p, j) => contentPart(p, `${at}.content[${j}]`));
  if (role === "assistant") {
    if (parts.some((p) => p.type !== "text")) return fail(`${at}: an assistant message holds text`, "input");
    return { role, content: parts.map((p) => p.text as string).join("") };
  }
  if (parts.length === 1 && parts[0]!.type === "text") return { role, content: parts[0]!.text };
  return { role, content: parts };
}

function contentPart(p: unknown, at: string): Json {
  if (!isObject(p)) return fail(`${at}: a content part is expected`, "input");
  if (
    (p.type === "input_text" || p.type === "output_text" || p.type === "text") &&
    typeof p.text === "string"
  )
    return { type: "text", text: p.text };
  if (p.type === "refusal" && typeof p.refusal === "string") return { type: "text", text: p.refusal };
  if (p.type === "input_image" && typeof p.image_url === "string")
    return { type: "image_url", image_url: { url: p.image_url, ...(p.detail ? { detail: p.detail } : {}) } };
  return fail(
    `${at}: part type ${JSON.stringify(p.type)} is not supported (input_text, output_text, refusal and input_image with an image_url are)`,
    "input",
  );
}

function reasoningText(item: Json): string {
  const from = (parts: unknown, type: string) =>
    Array.isArray(parts)
      ? parts
          .filter((p): p is Json => isObject(p) && p.type === type && typeof p.text === "string")
          .map((p) => p.text as string)
          .join("")
      : "";
  return from(item.content, "reasoning_text") || from(item.summary, "summary_text");
}

function toolCallOf(item: Json, at: string): Json {
  if (typeof item.call_id !== "string" || typeof item.name !== "string")
    return fail(`${at}: a tool call has a string call_id and name`, "input");
  const name = typeof item.namespace === "string" ? `${item.namespace}.${item.name}` : item.name;
  const args =
    item.type === "custom_tool_call"
      ? JSON.stringify({ input: typeof item.input === "string" ? item.input : "" })
      : typeof item.arguments === "string"
        ? item.arguments
        : fail(`${at}.arguments: a JSON string is expected`, "input");
  return { id: item.call_id, type: "function", function: { name, arguments: args } };
}

function toolOutput(item: Json, at: string, known: Set<string>): Json {
  const id = item.call_id;
  if (typeof id !== "string" || !known.has(id))
    return fail(`${at}: output for call ${JSON.stringify(id)}, which no earlier tool call has`, "input");
  const output = item.output;
  let content: string | Json[];
  if (typeof output === "string") content = output;
  else if (Array.isArray(output)) {
    const parts = output.map((p, j) => contentPart(p, `${at}.output[${j}]`));
    content = parts.every((p) => p.type === "text") ? parts.map((p) => p.text as string).join("") : parts;
  } else return fail(`${at}.output: a string or an array of parts is expected`, "input");
  return { role: "tool", tool_call_id: id, content };
}

/** The function-like tools as chat functions; hosted tools refused or dropped (counted). */
function translateTools(tools: unknown, ctx: RequestContext, names: ToolNames): Json[] {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) return fail("tools: an array is expected", "tools");
  const out: Json[] = [];
  const add = (t: Json, at: string, namespace?: string) => {
    if (typeof t.name !== "string" || t.name === "") return fail(`${at}: a tool has a name`, "tools");
    const name = namespace === undefined ? t.name : `${namespace}.${t.name}`;
    if (namespace !== undefined) names.namespaced.set(name, { namespace, name: t.name });
    const fn: Json = { name };
    if (typeof t.description === "string") fn.description = t.description;
    if (t.type === "custom") {
      names.custom.add(name);
      fn.parameters = {
        type: "object",
        properties: { input: { type: "string", description: "the tool's whole input, as free text" } },
        required: ["input"],
      };
    } else fn.parameters = isObject(t.parameters) ? t.parameters : { type: "object", properties: {} };
    out.push({ type: "function", function: fn });
  };
  for (const [i, t] of tools.entries()) {
    const at = `tools[${i}]`;
    if (!isObject(t)) return fail(`${at}: a tool object is expected`, "tools");
    if (t.type === "function" || t.type === "custom") add(t, at);
    else if (t.type === "namespace" && Array.isArray(t.tools) && typeof t.name === "string") {
      for (const [j, inner] of t.tools.entries()) {
        if (!isObject(inner) || (inner.type !== "function" && inner.type !== "custom"))
          return fail(`${at}.tools[${j}]: a namespace holds function and custom tools`, "tools");
        add(inner, `${at}.tools[${j}]`, t.name);
      }
    } else if (ctx.settings.hostedTools === "drop")
      ctx.metrics.inc("gateway_hosted_tools_dropped", hostedToolLabel(t.type));
    else
      fail(
        `${at}: ${JSON.stringify(t.type)} is a hosted tool; the gateway serves an open model that cannot run ` +
          'it. Leave it out (Codex: web_search = "disabled"), offer a function tool, or set the gateway\'s ' +
          "hosted_tools: drop",
        "tools",
      );
  }
  return out;
}

function toolChoice(choice: unknown, functions: Json[]): unknown {
  if (choice === "auto" || choice === "none" || choice === "required") return choice;
  if (
    isObject(choice) &&
    (choice.type === "function" || choice.type === "custom") &&
    typeof choice.name === "string"
  ) {
    if (!functions.some((f) => (f.function as Json).name === choice.name))
      return fail(`tool_choice: no tool named ${JSON.stringify(choice.name)} is offered`, "tool_choice");
    return { type: "function", function: { name: choice.name } };
  }
  return fail("tool_choice: auto, none, required or a function or custom tool by name", "tool_choice");
}
