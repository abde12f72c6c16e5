import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync } from "node:fs";
import { KILL_POINTS, type KillPoint } from "../../src/core/kill-points.ts";

const BIN = new URL("../../bin/trajflow.js", import.meta.url).pathname;

/** A line of a V8 stack trace ("    at fn (file.ts:12:5)"): pino's JSON logs escape theirs, so they never match. */
const STACK_FRAME = /^\s+at .*:\d+:\d+\)?$/m;

/**
 * No stack trace ever reaches the user (issue 27): every CLI run of the suite, failed or not, goes through
 * this check, so any path that prints one fails the test that took it.
 */
function stackTraceIn(args: string[], stderr: string): Error | null {
  if (!STACK_FRAME.test(stderr)) return null;
  return new Error(`trajflow ${args.join(" ")} printed a stack trace:\n${stderr.slice(-4_000)}`);
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the real CLI in a child process (the same Node that runs the tests, with `nodeArgs`), started
 * through `launcher` when given (a command that ends by running its arguments, e.g. one that moves itself
 * into a cgroup and execs them).
 */
export function runCli(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  nodeArgs: string[] = [],
  launcher: string[] = [],
): Promise<CliResult> {
  const [file, ...argv] = [...launcher, process.execPath, ...nodeArgs, BIN, ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(file!, argv, {
      env: { ...process.env, TRAJFLOW_LOG_LEVEL: "warn", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => {
      const trace = stackTraceIn(args, stderr);
      if (trace !== null) reject(trace);
      else resolve({ code, stdout, stderr });
    });
  });
}

export interface RunningCli {
  child: ChildProcess;
  /** Everything the process wrote to stderr so far (its logs). */
  stderr(): string;
  /** Resolves with the exit code (or the signal's name) when the process ends. */
  exited: Promise<number | string>;
}

const running = new Set<ChildProcess>();

/** Starts the CLI and returns at once; `killRunning` (call it in `after`) ends what a failed test left. */
export function startCli(args: string[], env: NodeJS.ProcessEnv = {}): RunningCli {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, TRAJFLOW_LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  running.add(child);
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  const exited = new Promise<number | string>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", () => running.delete(child));
    // "close" comes after "exit" and after stderr ended: the whole of stderr is there.
    child.on("close", (code, signal) => {
      const trace = stackTraceIn(args, stderr);
      if (trace !== null) reject(trace);
      else resolve(code ?? signal ?? "unknown");
    });
  });
  return { child, stderr: () => stderr, exited };
}

export function killRunning(): void {
  for (const child of running) child.kill("SIGKILL");
}

/** Parquet files visible in `dir` right now (0 when it does not exist yet); temporaries are hidden. */
export function parquetFiles(dir: string): number {
  try {
    return readdirSync(dir).filter((n) => !n.startsWith(".") && n.endsWith(".parquet")).length;
  } catch {
    return 0;
  }
}

/**
 * Runs the CLI with `TRAJFLOW_TEST_KILL_AT=<point>:<n>` (src/core/kill-points.ts): it SIGKILLs itself the
 * n-th time a thread reaches the named point of its commit path. Resolves "killed", or "done" when the run
 * finished its work (exit 0) before the n-th time came. Any other end (a crash of its own, a coded error)
 * fails the test with its output, rather than passing for a kill.
 */
export async function killAt(
  args: string[],
  env: NodeJS.ProcessEnv,
  point: KillPoint,
  n: number,
): Promise<"killed" | "done"> {
  const running = startCli(args, {
    TRAJFLOW_LOG_LEVEL: "silent",
    ...env,
    TRAJFLOW_TEST_KILL_AT: `${point}:${n}`,
  });
  const outcome = await running.exited;
  if (outcome === "SIGKILL") return "killed";
  if (outcome === 0) return "done";
  throw new Error(
    `trajflow ${args.join(" ")} (kill at ${point}:${n}) ended ${outcome}, neither killed nor done:\n${running.stderr().slice(-4000)}`,
  );
}

/**
 * Run `run` of a Kafka crash test: a consume killed at the run's point of the commit path (each of
 * KILL_POINTS in turn, the files' and the offsets' commit after them), the n-th time it gets there (n from
 * 1 to `maxN`, from `random`; the offsets, committed on a timer a few times a run, the first time).
 * With --until-idle-ms a run that drained everything before its point came ends by itself: "done".
 */
export function killConsumeAt(
  args: string[],
  env: NodeJS.ProcessEnv,
  run: number,
  random: () => number,
  maxN: number,
): Promise<"killed" | "done"> {
  const point = KILL_POINTS[run % KILL_POINTS.length]!;
  const n = point === "source.offsets-committed" ? 1 : 1 + Math.floor(random() * maxN);
  return killAt(
    [...args, "--until-idle-ms", "5000"],
    { KAFKAJS_NO_PARTITIONER_WARNING: "1", ...env },
    point,
    n,
  );
}
