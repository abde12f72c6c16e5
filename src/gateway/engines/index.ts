/**
 * The engine adapters by name: a new engine is one file beside this one and one line here. Each is loaded
 * only when a gateway uses it.
 */
import type { EngineAdapter, EngineName } from "./engine.ts";

const ENGINES: Record<EngineName, () => Promise<EngineAdapter>> = {
  vllm: async () => (await import("./vllm.ts")).createVllmAdapter(),
  sglang: async () => (await import("./sglang.ts")).createSglangAdapter(),
  // @ts-expect-error: the llama.cpp adapter lands in its own change
  llamacpp: async () => (await import("./llamacpp.ts")).createLlamacppAdapter(),
};

export function createAdapter(name: EngineName): Promise<EngineAdapter> {
  return ENGINES[name]();
}
