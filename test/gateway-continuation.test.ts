/**
 * Prompt mode tokens end to end, once per engine (helpers/engines.ts: llama.cpp's server and vLLM's, both with
 * the tiny model) behind `trajflow gateway --out --prompt-mode tokens --tool-parser hermes`, and tool-loop agents written with the official SDKs
 * (test/agents/continuation_agents.py: Chat for 8 turns with streamed calls, Messages and Responses for 6,
 * tool calls forced on every other turn; and a chat agent that compacts its history). The same agents run
 * through a gateway in prompt mode engine beside it, for comparison.
 *
 * Checked in mode tokens: each session that keeps its history is exactly one row with no drift; every call
 * after the first continues its branch (prompt_mode continued, the request's messages in the delta form);
 * the engine reports the branch's tokens as cached; every sampled id is trained once with the engine's
 * logprob; the compacting agent's rewritten history is rendered whole and its rows are right too. The same
 * holds with the rendering done in the gateway from the model's files (--tokenizer-dir), whose ids equal
 * each engine's for the same conversations; and a restarted gateway continues its sessions' branches.
 */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, it } from "node:test";
import { localRenderer } from "../src/gateway/continuation/local-renderer.ts";
import type { PromptRenderer } from "../src/gateway/engines/engine.ts";
import { llamaRenderer } from "../src/gateway/engines/llamacpp-render.ts";
import { vllmRenderer } from "../src/gateway/engines/vllm-render.ts";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import { killRunning, startCli } from "./helpers/cli.ts";
import { freePort, logEvents, waitUntil, type GatewayRow, type LoggedEvent } from "./helpers/gateway.ts";
import { enginesUnderTest, type TestEngine } from "./helpers/engines.ts";
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
/** The tiny model's tokenizer and template as a Hugging Face directory (scripts/tiny_llm.py, scripts/llama.sh). */
const TINY_HF = new URL("../.cache/llama/tiny-hf", import.meta.url).pathname;

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
async function throughGateway(engine: TestEngine, mode: "tokens" | "engine" | "local"): Promise<Outcome> {
  const out = join(scratch, `${engine.name}-${mode}`);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const gw = startCli([
    "gateway",
    ...engine.gatewayArgs(),
    "--listen",
    `127.0.0.1:${port}`,
    "--out",
    out,
    "--prompt-mode",
    mode === "engine" ? "engine" : "tokens",
    "--tool-parser",
    "hermes",
    // local: rendered in the gateway from the model directory scripts/llama.sh writes beside the GGUF.
    ...(mode === "local" ? ["--tokenizer-dir", TINY_HF] : []),
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

/** What prompt mode tokens must give, rendered through the engine's routes or in the gateway. */
function assertContinued(
  engine: TestEngine,
  tokens: Outcome,
  label: "tokens" | "local",
  t: { diagnostic(s: string): void },
): void {
  const requests = tokens.events.filter((e) => e.type === "request");
  const lengths = promptLengths(tokens.events);
  const continued: Array<{ call: string; cached: number; parentPrompt: number }> = [];
  for (const kind of ["chat", "messages", "responses"]) {
    const session = `${label}-${kind}`;
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
  // in its cache: llama.cpp's slot holds every token; vLLM caches whole blocks (128 tokens on CPU), so the
  // last partial block of the parent's prompt may be computed again. The test servers are shared with other
  // test files running beside this one, which may now and then take llama.cpp's slot: nearly every call,
  // not every one.
  const block = engine.name === "vllm" ? 128 : 1;
  const hits = continued.filter((c) => c.cached >= c.parentPrompt - (c.parentPrompt % block));
  assert.ok(
    hits.length >= 0.9 * continued.length,
    JSON.stringify(continued.filter((c) => !hits.includes(c))),
  );
  t.diagnostic(
    `engine cache: ${hits.length} of ${continued.length} continued calls found their parent's prompt cached`,
  );
  assert.equal(drifts(tokens.metrics), 0);
  // The compacting agent: its rewritten history is rendered whole, the calls after it continue again.
  const compact = requests.filter((e) => e.session_id === `${label}-compact`).map((e) => e.prompt_mode);
  assert.deepEqual(compact, ["rendered", "continued", "continued", "continued", "rendered", "continued"]);
  assert.match(tokens.metrics, /trajflow_gateway_prompt_renders_total\{reason="no_branch"\} 1\b/);
  let withLogprobs = 0;
  for (const kind of KINDS) withLogprobs += assertTrainedOnce(tokens, `${label}-${kind}`).withLogprobs;
  assert.ok(withLogprobs > 0, "the logprobs were compared somewhere, not only the ids");
  const rowsOf = KINDS.map(
    (k) => `${k} ${tokens.rows.filter((r) => r.session_id === `${label}-${k}`).length}`,
  );
  t.diagnostic(`rows per session, ${label}: ${rowsOf.join(", ")}; drift ${drifts(tokens.metrics)}`);
}

for (const engine of enginesUnderTest()) {
  it(`continues every branch from its sampled tokens through ${engine.name}: one row per session, no drift, the prefix cached`, async (t) => {
    assertContinued(engine, await throughGateway(engine, "tokens"), "tokens", t);
    const engineMode = await throughGateway(engine, "engine");
    for (const kind of KINDS) assertTrainedOnce(engineMode, `engine-${kind}`);
    const rows = KINDS.map(
      (k) => `${k} ${engineMode.rows.filter((r) => r.session_id === `engine-${k}`).length}`,
    );
    t.diagnostic(`rows per session, engine: ${rows.join(", ")}; drift ${drifts(engineMode.metrics)}`);
  });

  it(`does the same rendering in the gateway from the model directory (--tokenizer-dir) in front of ${engine.name}`, async (t) => {
    assertContinued(engine, await throughGateway(engine, "local"), "local", t);
  });
}

for (const engine of enginesUnderTest())
  it(`continues a session's branch after a gateway restart (${engine.name}): its conversation is rebuilt from the events`, async () => {
    const log = join(scratch, `restart-log-${engine.name}`);
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const start = () =>
      startCli([
        "gateway",
        ...[...engine.gatewayArgs(), "--listen", `127.0.0.1:${port}`],
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

const RENDERERS: Record<TestEngine["name"], PromptRenderer> = { llamacpp: llamaRenderer, vllm: vllmRenderer };

for (const engine of enginesUnderTest())
  it(`renders in the gateway exactly the ids ${engine.name} renders for the same model's files`, async () => {
    const local = localRenderer(TINY_HF);
    const server = engine.url();
    const engineRenderer = RENDERERS[engine.name];
    const upstream = async (path: string, body: unknown) =>
      (
        await fetch(`${server}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny", ...(body as object) }),
        })
      ).json();
    const tools = [
      {
        type: "function",
        function: {
          name: "calc",
          description: "adds two integers",
          parameters: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] },
        },
      },
    ];
    const conversations: Array<Record<string, unknown>> = [
      { messages: [{ role: "user", content: "Add 2 and 3. Crème brûlée, 你好 🙂" }] },
      {
        tools,
        messages: [
          { role: "system", content: "You add numbers." },
          { role: "user", content: "Add 2 and 3." },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c1", type: "function", function: { name: "calc", arguments: '{"a": 2}' } }],
          },
          { role: "tool", tool_call_id: "c1", content: "5" },
          { role: "assistant", content: "It is 5.\n\n  Done." },
          { role: "user", content: "Thanks\t\ttwice" },
        ],
      },
    ];
    for (const body of conversations) {
      const ids = await engineRenderer.renderIds(body, upstream);
      assert.deepEqual([...(await local.renderIds(body, upstream))], [...ids]);
      const text = await engineRenderer.renderText(body, upstream);
      assert.equal(await local.renderText(body, upstream), text);
      assert.deepEqual(
        [...(await local.tokenize(text, upstream))],
        [...(await engineRenderer.tokenize(text, upstream))],
      );
    }
  });
