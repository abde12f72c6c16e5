/**
 * The gateway's own behaviour, in front of an upstream that answers at once in vLLM's shapes
 * (helpers/instant-engine.ts): sessions in each convention, the events it writes (exactly), streaming,
 * a client that leaves mid-stream, bad input and limits, upstream errors, a restart, several upstreams.
 * The end-to-end tests against a real engine (llama.cpp) and the official OpenAI client are in
 * gateway-engines.test.ts.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../src/core/logger.ts";
import { gatewayConfigSchema, type GatewayConfigInput } from "../src/gateway/config.ts";
import { startGateway } from "../src/gateway/gateway.ts";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import {
  logprobAt,
  outputIds,
  renderPrompt,
  startInstantEngine,
  type InstantEngine,
} from "./helpers/instant-engine.ts";
import { runCli } from "./helpers/cli.ts";
import { logEvents, waitUntil } from "./helpers/gateway.ts";

const logger = createLogger({ level: "silent" });
const scratch = mkdtempSync(join(tmpdir(), "trajflow-gateway-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

let n = 0;
async function gateway(
  engine: InstantEngine | string[],
  extra: Partial<GatewayConfigInput> = {},
  dir?: string,
) {
  const logDir = dir ?? join(scratch, `log-${++n}`);
  const config = gatewayConfigSchema.parse({
    listen: "127.0.0.1:0",
    upstreams: Array.isArray(engine) ? engine : [engine.url],
    engine: "vllm",
    output: { type: "log", dir: logDir },
    ...extra,
  });
  const gw = await startGateway(config, logger);
  return { gw, logDir, base: `http://${gw.address}` };
}

const events = logEvents;
const ids = (v: unknown) => [...(decodeTokenIds(v) as Int32Array)];
const lps = (v: unknown) => [...(decodeLogprobs(v) as Float32Array)];

async function chat(
  url: string,
  messages: unknown[],
  init: { headers?: Record<string, string>; extra?: object } = {},
) {
  const res = await fetch(`${url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...init.headers },
    body: JSON.stringify({ model: "m", messages, ...init.extra }),
  });
  // The answers' shapes are what the test asserts; reading them loosely keeps the assertions short.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
}

describe("gateway in front of an engine that answers at once", () => {
  let engine: InstantEngine;
  before(async () => {
    engine = await startInstantEngine();
  });
  after(() => engine.close());

  it("records a multi-turn session exactly: start, full then delta prompts, ids, logprobs, finish reasons", async () => {
    const { gw, logDir, base } = await gateway(engine);
    try {
      const url = `${base}/sessions/s1/v1`;
      const history: Array<{ role: string; content: string }> = [{ role: "user", content: "hi" }];
      const a = await chat(url, history, { headers: { "x-trajflow-uid": "task-7" } });
      assert.equal(a.status, 200);
      const reply1 = a.body.choices[0].message.content as string;
      // The agent asked for neither ids nor logprobs: it gets vLLM's answer without them.
      assert.equal(a.body.prompt_token_ids, null);
      assert.equal(a.body.choices[0].token_ids, null);
      assert.equal(a.body.choices[0].logprobs, null);
      const call1 = a.headers.get("x-trajflow-call-id")!;
      history.push({ role: "assistant", content: reply1 }, { role: "user", content: "more" });
      const b = await chat(url, history);
      const call2 = b.headers.get("x-trajflow-call-id")!;
      const evs = events(logDir);
      assert.deepEqual(
        evs.map((e) => [e.type, e.seq, e.uid, e.session_id]),
        [
          ["session.start", 0, "task-7", "s1"],
          ["request", 1, "task-7", "s1"],
          ["response", 2, "task-7", "s1"],
          ["request", 3, "task-7", "s1"],
          ["response", 4, "task-7", "s1"],
        ],
      );
      const prompt1 = renderPrompt([{ role: "user", content: "hi" }]);
      const out1 = outputIds(reply1);
      assert.equal(evs[1]!.call_id, call1);
      assert.deepEqual(ids(evs[1]!.prompt_ids), prompt1);
      assert.deepEqual(evs[1]!.messages, [{ role: "user", content: "hi" }]);
      assert.deepEqual(ids(evs[2]!.output_ids), out1);
      assert.deepEqual(
        lps(evs[2]!.logprobs),
        out1.map((_, i) => Math.fround(logprobAt(i))),
      );
      assert.equal(evs[2]!.finish_reason, "stop");
      // The second prompt extends the first call's prompt + output: the delta form, against call 1.
      const prompt2 = renderPrompt(history);
      assert.equal(evs[3]!.call_id, call2);
      assert.equal(evs[3]!.parent_call_id, call1);
      assert.equal(evs[3]!.prompt_ids, undefined);
      assert.deepEqual(ids(evs[3]!.prompt_delta_ids), prompt2.slice(prompt1.length + out1.length));
      const state = await (await fetch(`${base}/sessions/s1`)).json();
      assert.deepEqual(state, {
        session_id: "s1",
        uid: "task-7",
        state: "open",
        calls: 2,
        failed_calls: 0,
        sampled_tokens: out1.length + outputIds(b.body.choices[0].message.content).length,
        in_flight: 0,
      });
    } finally {
      await gw.close();
    }
  });

  it("starts sessions by POST /sessions (the key selects them), records rewards and ends, and turns the log into rows", async () => {
    const { gw, logDir, base } = await gateway(engine, { implicit_sessions: false });
    try {
      const created = await fetch(`${base}/sessions`, {
        method: "POST",
        body: JSON.stringify({
          uid: "math-1",
          session_id: "r0",
          sample_index: 0,
          group_size: 1,
          metadata: { answer: "4" },
        }),
      });
      assert.equal(created.status, 201);
      const s = (await created.json()) as { session_id: string; base_url: string; api_key: string };
      assert.equal(s.session_id, "r0");
      assert.equal(s.base_url, `${base}/sessions/r0/v1`);
      // An unknown session is refused when sessions must be started first.
      assert.equal((await chat(`${base}/sessions/nope/v1`, [{ role: "user", content: "x" }])).status, 404);
      // The per-session key on the plain routes.
      const a = await chat(`${base}/v1`, [{ role: "user", content: "2+2?" }], {
        headers: { authorization: `Bearer ${s.api_key}` },
      });
      assert.equal(a.status, 200);
      const callId = a.headers.get("x-trajflow-call-id")!;
      const turn = await fetch(`${base}/sessions/r0/reward`, {
        method: "POST",
        body: JSON.stringify({ value: 0.5, target: callId, key: "k1" }),
      });
      assert.equal(turn.status, 200);
      await fetch(`${base}/sessions/r0/reward`, { method: "POST", body: JSON.stringify({ value: 1 }) });
      const ended = await fetch(`${base}/sessions/r0/end`, {
        method: "POST",
        body: JSON.stringify({ status: "ok" }),
      });
      assert.equal(((await ended.json()) as { state: string }).state, "ended");
      assert.equal((await chat(`${base}/sessions/r0/v1`, [{ role: "user", content: "x" }])).status, 409);
      const evs = events(logDir);
      assert.deepEqual(
        evs.map((e) => [e.type, e.seq]),
        [
          ["session.start", 0],
          ["request", 1],
          ["response", 2],
          ["reward", 3],
          ["reward", 4],
          ["session.end", 5],
        ],
      );
      assert.deepEqual(evs[0], { ...evs[0], sample_index: 0, group_size: 1, metadata: { answer: "4" } });
      assert.deepEqual([evs[3]!.value, evs[3]!.target, evs[3]!.key], [0.5, callId, "k1"]);
      assert.equal(evs[5]!.status, "ok");
      // The log is what replay reads: one row, the sampled tokens masked 1 with the engine's logprobs.
      const out = join(scratch, `rows-${n}`);
      const run = await runCli(["replay", join(logDir, readdirSync(logDir)[0]!), "--out", out, "--json"]);
      assert.equal(run.code, 0, run.stderr);
      const report = JSON.parse(run.stdout) as { metrics: Record<string, unknown> };
      assert.equal(report.metrics.rows_written as number, 1);
    } finally {
      await gw.close();
    }
  });

  it("selects a session by X-Session-Id and answers bad input in OpenAI's error shape", async () => {
    const { gw, base } = await gateway(engine, { max_body_bytes: 2048 });
    try {
      const ok = await chat(`${base}/v1`, [{ role: "user", content: "a" }], {
        headers: { "x-session-id": "h1", "x-trajflow-uid": "u9" },
      });
      assert.equal(ok.status, 200);
      assert.equal(ok.headers.get("x-trajflow-session-id"), "h1");
      const post = (body: string, headers: Record<string, string> = {}) =>
        fetch(`${base}/sessions/h1/v1/chat/completions`, { method: "POST", headers, body });
      const bad = await post("{not json");
      assert.equal(bad.status, 400);
      assert.equal(((await bad.json()) as { error: { code: string } }).error.code, "invalid_json");
      const noMessages = await post(JSON.stringify({ model: "m" }));
      assert.equal(noMessages.status, 400);
      assert.match(((await noMessages.json()) as { error: { message: string } }).error.message, /messages/);
      const big = await post(JSON.stringify({ messages: [{ role: "user", content: "x".repeat(5000) }] }));
      assert.equal(big.status, 413);
      const none = await chat(`${base}/v1`, [{ role: "user", content: "a" }]);
      assert.equal(none.status, 400);
      assert.equal(none.body.error.code, "no_session");
      const state = (await (await fetch(`${base}/sessions/h1`)).json()) as Record<string, unknown>;
      assert.equal(state.uid, "u9");
      assert.equal(state.calls, 1);
    } finally {
      await gw.close();
    }
  });

  it("records a token the engine gave no logprob for as missing (NaN), never a number, and its row says so", async () => {
    const gaps = await startInstantEngine({ missingLogprobs: [1] });
    const { gw, logDir, base } = await gateway(gaps);
    try {
      const r = await chat(`${base}/sessions/m1/v1`, [{ role: "user", content: "x" }]);
      assert.equal(r.status, 200);
      await fetch(`${base}/sessions/m1/end`, { method: "POST", body: "{}" });
      const response = events(logDir).find((e) => e.type === "response")!;
      const recorded = lps(response.logprobs);
      assert.equal(recorded.length, ids(response.output_ids).length);
      assert.ok(Number.isNaN(recorded[1]));
      assert.deepEqual(
        recorded.filter((_, i) => i !== 1),
        recorded.map((_, i) => Math.fround(logprobAt(i))).filter((_, i) => i !== 1),
      );
      assert.equal(gw.server.metrics.get("gateway_missing_logprobs"), 1);
      const out = join(scratch, `rows-missing-${n}`);
      const run = await runCli([
        "replay",
        join(logDir, readdirSync(logDir)[0]!),
        "--out",
        out,
        "--reward-grace-ms",
        "0",
      ]);
      assert.equal(run.code, 0, run.stderr);
      const inspect = await runCli(["inspect", out]);
      assert.match(inspect.stdout, /missing_logprobs/);
    } finally {
      await gw.close();
      await gaps.close();
    }
  });

  it("passes an engine's error to the agent and records nothing for it", async () => {
    const failing = await startInstantEngine({
      fail: { trigger: "boom", status: 400, body: { error: { message: "bad things", code: 400 } } },
    });
    const { gw, logDir, base } = await gateway(failing);
    try {
      const r = await chat(`${base}/sessions/e1/v1`, [{ role: "user", content: "boom" }]);
      assert.equal(r.status, 400);
      assert.deepEqual(r.body, { error: { message: "bad things", code: 400 } });
      const state = (await (await fetch(`${base}/sessions/e1`)).json()) as Record<string, unknown>;
      assert.deepEqual([state.calls, state.failed_calls], [0, 1]);
      assert.deepEqual(events(logDir), []);
    } finally {
      await gw.close();
      await failing.close();
    }
  });
});

/** Reads an SSE answer's data lines (the JSON chunks and the final [DONE]). */
async function streamed(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6));
}

describe("gateway: streaming, disconnects, restarts and upstreams", () => {
  it("relays a stream chunk by chunk and records it; the agent's own logprobs request is kept", async () => {
    const engine = await startInstantEngine({ reply: () => "héllo" });
    const { gw, logDir, base } = await gateway(engine);
    try {
      const res = await fetch(`${base}/sessions/st/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], stream: true, logprobs: true }),
      });
      assert.equal(res.headers.get("content-type"), "text/event-stream");
      const data = await streamed(res);
      assert.equal(data.at(-1), "[DONE]");
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, any>); // eslint-disable-line @typescript-eslint/no-explicit-any
      const out = outputIds("héllo");
      // The first chunk (role) and one per token; ids hidden (not asked), logprobs kept (asked).
      assert.equal(chunks.length, 1 + out.length);
      assert.ok(chunks.every((c) => c.prompt_token_ids === null || c.prompt_token_ids === undefined));
      assert.deepEqual(
        chunks.slice(1).map((c) => c.choices[0].logprobs.content[0].logprob),
        out.map((_, i) => logprobAt(i)),
      );
      assert.equal(chunks.at(-1)!.choices[0].finish_reason, "stop");
      const evs = events(logDir);
      assert.deepEqual(
        evs.map((e) => e.type),
        ["session.start", "request", "response"],
      );
      assert.deepEqual(ids(evs[2]!.output_ids), out);
      assert.equal(evs[2]!.finish_reason, "stop");
      assert.deepEqual(ids(evs[1]!.prompt_ids), renderPrompt([{ role: "user", content: "hi" }]));
    } finally {
      await gw.close();
      await engine.close();
    }
  });

  it("records a stream the agent leaves early as abort with the tokens sampled so far, and cancels the upstream", async () => {
    const engine = await startInstantEngine({
      reply: () => "a long answer that takes a while",
      tokenDelayMs: 15,
    });
    const { gw, logDir, base } = await gateway(engine);
    try {
      const controller = new AbortController();
      const res = await fetch(`${base}/sessions/dc/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ messages: [{ role: "user", content: "go" }], stream: true }),
        signal: controller.signal,
      });
      const reader = res.body!.getReader();
      let seen = "";
      while ((seen.match(/data: /g) ?? []).length < 4)
        seen += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
      await waitUntil(() => events(logDir).some((e) => e.type === "response"));
      const response = events(logDir).find((e) => e.type === "response")!;
      assert.equal(response.finish_reason, "abort");
      const got = ids(response.output_ids);
      const full = outputIds("a long answer that takes a while");
      assert.ok(got.length >= 3 && got.length < full.length, `${got.length} tokens recorded`);
      assert.deepEqual(got, full.slice(0, got.length));
      assert.equal(lps(response.logprobs).length, got.length);
      await waitUntil(() => engine.cancelled === 1);
      assert.equal(gw.server.metrics.get("gateway_client_disconnects"), 1);
    } finally {
      await gw.close();
      await engine.close();
    }
  });

  it("continues a session after a restart: seq goes on and the next prompt is a delta of the restored tip", async () => {
    const engine = await startInstantEngine();
    const dir = join(scratch, "restart");
    const history = [{ role: "user", content: "one" }];
    let first = await gateway(engine, {}, dir);
    const a = await chat(`${first.base}/sessions/rs/v1`, history);
    const call1 = a.headers.get("x-trajflow-call-id")!;
    await first.gw.close();
    first = await gateway(engine, {}, dir);
    try {
      assert.equal(first.gw.restoredEvents, 3);
      history.push(
        { role: "assistant", content: a.body.choices[0].message.content },
        { role: "user", content: "two" },
      );
      const b = await chat(`${first.base}/sessions/rs/v1`, history);
      assert.equal(b.status, 200);
      assert.notEqual(b.headers.get("x-trajflow-call-id"), call1);
      const evs = events(dir);
      assert.deepEqual(
        evs.map((e) => [e.type, e.seq]),
        [
          ["session.start", 0],
          ["request", 1],
          ["response", 2],
          ["request", 3],
          ["response", 4],
        ],
      );
      assert.equal(evs[3]!.parent_call_id, call1);
    } finally {
      await first.gw.close();
      await engine.close();
    }
  });

  it("sends a session to one upstream, a new session to the least loaded, and past one that refuses connections", async () => {
    const e1 = await startInstantEngine();
    const e2 = await startInstantEngine();
    const dead = "http://127.0.0.1:1"; // nothing listens on port 1
    const { gw, base } = await gateway([dead, e1.url, e2.url]);
    try {
      for (let i = 0; i < 3; i++)
        assert.equal(
          (await chat(`${base}/sessions/sticky/v1`, [{ role: "user", content: `q${i}` }])).status,
          200,
        );
      // The dead upstream refused before any byte: the first call went on to another, and the session stayed there.
      assert.equal(e1.calls + e2.calls, 3);
      assert.ok(e1.calls === 3 || e2.calls === 3, `${e1.calls} and ${e2.calls}`);
      assert.equal(gw.server.metrics.get("gateway_upstream_retries"), 1);
      assert.equal(gw.server.pool.upstreams[0]!.healthy, false);
    } finally {
      await gw.close();
      await e1.close();
      await e2.close();
    }
  });

  // Regression: a session forgotten for idleness started over at seq 0 on its next call (duplicate seqs
  // the pipeline rejects); and after a restart it came back to life.
  it("answers 409 session_expired for a session forgotten for idleness, also after a restart", async () => {
    const engine = await startInstantEngine();
    const dir = join(scratch, "expired");
    let g = await gateway(engine, { session_idle_ms: 1 }, dir);
    try {
      assert.equal((await chat(`${g.base}/sessions/old/v1`, [{ role: "user", content: "a" }])).status, 200);
      const last = Date.now();
      await waitUntil(() => Date.now() > last + 5);
      // A new session's arrival applies the bounds.
      assert.equal((await chat(`${g.base}/sessions/new/v1`, [{ role: "user", content: "b" }])).status, 200);
      const late = await chat(`${g.base}/sessions/old/v1`, [{ role: "user", content: "a" }]);
      assert.equal(late.status, 409);
      assert.equal(late.body.error.code, "session_expired");
      const again = await fetch(`${g.base}/sessions`, {
        method: "POST",
        body: JSON.stringify({ session_id: "old" }),
      });
      assert.equal(again.status, 409);
      await g.gw.close();
      g = await gateway(engine, { session_idle_ms: 1 }, dir);
      assert.equal((await chat(`${g.base}/sessions/old/v1`, [{ role: "user", content: "a" }])).status, 409);
      assert.deepEqual(
        events(dir)
          .filter((e) => e.session_id === "old")
          .map((e) => e.seq),
        [0, 1, 2],
      );
    } finally {
      await g.gw.close();
      await engine.close();
    }
  });

  it("refuses calls past the in-flight limit of a session with 429 and Retry-After", async () => {
    // The first call's answer is held until the second has been refused: it is in flight, whatever the clock.
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    const engine = await startInstantEngine({ hold: (call) => (call === 1 ? held : undefined) });
    const { gw, base } = await gateway(engine, { max_in_flight_per_session: 1 });
    try {
      const body = JSON.stringify({ messages: [{ role: "user", content: "slow" }], stream: true });
      const slow = fetch(`${base}/sessions/lim/v1/chat/completions`, { method: "POST", body });
      await waitUntil(() => engine.calls === 1);
      const refused = await fetch(`${base}/sessions/lim/v1/chat/completions`, { method: "POST", body });
      assert.equal(refused.status, 429);
      assert.equal(refused.headers.get("retry-after"), "1");
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "too_many_calls");
      release();
      assert.equal((await slow).status, 200);
      await (await slow).text();
      // Once the first call is answered, the session takes the next.
      const next = await fetch(`${base}/sessions/lim/v1/chat/completions`, { method: "POST", body });
      assert.equal(next.status, 200);
      await next.text();
    } finally {
      release();
      await gw.close();
      await engine.close();
    }
  });
});

/** The problems a refused start lists, one a line after the first, sorted. */
function problems(stderr: string): string[] {
  return stderr
    .trim()
    .split("\n")
    .slice(1)
    .map((l) => l.trim())
    .sort();
}

it("lists every problem of `trajflow gateway`'s flags at once: the gateway's, the engine's and the embedded pipeline's", async () => {
  const r = await runCli([
    "gateway",
    ...["--upstream", "ftp://engine", "--out", join(scratch, "never"), "--engine", "llamacpp"],
    ...["--engine-option", "streams=bogus", "--max-sessions", "many", "--drift-policy", "nah"],
  ]);
  assert.equal(r.code, 2);
  assert.deepEqual(problems(r.stderr), [
    '--max-sessions must be an integer, got "many"',
    'gateway options: transforms.assemble.drift_policy: Invalid option: expected one of "fork"|"realign"',
    'gateway.engine_options.streams: Invalid option: expected one of "whole"|"relay"',
    "gateway.upstreams.0: an upstream is an http:// or https:// URL",
  ]);
});

it("refuses prompt mode tokens without a tool parser, listing it with the other problems", async () => {
  const r = await runCli([
    "gateway",
    ...["--upstream", "http://engine", "--out", join(scratch, "never"), "--engine", "sglang"],
    ...["--prompt-mode", "tokens", "--max-sessions", "many"],
  ]);
  assert.equal(r.code, 2);
  assert.deepEqual(problems(r.stderr), [
    '--max-sessions must be an integer, got "many"',
    "gateway.tool_parser: prompt_mode tokens reads tool calls from the sampled text: set tool_parser to the model family's format (none, hermes, qwen3_coder, llama3_json, mistral, openai)",
  ]);
});

it("refuses a tokenizer directory without its files, or without prompt mode tokens", async () => {
  const dir = join(scratch, "no-model");
  const r = await runCli([
    "gateway",
    ...["--upstream", "http://engine", "--out", join(scratch, "never"), "--engine", "llamacpp"],
    ...["--tokenizer-dir", dir],
  ]);
  assert.equal(r.code, 2);
  assert.deepEqual(problems(r.stderr), [
    `gateway.tokenizer_dir: ${join(dir, "tokenizer.json")} does not exist (a model directory has tokenizer.json and tokenizer_config.json)`,
    `gateway.tokenizer_dir: ${join(dir, "tokenizer_config.json")} does not exist (a model directory has tokenizer.json and tokenizer_config.json)`,
    "gateway.tokenizer_dir: tokenizer_dir renders prompts for prompt_mode tokens: set prompt_mode tokens, or leave it out",
  ]);
});
