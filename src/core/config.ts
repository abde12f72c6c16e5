import { TrajflowError } from "./errors.ts";

interface Issue {
  path: PropertyKey[];
  message: string;
  code?: string;
  keys?: string[];
}

type ParseResult<T> = { success: true; data: T } | { success: false; error: { issues: Issue[] } };

/**
 * A schema issue as problems, each a path and a message: one per unknown key, with the key in its path,
 * so a file's problem points at the key's own line (a stray "__proto__" on line 5 was reported at line 1).
 */
export function issueProblems(issue: Issue): Array<{ path: Array<string | number>; message: string }> {
  const path = issue.path.map((p) => (typeof p === "number" ? p : String(p)));
  if (issue.code === "unrecognized_keys" && issue.keys !== undefined)
    return issue.keys.map((key) => ({ path: [...path, key], message: "unknown key" }));
  return [{ path, message: issue.message }];
}

/**
 * Collects configuration problems from several components so that all of them are reported at once,
 * each with the path where it is (`assemble.drift_policy: ...`), before anything starts.
 */
export class ConfigProblems {
  readonly problems: string[] = [];

  /** The parsed value, or undefined after recording the result's issues under `name`. */
  check<T>(name: string, result: ParseResult<T>): T | undefined {
    if (result.success) return result.data;
    for (const issue of result.error.issues)
      for (const { path, message } of issueProblems(issue))
        this.problems.push(`${[name, ...path].join(".")}: ${message}`);
    return undefined;
  }

  /** Parses an optional section: null when absent, otherwise as `check`. */
  optional<T>(name: string, schema: { safeParse(v: unknown): ParseResult<T> }, value: unknown): T | null {
    if (value === undefined) return null;
    return this.check(name, schema.safeParse(value)) ?? null;
  }

  add(problem: string): void {
    this.problems.push(problem);
  }

  /** Throws CONFIG_INVALID listing every problem, if there is any. */
  throwIfAny(): void {
    if (this.problems.length === 0) return;
    throw new TrajflowError("CONFIG_INVALID", `invalid configuration:\n  ${this.problems.join("\n  ")}`, {
      details: { problems: this.problems },
    });
  }
}
