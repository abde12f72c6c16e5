/**
 * End to end with a real engine and a real agent: llama.cpp's server (scripts/llama.sh: built from the
 * llama-cpp-python sdist, serving the tiny generated model) behind `trajflow gateway --engine llamacpp
 * --out`, and the official OpenAI Python client as the agent (test/agents/openai_agent.py: a tool loop, a
 * streamed session, a branch, a retry after an error, two sub-agents in one session, an agent that gives
 * up on a call, one that asks for logprobs). Checked: every sampled id is trained exactly once with the
 * logprob the engine returned, a call records as many sampled tokens as its usage says, the agent gets no
 * logprobs it did not ask for, rewards and versions land as sent.
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
import { freePort, logEvents, waitUntil, type GatewayRow } from "./helpers/gateway.ts";
import { llamaServer } from "./helpers/llama.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "trajflow-gateway-llamacpp-"));
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

it("records an OpenAI-client agent's sessions through llama.cpp: every sampled id trained once with its logprob", async () => {
  const engine = llamaServer();
  const out = join(scratch, "rows");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const gw = startCli([
    "gateway",
    "--upstream",
    engine,
    "--engine",
    "llamacpp",
    "--listen",
    `127.0.0.1:${port}`,
    "--out",
    out,
  ]);
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
    assert.equal(
      responses.size,
      seen.calls.length,
      "one response event per answered call, none for the others",
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
    // Two sub-agents and a branch are separate branches: more than one row each.
    assert.ok(rows.filter((r) => r.session_id === "subagents").length >= 3);
    assert.ok(rows.filter((r) => r.session_id === "branch").length >= 2);
  } finally {
    gw.child.kill("SIGTERM");
    await gw.exited;
  }
});
