/**
 * The agent API codecs' answers and stream events, parsed by the official SDKs' own types: what the codecs
 * write for Anthropic Messages must validate as anthropic.types.Message / RawMessageStreamEvent (errors as
 * ErrorResponse), and for OpenAI Responses as openai.types.responses.Response / ResponseStreamEvent (errors
 * as ErrorObject), as a client parsing the gateway's bytes would. The SDKs come from the test Python
 * environment (scripts/python-env.sh).
 */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";
import { Metrics } from "../src/core/metrics.ts";
import type { Capture } from "../src/gateway/engines/engine.ts";
import {
  ApiProblem,
  type AgentApi,
  type ApiCall,
  type CallOutcome,
  type Json,
} from "../src/gateway/apis/api.ts";
import { messagesApi } from "../src/gateway/apis/messages.ts";
import { responsesApi } from "../src/gateway/apis/responses.ts";
import { PYTHON, pythonReady } from "./helpers/python.ts";

const run = promisify(execFile);

function call(api: AgentApi, body: Json): ApiCall {
  const ctx = {
    session: { responses: null },
    settings: { upstreamModel: (m: string) => m, hostedTools: "refuse" as const, storedResponses: 16 },
    metrics: new Metrics(),
  };
  const c = api.request(body, ctx);
  if (c instanceof ApiProblem) assert.fail(c.message);
  return c;
}

const outcome = (finishReason: string, extra: Partial<Capture> = {}): CallOutcome => ({
  callIds: ["c7"],
  captures: [{ choiceIndex: 0, outputIds: Int32Array.from([1, 2, 3]), finishReason, ...extra }],
  promptLengths: [20],
});

const USAGE = {
  prompt_tokens: 20,
  completion_tokens: 5,
  total_tokens: 25,
  prompt_tokens_details: { cached_tokens: 16 },
};
const fn = (id: string, name: string, args: string) => ({
  id,
  type: "function",
  function: { name, arguments: args },
});
const canonical = (message: Json, finish: string): Json => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1700000000,
  model: "qwen3-8b",
  choices: [{ index: 0, message: { role: "assistant", ...message }, logprobs: null, finish_reason: finish }],
  usage: USAGE,
});
const chunk = (delta: Json, finish: string | null = null): Json => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1700000000,
  model: "qwen3-8b",
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
});
const piece = (p: Json) => chunk({ tool_calls: [p] });

/** A stream with thinking, text and tool calls (the last one `tool`), finished by `finish`, then usage. */
const chunks = (tool: string, args: string[], finish = "tool_calls"): Json[] => [
  chunk({ role: "assistant", content: "" }),
  chunk({ reasoning_content: "Think." }),
  chunk({ content: "Here." }),
  piece({ index: 0, id: "call_a", type: "function", function: { name: "shell", arguments: '{"cmd":"ls"}' } }),
  piece({ index: 1, id: "call_b", type: "function", function: { name: tool, arguments: "" } }),
  ...args.map((a) => piece({ index: 1, function: { arguments: a } })),
  chunk({}, finish),
  {
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1700000000,
    model: "qwen3-8b",
    choices: [],
    usage: USAGE,
  },
];

/** The data of each named SSE event a stream writes. */
function streamed(c: ApiCall, input: Json[], end: CallOutcome): Json[] {
  const s = c.streamer("c7");
  const text =
    input.map((x) => s.chunk(x).text).join("") + s.end(end, true) + s.error("not_recorded", "no ids");
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((e) => JSON.parse(e.slice(e.indexOf("\ndata: ") + 7)) as Json);
}

function messagesSamples(): Json {
  const body = { model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "ls" }] };
  const c = call(messagesApi, { ...body, tools: [{ name: "shell", input_schema: { type: "object" } }] });
  const answer = canonical(
    { content: "Here.", reasoning_content: "Think.", tool_calls: [fn("call_a", "shell", '{"cmd":"ls"}')] },
    "tool_calls",
  );
  const bad = canonical({ content: null, tool_calls: [fn("call_a", "shell", '{"cmd')] }, "tool_calls");
  return {
    messages: [
      c.answer(answer, outcome("tool_calls")).body,
      c.answer(canonical({ content: "Done" }, "stop"), outcome("stop", { stopSequence: "###" })).body,
      c.answer(canonical({ content: "Part" }, "length"), outcome("length")).body,
      c.answer(bad, outcome("tool_calls")).body,
    ],
    errors: [c.answer(answer, outcome("abort")).body, messagesApi.errorBody(400, "invalid_request", "bad")],
    events: [
      ...streamed(c, chunks("shell", ['{"cmd":', '"pwd"}']), outcome("tool_calls")),
      ...streamed(c, [chunk({ content: "Half" })], outcome("abort")),
      ...streamed(c, [], outcome("stop", { stopSequence: "###" })),
    ],
  };
}

function responsesSamples(): Json {
  const tools = [
    { type: "function", name: "shell", parameters: { type: "object", properties: {} }, strict: false },
    { type: "custom", name: "apply_patch", description: "Applies a patch" },
    {
      type: "namespace",
      name: "mcp",
      description: "MCP",
      tools: [{ type: "function", name: "read", parameters: { type: "object" } }],
    },
  ];
  const body = { model: "gpt-5-codex", instructions: "Be brief.", input: "ls", tools };
  const c = call(responsesApi, body);
  const logprobs = call(responsesApi, {
    ...body,
    include: ["message.output_text.logprobs"],
    max_output_tokens: 9,
  });
  const calls = [
    fn("call_a", "shell", "{}"),
    fn("call_b", "apply_patch", '{"input":"*** Begin Patch"}'),
    fn("call_c", "mcp.read", "{}"),
  ];
  const entry = {
    token: "Hi",
    logprob: -0.5,
    bytes: [72, 105],
    top_logprobs: [{ token: "Hi", logprob: -0.5, bytes: [72, 105] }],
  };
  const withLogprobs = canonical({ content: "Hi" }, "length");
  (withLogprobs.choices as Json[])[0]!.logprobs = { content: [entry] };
  return {
    responses: [
      c.answer(
        canonical({ content: "Here.", reasoning_content: "Think.", tool_calls: calls }, "tool_calls"),
        outcome("tool_calls"),
      ).body,
      logprobs.answer(withLogprobs, outcome("length")).body,
      c.answer(canonical({ content: "" }, "stop"), outcome("stop")).body,
    ],
    errors: [(c.answer(canonical({ content: "x" }, "abort"), outcome("abort")).body as Json).error],
    events: [
      ...streamed(c, chunks("apply_patch", ['{"input":', '"*** Begin Patch"}']), outcome("tool_calls")),
      ...streamed(c, chunks("mcp.read", ["{}"]), outcome("tool_calls")),
      ...streamed(logprobs, [chunk({ content: "Hi" }), chunk({}, "length")], outcome("length")),
      ...streamed(c, [chunk({ content: "Half" })], outcome("abort")),
      ...streamed(c, [], outcome("stop")),
    ],
  };
}

/** Validates every sample with the SDKs' types; prints the failures as JSON. */
const VALIDATE = `
import json, sys
from pydantic import TypeAdapter
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.shared import ErrorObject

data = json.load(open(sys.argv[1]))
failures = []
def check(kind, i, validate, value):
    try:
        validate(value)
    except Exception as e:
        failures.append(f"{kind}[{i}] ({value.get('type')}): {str(e)[:600]}")

anthropic_event = TypeAdapter(RawMessageStreamEvent)
openai_event = TypeAdapter(ResponseStreamEvent)
m, r = data["messages"], data["responses"]
for i, v in enumerate(m["messages"]): check("Message", i, lambda x: Message.model_validate(x, strict=False), v)
for i, v in enumerate(m["errors"]): check("ErrorResponse", i, ErrorResponse.model_validate, v)
for i, v in enumerate(m["events"]):
    check("Anthropic event", i, ErrorResponse.model_validate if v["type"] == "error" else anthropic_event.validate_python, v)
for i, v in enumerate(r["responses"]): check("Response", i, Response.model_validate, v)
for i, v in enumerate(r["errors"]): check("ErrorObject", i, ErrorObject.model_validate, v)
for i, v in enumerate(r["events"]): check("Responses event", i, openai_event.validate_python, v)
print(json.dumps({"failures": failures, "counts": [len(m["messages"]), len(m["events"]), len(r["responses"]), len(r["events"])]}))
`;

it(
  "writes answers and stream events the Anthropic and OpenAI SDKs' types accept",
  { skip: !pythonReady() && "the test Python environment is not prepared (scripts/python-env.sh)" },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "trajflow-api-shapes-"));
    try {
      const path = join(dir, "samples.json");
      const messages = messagesSamples();
      const responses = responsesSamples();
      writeFileSync(path, JSON.stringify({ messages, responses }));
      const { stdout } = await run(PYTHON, ["-c", VALIDATE, path], { maxBuffer: 64 << 20 });
      const result = JSON.parse(stdout) as { failures: string[]; counts: number[] };
      assert.deepEqual(result.failures, []);
      const count = (x: Json, k: string) => (x[k] as unknown[]).length;
      assert.deepEqual(result.counts, [
        count(messages, "messages"),
        count(messages, "events"),
        count(responses, "responses"),
        count(responses, "events"),
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
