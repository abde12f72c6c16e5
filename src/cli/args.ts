import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { TrajflowError } from "../core/errors.ts";
import { jsonSyntaxError } from "../core/json-syntax.ts";
import { memoryLimit, MIN_MEMORY_LIMIT, parseMemorySize, type MemoryLimit } from "../core/memory-limit.ts";
import { jsonLocator } from "../runtime/load.ts";

/** Exit codes of every command (docs/cli.md). */
export const ExitCode = {
  OK: 0,
  /** The run failed: an input could not be read, an output could not be written. */
  FAILURE: 1,
  /** The command line or the configuration is wrong; nothing was done. */
  USAGE: 2,
} as const;

export function usageError(message: string): TrajflowError {
  return new TrajflowError("USAGE", message);
}

/**
 * parseArgs with strict checking, turning its errors into usage errors in trajflow's words: an unknown
 * flag names the closest one the command takes, and a value that starts with `-` says how to give it.
 */
export function parse<const O extends ParseArgsOptionsConfig>(argv: string[], options: O) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (err) {
    const { code, message } = err as Error & { code?: string };
    const flag = /'(-[^' ]+)/.exec(message)?.[1];
    if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && flag !== undefined) {
      const near = closest(flag.replace(/^-+/, ""), Object.keys(options));
      throw usageError(`unknown option ${flag}${near === undefined ? "" : ` (did you mean --${near}?)`}`);
    }
    if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && flag !== undefined) {
      const value = argv[argv.indexOf(flag) + 1];
      throw usageError(
        value !== undefined && value.startsWith("-")
          ? `${flag} ${value}: a value that starts with "-" is given as ${flag}=${value}`
          : `${flag} needs a value`,
      );
    }
    throw usageError(message);
  }
}

/** The name among `names` closest to `name` (edit distance at most a third of its length), if any. */
export function closest(name: string, names: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.floor(name.length / 3)) + 1;
  for (const candidate of names) {
    const d = editDistance(name, candidate);
    if (d < bestDistance || (candidate.startsWith(name) && best === undefined)) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance between two strings. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    prev = row;
  }
  return prev[b.length]!;
}

/** Problems of flags read so far: reported together with every other problem, not one at a time. */
const flagProblems: string[] = [];

/** An integer flag; a bad value is recorded (see takeFlagProblems) and reads as absent. */
export function intOption(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n)) {
    flagProblems.push(`--${name} must be an integer, got ${JSON.stringify(value)}`);
    return undefined;
  }
  return n;
}

/**
 * `--max-memory`: the memory the pipeline is sized for (core/memory-limit.ts), else the cgroup's limit,
 * else none. A value that is not a size, or is below the least trajflow runs in, is recorded as a problem.
 */
export function memoryOption(value: string | undefined): MemoryLimit | null {
  if (value === undefined) return memoryLimit(undefined);
  const bytes = parseMemorySize(value);
  if (bytes === null) {
    flagProblems.push(
      `--max-memory must be a size (MiB, or with a unit: 768MiB, 2GiB), got ${JSON.stringify(value)}`,
    );
    return null;
  }
  if (bytes < MIN_MEMORY_LIMIT) {
    flagProblems.push(
      `--max-memory must be at least ${MIN_MEMORY_LIMIT / 2 ** 20} MiB (a catch-up peaks at ~320 MiB with the ` +
        `smallest settings; docs/operations.md), got ${JSON.stringify(value)}`,
    );
    return null;
  }
  return memoryLimit(bytes);
}

/** Records a flag problem found by a command's own check (reported with every other one). */
export function flagProblem(problem: string): void {
  flagProblems.push(problem);
}

/** The flag problems recorded so far (and forgets them). */
export function takeFlagProblems(): string[] {
  return flagProblems.splice(0);
}

/** Throws a usage error listing every flag problem recorded so far, if any. */
export function throwFlagProblems(): void {
  const problems = takeFlagProblems();
  if (problems.length > 0) throw usageError(problems.join("\n  "));
}

/** Reads a JSON configuration file given on the command line (e.g. `--rewards rewards.json`). */
export function jsonFileOption(
  name: string,
  path: string | undefined,
): { value: unknown; dir: string; where: (path: ReadonlyArray<string | number>) => string } | undefined {
  if (path === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw usageError(`--${name}: cannot read ${path}: ${(err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch (err) {
    // V8 names the line for some errors only; the scanner finds it for all, in plainer words.
    const found = jsonSyntaxError(text);
    const where = found === null ? "" : `:${found.line}:${found.column}`;
    throw usageError(
      `--${name}: ${path}${where}: not valid JSON: ${found?.message ?? (err as Error).message}`,
    );
  }
  return { value, dir: dirname(resolve(path)), where: jsonLocator(path, text) };
}
