/**
 * `npm run bench:gpu-rewards` (issue 25 item 2): a replay scored by the `http` stage (KServe v2) against the
 * torch reward server (test/fixtures/reward_server.py, on CUDA when torch sees a GPU), sweeping the
 * runner's `max_batch_size` and requests in flight (`concurrency`), beside the same replay scored by the
 * `onnx` stage on CPU. Per run: rows/s, the server's time in the model over the run's wall time (how busy
 * the model kept its device), GPU utilisation sampled by nvidia-smi every 100 ms where there is one, and
 * the p99 delay of trajflow's event loop while it scored. Every run's scores are checked against the onnx
 * stage's (1e-4). Meant for a GPU host (`device`); on CPU it runs too, and says so in its header.
 *
 * BENCH_SESSIONS (default 2,000) sessions of 2-4 turns with 1k-token prompts; BENCH_SWEEP="64x2,256x4"
 * (batch x in flight) replaces the default sweep.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { pino } from "pino";
import { replayPlan } from "../src/cli/presets.ts";
import { mulberry32 } from "../test/helpers/prng.ts";
import { Runtime } from "../src/runtime/runtime.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { startTorchRewardServer } from "../test/helpers/torch-reward-server.ts";
import { linearSession } from "./workloads.ts";

const root = new URL("..", import.meta.url).pathname;
const MODEL = join(root, "examples/rewards/tiny-reward.onnx");
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 2_000);
const SWEEP = (process.env.BENCH_SWEEP ?? "16x1,16x4,64x1,64x2,64x4,256x2,256x4,256x8")
  .split(",")
  .map((s) => s.split("x").map(Number) as [number, number]);
const SCORE = { kind: "softmax", class: 1 };

/** Samples GPU utilisation (%) every 100 ms while running, where nvidia-smi exists. */
function gpuSampler(): { stop(): number | null } {
  const samples: number[] = [];
  let child: ChildProcess | null = null;
  try {
    child = spawn(
      "nvidia-smi",
      ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"],
      {
        stdio: ["ignore", "pipe", "ignore"],
      },
    );
    child.on("error", () => (child = null));
    createInterface({ input: child.stdout! }).on("line", (l) => {
      const v = Number(l.trim().split("\n")[0]);
      if (Number.isFinite(v)) samples.push(v);
    });
  } catch {
    child = null;
  }
  return {
    stop() {
      child?.kill();
      return samples.length === 0 ? null : samples.reduce((a, b) => a + b, 0) / samples.length;
    },
  };
}

async function scoredReplay(input: string, out: string, stage: Record<string, unknown>) {
  const plan = replayPlan([input], undefined, {
    assemble: {},
    files: { path: out },
    rewards: { stages: [{ name: "rm", ...stage }] },
  });
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const started = performance.now();
  const result = await new Runtime(plan, { logger: pino({ level: "silent" }), baseDir: root }).run();
  const seconds = (performance.now() - started) / 1000;
  delay.disable();
  const scores = new Map<string, number>();
  for (const f of await listDataFiles(out))
    for (const r of await readRows(f)) scores.set(r.key, r.reward_values[0] as number);
  return { seconds, rows: result.metrics.total("rows_written"), p99: delay.percentile(99) / 1e6, scores };
}

const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-gpu-rewards-"));
const server = await startTorchRewardServer(MODEL);
try {
  const random = mulberry32(25);
  const lines: string[] = [];
  for (let s = 0; s < SESSIONS; s++) {
    const shape = {
      initialPrompt: 1_024,
      turns: 2 + Math.floor(random() * 3),
      outputTokens: 128,
      observationTokens: 64,
    };
    for (const e of linearSession(shape, "full", { uid: `u${s % 300}`, sessionId: `s${s}`, seed: s + 1 }))
      lines.push(JSON.stringify(e));
  }
  const input = join(dir, "sessions.jsonl");
  writeFileSync(input, `${lines.join("\n")}\n`);
  const stats = async () =>
    (await (await fetch(`${server.url}/stats`)).json()) as { items: number; model_seconds: number };

  const cpu = await scoredReplay(input, join(dir, "onnx"), {
    type: "onnx",
    options: { model: MODEL, providers: ["cpu"], score: SCORE },
    batch: { max_batch_size: 64, concurrency: 2 },
  });
  const table = [
    `| onnx stage, CPU (batch 64, 2 in flight) | ${Math.round(cpu.rows / cpu.seconds)} | | | ${cpu.p99.toFixed(1)} ms |`,
  ];
  for (const [batch, inFlight] of SWEEP) {
    const before = await stats();
    const gpu = gpuSampler();
    const run = await scoredReplay(input, join(dir, `http-${batch}x${inFlight}`), {
      type: "http",
      options: { protocol: "kserve", url: server.url, model: "tiny-reward", score: SCORE, max_length: 2_048 },
      batch: { max_batch_size: batch, concurrency: inFlight, max_queue: 16_384 },
    });
    const utilisation = gpu.stop();
    const after = await stats();
    for (const [key, expected] of cpu.scores) {
      const got = run.scores.get(key);
      if (got === undefined || Math.abs(got - expected) > 1e-4)
        throw new Error(`${key}: the server scored ${got}, the onnx stage ${expected}`);
    }
    const busy = (after.model_seconds - before.model_seconds) / run.seconds;
    table.push(
      `| kserve → torch on ${server.device}, batch ${batch}, ${inFlight} in flight | ${Math.round(run.rows / run.seconds)} | ` +
        `${(busy * 100).toFixed(0)}% | ${utilisation === null ? "n/a" : `${utilisation.toFixed(0)}%`} | ${run.p99.toFixed(1)} ms |`,
    );
    console.log(table[table.length - 1]);
  }
  const cores = cpus();
  console.log(
    [
      "",
      `Generated by \`npm run bench:gpu-rewards\` on ${new Date().toISOString().slice(0, 10)}, ${cores.length} x ` +
        `${cores[0]?.model.trim() ?? "unknown CPU"}, Node ${process.version}, the server on ${server.device}; ` +
        `${SESSIONS} sessions, ${cpu.rows} rows, scores equal to the onnx stage's (1e-4) in every run.`,
      "",
      "| scorer | rows/s | server time in the model | GPU utilisation (nvidia-smi) | trajflow event loop p99 |",
      "| --- | --- | --- | --- | --- |",
      ...table,
    ].join("\n"),
  );
} finally {
  server.child.kill();
  rmSync(dir, { recursive: true, force: true });
}
