/**
 * OpenAI Responses requests → the canonical chat body. Request bodies are shaped as the Responses API
 * reference documents them (openai SDK types: ResponseCreateParams, EasyInputMessage, ResponseInputText,
 * ResponseInputImage, ResponseReasoningItem, ResponseFunctionToolCall, ResponseCustomToolCall,
 * FunctionCallOutput, CustomToolCallOutput, FunctionTool, CustomTool, NamespaceTool), as Codex sends them.
 */
import { strict as assert } from "node:assert";
import { codecContext } from "../../../test/helpers/api-codecs.ts";
import { it } from "node:test";
import { ApiProblem, type ApiCall, type Json } from "./api.ts";
import { responsesApi, responseId } from "./responses.ts";

const context = (hostedTools: "refuse" | "drop" = "refuse") => codecContext({ hostedTools });

function call(body: Json, ctx = context()): ApiCall {
  const c = responsesApi.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(`refused: ${c.message}`);
  return c;
}

const chatOf = (extra: Json, ctx = context()) => call({ model: "gpt-5-codex", ...extra }, ctx).body;

const SHELL_PARAMS = { type: "object", properties: { cmd: { type: "array", items: { type: "string" } } } };
const READ_PARAMS = { type: "object", properties: { path: { type: "string" } }, required: ["path"] };
const CUSTOM_PARAMS = {
  type: "object",
  properties: { input: { type: "string", description: "the tool's whole input, as free text" } },
  required: ["input"],
};
const TOOLS = [
  { type: "function", name: "shell", description: "Runs a command", parameters: SHELL_PARAMS, strict: false },
  {
    type: "custom",
    name: "apply_patch",
    description: "Applies a patch",
    format: { type: "grammar", syntax: "lark", definition: "start: /.+/" },
  },
  {
    type: "namespace",
    name: "mcp__fs",
    description: "Files",
    tools: [{ type: "function", name: "read", parameters: READ_PARAMS }],
  },
];
const CHAT_TOOLS = [
  { type: "function", function: { name: "shell", description: "Runs a command", parameters: SHELL_PARAMS } },
  {
    type: "function",
    function: { name: "apply_patch", description: "Applies a patch", parameters: CUSTOM_PARAMS },
  },
  { type: "function", function: { name: "mcp__fs.read", parameters: READ_PARAMS } },
];

/** A Codex turn: developer message, an image, a reasoning item, a reply with three tool calls, outputs. */
const CODEX: Json = {
  model: "gpt-5-codex",
  instructions: "You are Codex.",
  input: [
    {
      type: "message",
      role: "developer",
      content: [{ type: "input_text", text: "Sandbox: workspace-write." }],
    },
    {
      type: "message",
      role: "user",
      content: [
        { type: "input_text", text: "What is in this picture?" },
        { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
      ],
    },
    {
      type: "reasoning",
      id: "rs_1",
      summary: [{ type: "summary_text", text: "Look first." }],
      content: [{ type: "reasoning_text", text: "I should list files." }],
      encrypted_content: null,
    },
    {
      type: "message",
      id: "msg_1",
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: "Checking.", annotations: [] }],
    },
    {
      type: "function_call",
      id: "fc_1",
      call_id: "call_1",
      name: "shell",
      arguments: '{"cmd":["ls"]}',
      status: "completed",
    },
    {
      type: "custom_tool_call",
      id: "ctc_1",
      call_id: "call_2",
      name: "apply_patch",
      input: "*** Begin Patch",
    },
    {
      type: "function_call",
      call_id: "call_3",
      namespace: "mcp__fs",
      name: "read",
      arguments: '{"path":"a"}',
    },
    { type: "function_call_output", call_id: "call_1", output: "a.txt" },
    { type: "custom_tool_call_output", call_id: "call_2", output: "Done!" },
    { type: "function_call_output", call_id: "call_3", output: [{ type: "input_text", text: "hello" }] },
  ],
  tools: TOOLS,
  tool_choice: "auto",
  parallel_tool_calls: false,
  max_output_tokens: 2048,
  temperature: 1,
  top_p: 0.95,
  text: {
    format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true },
    verbosity: "low",
  },
  reasoning: { effort: "minimal", summary: "auto" },
  store: true,
  stream: true,
  include: ["reasoning.encrypted_content"],
  prompt_cache_key: "019a-thread",
  client_metadata: { originator: "codex_cli_rs" },
  metadata: { team: "rl" },
  seed: 3,
};

it("translates a Codex turn into the canonical chat body", () => {
  const c = call(CODEX);
  assert.deepEqual(c.body, {
    model: "gpt-5-codex",
    seed: 3,
    messages: [
      { role: "system", content: "You are Codex." },
      { role: "system", content: "Sandbox: workspace-write." },
      {
        role: "user",
        content: [
          { type: "text", text: "What is in this picture?" },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
        ],
      },
      {
        role: "assistant",
        content: "Checking.",
        reasoning_content: "I should list files.",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "shell", arguments: '{"cmd":["ls"]}' } },
          {
            id: "call_2",
            type: "function",
            function: { name: "apply_patch", arguments: '{"input":"*** Begin Patch"}' },
          },
          { id: "call_3", type: "function", function: { name: "mcp__fs.read", arguments: '{"path":"a"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "a.txt" },
      { role: "tool", tool_call_id: "call_2", content: "Done!" },
      { role: "tool", tool_call_id: "call_3", content: "hello" },
    ],
    tools: CHAT_TOOLS,
    tool_choice: "auto",
    parallel_tool_calls: false,
    max_tokens: 2048,
    temperature: 1,
    top_p: 0.95,
    response_format: {
      type: "json_schema",
      json_schema: { name: "answer", schema: { type: "object" }, strict: true },
    },
    reasoning_effort: "low",
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.deepEqual(
    { api: c.api, route: c.route, stream: c.stream, passes: c.passesEngineErrors, model: c.agentModel },
    { api: "responses", route: "chat", stream: true, passes: false, model: "gpt-5-codex" },
  );
  assert.deepEqual(c.details("c1"), {
    response_id: responseId("c1"),
    model: "gpt-5-codex",
    store: true,
    instructions: true,
  });
});

it("takes a string input, items without a type, and a reasoning summary when there is no reasoning text", () => {
  assert.deepEqual(chatOf({ input: "Hello" }), {
    model: "gpt-5-codex",
    messages: [{ role: "user", content: "Hello" }],
  });
  const body = chatOf({
    input: [
      { role: "user", content: "Hi" },
      { type: "reasoning", id: "rs_2", summary: [{ type: "summary_text", text: "Greet." }] },
      {
        role: "assistant",
        content: [
          { type: "output_text", text: "Hello" },
          { type: "output_text", text: "!" },
        ],
      },
      { role: "system", content: [{ type: "input_text", text: "Stay kind." }] },
    ],
  });
  assert.deepEqual(body.messages, [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello!", reasoning_content: "Greet." },
    { role: "system", content: "Stay kind." },
  ]);
});

it("gives a reasoning item followed by function calls one assistant turn without text", () => {
  const body = chatOf({
    input: [
      { role: "user", content: "go" },
      { type: "reasoning", id: "rs_3", summary: [], content: [{ type: "reasoning_text", text: "Run it." }] },
      { type: "function_call", call_id: "call_1", name: "shell", arguments: "{}" },
      { type: "function_call", call_id: "call_2", name: "shell", arguments: '{"cmd":["pwd"]}' },
      { type: "function_call_output", call_id: "call_2", output: "/" },
      { type: "function_call_output", call_id: "call_1", output: "" },
    ],
  });
  assert.deepEqual(body.messages, [
    { role: "user", content: "go" },
    {
      role: "assistant",
      content: null,
      reasoning_content: "Run it.",
      tool_calls: [
        { id: "call_1", type: "function", function: { name: "shell", arguments: "{}" } },
        { id: "call_2", type: "function", function: { name: "shell", arguments: '{"cmd":["pwd"]}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_2", content: "/" },
    { role: "tool", tool_call_id: "call_1", content: "" },
  ]);
});

it("maps every tool_choice form and json_object", () => {
  const choice = (tool_choice: unknown) => chatOf({ input: "x", tools: TOOLS, tool_choice }).tool_choice;
  assert.equal(choice("none"), "none");
  assert.equal(choice("required"), "required");
  assert.deepEqual(choice({ type: "function", name: "shell" }), {
    type: "function",
    function: { name: "shell" },
  });
  assert.deepEqual(choice({ type: "custom", name: "apply_patch" }), {
    type: "function",
    function: { name: "apply_patch" },
  });
  assert.deepEqual(chatOf({ input: "x", text: { format: { type: "json_object" } } }).response_format, {
    type: "json_object",
  });
  assert.deepEqual(chatOf({ input: "x", text: { format: { type: "text" } } }), {
    model: "gpt-5-codex",
    messages: [{ role: "user", content: "x" }],
  });
});

it("maps reasoning effort, turning thinking off for none, and asks for logprobs", () => {
  const effort = (e: string) => {
    const b = chatOf({ input: "x", reasoning: { effort: e } });
    return b.reasoning_effort ?? b.chat_template_kwargs;
  };
  assert.deepEqual(["minimal", "low", "medium", "high", "xhigh", "none"].map(effort), [
    "low",
    "low",
    "medium",
    "high",
    "high",
    { enable_thinking: false },
  ]);
  const b = chatOf({ input: "x", include: ["message.output_text.logprobs"], top_logprobs: 2 });
  assert.deepEqual([b.logprobs, b.top_logprobs], [true, 2]);
});

const refused = (body: Json, message: string, param: string, ctx = context()) =>
  assert.deepEqual(responsesApi.request(body, ctx), new ApiProblem(message, { param }));

it("refuses a request without a model or without input", () => {
  refused({ input: "hi" }, "model: a model name is required", "model");
  refused({ model: "m", input: [] }, "input: there is nothing to answer", "input");
  refused({ model: "m" }, "input: there is nothing to answer", "input");
});

it("refuses background, conversation and prompt", () => {
  for (const [k, v] of [
    ["background", true],
    ["conversation", "conv_1"],
    ["prompt", { id: "pmpt_1" }],
  ] as const)
    refused(
      { model: "m", input: "hi", [k]: v },
      `${k} is not supported by this gateway (it serves calls as they come, from its own sessions)`,
      k,
    );
  assert.ok(
    !(responsesApi.request({ model: "m", input: "hi", background: false }, context()) instanceof ApiProblem),
  );
});

it("refuses an output for no call and an unknown item", () => {
  refused(
    { model: "m", input: [{ type: "function_call_output", call_id: "call_9", output: "x" }] },
    'input[0]: output for call "call_9", which no earlier tool call has',
    "input",
  );
  refused(
    { model: "m", input: [{ type: "web_search_call", id: "ws_1", status: "completed" }] },
    'input[0]: item type "web_search_call" is not supported (message, reasoning, function_call, ' +
      "function_call_output, custom_tool_call and custom_tool_call_output are)",
    "input",
  );
  refused(
    { model: "m", input: [{ role: "user", content: [{ type: "input_file", file_id: "file_1" }] }] },
    'input[0].content[0]: part type "input_file" is not supported (input_text, output_text, refusal and input_image with an image_url are)',
    "input",
  );
});

it("refuses a hosted tool by default and drops it, counted, with hosted_tools: drop", () => {
  const tools = [{ type: "web_search" }, TOOLS[0]];
  refused(
    { model: "m", input: "hi", tools },
    'tools[0]: "web_search" is a hosted tool; the gateway serves an open model that cannot run it. Leave it ' +
      'out (Codex: web_search = "disabled"), offer a function tool, or set the gateway\'s hosted_tools: drop',
    "tools",
  );
  const ctx = context("drop");
  assert.deepEqual(chatOf({ input: "hi", tools }, ctx), {
    model: "gpt-5-codex",
    messages: [{ role: "user", content: "hi" }],
    tools: [CHAT_TOOLS[0]],
  });
  assert.deepEqual(ctx.metrics.byLabel("gateway_hosted_tools_dropped"), [["web_search", 1]]);
});

it("refuses a tool_choice for a tool not offered and a bad max_output_tokens", () => {
  refused(
    { model: "m", input: "hi", tools: TOOLS, tool_choice: { type: "function", name: "rm" } },
    'tool_choice: no tool named "rm" is offered',
    "tool_choice",
  );
  refused(
    { model: "m", input: "hi", max_output_tokens: 0 },
    "max_output_tokens: an integer of at least 1 is expected",
    "max_output_tokens",
  );
});

// Regression: a reasoning item that no message or call followed was dropped from the prompt.
it("keeps reasoning that nothing followed as the model's turn, before the next user message", () => {
  const c = call({
    model: "gpt-5-codex",
    input: [
      { role: "user", content: "Think." },
      { type: "reasoning", id: "rs_1", summary: [], content: [{ type: "reasoning_text", text: "Hmm." }] },
      { role: "user", content: "Go on." },
    ],
  });
  assert.deepEqual(c.body.messages, [
    { role: "user", content: "Think." },
    { role: "assistant", content: "", reasoning_content: "Hmm." },
    { role: "user", content: "Go on." },
  ]);
});
