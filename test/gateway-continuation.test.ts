/**
 * Prompt mode tokens end to end: llama.cpp's server with the tiny model behind `trajflow gateway --out
 * --prompt-mode tokens --tool-parser hermes`, and tool-loop agents written with the official SDKs
 * (test/agents/continuation_agents.py: Chat for 8 turns with streamed calls, Messages and Responses for 6,
 * tool calls forced on every other turn; and a chat agent that compacts its history). The same agents run
 * through a gateway in prompt mode engine beside it, for comparison.
 *
 * Checked in mode tokens: each session that keeps its history is exactly one row with no drift; every call
 * after the first continues its branch (prompt_mode continued, the request's messages in the delta form);
 * the engine reports the branch's tokens as cached; every sampled id is trained once with the engine's
 * logprob; the compacting agent's rewritten history is rendered whole and its rows are right too.
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
import { freePort, logEvents, waitUntil, type GatewayRow, type LoggedEvent } from "./helpers/gateway.ts";
import { llamaServer } from "./helpers/llama.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "trajflow-continuation-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

interface AgentCall {
  session: string;
  call_id: string;
  output_tokens: number;
  cached: number | null;
}
const KINDS = ["chat", "messages", "responses", "compact"];

/** `id:logprob` of every sampled token (logprob "?" where the engine gave none), sorted. */
const sampled = (pairs: Array<[number, number]>) =>
  pairs.map(([id, lp]) => `${id}:${Number.isNaN(lp) ? "?" : Math.fround(lp)}`).sort();

interface Outcome {
  calls: AgentCall[];
  events: LoggedEvent[];
  rows: GatewayRow[];
  metrics: string;
}

/** Runs the agents through a gateway in `mode`, rewards and ends their sessions, reads the rows back. */
async function throughGateway(mode: "tokens" | "engine"): Promise<Outcome> {
  const out = join(scratch, mode);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const gw = startCli([
    "gateway",
    "--upstream",
    llamaServer(),
    "--engine",
    "llamacpp",
    "--listen",
    `127.0.0.1:${port}`,
    "--out",
    out,
    "--prompt-mode",
    mode,
    "--tool-parser",
    "hermes",
  ]);
  try {
    await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
    const script = new URL("./agents/continuation_agents.py", import.meta.url).pathname;
    const agent = await run(PYTHON, [script, base, `${mode}-`], { maxBuffer: 16 << 20 });
    const { calls } = JSON.parse(agent.stdout) as { calls: AgentCall[] };
    for (const kind of KINDS) {
      const session = `${mode}-${kind}`;
      for (const [route, body] of [
        ["reward", { value: 1 }],
        ["end", {}],
      ] as const) {
        const answer = await fetch(`${base}/sessions/${session}/${route}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        assert.equal(answer.status, 200, `${route} ${session}`);
      }
    }
    let rows: GatewayRow[] = [];
    await waitUntil(async () => {
      rows = (await readWithPython<{ rows: GatewayRow[] }>("read_output.py", out)).rows;
      return new Set(rows.map((r) => r.session_id)).size === KINDS.length;
    }, 120_000);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    return { calls, events: logEvents(join(out, "_events")), rows, metrics };
  } finally {
    gw.child.kill("SIGTERM");
    await gw.exited;
  }
}

/** Each request's full prompt length, from its own ids or its parent's prompt and output. */
function promptLengths(events: LoggedEvent[]): Map<string, number> {
  const lengths = new Map<string, number>();
  const outputs = new Map<string, number>();
  for (const e of events) {
    const id = e.call_id as string;
    if (e.type === "response") outputs.set(id, (decodeTokenIds(e.output_ids) as Int32Array).length);
    if (e.type !== "request") continue;
    if (e.prompt_ids !== undefined) lengths.set(id, (decodeTokenIds(e.prompt_ids) as Int32Array).length);
    else {
      const parent = e.parent_call_id as string;
      const delta = (decodeTokenIds(e.prompt_delta_ids) as Int32Array).length;
      lengths.set(id, lengths.get(parent)! + outputs.get(parent)! + delta);
    }
  }
  return lengths;
}

/**
 * Trained (mask 1) ids and logprobs of a session's rows against the sampled ids and logprobs of its calls.
 * A row whose output holds a token llama.cpp gave no logprob for (one that ends inside a UTF-8 character,
 * docs/engines.md) has no logprobs at all: its ids are compared alone, and it must say so in its flags.
 */
function assertTrainedOnce(o: Outcome, session: string): { withLogprobs: number } {
  const rows = o.rows.filter((r) => r.session_id === session);
  const idsOnly = rows.some((r) => r.rollout_log_probs === null);
  for (const r of rows) if (r.rollout_log_probs === null) assert.ok(r.flags.includes("missing_logprobs"));
  const trained = rows.flatMap((r) =>
    r.response_ids.flatMap((id, i): Array<[number, number]> =>
      r.response_mask[i] === 1 ? [[id, idsOnly ? Number.NaN : r.rollout_log_probs![i]!]] : [],
    ),
  );
  const byCall = new Map(o.events.filter((e) => e.type === "response").map((e) => [e.call_id as string, e]));
  let missing = 0;
  const expected = o.calls
    .filter((c) => c.session === session)
    .flatMap((c) => {
      const e = byCall.get(c.call_id)!;
      const ids = decodeTokenIds(e.output_ids) as Int32Array;
      const lps = decodeLogprobs(e.logprobs) as Float32Array;
      missing += lps.filter((v) => Number.isNaN(v)).length;
      assert.equal(ids.length, c.output_tokens, `${session} ${c.call_id}: the usage the agent saw`);
      return [...ids].map((id, i): [number, number] => [id, idsOnly ? Number.NaN : lps[i]!]);
    });
  // Rows drop logprobs only where the engine left some out.
  assert.equal(idsOnly, missing > 0, session);
  assert.deepEqual(sampled(trained), sampled(expected), session);
  return { withLogprobs: idsOnly ? 0 : rows.length };
}

const drifts = (metrics: string) =>
  [...metrics.matchAll(/^trajflow_drift_detected_total\{[^}]*\} (\d+)/gm)].reduce(
    (n, m) => n + Number(m[1]),
    0,
  );

it("continues every branch from its sampled tokens: one row per session, no drift, the prefix cached", async (t) => {
  const tokens = await throughGateway("tokens");
  const engine = await throughGateway("engine");
  const requests = tokens.events.filter((e) => e.type === "request");
  const lengths = promptLengths(tokens.events);
  const continued: Array<{ call: string; cached: number; parentPrompt: number }> = [];
  for (const kind of ["chat", "messages", "responses"]) {
    const session = `tokens-${kind}`;
    const mine = tokens.rows.filter((r) => r.session_id === session);
    assert.equal(mine.length, 1, `${session}: one row`);
    assert.deepEqual(
      mine[0]!.flags.filter((f) => f.includes("drift")),
      [],
      session,
    );
    const forms = requests.filter((e) => e.session_id === session).map((e) => e.prompt_mode);
    assert.deepEqual(forms, ["rendered", ...forms.slice(1).map(() => "continued")], session);
    for (const e of requests.filter((r) => r.session_id === session && r.parent_call_id !== undefined)) {
      const call = tokens.calls.find((c) => c.call_id === e.call_id)!;
      const parentPrompt = lengths.get(e.parent_call_id as string)!;
      continued.push({ call: `${session} ${call.call_id}`, cached: call.cached ?? 0, parentPrompt });
      assert.equal(typeof e.messages_offset, "number", "the messages in the delta form too");
      assert.equal(e.tools, undefined, "the parent's tools are not repeated");
    }
  }
  // A continued call's prompt starts with its parent's whole prompt and output, which the engine still has
  // in its slot's cache. The test server is shared with other test files running beside this one (2 slots),
  // which may now and then take the slot: nearly every call, not every one.
  const hits = continued.filter((c) => c.cached >= c.parentPrompt);
  assert.ok(
    hits.length >= 0.9 * continued.length,
    JSON.stringify(continued.filter((c) => !hits.includes(c))),
  );
  t.diagnostic(
    `engine cache: ${hits.length} of ${continued.length} continued calls found their parent's prompt cached`,
  );
  assert.equal(drifts(tokens.metrics), 0);
  // The compacting agent: its rewritten history is rendered whole, the calls after it continue again.
  const compact = requests.filter((e) => e.session_id === "tokens-compact").map((e) => e.prompt_mode);
  assert.deepEqual(compact, ["rendered", "continued", "continued", "continued", "rendered", "continued"]);
  assert.match(tokens.metrics, /trajflow_gateway_prompt_renders_total\{reason="no_branch"\} 1\b/);
  let withLogprobs = 0;
  for (const kind of KINDS) {
    withLogprobs += assertTrainedOnce(tokens, `tokens-${kind}`).withLogprobs;
    assertTrainedOnce(engine, `engine-${kind}`);
  }
  assert.ok(withLogprobs > 0, "the logprobs were compared somewhere, not only the ids");
  const rowsOf = (o: Outcome, mode: string) =>
    KINDS.map((k) => `${k} ${o.rows.filter((r) => r.session_id === `${mode}-${k}`).length}`).join(", ");
  t.diagnostic(`rows per session, tokens: ${rowsOf(tokens, "tokens")}; drift ${drifts(tokens.metrics)}`);
  t.diagnostic(`rows per session, engine: ${rowsOf(engine, "engine")}; drift ${drifts(engine.metrics)}`);
});

it("continues a session's branch after a gateway restart: its conversation is rebuilt from the events", async () => {
  const log = join(scratch, "restart-log");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const start = () =>
    startCli([
      "gateway",
      ...["--upstream", llamaServer(), "--engine", "llamacpp", "--listen", `127.0.0.1:${port}`],
      ...["--event-log", log, "--prompt-mode", "tokens", "--tool-parser", "hermes"],
    ]);
  const messages: unknown[] = [
    { role: "system", content: "You add numbers." },
    { role: "user", content: "Add 1 and 2." },
  ];
  const turn = async (n: number) => {
    const answer = await fetch(`${base}/sessions/restarted/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "tiny",
        messages,
        tools: [{ type: "function", function: { name: "calc", parameters: { type: "object" } } }],
        max_tokens: 6,
        seed: n,
        // A template setting: a branch restored from the events (which do not carry it) still matches.
        chat_template_kwargs: { enable_thinking: false },
      }),
    });
    assert.equal(answer.status, 200);
    const json = (await answer.json()) as { choices: Array<{ message: Record<string, unknown> }> };
    messages.push(json.choices[0]!.message, { role: "user", content: `And ${n}?` });
  };
  for (const round of [0, 1]) {
    const gw = start();
    try {
      await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
      await turn(2 * round);
      await turn(2 * round + 1);
    } finally {
      gw.child.kill("SIGTERM");
      await gw.exited;
    }
  }
  const forms = logEvents(log)
    .filter((e) => e.type === "request")
    .map((e) => e.prompt_mode);
  assert.deepEqual(forms, ["rendered", "continued", "continued", "continued"]);
});
