/**
 * The engines the gateway suites run against, each a real server: llama.cpp's (scripts/llama.sh) and vLLM's
 * CPU build (scripts/vllm.sh), both serving the project's tiny random-weight model with the same tokenizer and
 * chat template. A suite loops over `enginesUnderTest()` and registers its tests once per engine, named by it.
 *
 * TRAJFLOW_TEST_ENGINES picks a subset (`llamacpp`, `vllm`, comma separated) for a quick local run; under CI
 * it must not leave one out (the matrix is what CI checks). LLAMA_SERVER / VLLM_SERVER name running servers;
 * otherwise the scripts start them (`npm test` starts both before the tests and stops them after).
 */
import { llamaServer, scriptedServer } from "./llama.ts";

export type TestEngineName = "llamacpp" | "vllm";

export interface TestEngine {
  name: TestEngineName;
  /** The server's base URL (starting it the first time, when no variable names one). */
  url: () => string;
  /** The gateway flags that put it in front of this engine. */
  gatewayArgs: () => string[];
}

const VLLM_SCRIPT = new URL("../../scripts/vllm.sh", import.meta.url).pathname;

/** The real vLLM server: VLLM_SERVER when set, otherwise the one scripts/vllm.sh starts (installs once). */
export function vllmServer(): string {
  return scriptedServer("VLLM_SERVER", VLLM_SCRIPT);
}

export const TEST_ENGINES: Record<TestEngineName, TestEngine> = {
  llamacpp: {
    name: "llamacpp",
    url: llamaServer,
    gatewayArgs: () => ["--upstream", llamaServer(), "--engine", "llamacpp"],
  },
  vllm: {
    name: "vllm",
    url: vllmServer,
    // vLLM serves only the names it was given (scripts/vllm.sh: --served-model-name tiny), and harnesses ask
    // for their own models (claude-sonnet-4-5, gpt-5-codex): the gateway sends every call to tiny.
    gatewayArgs: () => ["--upstream", vllmServer(), "--engine", "vllm", "--model", "tiny"],
  },
};

/** The engines this run tests against: both, unless TRAJFLOW_TEST_ENGINES picks (never fewer under CI). */
export function enginesUnderTest(): TestEngine[] {
  const picked = process.env.TRAJFLOW_TEST_ENGINES;
  if (picked === undefined || picked.trim() === "") return Object.values(TEST_ENGINES);
  const names = picked.split(",").map((s) => s.trim());
  for (const n of names)
    if (!(n in TEST_ENGINES)) throw new Error(`TRAJFLOW_TEST_ENGINES: unknown engine ${JSON.stringify(n)}`);
  const chosen = Object.values(TEST_ENGINES).filter((e) => names.includes(e.name));
  if (process.env.CI === "true" && chosen.length !== Object.keys(TEST_ENGINES).length)
    throw new Error("TRAJFLOW_TEST_ENGINES leaves an engine out, which CI does not allow");
  return chosen;
}
