import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync } from "node:fs";

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
 * Runs the CLI and kills it with SIGKILL once `files` Parquet files are visible in `out`, `extraMs` later
 * (so kills land before, between and inside commits); resolves when it is gone.
 */
export async function killAfterFiles(
  args: string[],
  env: NodeJS.ProcessEnv,
  out: string,
  files: number,
  extraMs: number,
): Promise<void> {
  const running = startCli(args, { TRAJFLOW_LOG_LEVEL: "silent", ...env });
  let timer: NodeJS.Timeout | undefined;
  const poll = setInterval(() => {
    if (timer === undefined && parquetFiles(out) >= files) {
      timer = setTimeout(() => running.child.kill("SIGKILL"), extraMs);
    }
  }, 2);
  try {
    await running.exited;
  } finally {
    clearInterval(poll);
    clearTimeout(timer);
  }
}
