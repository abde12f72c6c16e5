/**
 * The real engine servers for integration tests, each the one its variable names (a base URL) when set,
 * otherwise the one its script starts (and `npm test` starts before the tests run): here llama.cpp's
 * (LLAMA_SERVER; scripts/llama.sh: llama-server built from the llama-cpp-python sdist, serving
 * scripts/tiny_llm.py's model). helpers/engines.ts has vLLM's.
 */
import { execFileSync } from "node:child_process";

const SCRIPT = new URL("../../scripts/llama.sh", import.meta.url).pathname;

/** The server `variable` names, or the one `script start` starts (a build or install the first time). */
export function scriptedServer(variable: string, script: string): string {
  const fromEnv = process.env[variable];
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv.replace(/\/+$/, "");
  // The script's last line is the base URL.
  const url = execFileSync("bash", [script, "start"], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  })
    .trim()
    .split("\n")
    .pop()!;
  process.env[variable] = url;
  return url;
}

export function llamaServer(): string {
  return scriptedServer("LLAMA_SERVER", SCRIPT);
}
