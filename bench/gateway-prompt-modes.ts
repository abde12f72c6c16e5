/**
 * Prompt mode tokens against prompt mode engine (issue 44), in front of llama.cpp's server with the tiny
 * model: the same multi-turn sessions (a system prompt, a tool, 50 turns each, the history resent every turn)
 * through `trajflow gateway --prompt-mode engine`, `--prompt-mode tokens` (rendered through llama.cpp's
 * routes) and `--prompt-mode tokens --tokenizer-dir` (rendered in the gateway from the model's files: "local"),
 * one after the other, one call at a time. Measured per mode:
 * - the gateway's added latency (gateway_added_seconds: everything but the engine's own time and the event
 *   log's acknowledgement). In engine mode that includes rendering and tokenizing the whole conversation
 *   (llama.cpp /apply-template + /tokenize, for the prompt ids); in tokens mode rendering the new messages
 *   alone (a stand-in conversation) and tokenizing them, through two round trips or in-process;
 * - the client's latency per call, and the engine's cached prompt tokens (usage.prompt_tokens_details);
 * - the bytes of a call's events (request + response lines in the event log) at turns 1, 10 and 50.
 *
 * Run alone: `node bench/gateway-prompt-modes.ts [--json file]` (LLAMA_SERVER, or scripts/llama.sh's server);
 * `npm run bench:gateway` runs it after its own phases. BENCH_PROMPT_MODES_SESSIONS (default 4).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = new URL("..", import.meta.url).pathname;
const TURNS = 50;
const SESSIONS = Number(process.env.BENCH_PROMPT_MODES_SESSIONS ?? 4);
const TOOLS = [
  {
    type: "function",
    function: {
      name: "calc",
      description: "adds two integers",
      parameters: {
        type: "object",
        properties: { a: { type: "integer" }, b: { type: "integer" } },
        required: ["a", "b"],
      },
    },
  },
];

export interface ModeResult {
  mode: string;
  calls: number;
  addedP50: number;
  addedP90: number;
  clientP50: number;
  clientP90: number;
  /** Prompt tokens the engine reported cached, over all prompt tokens. */
  cachedShare: number;
  /** Event bytes (request + response) of the call at turn 1, 10, 50, averaged over the sessions. */
  eventBytes: Record<number, number>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** The tiny model's Hugging Face directory (scripts/llama.sh writes it beside the GGUF). */
const TINY_HF = join(ROOT, ".cache/llama/tiny-hf");

/** engine, tokens (rendered through the engine's routes), or local (tokens, rendered in the gateway). */
function startGateway(upstream: string, mode: string, log: string, port: number): ChildProcess {
  return spawn(
    process.execPath,
    [
      join(ROOT, "bin/trajflow.js"),
      "gateway",
      "--upstream",
      upstream,
      "--engine",
      "llamacpp",
      "--listen",
      `127.0.0.1:${port}`,
      "--event-log",
      log,
      "--prompt-mode",
      mode === "engine" ? "engine" : "tokens",
      "--tool-parser",
      "hermes",
      ...(mode === "local" ? ["--tokenizer-dir", TINY_HF] : []),
    ],
    { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, TRAJFLOW_LOG_LEVEL: "warn" } },
  );
}

async function until(ok: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await ok()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > end) throw new Error("the gateway did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The per-call gateway_added_seconds observations' quantile, from the histogram's buckets (ms). */
function addedQuantile(metrics: string, q: number): number {
  const buckets: Array<[number, number]> = [];
  for (const m of metrics.matchAll(/^trajflow_gateway_added_seconds_bucket\{le="([^"]+)"\} (\d+)/gm))
    buckets.push([m[1] === "+Inf" ? Infinity : Number(m[1]), Number(m[2])]);
  const total = buckets.at(-1)?.[1] ?? 0;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === Infinity) return prevBound * 1000;
      return (prevBound + ((bound - prevBound) * (rank - prevCount)) / Math.max(1, count - prevCount)) * 1000;
    }
    prevBound = bound;
    prevCount = count;
  }
  return NaN;
}

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]!;

async function oneMode(upstream: string, mode: string, scratch: string): Promise<ModeResult> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const log = join(scratch, mode);
  const gateway = startGateway(upstream, mode, log, port);
  try {
    await until(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
    const client: number[] = [];
    let cached = 0;
    let prompt = 0;
    const callAt = new Map<string, number>();
    for (let s = 0; s < SESSIONS; s++) {
      const session = `${mode}-${s}`;
      const messages: unknown[] = [
        { role: "system", content: "You add numbers with the calc tool and say the sum." },
        { role: "user", content: "Add 2 and 3." },
      ];
      for (let turn = 1; turn <= TURNS; turn++) {
        const began = performance.now();
        const answer = await fetch(`${base}/sessions/${session}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: "tiny",
            messages,
            tools: TOOLS,
            max_tokens: 8,
            seed: turn,
            // Plain, short answers: the bench measures prompts, not sampling.
            logit_bias: { "456": -100, "457": -100, "460": 2 },
          }),
        });
        const json = (await answer.json()) as {
          choices: Array<{ message: Record<string, unknown> }>;
          usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
        };
        if (!answer.ok) throw new Error(`${mode}: ${JSON.stringify(json)}`);
        client.push(performance.now() - began);
        callAt.set(answer.headers.get("x-trajflow-call-id")!, turn);
        if (turn > 1) {
          prompt += json.usage.prompt_tokens;
          cached += json.usage.prompt_tokens_details?.cached_tokens ?? 0;
        }
        const { role, content } = json.choices[0]!.message;
        messages.push({ role, content }, { role: "user", content: `Now add ${turn} more.` });
      }
    }
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const bytes: Record<number, number[]> = { 1: [], 10: [], 50: [] };
    const perCall = new Map<string, number>();
    for (const file of readdirSync(log).filter((f) => f.endsWith(".jsonl")))
      for (const line of readFileSync(join(log, file), "utf8").split("\n")) {
        const m = /"call_id":"([^"]+)"/.exec(line);
        if (m !== null && /"type":"(request|response)"/.test(line))
          perCall.set(m[1]!, (perCall.get(m[1]!) ?? 0) + Buffer.byteLength(line) + 1);
      }
    for (const [id, n] of perCall) {
      const turn = callAt.get(id);
      if (turn !== undefined && bytes[turn] !== undefined) bytes[turn].push(n);
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    return {
      mode,
      calls: client.length,
      addedP50: addedQuantile(metrics, 0.5),
      addedP90: addedQuantile(metrics, 0.9),
      clientP50: quantile(client, 0.5),
      clientP90: quantile(client, 0.9),
      cachedShare: prompt === 0 ? 0 : cached / prompt,
      eventBytes: { 1: mean(bytes[1]!), 10: mean(bytes[10]!), 50: mean(bytes[50]!) },
    };
  } finally {
    gateway.kill("SIGTERM");
    await new Promise((r) => gateway.once("exit", r));
  }
}

/**
 * The modes one after another against one llama.cpp server: engine, tokens through the engine's routes, and
 * tokens rendered in the gateway (local) when the tiny model's directory is there.
 */
export async function promptModes(upstream: string): Promise<ModeResult[]> {
  const scratch = mkdtempSync(join(tmpdir(), "trajflow-bench-prompt-modes-"));
  try {
    const out = [await oneMode(upstream, "engine", scratch), await oneMode(upstream, "tokens", scratch)];
    if (existsSync(join(TINY_HF, "tokenizer.json"))) out.push(await oneMode(upstream, "local", scratch));
    return out;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

export function promptModesTable(results: ModeResult[]): string {
  const f = (x: number, d = 2) => x.toFixed(d);
  const lines = [
    `| mode | calls | added p50 / p90 (ms) | client p50 / p90 (ms) | engine cache hits | event bytes at turn 1 / 10 / 50 |`,
    `|---|---:|---:|---:|---:|---:|`,
  ];
  for (const r of results)
    lines.push(
      `| ${r.mode} | ${r.calls} | ${f(r.addedP50)} / ${f(r.addedP90)} | ${f(r.clientP50)} / ${f(r.clientP90)} | ` +
        `${f(r.cachedShare * 100, 1)}% | ${Math.round(r.eventBytes[1]!)} / ${Math.round(r.eventBytes[10]!)} / ${Math.round(r.eventBytes[50]!)} |`,
    );
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const upstream = (process.env.LLAMA_SERVER ?? "http://127.0.0.1:39480").replace(/\/+$/, "");
  const results = await promptModes(upstream);
  console.log(`prompt modes, ${SESSIONS} sessions x ${TURNS} turns, llama.cpp at ${upstream}\n`);
  console.log(promptModesTable(results));
  const at = process.argv.indexOf("--json");
  if (at > 0) writeFileSync(process.argv[at + 1]!, JSON.stringify(results, null, 2));
}
