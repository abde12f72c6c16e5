/**
 * Real agent harnesses through `trajflow gateway --engine <engine> --out`, once in front of llama.cpp's server
 * and once in front of vLLM's (helpers/engines.ts), both with the tiny model, each harness pointed at the
 * gateway by its base URL only:
 * - Claude Code (`claude -p`, npm @anthropic-ai/claude-code, ANTHROPIC_BASE_URL) with its default prompt and
 *   tools;
 * - Codex CLI (`codex exec`, npm @openai/codex, a provider with wire_api = "responses");
 * - the anthropic and openai Python SDKs and the OpenAI Agents SDK (test/agents/harness_agents.py: whole
 *   and streamed calls, forced tool calls and their results, count_tokens, previous_response_id, a side
 *   call on a small model), every answer and event parsed strictly by the SDKs' own types.
 * Each harness gets its answer and exits 0. Then, per session: the rows train exactly the tokens the
 * harness's usage reported, each sampled id once with the engine's logprob, and the side call none.
 * The harnesses come from scripts/harnesses.sh (npm, into .cache/harnesses) and the test's Python
 * environment (PyPI).
 */
import { strict as assert } from "node:assert";
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, it } from "node:test";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import { killRunning, startCli } from "./helpers/cli.ts";
import { freePort, logEvents, waitUntil, type GatewayRow, type LoggedEvent } from "./helpers/gateway.ts";
import { enginesUnderTest } from "./helpers/engines.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "trajflow-harnesses-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

/** The directory of the harnesses' executables (installed once by scripts/harnesses.sh). */
function harnessBin(): string {
  const script = new URL("../scripts/harnesses.sh", import.meta.url).pathname;
  return execFileSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
    .trim()
    .split("\n")
    .pop()!;
}

/** Runs a harness with no input (Codex reads stdin when it is open); resolves with its stdout on exit 0. */
function harness(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code === 0) resolve(stdout);
      else
        reject(
          new Error(
            `${file} ${args.join(" ")} exited ${code ?? signal}:\n${stderr.slice(-4000)}\n${stdout.slice(-2000)}`,
          ),
        );
    });
  });
}

interface SeenCall {
  session: string;
  call_id: string;
  output_tokens: number;
}

/** Claude Code's `-p --output-format json` result: its output tokens over the run. */
async function claudeCode(bin: string, base: string, session: string): Promise<number> {
  const home = join(scratch, `claude-home-${new URL(base).port}`);
  const cwd = join(scratch, `claude-work-${new URL(base).port}`);
  mkdirSync(home, { recursive: true });
  mkdirSync(cwd, { recursive: true });
  const stdout = await harness(join(bin, "claude"), ["-p", "--output-format", "json", "Say hi."], cwd, {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: `${base}/sessions/${session}`,
    ANTHROPIC_API_KEY: "sk-unused",
  });
  const result = JSON.parse(stdout) as { is_error: boolean; usage: { output_tokens: number } };
  assert.equal(result.is_error, false, stdout.slice(0, 2000));
  return result.usage.output_tokens;
}

/** Codex's `exec --json` run: the output tokens its turn reported. */
async function codex(bin: string, base: string, session: string): Promise<number> {
  const home = join(scratch, `codex-home-${new URL(base).port}`);
  const cwd = join(scratch, `codex-work-${new URL(base).port}`);
  mkdirSync(home, { recursive: true });
  mkdirSync(cwd, { recursive: true });
  // The provider is the gateway; web_search, a tool OpenAI hosts, is off (an open model cannot run it).
  writeFileSync(
    join(home, "config.toml"),
    [
      'model = "gpt-5-codex"',
      'model_provider = "trajflow"',
      'web_search = "disabled"',
      "",
      "[model_providers.trajflow]",
      'name = "trajflow"',
      `base_url = "${base}/sessions/${session}/v1"`,
      'wire_api = "responses"',
      'env_key = "TRAJFLOW_GATEWAY_KEY"',
      "",
    ].join("\n"),
  );
  const stdout = await harness(
    join(bin, "codex"),
    ["exec", "--json", "--skip-git-repo-check", "Say hi."],
    cwd,
    {
      PATH: process.env.PATH,
      HOME: home,
      CODEX_HOME: home,
      TRAJFLOW_GATEWAY_KEY: "unused",
    },
  );
  const events = stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as { type: string; usage?: { output_tokens: number } });
  const turns = events.filter((e) => e.type === "turn.completed");
  assert.equal(turns.length, 1, stdout.slice(-2000));
  assert.deepEqual(
    events.filter((e) => e.type === "turn.failed" || e.type === "error"),
    [],
  );
  return turns[0]!.usage!.output_tokens;
}

/** `id:logprob` of sampled tokens ("?" where there is none), sorted. */
const sampled = (pairs: Array<[number, number | null]>) =>
  pairs.map(([id, lp]) => `${id}:${lp === null || Number.isNaN(lp) ? "?" : Math.fround(lp)}`).sort();

function trainedOf(rows: GatewayRow[]): Array<[number, number | null]> {
  return rows.flatMap((r) =>
    r.response_ids.flatMap((id, i): Array<[number, number | null]> =>
      r.response_mask[i] === 1 ? [[id, r.rollout_log_probs === null ? null : r.rollout_log_probs[i]!]] : [],
    ),
  );
}

function sampledOf(responses: LoggedEvent[]): Array<[number, number | null]> {
  return responses.flatMap((e) => {
    const ids = decodeTokenIds(e.output_ids) as Int32Array;
    const lps = e.logprobs === undefined ? null : (decodeLogprobs(e.logprobs) as Float32Array);
    return [...ids].map((id, i): [number, number | null] => [id, lps === null ? null : lps[i]!]);
  });
}

for (const engine of enginesUnderTest()) {
  it(`serves Claude Code, Codex and the Python SDKs through ${engine.name} by base URL alone; their rows train what their usage reported`, async () => {
    const bin = harnessBin();
    const out = join(scratch, `rows-${engine.name}`);
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const gw = startCli([
      "gateway",
      ...[...engine.gatewayArgs(), "--listen", `127.0.0.1:${port}`, "--out", out],
      ...["--untrained-model", "claude-haiku-*"],
    ]);
    try {
      await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
      const agents = await run(
        PYTHON,
        [new URL("./agents/harness_agents.py", import.meta.url).pathname, base],
        {
          maxBuffer: 64 << 20,
        },
      );
      const seen = JSON.parse(agents.stdout) as { calls: SeenCall[]; problems: string[] };
      assert.deepEqual(seen.problems, []);
      // Each harness's usage over its session: the Python agents' per call, Claude Code's and Codex's per run.
      const usage = new Map<string, number>();
      for (const c of seen.calls) usage.set(c.session, (usage.get(c.session) ?? 0) + c.output_tokens);
      usage.set("claude-code", await claudeCode(bin, base, "claude-code"));
      usage.set("codex", await codex(bin, base, "codex"));

      const events = logEvents(join(out, "_events"));
      const sessions = [...new Set(events.map((e) => e.session_id as string))];
      for (const s of sessions) {
        const res = await fetch(`${base}/sessions/${s}/end`, { method: "POST", body: "{}" });
        assert.equal(res.status, 200, s);
      }
      const rows = await waitUntil(async () => {
        const view = await readWithPython<{ rows: GatewayRow[] }>("read_output.py", out);
        return new Set(view.rows.map((r) => r.session_id)).size === sessions.length;
      }, 120_000).then(
        async () => (await readWithPython<{ rows: GatewayRow[] }>("read_output.py", out)).rows,
      );

      const requests = new Map(
        events.filter((e) => e.type === "request").map((e) => [e.call_id as string, e]),
      );
      for (const session of sessions) {
        const mine = rows.filter((r) => r.session_id === session);
        const responses = events.filter((e) => e.type === "response" && e.session_id === session);
        const trainedCalls = responses.filter((e) => requests.get(e.call_id as string)?.train !== false);
        // Every sampled id of the session's trained calls is trained once, with the engine's logprob.
        const withoutLogprobs = mine.some((r) => r.rollout_log_probs === null);
        // vLLM reports a logprob for every sampled token: no row through it may lack them.
        if (engine.name === "vllm")
          assert.equal(withoutLogprobs, false, `${session}: a row without logprobs`);
        const strip = (pairs: Array<[number, number | null]>) =>
          withoutLogprobs ? pairs.map(([id]): [number, null] => [id, null]) : pairs;
        assert.deepEqual(sampled(strip(trainedOf(mine))), sampled(strip(sampledOf(trainedCalls))), session);
        // As many as the harness's usage reported (the side call's tokens are in no row).
        const reported = usage.get(session);
        if (reported !== undefined && trainedCalls.length === responses.length)
          assert.equal(trainedOf(mine).length, reported, `${session}: trained tokens against usage`);
      }
      // The side call was recorded, untrained, and is in no row; the session's main call is.
      const side = events.filter((e) => e.type === "request" && e.session_id === "a-side");
      assert.deepEqual(
        side.map((e) => e.train),
        [false, undefined],
      );
      assert.equal(rows.filter((r) => r.session_id === "a-side").length, 1);
      // The APIs are recorded: Claude Code and the anthropic SDK on Messages, Codex and the rest on Responses.
      const apiOf = (s: string) =>
        new Set(events.filter((e) => e.type === "request" && e.session_id === s).map((e) => e.api));
      assert.deepEqual([...apiOf("claude-code")], ["messages"]);
      assert.deepEqual([...apiOf("codex")], ["responses"]);
      assert.ok(usage.get("claude-code")! > 0 && usage.get("codex")! > 0);
    } finally {
      gw.child.kill("SIGTERM");
      await gw.exited;
    }
  });
}
