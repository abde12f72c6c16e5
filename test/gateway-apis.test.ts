/**
 * The gateway's Anthropic Messages and OpenAI Responses routes, in front of an upstream that answers at once
 * in vLLM's shapes (helpers/instant-engine.ts): the events each call writes (the canonical messages, the
 * API, the stop reason beside the raw finish reason, the delta form across turns), answers and streams in
 * each API's shape, stored Responses, model names, side calls kept out of training, and hostile bodies
 * answered in the API's error shape with nothing recorded. The real harnesses and SDKs against llama.cpp are
 * in gateway-harnesses.test.ts.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../src/core/logger.ts";
import { gatewayConfigSchema, type GatewayConfigInput } from "../src/gateway/config.ts";
import { startGateway } from "../src/gateway/gateway.ts";
import { decodeTokenIds } from "../src/schemas/tokens.ts";
import { outputIds, renderPrompt, startInstantEngine, type InstantEngine } from "./helpers/instant-engine.ts";
import { logEvents, waitUntil } from "./helpers/gateway.ts";

const logger = createLogger({ level: "silent" });
const scratch = mkdtempSync(join(tmpdir(), "trajflow-gateway-apis-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

let n = 0;
async function gateway(engine: InstantEngine, extra: Partial<GatewayConfigInput> = {}) {
  const logDir = join(scratch, `log-${++n}`);
  const config = gatewayConfigSchema.parse({
    listen: "127.0.0.1:0",
    upstreams: [engine.url],
    engine: "vllm",
    output: { type: "log", dir: logDir },
    ...extra,
  });
  const gw = await startGateway(config, logger);
  return { gw, logDir, base: `http://${gw.address}` };
}

const ids = (v: unknown) => [...(decodeTokenIds(v) as Int32Array)];

// The answers' shapes are what the tests assert; reading them loosely keeps the assertions short.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Loose = Record<string, any>;

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  const isJson = (res.headers.get("content-type") ?? "").includes("json");
  return { status: res.status, headers: res.headers, body: (isJson ? JSON.parse(text) : text) as Loose };
}

/** The events of an SSE text: `event:` name and parsed data. */
function sse(text: string): Array<{ event: string; data: Loose }> {
  return text
    .split("\n\n")
    .filter((b) => b.trim() !== "")
    .map((b) => {
      const event = /^event: (.*)$/m.exec(b)?.[1] ?? "";
      const data = /^data: (.*)$/m.exec(b)?.[1] ?? "null";
      return { event, data: JSON.parse(data) as Loose };
    });
}

describe("gateway: Anthropic Messages", () => {
  let engine: InstantEngine;
  before(async () => {
    engine = await startInstantEngine({
      toolCall: (_call, body) =>
        (body.messages as Loose[]).at(-1)?.content === "use the tool"
          ? { name: "calc", arguments: '{"a": 2}' }
          : undefined,
    });
  });
  after(() => engine.close());

  it("answers a session in Anthropic's shape and records the canonical messages, API and stop reasons", async () => {
    const { gw, logDir, base } = await gateway(engine, { model_map: { "claude-*": "instant" } });
    try {
      const url = `${base}/sessions/m1/v1/messages`;
      const tools = [{ name: "calc", description: "adds", input_schema: { type: "object", properties: {} } }];
      const first = await post(
        url,
        {
          model: "claude-sonnet-4-5",
          max_tokens: 64,
          system: "be brief",
          tools,
          messages: [{ role: "user", content: "use the tool" }],
        },
        { "anthropic-version": "2023-06-01", "x-api-key": "anything" },
      );
      assert.equal(first.status, 200);
      const callId = first.headers.get("x-trajflow-call-id")!;
      assert.deepEqual(first.body, {
        id: `msg_${callId}`,
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-5",
        content: [
          { type: "text", text: "ok 1" },
          { type: "tool_use", id: "call_1", name: "calc", input: { a: 2 } },
        ],
        stop_reason: "tool_use",
        stop_sequence: null,
        usage: {
          input_tokens: renderPrompt([
            { role: "system", content: "be brief" },
            { role: "user", content: "use the tool" },
          ]).length,
          output_tokens: outputIds("ok 1").length,
        },
      });
      // The engine got the mapped model and the canonical chat call.
      assert.equal(engine.bodies.at(-1)!.model, "instant");
      assert.deepEqual(engine.bodies.at(-1)!.tools, [
        {
          type: "function",
          function: { name: "calc", parameters: { type: "object", properties: {} }, description: "adds" },
        },
      ]);
      // The tool's result continues the session: the same branch, in the delta form.
      const history = [
        { role: "user", content: "use the tool" },
        { role: "assistant", content: first.body.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_1", content: "2" }] },
      ];
      const second = await post(url, {
        model: "claude-sonnet-4-5",
        max_tokens: 64,
        system: "be brief",
        tools,
        messages: history,
      });
      assert.equal(second.status, 200);
      assert.equal(second.body.stop_reason, "end_turn");
      const events = logEvents(logDir);
      const requests = events.filter((e) => e.type === "request");
      const responses = events.filter((e) => e.type === "response");
      assert.deepEqual(
        requests.map((e) => [e.api, e.messages]),
        [
          [
            "messages",
            [
              { role: "system", content: "be brief" },
              { role: "user", content: "use the tool" },
            ],
          ],
          [
            "messages",
            [
              { role: "system", content: "be brief" },
              { role: "user", content: "use the tool" },
              {
                role: "assistant",
                content: "ok 1",
                tool_calls: [
                  { id: "call_1", type: "function", function: { name: "calc", arguments: '{"a":2}' } },
                ],
              },
              { role: "tool", tool_call_id: "call_1", content: "2" },
            ],
          ],
        ],
      );
      assert.deepEqual(
        responses.map((e) => [e.finish_reason, e.stop_reason]),
        [
          ["tool_calls", "tool_use"],
          ["stop", "end_turn"],
        ],
      );
      assert.deepEqual(ids(responses[0]!.output_ids), outputIds("ok 1"));
    } finally {
      await gw.close();
    }
  });

  it("streams in Anthropic's event order, the last events after the call is recorded", async () => {
    const { gw, logDir, base } = await gateway(engine);
    try {
      const res = await post(`${base}/sessions/m2/v1/messages`, {
        model: "claude-sonnet-4-5",
        max_tokens: 64,
        stream: true,
        messages: [{ role: "user", content: "hi" }],
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type")!, /text\/event-stream/);
      const evs = sse(res.body as unknown as string);
      const reply = `ok ${engine.calls}`;
      assert.deepEqual(
        evs.map((e) => e.event),
        [
          "message_start",
          "content_block_start",
          ...[...reply].map(() => "content_block_delta"),
          "content_block_stop",
          "message_delta",
          "message_stop",
        ],
      );
      for (const e of evs) assert.equal(e.data.type, e.event);
      assert.equal(
        evs
          .filter((e) => e.event === "content_block_delta")
          .map((e) => e.data.delta.text)
          .join(""),
        reply,
      );
      const delta = evs.find((e) => e.event === "message_delta")!.data;
      assert.deepEqual(delta.delta, { stop_reason: "end_turn", stop_sequence: null });
      // The instant engine reports no usage in streams: the sampled ids count.
      assert.equal(delta.usage.output_tokens, outputIds(reply).length);
      const response = logEvents(logDir).find((e) => e.type === "response")!;
      assert.equal(response.stop_reason, "end_turn");
    } finally {
      await gw.close();
    }
  });

  it("records a Messages stream the agent leaves as abort, with the tokens sampled so far", async () => {
    const slow = await startInstantEngine({ tokenDelayMs: 40, reply: () => "a longer reply to leave early" });
    const { gw, logDir, base } = await gateway(slow);
    try {
      const controller = new AbortController();
      const res = await fetch(`${base}/sessions/m4/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "m",
          max_tokens: 64,
          stream: true,
          messages: [{ role: "user", content: "hi" }],
        }),
        signal: controller.signal,
      });
      const reader = res.body!.getReader();
      let seen = "";
      while (!seen.includes("text_delta")) seen += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
      await waitUntil(() => logEvents(logDir).some((e) => e.type === "response"));
      const response = logEvents(logDir).find((e) => e.type === "response")!;
      assert.equal(response.finish_reason, "abort");
      const sampled = ids(response.output_ids);
      assert.ok(sampled.length > 0 && sampled.length < outputIds("a longer reply to leave early").length);
    } finally {
      await gw.close();
      await slow.close();
    }
  });

  it("answers an aborted call with an error it retries, never as a finished turn, and records what was sampled", async () => {
    const aborting = await startInstantEngine({ finishReason: () => "abort" });
    const { gw, logDir, base } = await gateway(aborting);
    try {
      const res = await post(`${base}/sessions/m3/v1/messages`, {
        model: "m",
        max_tokens: 8,
        messages: [{ role: "user", content: "hi" }],
      });
      assert.equal(res.status, 503);
      assert.equal(res.body.type, "error");
      assert.equal(res.body.error.type, "overloaded_error");
      const response = logEvents(logDir).find((e) => e.type === "response")!;
      assert.deepEqual([response.finish_reason, response.stop_reason], ["abort", "error"]);
    } finally {
      await gw.close();
      await aborting.close();
    }
  });
});

describe("gateway: OpenAI Responses", () => {
  let engine: InstantEngine;
  before(async () => {
    engine = await startInstantEngine();
  });
  after(() => engine.close());

  it("continues from previous_response_id in its session, and serves GET and DELETE of a stored response", async () => {
    const { gw, logDir, base } = await gateway(engine);
    try {
      const url = `${base}/sessions/r1/v1/responses`;
      const a = await post(url, { model: "gpt-5-codex", instructions: "be brief", input: "hi" });
      assert.equal(a.status, 200);
      assert.equal(a.body.object, "response");
      assert.equal(a.body.status, "completed");
      assert.equal(a.body.model, "gpt-5-codex");
      assert.equal(a.body.output[0].content[0].text, "ok 1");
      const b = await post(url, {
        model: "gpt-5-codex",
        instructions: "be brief",
        input: "more",
        previous_response_id: a.body.id,
      });
      assert.equal(b.status, 200);
      assert.equal(b.body.previous_response_id, a.body.id);
      // The second prompt is the first's prompt + output + the new input: the delta form.
      const requests = logEvents(logDir).filter((e) => e.type === "request");
      assert.equal(requests[1]!.parent_call_id, requests[0]!.call_id);
      assert.deepEqual(requests[1]!.messages, [
        { role: "system", content: "be brief" },
        { role: "user", content: "hi" },
        { role: "assistant", content: "ok 1" },
        { role: "user", content: "more" },
      ]);
      assert.deepEqual(
        requests.map((e) => e.api_details),
        [
          { response_id: a.body.id, model: "gpt-5-codex", store: true, instructions: true },
          {
            response_id: b.body.id,
            model: "gpt-5-codex",
            store: true,
            instructions: true,
            previous_response_id: a.body.id,
          },
        ],
      );
      const got = await fetch(`${base}/sessions/r1/v1/responses/${a.body.id}`);
      assert.deepEqual(await got.json(), a.body);
      // Another session does not see it; an unknown id is a 400 in OpenAI's shape, saying why.
      const elsewhere = await post(`${base}/sessions/r2/v1/responses`, {
        model: "m",
        input: "x",
        previous_response_id: a.body.id,
      });
      assert.equal(elsewhere.status, 400);
      assert.equal(elsewhere.body.error.code, "previous_response_not_found");
      assert.equal(elsewhere.body.error.param, "previous_response_id");
      const deleted = await fetch(`${base}/sessions/r1/v1/responses/${a.body.id}`, { method: "DELETE" });
      assert.deepEqual(await deleted.json(), { id: a.body.id, object: "response", deleted: true });
      assert.equal((await fetch(`${base}/sessions/r1/v1/responses/${a.body.id}`)).status, 404);
      // store: false is not kept.
      const unstored = await post(url, { model: "m", input: "x", store: false });
      assert.equal((await fetch(`${base}/sessions/r1/v1/responses/${unstored.body.id}`)).status, 404);
    } finally {
      await gw.close();
    }
  });

  it("continues a stored response after a restart, rebuilt from the session's events", async () => {
    const logDir = join(scratch, `log-${++n}`);
    const first = await gateway(engine, { output: { type: "log", dir: logDir } });
    const url = (base: string) => `${base}/sessions/r9/v1/responses`;
    let a: Loose;
    try {
      a = (await post(url(first.base), { model: "m", instructions: "be brief", input: "hi" })).body;
    } finally {
      await first.gw.close();
    }
    const second = await gateway(engine, { output: { type: "log", dir: logDir } });
    try {
      const got = (await (await fetch(`${second.base}/sessions/r9/v1/responses/${a.id}`)).json()) as Loose;
      assert.equal(got.id, a.id);
      assert.equal(got.output[0].content[0].text, a.output[0].content[0].text);
      const b = await post(url(second.base), {
        model: "m",
        instructions: "be brief",
        input: "more",
        previous_response_id: a.id,
      });
      assert.equal(b.status, 200);
      const requests = logEvents(logDir).filter((e) => e.type === "request");
      assert.deepEqual(requests[1]!.messages, [
        { role: "system", content: "be brief" },
        { role: "user", content: "hi" },
        { role: "assistant", content: a.output[0].content[0].text },
        { role: "user", content: "more" },
      ]);
      // The restored tip makes it the delta form, as before the restart.
      assert.equal(requests[1]!.parent_call_id, requests[0]!.call_id);
    } finally {
      await second.gw.close();
    }
  });

  it("streams in the Responses event order with sequence numbers, ending with response.completed", async () => {
    const { gw, base } = await gateway(engine);
    try {
      const res = await post(`${base}/sessions/r3/v1/responses`, { model: "m", input: "hi", stream: true });
      const evs = sse(res.body as unknown as string);
      const types = evs.map((e) => e.event);
      const deltas = types.filter((t) => t === "response.output_text.delta").length;
      assert.deepEqual(types, [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        ...Array.from({ length: deltas }, () => "response.output_text.delta"),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
      ]);
      assert.deepEqual(
        evs.map((e) => e.data.sequence_number),
        evs.map((_, i) => i),
      );
      const done = evs.at(-1)!.data.response;
      assert.equal(done.status, "completed");
      assert.equal(
        done.output[0].content[0].text,
        evs.find((e) => e.event === "response.output_text.done")!.data.text,
      );
    } finally {
      await gw.close();
    }
  });
});

describe("gateway: names, side calls and hostile bodies", () => {
  let engine: InstantEngine;
  before(async () => {
    engine = await startInstantEngine();
  });
  after(() => engine.close());

  it("records side calls with train: false, by model rule and by header", async () => {
    const { gw, logDir, base } = await gateway(engine, { untrained_models: ["claude-haiku-*"] });
    try {
      const url = `${base}/sessions/side/v1/messages`;
      const call = (model: string, headers: Record<string, string> = {}) =>
        post(url, { model, max_tokens: 8, messages: [{ role: "user", content: model }] }, headers);
      assert.equal((await call("claude-haiku-4-5")).status, 200);
      assert.equal((await call("claude-sonnet-4-5", { "x-trajflow-train": "false" })).status, 200);
      assert.equal((await call("claude-sonnet-4-5")).status, 200);
      const requests = logEvents(logDir).filter((e) => e.type === "request");
      assert.deepEqual(
        requests.map((e) => e.train),
        [false, false, undefined],
      );
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /trajflow_gateway_untrained_calls_total 2\b/);
    } finally {
      await gw.close();
    }
  });

  it("answers hostile bodies in each API's error shape, records nothing, and serves on", async () => {
    const { gw, logDir, base } = await gateway(engine, { max_body_bytes: 4 * 1024 * 1024 });
    try {
      const messages = `${base}/sessions/h1/v1/messages`;
      const responses = `${base}/sessions/h2/v1/responses`;
      const big = JSON.stringify({
        model: "m",
        max_tokens: 8,
        messages: [{ role: "user", content: "x".repeat(10 << 20) }],
      });
      const anthropic: Array<[unknown, number, string]> = [
        ["{not json", 400, "invalid_request_error"],
        [
          { model: "m", max_tokens: 8, messages: [{ role: "user", content: [{ type: "hologram" }] }] },
          400,
          "invalid_request_error",
        ],
        [
          {
            model: "m",
            max_tokens: 8,
            messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t9", content: "x" }] }],
          },
          400,
          "invalid_request_error",
        ],
        [
          {
            model: "m",
            max_tokens: 8,
            tools: [{ type: "web_search_20250305", name: "web_search" }],
            messages: [{ role: "user", content: "x" }],
          },
          400,
          "invalid_request_error",
        ],
        [{ model: "m", messages: [{ role: "user", content: "x" }] }, 400, "invalid_request_error"],
        [big, 413, "request_too_large"],
      ];
      for (const [body, status, type] of anthropic) {
        const res = await post(messages, body);
        assert.equal(res.status, status, JSON.stringify(res.body).slice(0, 200));
        assert.equal(res.body.type, "error");
        assert.equal(res.body.error.type, type);
        assert.equal(typeof res.body.error.message, "string");
      }
      const openai: Array<[unknown, number]> = [
        ["{not json", 400],
        [{ model: "m", input: [{ type: "message", role: "user", content: [{ type: "hologram" }] }] }, 400],
        [{ model: "m", input: [{ type: "function_call_output", call_id: "c9", output: "x" }] }, 400],
        [{ model: "m", input: "x", tools: [{ type: "web_search" }] }, 400],
        [big.replace('"messages"', '"input"'), 413],
      ];
      for (const [body, status] of openai) {
        const res = await post(responses, body);
        assert.equal(res.status, status, JSON.stringify(res.body).slice(0, 200));
        assert.equal(typeof res.body.error.message, "string");
        assert.equal(res.body.error.type, "invalid_request_error");
      }
      assert.deepEqual(logEvents(logDir), []);
      // Serving on: the next call is answered and recorded.
      const ok = await post(responses, { model: "m", input: "hi" });
      assert.equal(ok.status, 200);
      assert.equal(logEvents(logDir).filter((e) => e.type === "response").length, 1);
    } finally {
      await gw.close();
    }
  });

  it("says a prompt past the engine's context in the words each harness acts on", async () => {
    const full = await startInstantEngine({
      fail: {
        trigger: "too long",
        status: 400,
        body: {
          object: "error",
          message:
            "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
          type: "BadRequestError",
          code: 400,
        },
      },
    });
    const { gw, logDir, base } = await gateway(full);
    try {
      const m = await post(`${base}/sessions/o1/v1/messages`, {
        model: "m",
        max_tokens: 8,
        messages: [{ role: "user", content: "too long" }],
      });
      assert.equal(m.status, 400);
      assert.equal(m.body.error.type, "invalid_request_error");
      assert.match(
        m.body.error.message,
        /^prompt is too long: This model's maximum context length is 32768 tokens/,
      );
      const r = await post(`${base}/sessions/o2/v1/responses`, { model: "m", input: "too long" });
      assert.equal(r.status, 400);
      assert.equal(r.body.error.code, "context_length_exceeded");
      assert.deepEqual(logEvents(logDir), []);
    } finally {
      await gw.close();
      await full.close();
    }
  });

  it("refuses a model name past 256 characters, in each API's shape", async () => {
    const { gw, base } = await gateway(engine);
    try {
      const name = "m".repeat(257);
      const m = await post(`${base}/sessions/n1/v1/messages`, {
        model: name,
        max_tokens: 8,
        messages: [{ role: "user", content: "x" }],
      });
      assert.deepEqual([m.status, m.body.error.type], [400, "invalid_request_error"]);
      const r = await post(`${base}/sessions/n2/v1/responses`, { model: name, input: "x" });
      assert.deepEqual([r.status, r.body.error.param], [400, "model"]);
      const c = await post(`${base}/sessions/n3/v1/chat/completions`, {
        model: name,
        messages: [{ role: "user", content: "x" }],
      });
      assert.equal(c.status, 400);
    } finally {
      await gw.close();
    }
  });

  it("drops hosted tools when told to, and counts them", async () => {
    const { gw, base } = await gateway(engine, { hosted_tools: "drop" });
    try {
      const res = await post(`${base}/sessions/d1/v1/responses`, {
        model: "m",
        input: "x",
        tools: [{ type: "web_search" }, { type: "function", name: "f", parameters: { type: "object" } }],
      });
      assert.equal(res.status, 200);
      assert.deepEqual(engine.bodies.at(-1)!.tools, [
        { type: "function", function: { name: "f", parameters: { type: "object" } } },
      ]);
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /trajflow_gateway_hosted_tools_dropped_total\{tool="web_search"\} 1\b/);
    } finally {
      await gw.close();
    }
  });

  it("lists models in each API's shape", async () => {
    const { gw, base } = await gateway(engine);
    try {
      const openai = (await (await fetch(`${base}/v1/models`)).json()) as Loose;
      assert.deepEqual(
        openai.data.map((m: Loose) => m.id),
        ["instant"],
      );
      const anthropic = (await (
        await fetch(`${base}/v1/models`, { headers: { "anthropic-version": "2023-06-01" } })
      ).json()) as Loose;
      assert.deepEqual(anthropic, {
        data: [{ type: "model", id: "instant", display_name: "instant", created_at: "1970-01-01T00:00:00Z" }],
        has_more: false,
        first_id: "instant",
        last_id: "instant",
      });
    } finally {
      await gw.close();
    }
  });
});
