/**
 * The engine adapters by name, each built from the gateway's `engine_options` (checked here: a wrong
 * option fails the start with every problem listed). A new engine is one file beside this one and one line
 * here. Each is loaded only when a gateway uses it.
 */
import { z } from "zod";
import type { EngineAdapter, EngineName } from "./engine.ts";

/** The options each engine's adapter takes (`engine_options` in the gateway's config). */
export const ENGINE_OPTIONS = {
  vllm: z.strictObject({}),
  sglang: z.strictObject({
    routed_experts: z
      .strictObject({
        layers: z.int().positive(),
        top_k: z.int().positive(),
        dtype: z.enum(["uint8", "uint16", "int16", "int32"]).optional(),
      })
      .optional()
      .describe("The served model's MoE layout, for a server started with --enable-return-routed-experts."),
  }),
  llamacpp: z.strictObject({
    streams: z
      .enum(["whole", "relay"])
      .optional()
      .describe(
        "whole (default): exact ids, the answer streamed when complete; relay: real streaming (docs/engines.md).",
      ),
  }),
} as const;

const ENGINES: Record<EngineName, (options: Record<string, unknown>) => Promise<EngineAdapter>> = {
  vllm: async () => (await import("./vllm.ts")).createVllmAdapter(),
  sglang: async (o) => {
    const r = (o as z.output<typeof ENGINE_OPTIONS.sglang>).routed_experts;
    return (await import("./sglang.ts")).createSglangAdapter(
      r === undefined
        ? {}
        : { routedExperts: { layers: r.layers, topK: r.top_k, ...(r.dtype ? { dtype: r.dtype } : {}) } },
    );
  },
  llamacpp: async (o) =>
    new (await import("./llamacpp.ts")).LlamaCppAdapter(o as z.output<typeof ENGINE_OPTIONS.llamacpp>),
};

export function createAdapter(
  name: EngineName,
  options: Record<string, unknown> = {},
): Promise<EngineAdapter> {
  return ENGINES[name](options);
}
