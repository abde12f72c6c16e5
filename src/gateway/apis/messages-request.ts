/**
 * An Anthropic Messages request (`POST /v1/messages`, docs.anthropic.com "Messages") as the canonical chat
 * call: `system` → a system message; each message's content blocks → chat messages (text and image parts,
 * tool_use → assistant `tool_calls`, tool_result → `tool` messages, thinking → `reasoning_content`);
 * `tools` (`input_schema`) → functions; `tool_choice` auto/any/tool/none → auto/required/function/none;
 * `stop_sequences` → `stop`; `max_tokens`, temperature, top_p, top_k as they are. Every refusal is an
 * ApiProblem naming the field, answered 400 in Anthropic's error shape.
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

const fail = refuseRequest;

/** Anthropic's `effort` (Claude Code's output_config.effort) as the chat routes' `reasoning_effort`. */
const EFFORT: Record<string, string> = { low: "low", medium: "medium", high: "high", max: "high" };

/**
 * The canonical chat body of a Messages request. `forCount`: a count_tokens body (no `max_tokens`, never
 * streamed). Throws an ApiProblem for a request Anthropic's API would refuse, or one the gateway cannot
 * translate faithfully.
 */
export function messagesToChat(body: Json, ctx: RequestContext, forCount = false): Json {
  const modelProblem = modelNameProblem(body.model ?? "");
  if (modelProblem !== null) fail(modelProblem, "model");
  const model = body.model as string;
  if (!forCount && !(Number.isInteger(body.max_tokens) && (body.max_tokens as number) >= 1))
    fail("max_tokens: an integer of at least 1 is required", "max_tokens");
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    fail("messages: a non-empty array is required", "messages");
  const chat: Json = { model: ctx.settings.upstreamModel(model) };
  copyEngineExtras(body, chat);
  const messages: Json[] = [];
  const system = systemText(body.system);
  if (system !== null) messages.push({ role: "system", content: system });
  const toolUses = new Set<string>();
  for (const [i, m] of (body.messages as unknown[]).entries())
    translateMessage(m, i, toolUses, messages, ctx);
  chat.messages = messages;
  const tools = translateTools(body.tools, ctx);
  if (tools.length > 0) {
    chat.tools = tools;
    Object.assign(chat, toolChoice(body.tool_choice, tools));
  }
  if (forCount) return chat;
  chat.max_tokens = body.max_tokens;
  sampling(body, chat);
  if (body.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

function sampling(body: Json, chat: Json): void {
  for (const k of ["temperature", "top_p", "top_k"] as const) {
    if (body[k] === undefined) continue;
    if (typeof body[k] !== "number") fail(`${k}: a number is expected`, k);
    chat[k] = body[k];
  }
  if (body.stop_sequences !== undefined) {
    const stops = body.stop_sequences;
    if (!Array.isArray(stops) || !stops.every((s) => typeof s === "string"))
      fail("stop_sequences: an array of strings is expected", "stop_sequences");
    if ((stops as string[]).length > 0) chat.stop = stops;
  }
  const thinking = body.thinking;
  if (isObject(thinking) && thinking.type === "disabled") {
    const kwargs = isObject(chat.chat_template_kwargs) ? chat.chat_template_kwargs : {};
    chat.chat_template_kwargs = { ...kwargs, enable_thinking: false };
  }
  const effort = isObject(body.output_config) ? body.output_config.effort : undefined;
  if (typeof effort === "string" && EFFORT[effort] !== undefined) chat.reasoning_effort = EFFORT[effort];
  const format = body.output_format;
  if (isObject(format) && format.type === "json_schema" && isObject(format.schema))
    chat.response_format = { type: "json_schema", json_schema: { name: "output", schema: format.schema } };
}

/** `system`: a string or text blocks; null when there is none (or it is empty). */
function systemText(system: unknown): string | Json[] | null {
  if (system === undefined || system === null) return null;
  if (typeof system === "string") return system === "" ? null : system;
  if (!Array.isArray(system))
    return fail("system: a string or an array of text blocks is expected", "system");
  const parts = textParts(system, "system");
  return parts.length === 0 ? null : parts.length === 1 ? (parts[0]!.text as string) : parts;
}

/** Text blocks as chat text parts (cache_control and citations left out: they mean nothing to an engine). */
function textParts(blocks: unknown[], where: string): Json[] {
  return blocks.map((b, i) => {
    if (!isObject(b) || b.type !== "text" || typeof b.text !== "string")
      return fail(`${where}[${i}]: a text block is expected here`, where);
    return { type: "text", text: b.text };
  });
}

function translateMessage(
  m: unknown,
  i: number,
  toolUses: Set<string>,
  out: Json[],
  ctx: RequestContext,
): void {
  const at = `messages[${i}]`;
  if (!isObject(m)) return fail(`${at}: an object with role and content is expected`, "messages");
  const { role, content } = m;
  if (role !== "user" && role !== "assistant" && role !== "system")
    return fail(`${at}.role: must be "user", "assistant" or "system"`, "messages");
  if (typeof content === "string") {
    out.push({ role, content });
    return;
  }
  if (!Array.isArray(content)) return fail(`${at}.content: a string or an array of blocks`, "messages");
  if (role === "assistant") return void out.push(assistantMessage(content, at, toolUses, ctx));
  if (role === "system") {
    // A system turn mid-conversation (Claude Code's per-turn control): only its text; empty ones say nothing.
    const parts = textParts(content, `${at}.content`);
    if (parts.length > 0) out.push({ role: "system", content: joinParts(parts) });
    return;
  }
  userMessages(content, at, toolUses, out);
}

const joinParts = (parts: Json[]): string | Json[] =>
  parts.length === 1 ? (parts[0]!.text as string) : parts;

/** A user turn: text and images as one user message, each tool_result as a tool message, in order. */
function userMessages(content: unknown[], at: string, toolUses: Set<string>, out: Json[]): void {
  let parts: Json[] = [];
  const flush = () => {
    if (parts.length === 0) return;
    const onlyText = parts.every((p) => p.type === "text");
    out.push({ role: "user", content: onlyText ? joinParts(parts) : parts });
    parts = [];
  };
  for (const [j, b] of content.entries()) {
    const where = `${at}.content[${j}]`;
    if (!isObject(b)) return fail(`${where}: a content block is expected`, "messages");
    if (b.type === "text" && typeof b.text === "string") parts.push({ type: "text", text: b.text });
    else if (b.type === "image") parts.push(imagePart(b, where));
    else if (b.type === "document") parts.push({ type: "text", text: documentText(b, where) });
    else if (b.type === "tool_result") {
      flush();
      out.push(toolMessage(b, where, toolUses));
    } else return unknownBlock(b, where);
  }
  flush();
}

function unknownBlock(b: Json, where: string): never {
  return fail(
    `${where}: content block type ${JSON.stringify(b.type)} is not supported here ` +
      "(user turns take text, image, document and tool_result; assistant turns text, thinking, " +
      "redacted_thinking and tool_use)",
    "messages",
  );
}

function imagePart(b: Json, where: string): Json {
  const source = isObject(b.source) ? b.source : {};
  if (source.type === "base64" && typeof source.data === "string" && typeof source.media_type === "string")
    return { type: "image_url", image_url: { url: `data:${source.media_type};base64,${source.data}` } };
  if (source.type === "url" && typeof source.url === "string")
    return { type: "image_url", image_url: { url: source.url } };
  return fail(`${where}.source: a base64 or url image source is expected`, "messages");
}

/** A plain-text document's text (other sources need Anthropic's own file and PDF handling). */
function documentText(b: Json, where: string): string {
  const source = isObject(b.source) ? b.source : {};
  if (source.type === "text" && typeof source.data === "string") return source.data;
  return fail(`${where}: only documents with a text source are supported`, "messages");
}

function toolMessage(b: Json, where: string, toolUses: Set<string>): Json {
  const id = b.tool_use_id;
  if (typeof id !== "string" || !toolUses.has(id))
    return fail(
      `${where}: tool_result for ${JSON.stringify(id)}, which no earlier assistant tool_use block has`,
      "messages",
    );
  let content: string | Json[];
  if (b.content === undefined || typeof b.content === "string") content = (b.content as string) ?? "";
  else if (Array.isArray(b.content))
    content = b.content.map((c, k) => {
      if (isObject(c) && c.type === "text" && typeof c.text === "string")
        return { type: "text", text: c.text };
      if (isObject(c) && c.type === "image") return imagePart(c, `${where}.content[${k}]`);
      return fail(`${where}.content[${k}]: a text or image block is expected`, "messages");
    });
  else return fail(`${where}.content: a string or an array of blocks is expected`, "messages");
  if (Array.isArray(content) && content.every((p) => p.type === "text"))
    content = content.map((p) => p.text as string).join("");
  // is_error goes with the message as the agent said it; the chat template decides whether it shows.
  return { role: "tool", tool_call_id: id, content, ...(b.is_error === true ? { is_error: true } : {}) };
}

/** An assistant turn: text joined, thinking as reasoning_content, tool_use blocks as tool_calls. */
function assistantMessage(content: unknown[], at: string, toolUses: Set<string>, ctx: RequestContext): Json {
  const text: string[] = [];
  const reasoning: string[] = [];
  const calls: Json[] = [];
  for (const [j, b] of content.entries()) {
    const where = `${at}.content[${j}]`;
    if (!isObject(b)) return fail(`${where}: a content block is expected`, "messages");
    if (b.type === "text" && typeof b.text === "string") text.push(b.text);
    else if (b.type === "thinking" && typeof b.thinking === "string") reasoning.push(b.thinking);
    // Anthropic's encrypted reasoning: nothing an open model could read; it is left out of the prompt
    // (counted: what the agent sent and the engine did not see is never dropped silently).
    else if (b.type === "redacted_thinking") ctx.metrics.inc("gateway_blocks_left_out", "redacted_thinking");
    else if (b.type === "tool_use") {
      if (typeof b.id !== "string" || typeof b.name !== "string" || !isObject(b.input))
        return fail(`${where}: a tool_use block has a string id and name and an object input`, "messages");
      toolUses.add(b.id);
      calls.push({
        id: b.id,
        type: "function",
        function: { name: b.name, arguments: JSON.stringify(b.input) },
      });
    } else return unknownBlock(b, where);
  }
  const message: Json = { role: "assistant", content: text.length > 0 ? text.join("") : null };
  if (reasoning.length > 0) message.reasoning_content = reasoning.join("");
  if (calls.length > 0) message.tool_calls = calls;
  else if (message.content === null) message.content = "";
  return message;
}

/** Client tools as chat functions; server tools (web search, code execution...) refused or dropped. */
function translateTools(tools: unknown, ctx: RequestContext): Json[] {
  if (tools === undefined) return [];
  if (!Array.isArray(tools)) return fail("tools: an array is expected", "tools");
  const out: Json[] = [];
  for (const [i, t] of tools.entries()) {
    if (!isObject(t) || typeof t.name !== "string") return fail(`tools[${i}]: a tool has a name`, "tools");
    if (t.type !== undefined && t.type !== "custom") {
      if (ctx.settings.hostedTools === "drop") {
        ctx.metrics.inc("gateway_hosted_tools_dropped", hostedToolLabel(t.type));
        continue;
      }
      return fail(
        `tools[${i}]: ${JSON.stringify(t.type)} is a tool Anthropic runs on its servers; the gateway ` +
          "serves an open model that cannot run it. Offer it as a client tool, leave it out, or set the " +
          "gateway's hosted_tools: drop",
        "tools",
      );
    }
    if (!isObject(t.input_schema)) return fail(`tools[${i}].input_schema: an object is expected`, "tools");
    const fn: Json = { name: t.name, parameters: t.input_schema };
    if (typeof t.description === "string") fn.description = t.description;
    out.push({ type: "function", function: fn });
  }
  return out;
}

function toolChoice(choice: unknown, tools: Json[]): Json {
  if (choice === undefined) return {};
  if (!isObject(choice)) return fail("tool_choice: an object is expected", "tool_choice");
  const out: Json = {};
  if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  if (choice.type === "auto") out.tool_choice = "auto";
  else if (choice.type === "any") out.tool_choice = "required";
  else if (choice.type === "none") out.tool_choice = "none";
  else if (choice.type === "tool" && typeof choice.name === "string") {
    if (!tools.some((t) => (t.function as Json).name === choice.name))
      return fail(`tool_choice: no tool named ${JSON.stringify(choice.name)} is offered`, "tool_choice");
    out.tool_choice = { type: "function", function: { name: choice.name } };
  } else return fail("tool_choice: type is auto, any, tool (with a name) or none", "tool_choice");
  return out;
}
