/**
 * End to end with a real engine and a real agent, once per engine (helpers/engines.ts): llama.cpp's server
 * (scripts/llama.sh) and vLLM's CPU build (scripts/vllm.sh), each serving the tiny generated model, behind
 * `trajflow gateway --engine <engine> --out`, and the official OpenAI Python client as the agent (test/agents/openai_agent.py: a tool loop, a
 * streamed session, a branch, a retry after an error, two sub-agents in one session, an agent that gives
 * up on a call, one that asks for logprobs). Checked: every sampled id is trained exactly once with the
 * logprob the engine returned, a call records as many sampled tokens as its usage says, the agent gets no
 * logprobs it did not ask for, rewards and versions land as sent. Through vLLM, which reports a logprob for
 * every sampled token, no row may lack them; through llama.cpp, rows of tokens ending inside a UTF-8
 * character are flagged missing_logprobs (docs/engines.md).
 */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, it } from "node:test";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import { killRunning, startCli } from "./helpers/cli.ts";
import { freePort, logEvents, recordedCall, waitUntil, type GatewayRow } from "./helpers/gateway.ts";
import { enginesUnderTest } from "./helpers/engines.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";
import { sseData } from "./helpers/sse.ts";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "trajflow-gateway-engines-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

interface AgentCall {
  session: string;
  call_id: string;
  completion_tokens: number;
  finish_reason: string;
  got_logprobs: boolean;
  asked_logprobs: boolean;
}
type Row = GatewayRow;

const SESSIONS = ["tools", "stream", "branch", "retry", "subagents", "leave", "logprobs"];
const REWARDS: Record<string, number> = {
  tools: 1,
  stream: 0.5,
  branch: 0.25,
  retry: 0,
  subagents: 0.75,
  leave: 0.1,
  logprobs: 0.9,
};

/** `id:logprob` of every sampled token (logprob "?" where the row or the event has none), sorted. */
const sampled = (pairs: Array<[number, number | null]>) =>
  pairs.map(([id, lp]) => `${id}:${lp === null || Number.isNaN(lp) ? "?" : Math.fround(lp)}`).sort();

for (const engine of enginesUnderTest()) {
  it(`records an OpenAI-client agent's sessions through ${engine.name}: every sampled id trained once with its logprob`, async () => {
    const out = join(scratch, `rows-${engine.name}`);
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const gw = startCli(["gateway", ...engine.gatewayArgs(), "--listen", `127.0.0.1:${port}`, "--out", out]);
    try {
      await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
      const agent = await run(PYTHON, [new URL("./agents/openai_agent.py", import.meta.url).pathname, base], {
        maxBuffer: 16 << 20,
      });
      const seen = JSON.parse(agent.stdout) as { calls: AgentCall[]; refused: number; left: number };
      assert.equal(seen.refused, 1, "the engine refused the bad call");
      assert.equal(seen.left, 1, "the agent gave up on one call");
      // The agent got logprobs only where it asked for them.
      assert.deepEqual(
        seen.calls.filter((c) => c.got_logprobs !== c.asked_logprobs),
        [],
      );
      assert.equal(seen.calls.filter((c) => c.asked_logprobs).length, 1);
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /trajflow_gateway_client_disconnects_total 1\b/);

      // Each answered call's events: as many sampled ids as its usage said, its finish reason as the agent saw it.
      const logDir = join(out, "_events");
      const events = logEvents(logDir);
      const responses = new Map(
        events.filter((e) => e.type === "response").map((e) => [e.call_id as string, e]),
      );
      // The call the agent left: a relayed stream (vLLM) had sampled tokens by then, recorded as an `abort`
      // (never `stop`); llama.cpp's stream is the whole answer sent at the end, so the agent left before it.
      const answered = new Set(seen.calls.map((c) => c.call_id));
      const left = [...responses.values()].filter((e) => !answered.has(e.call_id as string));
      assert.deepEqual(
        left.map((e) => [e.session_id, e.finish_reason]),
        engine.name === "vllm" ? [["leave", "abort"]] : [],
        "one response event per answered call, and the left call's only where it streamed",
      );
      for (const c of seen.calls) {
        const r = responses.get(c.call_id)!;
        assert.equal((decodeTokenIds(r.output_ids) as Int32Array).length, c.completion_tokens, c.call_id);
        assert.equal(r.finish_reason, c.finish_reason, c.call_id);
      }
      assert.deepEqual(
        events.filter((e) => e.type === "policy.update").map((e) => e.weight_version),
        [3, 4],
      );

      const rows = await waitUntil(async () => {
        const view = await readWithPython<{ rows: Row[] }>("read_output.py", out);
        return new Set(view.rows.map((r) => r.session_id)).size === SESSIONS.length;
      }, 120_000).then(async () => (await readWithPython<{ rows: Row[] }>("read_output.py", out)).rows);

      for (const session of SESSIONS) {
        const mine = rows.filter((r) => r.session_id === session);
        // Trained tokens across the session's rows (mask 1) are exactly the sampled tokens of its calls: each
        // once, with the engine's logprob (or, where the engine gave none, a row without logprobs).
        const trained = mine.flatMap((r) =>
          r.response_ids.flatMap((id, i): Array<[number, number | null]> =>
            r.response_mask[i] === 1
              ? [[id, r.rollout_log_probs === null ? null : r.rollout_log_probs[i]!]]
              : [],
          ),
        );
        // The left call is not: the agent asked the same prompt again, and the pipeline keeps the call the
        // agent continued from and drops the other as a retry orphan.
        const calls = seen.calls.filter((c) => c.session === session).map((c) => responses.get(c.call_id)!);
        const expected = calls.flatMap((e): Array<[number, number | null]> => {
          const ids = decodeTokenIds(e.output_ids) as Int32Array;
          const lps = e.logprobs === undefined ? null : (decodeLogprobs(e.logprobs) as Float32Array);
          return [...ids].map((id, i) => [id, lps === null ? null : lps[i]!]);
        });
        const rowsWithoutLogprobs = mine.some((r) => r.rollout_log_probs === null);
        const strip = (pairs: Array<[number, number | null]>) =>
          rowsWithoutLogprobs ? pairs.map(([id]): [number, null] => [id, null]) : pairs;
        assert.deepEqual(sampled(strip(trained)), sampled(strip(expected)), session);
        for (const r of mine) {
          assert.equal(r.reward, REWARDS[session], session);
          if (r.rollout_log_probs === null) assert.ok(r.flags.includes("missing_logprobs"), session);
          const version = session === "subagents" || session === "leave" || session === "logprobs" ? 4 : 3;
          assert.equal(r.weight_version_min, version, session);
          assert.equal(r.weight_version_max, version, session);
        }
      }
      // The logprob comparison above ran on real values somewhere, not only on ids.
      const withLogprobs = rows.filter((r) => r.rollout_log_probs !== null).length;
      assert.ok(withLogprobs > 0, "every row lacked logprobs");
      // vLLM gives a logprob for every sampled token, those ending inside a UTF-8 character too.
      if (engine.name === "vllm") {
        assert.equal(withLogprobs, rows.length, "a row through vLLM lacks logprobs");
        assert.deepEqual(
          rows.filter((r) => r.flags.includes("missing_logprobs")).map((r) => r.key),
          [],
        );
      }
      // Two sub-agents and a branch are separate branches: more than one row each.
      assert.ok(rows.filter((r) => r.session_id === "subagents").length >= 3);
      assert.ok(rows.filter((r) => r.session_id === "branch").length >= 2);
    } finally {
      gw.child.kill("SIGTERM");
      await gw.exited;
    }
  });

  it(`gives the agent what it asked for through ${engine.name}, no more and no less, in both prompt modes`, async () => {
    type Json = Record<string, unknown>;
    /** Each mode's answers to the same calls, for comparing their shapes. */
    const shapes = new Map<string, string[]>();
    for (const mode of ["engine", "tokens"] as const) {
      const out = join(scratch, `asked-${engine.name}-${mode}`);
      const port = await freePort();
      const base = `http://127.0.0.1:${port}`;
      const gw = startCli([
        "gateway",
        ...engine.gatewayArgs(),
        ...["--listen", `127.0.0.1:${port}`, "--out", out],
        ...(mode === "tokens" ? ["--prompt-mode", "tokens", "--tool-parser", "hermes"] : []),
      ]);
      try {
        await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
        const call = async (session: string, extra: Json) => {
          const response = await fetch(`${base}/sessions/${mode}-${session}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              model: "tiny",
              messages: [{ role: "user", content: "Hi there, 你好" }],
              max_tokens: 8,
              seed: 9,
              ...extra,
            }),
          });
          assert.equal(response.status, 200, `${mode} ${session}`);
          const callId = response.headers.get("x-trajflow-call-id")!;
          if (extra.stream !== true) return { callId, json: (await response.json()) as Json, chunks: [] };
          const chunks: Json[] = [];
          for await (const data of sseData(response)) chunks.push(data);
          return { callId, json: {} as Json, chunks };
        };
        const recorded = (callId: string) => recordedCall(join(out, "_events"), callId);
        const choice = (json: Json) => (json.choices as Json[])[0]!;
        const entries = (json: Json) => ((choice(json).logprobs as Json).content as Json[]) ?? [];

        // No logprobs asked: none given, nor ids.
        const plain = await call("plain", {});
        assert.equal(choice(plain.json).logprobs ?? null, null, mode);
        assert.equal(plain.json.prompt_token_ids ?? null, null, mode);
        assert.equal(choice(plain.json).token_ids ?? null, null, mode);

        // logprobs without top_logprobs: an entry per sampled token and no alternatives.
        const lp = await call("logprobs", { logprobs: true });
        const lpEntries = entries(lp.json);
        assert.equal(lpEntries.length, recorded(lp.callId).output.length, `${mode}: an entry per token`);
        assert.deepEqual(
          lpEntries.filter((e) => (e.top_logprobs as unknown[]).length !== 0),
          [],
          `${mode}: alternatives nobody asked for`,
        );
        shapes.set(mode, Object.keys(lpEntries[0]!).sort());

        // top_logprobs 2: two alternatives a token.
        const top = await call("top", { logprobs: true, top_logprobs: 2 });
        assert.deepEqual(
          entries(top.json).filter((e) => (e.top_logprobs as unknown[]).length !== 2),
          [],
          `${mode}: two alternatives a token`,
        );

        // return_token_ids, whole and streamed: the prompt's ids and the sampled ones, as recorded.
        const ids = await call("ids", { return_token_ids: true });
        const want = recorded(ids.callId);
        assert.deepEqual(choice(ids.json).token_ids, want.output, `${mode}: token_ids`);
        assert.deepEqual(ids.json.prompt_token_ids, want.prompt, `${mode}: prompt_token_ids`);
        const streamed = await call("ids-stream", { return_token_ids: true, stream: true });
        const wantStreamed = recorded(streamed.callId);
        const streamedIds = streamed.chunks.flatMap((c) =>
          ((c.choices as Json[] | undefined) ?? []).flatMap((ch) => (ch.token_ids as number[] | null) ?? []),
        );
        assert.deepEqual(streamedIds, wantStreamed.output, `${mode}: streamed token_ids`);
        const prompts = streamed.chunks.filter((c) => Array.isArray(c.prompt_token_ids));
        assert.equal(prompts.length, 1, `${mode}: the prompt's ids in one chunk`);
        if (wantStreamed.prompt !== undefined)
          assert.deepEqual(prompts[0]!.prompt_token_ids, wantStreamed.prompt);
      } finally {
        gw.child.kill("SIGTERM");
        await gw.exited;
      }
    }
    // The same fields in a logprob entry whichever mode made the prompt.
    assert.deepEqual(shapes.get("tokens"), shapes.get("engine"));
  });
}
