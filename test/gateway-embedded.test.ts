/**
 * `trajflow gateway --out <dir>`, the embedded mode: the gateway records to its local event log and the
 * pipeline in the same process follows the log and writes rows. Exact rows for hand-made sessions, read
 * back with pyarrow; SIGKILL mid-session and a restart lose and double nothing.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { killRunning, startCli } from "./helpers/cli.ts";
import { freePort, type GatewayRow } from "./helpers/gateway.ts";
import { logprobAt, outputIds, renderPrompt, startInstantEngine } from "./helpers/instant-engine.ts";
import { readWithPython } from "./helpers/python.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-embedded-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

type Row = GatewayRow;
interface View {
  rows: Row[];
}

async function rowsIn(out: string, count: number): Promise<Row[] | undefined> {
  const view = await readWithPython<View>("read_output.py", out);
  return view.rows.length >= count ? view.rows : undefined;
}

const started = (base: string) =>
  waitFor("the gateway", async () => ((await fetch(`${base}/readyz`)).ok ? true : undefined));

async function call(base: string, session: string, messages: Array<{ role: string; content: string }>) {
  const res = await fetch(`${base}/sessions/${session}/v1/chat/completions`, {
    method: "POST",
    headers: { "x-trajflow-uid": "task" },
    body: JSON.stringify({ model: "m", messages }),
  });
  assert.equal(res.status, 200);
  return ((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message
    .content;
}

const post = (url: string, body: unknown) => fetch(url, { method: "POST", body: JSON.stringify(body) });

it("writes the rows of the sessions it serves, and a gateway killed mid-session loses and doubles nothing", async () => {
  const engine = await startInstantEngine();
  const out = join(scratch, "rows");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const args = [
    "gateway",
    "--upstream",
    engine.url,
    "--engine",
    "vllm",
    "--listen",
    `127.0.0.1:${port}`,
    "--out",
    out,
  ];
  let gw = startCli(args);
  try {
    await started(base);
    // s1: two turns, a reward, the end. s2: one turn, begun, then the gateway dies; continued after.
    const h1 = [{ role: "user", content: "add 2 and 2" }];
    const r1 = await call(base, "s1", h1);
    h1.push({ role: "assistant", content: r1 }, { role: "user", content: "and 3?" });
    const r2 = await call(base, "s1", h1);
    await post(`${base}/sessions/s1/reward`, { value: 1 });
    await post(`${base}/sessions/s1/end`, { status: "ok" });
    const h2 = [{ role: "user", content: "hello" }];
    const r3 = await call(base, "s2", h2);
    await waitFor("s1's row", () => rowsIn(out, 1));
    gw.child.kill("SIGKILL");
    await gw.exited;
    gw = startCli(args);
    await started(base);
    h2.push({ role: "assistant", content: r3 }, { role: "user", content: "again" });
    const r4 = await call(base, "s2", h2);
    await post(`${base}/sessions/s2/reward`, { value: 0.25 });
    await post(`${base}/sessions/s2/end`, { status: "ok" });
    const rows = await waitFor("both rows", () => rowsIn(out, 2));
    assert.deepEqual(
      rows.map((r) => r.key),
      ["task_s1_0", "task_s2_0"],
    );
    // Exact rows: the first prompt, then every turn's sampled tokens (mask 1) and the user's (mask 0).
    const expected = (history: Array<{ role: string; content: string }>, replies: string[]) => {
      const prompt = renderPrompt(history.slice(0, 1));
      const response: number[] = [];
      const mask: number[] = [];
      const logprobs: number[] = [];
      for (const [i, reply] of replies.entries()) {
        const out = outputIds(reply);
        response.push(...out);
        mask.push(...out.map(() => 1));
        logprobs.push(...out.map((_, j) => Math.fround(logprobAt(j))));
        if (i + 1 < replies.length) {
          const next = renderPrompt(history.slice(0, 2 * i + 3));
          const delta = next.slice(prompt.length + response.length);
          response.push(...delta);
          mask.push(...delta.map(() => 0));
          logprobs.push(...delta.map(() => 0));
        }
      }
      return { prompt, response, mask, logprobs };
    };
    for (const [row, history, replies, reward] of [
      [rows[0]!, h1, [r1, r2], 1],
      [rows[1]!, h2, [r3, r4], 0.25],
    ] as const) {
      const e = expected(history, [...replies]);
      assert.deepEqual(row.prompt_ids, e.prompt);
      assert.deepEqual(row.response_ids, e.response);
      assert.deepEqual(row.response_mask, e.mask);
      assert.deepEqual(row.rollout_log_probs, e.logprobs);
      assert.equal(row.reward, reward);
    }
  } finally {
    gw.child.kill("SIGTERM");
    await gw.exited;
    await engine.close();
  }
});

it("runs the shipped pipelines/gateway.yaml: the gateway and its pipeline from one file", async () => {
  const engine = await startInstantEngine();
  const out = join(scratch, "from-file");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const pipeline = new URL("../pipelines/gateway.yaml", import.meta.url).pathname;
  const run = startCli(["run", pipeline, "--set", "transforms.assemble.reward_grace_ms=0"], {
    TRAJFLOW_UPSTREAM: engine.url,
    TRAJFLOW_LISTEN: `127.0.0.1:${port}`,
    TRAJFLOW_OUT: out,
  });
  try {
    await started(base);
    const reply = await call(base, "f1", [{ role: "user", content: "from a file" }]);
    await post(`${base}/sessions/f1/end`, { status: "ok" });
    const [row] = await waitFor("the row", () => rowsIn(out, 1));
    assert.equal(row!.key, "task_f1_0");
    assert.deepEqual(row!.response_ids, outputIds(reply));
  } finally {
    run.child.kill("SIGTERM");
    assert.equal(await run.exited, 0, run.stderr());
    await engine.close();
  }
});

it("refuses a reward for a session its pipeline has written: 409 session_written, nothing recorded", async () => {
  const engine = await startInstantEngine();
  const out = join(scratch, "late");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  // The reward before the end is the one awaited (the default): the session is final at its end.
  const gw = startCli([
    ...["gateway", "--upstream", engine.url, "--engine", "vllm", "--listen", `127.0.0.1:${port}`],
    ...["--out", out, "--file-age-ms", "50"],
  ]);
  try {
    await started(base);
    await call(base, "t1", [{ role: "user", content: "hi" }]);
    assert.equal((await post(`${base}/sessions/t1/reward`, { value: 1 })).status, 200);
    assert.equal((await post(`${base}/sessions/t1/end`, { status: "ok" })).status, 200);
    const [row] = await waitFor("t1's row", () => rowsIn(out, 1));
    assert.equal(row!.reward, 1);
    const late = await post(`${base}/sessions/t1/reward`, { value: 0.5 });
    assert.equal(late.status, 409);
    const body = (await late.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "session_written");
    assert.match(body.error.message, /session t1 was finalized by the pipeline/);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    assert.match(metrics, /trajflow_gateway_rewards_refused_total\{reason="session_written"\} 1/);
  } finally {
    gw.child.kill("SIGTERM");
    await gw.exited;
    await engine.close();
  }
  // Nothing was recorded for the refused reward: no LATE_EVENT dead letter, the row as it was.
  const rows = (await readWithPython<View>("read_output.py", out)).rows;
  assert.deepEqual(
    rows.map((r) => [r.key, r.reward]),
    [["task_t1_0", 1]],
  );
  const letters = (readdirSync(out, { recursive: true }) as string[]).filter((f) => /dead-letters-/.test(f));
  assert.deepEqual(letters, []);
});
