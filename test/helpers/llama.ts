/**
 * The real llama.cpp server for integration tests: LLAMA_SERVER (a base URL) when set, otherwise the one
 * scripts/llama.sh starts (and `npm test` starts before the tests run): llama-server built from the
 * llama-cpp-python sdist, serving scripts/tiny_llm.py's model.
 */
import { execFileSync } from "node:child_process";

const SCRIPT = new URL("../../scripts/llama.sh", import.meta.url).pathname;

export function llamaServer(): string {
  const fromEnv = process.env.LLAMA_SERVER;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv.replace(/\/+$/, "");
  // The build (once) takes minutes; the script's last line is the base URL.
  const url = execFileSync("bash", [SCRIPT, "start"], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  })
    .trim()
    .split("\n")
    .pop()!;
  process.env.LLAMA_SERVER = url;
  return url;
}
