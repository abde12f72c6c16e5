/**
 * Anthropic Messages requests → the canonical chat body. Request bodies are shaped as the Messages API
 * reference documents them (anthropic SDK types: MessageCreateParams, TextBlockParam, ImageBlockParam,
 * DocumentBlockParam, ToolUseBlockParam, ToolResultBlockParam, ThinkingBlockParam, ToolParam,
 * ToolChoice*Param, ThinkingConfigDisabledParam), as Claude Code sends them.
 */
import { strict as assert } from "node:assert";
import { codecContext } from "../../../test/helpers/api-codecs.ts";
import { it } from "node:test";
import { ApiProblem, type ApiCall, type Json } from "./api.ts";
import { messagesApi } from "./messages.ts";
import { messagesToChat } from "./messages-request.ts";

const context = (hostedTools: "refuse" | "drop" = "refuse", upstreamModel = (m: string) => m) =>
  codecContext({ hostedTools, upstreamModel });

function call(body: Json, ctx = context()): ApiCall {
  const c = messagesApi.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(`refused: ${c.message}`);
  return c;
}

/** The chat body of a request that has everything else. */
const chatOf = (extra: Json, ctx = context()) =>
  call({ model: "claude-sonnet-4-5", max_tokens: 64, ...extra }, ctx).body;

const LS_SCHEMA = { type: "object", properties: { path: { type: "string" } }, required: ["path"] };
const LS_TOOL = { name: "ls", description: "List files", input_schema: LS_SCHEMA };
const LS_FN = {
  type: "function",
  function: { name: "ls", parameters: LS_SCHEMA, description: "List files" },
};
const hi = [{ role: "user", content: "hi" }];

/** A Claude Code turn: cached system blocks, an image, thinking, two tool uses and their results. */
const CLAUDE_CODE: Json = {
  model: "claude-sonnet-4-5",
  max_tokens: 1024,
  system: [
    { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
    { type: "text", text: "Be brief." },
  ],
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "List the files." },
        { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      ],
    },
    {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should call ls.", signature: "EqQBCkYIBxgCKkA" },
        { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix" },
        { type: "text", text: "Let me look." },
        { type: "tool_use", id: "toolu_01", name: "ls", input: { path: "." } },
        { type: "tool_use", id: "toolu_02", name: "cat", input: { path: "a.txt" } },
      ],
    },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_01", content: "a.txt\nb.txt" },
        {
          type: "tool_result",
          tool_use_id: "toolu_02",
          is_error: true,
          content: [
            { type: "text", text: "permission " },
            { type: "text", text: "denied" },
          ],
        },
        { type: "text", text: "Go on.", cache_control: { type: "ephemeral" } },
      ],
    },
  ],
  tools: [LS_TOOL, { name: "cat", input_schema: LS_SCHEMA, cache_control: { type: "ephemeral" } }],
  tool_choice: { type: "auto", disable_parallel_tool_use: true },
  stop_sequences: ["</done>"],
  temperature: 0.7,
  top_p: 0.9,
  top_k: 40,
  stream: true,
  metadata: { user_id: "user_1" },
  context_management: { edits: [{ type: "clear_tool_uses_20250919" }] },
  logit_bias: { "42": 5 },
  seed: 7,
};

it("translates a Claude Code turn into the canonical chat body", () => {
  const ctx = context();
  const c = call(CLAUDE_CODE, ctx);
  assert.deepEqual(ctx.metrics.byLabel("gateway_blocks_left_out"), [["redacted_thinking", 1]]);
  assert.deepEqual(c.body, {
    model: "claude-sonnet-4-5",
    logit_bias: { "42": 5 },
    seed: 7,
    messages: [
      {
        role: "system",
        content: [
          { type: "text", text: "You are Claude Code." },
          { type: "text", text: "Be brief." },
        ],
      },
      {
        role: "user",
        content: [
          { type: "text", text: "List the files." },
          { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
        ],
      },
      {
        role: "assistant",
        content: "Let me look.",
        reasoning_content: "I should call ls.",
        tool_calls: [
          { id: "toolu_01", type: "function", function: { name: "ls", arguments: '{"path":"."}' } },
          { id: "toolu_02", type: "function", function: { name: "cat", arguments: '{"path":"a.txt"}' } },
        ],
      },
      { role: "tool", tool_call_id: "toolu_01", content: "a.txt\nb.txt" },
      { role: "tool", tool_call_id: "toolu_02", content: "permission denied", is_error: true },
      { role: "user", content: "Go on." },
    ],
    tools: [LS_FN, { type: "function", function: { name: "cat", parameters: LS_SCHEMA } }],
    tool_choice: "auto",
    parallel_tool_calls: false,
    max_tokens: 1024,
    temperature: 0.7,
    top_p: 0.9,
    top_k: 40,
    stop: ["</done>"],
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.deepEqual(
    { api: c.api, route: c.route, stream: c.stream, passes: c.passesEngineErrors, model: c.agentModel },
    { api: "messages", route: "chat", stream: true, passes: false, model: "claude-sonnet-4-5" },
  );
  assert.equal(c.details("c1"), undefined);
});

it("keeps a plain system string, url images, text documents and mid-conversation system turns", () => {
  const body = chatOf({
    system: "Be terse.",
    messages: [
      {
        role: "user",
        content: [
          { type: "document", source: { type: "text", media_type: "text/plain", data: "notes" } },
          { type: "image", source: { type: "url", url: "https://example.com/a.png" } },
        ],
      },
      { role: "assistant", content: [{ type: "thinking", thinking: "Hmm.", signature: "s" }] },
      { role: "system", content: [{ type: "text", text: "Now answer." }] },
      { role: "system", content: [] },
      { role: "user", content: "ok" },
    ],
  });
  assert.deepEqual(body, {
    model: "claude-sonnet-4-5",
    messages: [
      { role: "system", content: "Be terse." },
      {
        role: "user",
        content: [
          { type: "text", text: "notes" },
          { type: "image_url", image_url: { url: "https://example.com/a.png" } },
        ],
      },
      { role: "assistant", content: "", reasoning_content: "Hmm." },
      { role: "system", content: "Now answer." },
      { role: "user", content: "ok" },
    ],
    max_tokens: 64,
  });
});

it("gives a tool result's images and an assistant turn of tool uses only (content null)", () => {
  const body = chatOf({
    system: [],
    messages: [
      { role: "user", content: "look" },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "shot", input: {} }] },
      {
        role: "user",
        content: [
          {
            type: "tool_result",
            tool_use_id: "t1",
            content: [
              { type: "text", text: "the screen:" },
              { type: "image", source: { type: "base64", media_type: "image/jpeg", data: "/9j/" } },
            ],
          },
        ],
      },
      { role: "assistant", content: [{ type: "tool_use", id: "t2", name: "shot", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t2" }] },
    ],
  });
  assert.deepEqual(body.messages, [
    { role: "user", content: "look" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "t1", type: "function", function: { name: "shot", arguments: "{}" } }],
    },
    {
      role: "tool",
      tool_call_id: "t1",
      content: [
        { type: "text", text: "the screen:" },
        { type: "image_url", image_url: { url: "data:image/jpeg;base64,/9j/" } },
      ],
    },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "t2", type: "function", function: { name: "shot", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "t2", content: "" },
  ]);
});

it("maps tool_choice any, tool and none, and leaves it out when no tools are offered", () => {
  const tools = [LS_TOOL];
  const choice = (tool_choice: Json) => {
    const b = chatOf({ messages: hi, tools, tool_choice });
    return { tool_choice: b.tool_choice, parallel_tool_calls: b.parallel_tool_calls };
  };
  assert.deepEqual(choice({ type: "any" }), { tool_choice: "required", parallel_tool_calls: undefined });
  assert.deepEqual(choice({ type: "tool", name: "ls", disable_parallel_tool_use: true }), {
    tool_choice: { type: "function", function: { name: "ls" } },
    parallel_tool_calls: false,
  });
  assert.deepEqual(choice({ type: "none" }), { tool_choice: "none", parallel_tool_calls: undefined });
  assert.deepEqual(chatOf({ messages: hi, tool_choice: { type: "any" } }), {
    model: "claude-sonnet-4-5",
    messages: hi,
    max_tokens: 64,
  });
});

it("turns thinking off in the chat template, maps effort and output_format, and drops empty stops", () => {
  const body = chatOf({
    messages: hi,
    thinking: { type: "disabled" },
    chat_template_kwargs: { custom: 1 },
    output_config: { effort: "max" },
    output_format: { type: "json_schema", schema: { type: "object" } },
    stop_sequences: [],
    stream: false,
  });
  assert.deepEqual(body, {
    model: "claude-sonnet-4-5",
    chat_template_kwargs: { custom: 1, enable_thinking: false },
    messages: hi,
    max_tokens: 64,
    reasoning_effort: "high",
    response_format: { type: "json_schema", json_schema: { name: "output", schema: { type: "object" } } },
  });
  const enabled = chatOf({ messages: hi, thinking: { type: "enabled", budget_tokens: 2048 } });
  assert.deepEqual(enabled, { model: "claude-sonnet-4-5", messages: hi, max_tokens: 64 });
});

it("sends the upstream's model name and answers with the agent's", () => {
  const c = call(
    { model: "claude-opus-4", max_tokens: 8, messages: hi },
    context("refuse", () => "qwen3"),
  );
  assert.deepEqual(c.body, { model: "qwen3", messages: hi, max_tokens: 8 });
  assert.equal(c.agentModel, "claude-opus-4");
});

it("builds a count_tokens body without max_tokens, sampling or stream", () => {
  const body = { model: "m", messages: hi, tools: [LS_TOOL], temperature: 1, stream: true };
  assert.deepEqual(messagesToChat(body, context(), true), { model: "m", messages: hi, tools: [LS_FN] });
});

const refused = (body: Json, message: string, param: string, ctx = context()) =>
  assert.deepEqual(messagesApi.request(body, ctx), new ApiProblem(message, { param }));

it("refuses a request without model, max_tokens or messages", () => {
  refused({ max_tokens: 8, messages: hi }, "model: a model name is required", "model");
  refused({ model: "m", messages: hi }, "max_tokens: an integer of at least 1 is required", "max_tokens");
  refused(
    { model: "m", max_tokens: 0, messages: hi },
    "max_tokens: an integer of at least 1 is required",
    "max_tokens",
  );
  refused({ model: "m", max_tokens: 8, messages: [] }, "messages: a non-empty array is required", "messages");
});

it("refuses an unknown content block, naming where it is", () => {
  const messages = [{ role: "user", content: [{ type: "search_result", source: "s", title: "t" }] }];
  refused(
    { model: "m", max_tokens: 8, messages },
    'messages[0].content[0]: content block type "search_result" is not supported here (user turns take ' +
      "text, image, document and tool_result; assistant turns text, thinking, redacted_thinking and tool_use)",
    "messages",
  );
});

it("refuses a tool_result that answers no earlier tool_use", () => {
  const messages = [
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "x" }] },
  ];
  refused(
    { model: "m", max_tokens: 8, messages },
    'messages[0].content[0]: tool_result for "toolu_9", which no earlier assistant tool_use block has',
    "messages",
  );
});

it("refuses a PDF document, a wrong temperature and a tool_choice for a tool not offered", () => {
  const pdf = { type: "base64", media_type: "application/pdf", data: "JVBERi0" };
  const messages = [{ role: "user", content: [{ type: "document", source: pdf }] }];
  refused(
    { model: "m", max_tokens: 8, messages },
    "messages[0].content[0]: only documents with a text source are supported",
    "messages",
  );
  refused(
    { model: "m", max_tokens: 8, messages: hi, temperature: "hot" },
    "temperature: a number is expected",
    "temperature",
  );
  refused(
    {
      model: "m",
      max_tokens: 8,
      messages: hi,
      tools: [LS_TOOL],
      tool_choice: { type: "tool", name: "rm" },
    },
    'tool_choice: no tool named "rm" is offered',
    "tool_choice",
  );
});

const WEB_SEARCH = { type: "web_search_20250305", name: "web_search", max_uses: 5 };

it("refuses a hosted tool by default", () => {
  refused(
    { model: "m", max_tokens: 8, messages: hi, tools: [LS_TOOL, WEB_SEARCH] },
    'tools[1]: "web_search_20250305" is a tool Anthropic runs on its servers; the gateway serves an open ' +
      "model that cannot run it. Offer it as a client tool, leave it out, or set the gateway's hosted_tools: drop",
    "tools",
  );
});

it("drops a hosted tool and counts it with hosted_tools: drop", () => {
  const ctx = context("drop");
  const body = chatOf({ messages: hi, tools: [WEB_SEARCH, { ...LS_TOOL, type: "custom" }] }, ctx);
  assert.deepEqual(body, { model: "claude-sonnet-4-5", messages: hi, tools: [LS_FN], max_tokens: 64 });
  // Counted by the tool's type without its date suffix (a known name, or "other": labels stay few).
  assert.deepEqual(ctx.metrics.byLabel("gateway_hosted_tools_dropped"), [["web_search", 1]]);
  const only = chatOf({ messages: hi, tools: [WEB_SEARCH], tool_choice: { type: "any" } }, ctx);
  assert.deepEqual(only, { model: "claude-sonnet-4-5", messages: hi, max_tokens: 64 });
  assert.deepEqual(ctx.metrics.byLabel("gateway_hosted_tools_dropped"), [["web_search", 2]]);
  chatOf({ messages: hi, tools: [{ type: "x".repeat(500), name: "n" }] }, ctx);
  assert.deepEqual(ctx.metrics.byLabel("gateway_hosted_tools_dropped"), [
    ["other", 1],
    ["web_search", 2],
  ]);
});
