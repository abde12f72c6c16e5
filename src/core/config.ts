import { TrajflowError } from "./errors.ts";

interface Issue {
  path: PropertyKey[];
  message: string;
  code?: string;
  keys?: string[];
}

type ParseResult<T> = { success: true; data: T } | { success: false; error: { issues: Issue[] } };

/**
 * Collects configuration problems from several components so that all of them are reported at once,
 * each with the path where it is (`assemble.drift_policy: ...`), before anything starts.
 */
export class ConfigProblems {
  readonly problems: string[] = [];

  /** The parsed value, or undefined after recording the result's issues under `name`. */
  check<T>(name: string, result: ParseResult<T>): T | undefined {
    if (result.success) return result.data;
    for (const issue of result.error.issues) {
      const path = [name, ...issue.path.map(String)];
      // One line per unknown key, named in the path, as a pipeline's problems are.
      if (issue.code === "unrecognized_keys" && issue.keys !== undefined)
        for (const key of issue.keys) this.problems.push(`${[...path, key].join(".")}: unknown key`);
      else this.problems.push(`${path.join(".")}: ${issue.message}`);
    }
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
