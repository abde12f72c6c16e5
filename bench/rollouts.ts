/**
 * `npm run bench:rollouts` (and the last part of `npm run bench`): the rollout driver's own cost
 * (python/src/trajflow/rollout), against `trajflow gateway --out` in front of the instant upstream
 * (bench/gateway-upstream.ts: answers at once, so the figures are the driver's, the gateway's and the
 * pipeline's). bench/rollouts.py runs the steps: sessions/s at 1, 64 and 512 concurrent agents (groups of
 * 4, one model call per session), the driver process's CPU per session (its agents' client included), the
 * time from a group's last session end to its rows in hand (p50, p99), and the same step written by hand
 * with the control client and the reader at 64. The gateway runs with `--file-age-ms 50`
 * (BENCH_ROLLOUTS_FILE_AGE_MS), as docs/rollouts.md advises for a gateway a driver waits on. Needs the project's Python environment (.cache/python,
 * which `npm test` makes). `--json <file>` writes the figures.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const ROOT = new URL("..", import.meta.url).pathname;
const PYTHON = join(ROOT, ".cache/python/bin/python");

interface StepFigures {
  concurrency: number;
  sessions: number;
  seconds: number;
  sessions_per_s: number;
  cpu_ms_per_session: number;
  rows_wait_p50_ms: number;
  rows_wait_p99_ms: number;
}

async function firstLine(child: ChildProcess): Promise<string> {
  for await (const line of createInterface({ input: child.stdout! })) return line.trim();
  throw new Error("the instant upstream printed nothing");
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

export async function run(): Promise<{ driver: StepFigures[]; by_hand: StepFigures[] } | null> {
  if (!existsSync(PYTHON)) {
    console.log("rollouts: skipped, no Python environment (.cache/python: run npm test once)");
    return null;
  }
  const scratch = mkdtempSync(join(tmpdir(), "trajflow-bench-rollouts-"));
  const children: ChildProcess[] = [];
  try {
    const upstream = spawn(process.execPath, [join(ROOT, "bench/gateway-upstream.ts")], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    children.push(upstream);
    const engine = await firstLine(upstream);
    const port = await freePort();
    const out = join(scratch, "rows");
    const args = ["gateway", "--upstream", engine, "--engine", "vllm", "--listen", `127.0.0.1:${port}`];
    // A rollout-driven gateway cuts its files fast: the driver waits for them (the default, 10 s, suits a
    // trainer that follows the files in big batches). BENCH_ROLLOUTS_FILE_AGE_MS sets another.
    args.push("--file-age-ms", process.env.BENCH_ROLLOUTS_FILE_AGE_MS ?? "50");
    const gateway = spawn(process.execPath, [join(ROOT, "bin/trajflow.js"), ...args, "--out", out], {
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, TRAJFLOW_LOG_LEVEL: "warn" },
    });
    children.push(gateway);
    const url = `http://127.0.0.1:${port}`;
    for (let ready = false; !ready;) {
      ready = await fetch(`${url}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (gateway.exitCode !== null) throw new Error(`the gateway exited ${gateway.exitCode}`);
      if (!ready) await new Promise((r) => setTimeout(r, 50));
    }
    const bench = spawnSync(PYTHON, [join(ROOT, "bench/rollouts.py"), url, out], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      maxBuffer: 16 << 20,
    });
    if (bench.status !== 0) throw new Error(`bench/rollouts.py exited ${bench.status}`);
    const figures = JSON.parse(bench.stdout.trim().split("\n").pop()!) as {
      driver: StepFigures[];
      by_hand: StepFigures[];
    };
    const line = (who: string, f: StepFigures) =>
      console.log(
        `rollouts ${who} x${String(f.concurrency).padEnd(3)} ${f.sessions} sessions: ` +
          `${f.sessions_per_s.toFixed(0)} sessions/s, ${f.cpu_ms_per_session.toFixed(2)} CPU-ms/session, ` +
          `rows in hand ${f.rows_wait_p50_ms.toFixed(0)} ms p50, ${f.rows_wait_p99_ms.toFixed(0)} ms p99 after the group's last end`,
      );
    for (const f of figures.driver) line("driver ", f);
    for (const f of figures.by_hand) line("by hand", f);
    return figures;
  } finally {
    for (const c of children) c.kill("SIGTERM");
    await Promise.all(
      children.map((c) =>
        c.exitCode !== null || c.signalCode !== null ? null : new Promise((r) => c.once("exit", r)),
      ),
    );
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const machine = `${cpus().length} x ${cpus()[0]?.model ?? "unknown CPU"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
  console.log(`trajflow rollouts bench on ${machine}`);
  const figures = await run();
  const at = process.argv.indexOf("--json");
  if (at >= 0 && process.argv[at + 1] !== undefined)
    writeFileSync(process.argv[at + 1]!, `${JSON.stringify({ machine, figures }, null, 2)}\n`);
}
