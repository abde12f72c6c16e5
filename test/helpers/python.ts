import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The virtual environment `npm test` prepares (scripts/python-env.sh) with pyarrow and DuckDB. */
export const PYTHON = new URL("../../.cache/python/bin/python", import.meta.url).pathname;

export function pythonReady(): boolean {
  return existsSync(PYTHON);
}

/** Runs a Python reader script from test/readers/ and parses its JSON output. */
export async function readWithPython<T>(script: string, ...args: string[]): Promise<T> {
  return readWithPythonIn<T>({}, script, ...args);
}

/** readWithPython with these variables added to the environment (credentials, never in argv). */
export async function readWithPythonIn<T>(
  env: Record<string, string>,
  script: string,
  ...args: string[]
): Promise<T> {
  const path = new URL(`../readers/${script}`, import.meta.url).pathname;
  const { stdout } = await run(PYTHON, [path, ...args], {
    maxBuffer: 256 << 20,
    env: { ...process.env, ...env },
  });
  return JSON.parse(stdout) as T;
}
