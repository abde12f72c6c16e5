/** How many decode workers a run starts. */
import { availableParallelism } from "node:os";
import type { Plan } from "./plan.ts";
import { REGISTRY } from "./registry.ts";

/**
 * Decode workers of a plan: as configured, else for a source that pipelines its batches (Kafka) one on a
 * host with a core to spare and two on 8 or more cores (workers decode a batch while the consumer thread
 * assembles the one before; on 16 cores a second worker measured +9-18% events/s for 12-50 MiB,
 * BENCHMARKS.md), none for a source applied batch by batch (a replay).
 */
export function decodeWorkers(plan: Plan, cores = availableParallelism()): number {
  const configured = REGISTRY.sources[plan.source.type]!.decodeWorkers(plan.source.config as never);
  if (configured !== undefined) return configured;
  if (!plan.sourceTraits.pipelined) return 0;
  return cores >= 8 ? 2 : cores >= 2 ? 1 : 0;
}
