/**
 * OpenAI Responses answers: the canonical chat answer (shaped as vLLM's ChatCompletionResponse gives it)
 * and a recorded CallOutcome → the Response object the Responses API reference documents (openai SDK
 * types: Response, ResponseOutputMessage, ResponseOutputText, ResponseReasoningItem,
 * ResponseFunctionToolCall, ResponseCustomToolCall, ResponseUsage), stored for previous_response_id.
 */
import { strict as assert } from "node:assert";
import { codecContext } from "../../../test/helpers/api-codecs.ts";
import { afterEach, beforeEach, it, mock } from "node:test";
import type { Capture } from "../engines/engine.ts";
import { ApiProblem, type ApiCall, type CallOutcome, type Json, type RequestContext } from "./api.ts";
import { ResponseStore } from "./response-store.ts";
import { responsesApi, responseId } from "./responses.ts";

const context = codecContext;

const TOOLS = [
  { type: "function", name: "shell", parameters: { type: "object", properties: {} }, strict: false },
  { type: "custom", name: "apply_patch", description: "Applies a patch" },
  {
    type: "namespace",
    name: "mcp__fs",
    description: "Files",
    tools: [{ type: "function", name: "read", parameters: { type: "object", properties: {} } }],
  },
];
const REQUEST = {
  model: "gpt-5-codex",
  instructions: "You are Codex.",
  input: "List the files.",
  tools: TOOLS,
};

function call(ctx = context(), extra: Json = {}): ApiCall {
  const c = responsesApi.request({ ...REQUEST, ...extra }, ctx);
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

const outcome = (finishReason: string, extra: Partial<Capture> = {}): CallOutcome => ({
  callIds: ["c7"],
  captures: [{ choiceIndex: 0, outputIds: Int32Array.from([1, 2, 3, 4, 5]), finishReason, ...extra }],
  promptLengths: [20],
});

const USAGE = {
  prompt_tokens: 20,
  total_tokens: 25,
  completion_tokens: 5,
  prompt_tokens_details: { cached_tokens: 16 },
};
const fn = (id: string, name: string, args: string) => ({
  id,
  type: "function",
  function: { name, arguments: args },
});

/** vLLM's ChatCompletionResponse for one choice. */
function canonical(message: Json, finish: string, logprobs: Json | null = null): Json {
  return {
    id: "chatcmpl-8f2",
    object: "chat.completion",
    created: 1700000000,
    model: "qwen3-8b",
    choices: [
      {
        index: 0,
        message: { role: "assistant", refusal: null, ...message },
        logprobs,
        finish_reason: finish,
        stop_reason: null,
      },
    ],
    usage: USAGE,
  };
}

const RESPONSES_USAGE = {
  input_tokens: 20,
  input_tokens_details: { cached_tokens: 16, cache_write_tokens: 0 },
  output_tokens: 5,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 25,
};

/** The Response object for REQUEST around `output`. */
function response(output: Json[], extra: Json = {}): Json {
  return {
    id: responseId("c7"),
    object: "response",
    created_at: 1700000000,
    status: "completed",
    error: null,
    incomplete_details: null,
    instructions: "You are Codex.",
    max_output_tokens: null,
    model: "gpt-5-codex",
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: null,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: TOOLS,
    top_p: null,
    truncation: "disabled",
    metadata: {},
    usage: RESPONSES_USAGE,
    ...extra,
  };
}

const text = (t: string, status = "completed", logprobs: Json[] = []) => ({
  type: "message",
  id: "msg_c7",
  status,
  role: "assistant",
  content: [{ type: "output_text", text: t, annotations: [], logprobs }],
});

beforeEach(() => mock.timers.enable({ apis: ["Date"], now: 1_700_000_000_000 }));
afterEach(() => mock.timers.reset());

it("gives reasoning, the message and each tool call as output items, and stores the response", () => {
  const ctx = context();
  const c = call(ctx);
  const calls = [
    fn("call_a", "shell", '{"cmd":["ls"]}'),
    fn("call_b", "apply_patch", '{"input":"*** Begin Patch"}'),
    fn("call_c", "mcp__fs.read", '{"path":"a"}'),
  ];
  const answer = canonical(
    { content: "Checking.", reasoning_content: "List first.", tool_calls: calls },
    "tool_calls",
  );
  const expected = response([
    {
      type: "reasoning",
      id: "rs_c7",
      summary: [],
      content: [{ type: "reasoning_text", text: "List first." }],
    },
    text("Checking."),
    {
      type: "function_call",
      id: "fc_c7_0",
      call_id: "call_a",
      name: "shell",
      arguments: '{"cmd":["ls"]}',
      status: "completed",
    },
    {
      type: "custom_tool_call",
      id: "ctc_c7_1",
      call_id: "call_b",
      name: "apply_patch",
      input: "*** Begin Patch",
    },
    {
      type: "function_call",
      id: "fc_c7_2",
      call_id: "call_c",
      name: "read",
      namespace: "mcp__fs",
      arguments: '{"path":"a"}',
      status: "completed",
    },
  ]);
  assert.deepEqual(c.answer(answer, outcome("tool_calls")), { status: 200, body: expected });
  assert.deepEqual(ctx.session.responses?.get(responseId("c7")), {
    response: expected,
    conversation: [
      { role: "user", content: "List the files." },
      { role: "assistant", content: "Checking.", reasoning_content: "List first.", tool_calls: calls },
    ],
  });
  assert.equal(c.stopReason(outcome("tool_calls").captures[0]!), "completed");
});

it("gives only the tool calls when there is no text, and an empty message when there is nothing", () => {
  const c = call();
  const only = c.answer(
    canonical({ content: null, tool_calls: [fn("call_a", "shell", "{}")] }, "tool_calls"),
    outcome("tool_calls"),
  );
  assert.deepEqual(
    only.body,
    response([
      {
        type: "function_call",
        id: "fc_c7_0",
        call_id: "call_a",
        name: "shell",
        arguments: "{}",
        status: "completed",
      },
    ]),
  );
  assert.deepEqual(
    call().answer(canonical({ content: "" }, "stop"), outcome("stop")).body,
    response([text("")]),
  );
});

it("is incomplete with reason max_output_tokens when the engine hit the limit", () => {
  const c = call(context(), { max_output_tokens: 5 });
  const cap = outcome("length");
  assert.deepEqual(
    c.answer(canonical({ content: "Partial" }, "length"), cap).body,
    response([text("Partial", "incomplete")], {
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      max_output_tokens: 5,
    }),
  );
  assert.equal(c.stopReason(cap.captures[0]!), "max_output_tokens");
});

it("answers an aborted call with a 503 in OpenAI's error shape and stores nothing", () => {
  const ctx = context();
  const c = call(ctx);
  assert.deepEqual(c.answer(canonical({ content: "Half" }, "abort"), outcome("abort")), {
    status: 503,
    body: {
      error: {
        message:
          "the engine aborted the call before it finished (finish reason abort: preempted, e.g. by a weight update); what it sampled is recorded; retry the call",
        type: "server_error",
        param: null,
        code: "call_aborted",
      },
    },
  });
  assert.equal(c.stopReason(outcome("abort").captures[0]!), "failed");
  assert.equal(ctx.session.responses?.size, 0);
});

it("gives malformed tool arguments as text, counted, and stores the turn as the agent got it", () => {
  const ctx = context();
  const c = call(ctx);
  const calls = [fn("call_a", "shell", "{}"), fn("call_b", "shell", '{"cmd": [')];
  const body = c.answer(
    canonical({ content: "Run: ", tool_calls: calls }, "tool_calls"),
    outcome("tool_calls"),
  ).body;
  assert.deepEqual(
    body,
    response([
      text('Run: {"cmd": ['),
      {
        type: "function_call",
        id: "fc_c7_0",
        call_id: "call_a",
        name: "shell",
        arguments: "{}",
        status: "completed",
      },
    ]),
  );
  assert.deepEqual(ctx.metrics.byLabel("gateway_malformed_tool_calls"), [["responses", 1]]);
  assert.deepEqual(ctx.session.responses?.get(responseId("c7"))?.conversation.at(-1), {
    role: "assistant",
    content: 'Run: {"cmd": [',
    tool_calls: [calls[0]],
  });
});

it("gives the output text's logprobs when the agent asked for them", () => {
  const c = call(context(), { include: ["message.output_text.logprobs"], top_logprobs: 1 });
  const entry = {
    token: "Hi",
    logprob: -0.25,
    bytes: [72, 105],
    top_logprobs: [{ token: "Hi", logprob: -0.25, bytes: [72, 105] }],
  };
  const answer = canonical({ content: "Hi" }, "stop", { content: [entry] });
  assert.deepEqual(c.answer(answer, outcome("stop")).body, response([text("Hi", "completed", [entry])]));
});

it("keeps nothing with store: false", () => {
  const ctx = context();
  const c = call(ctx, { store: false });
  assert.deepEqual(c.details("c7"), {
    response_id: responseId("c7"),
    model: "gpt-5-codex",
    store: false,
    instructions: true,
  });
  assert.deepEqual(
    c.answer(canonical({ content: "Hi" }, "stop"), outcome("stop")).body,
    response([text("Hi")], { store: false }),
  );
  assert.equal(ctx.session.responses?.size, 0);
});

it("puts the stored conversation after the new instructions and before the new input", () => {
  const ctx = context();
  const first = call(ctx);
  first.answer(
    canonical(
      { content: null, reasoning_content: "Use ls.", tool_calls: [fn("call_a", "shell", "{}")] },
      "tool_calls",
    ),
    outcome("tool_calls"),
  );
  const next = call(ctx, {
    instructions: "Answer in French.",
    previous_response_id: responseId("c7"),
    input: [{ type: "function_call_output", call_id: "call_a", output: "a.txt" }],
  });
  assert.deepEqual(next.body.messages, [
    { role: "system", content: "Answer in French." },
    { role: "user", content: "List the files." },
    {
      role: "assistant",
      content: null,
      reasoning_content: "Use ls.",
      tool_calls: [fn("call_a", "shell", "{}")],
    },
    { role: "tool", tool_call_id: "call_a", content: "a.txt" },
  ]);
  assert.deepEqual(next.details("c8"), {
    response_id: responseId("c8"),
    model: "gpt-5-codex",
    store: true,
    instructions: true,
    previous_response_id: responseId("c7"),
  });
});

it("refuses an id the session never stored, naming previous_response_not_found", () => {
  const ctx: RequestContext = { ...context(), session: { responses: new ResponseStore(16) } };
  assert.deepEqual(
    responsesApi.request({ model: "m", previous_response_id: "resp_nope", input: "hi" }, ctx),
    new ApiProblem(
      "Previous response with id 'resp_nope' not found: this gateway continues only responses it gave in the same " +
        "session with store left true, and keeps the latest stored_responses of each session",
      { param: "previous_response_id", apiCode: "previous_response_not_found" },
    ),
  );
});

it("keeps the latest stored_responses of a session", () => {
  const store = new ResponseStore(2);
  for (const id of ["a", "b", "c"]) store.put(id, { response: { id }, conversation: [] });
  assert.deepEqual(
    [store.get("a"), store.get("b")?.response, store.get("c")?.response, store.size],
    [undefined, { id: "b" }, { id: "c" }, 2],
  );
  assert.equal(store.delete("b"), true);
  assert.equal(store.size, 1);
});
