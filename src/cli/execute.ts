/**
 * Runs a plan for a command: the operations endpoint and status line around the runtime, the same for
 * replay, consume and run.
 */
import type { Logger } from "../core/logger.ts";
import type { Plan } from "../runtime/plan.ts";
import { Runtime, type RunResult } from "../runtime/runtime.ts";
import { startOperations, type OperationsOptions } from "./operations.ts";

export interface ExecuteOptions {
  logger: Logger;
  /** Directory relative model and module paths are resolved from. */
  baseDir: string;
  operations?: OperationsOptions;
  stopSignal?: Promise<void>;
  untilIdleMs?: number;
  /** After every batch (the replay progress bar). */
  onBatch?: (runtime: Runtime) => void;
}

export async function execute(plan: Plan, options: ExecuteOptions): Promise<RunResult> {
  if (plan.memory !== null) {
    const { limit, sized } = plan.memory;
    options.logger.info(
      { limit_mib: Math.round(limit.bytes / 2 ** 20), from: limit.source, sized },
      "Defaults sized for the memory limit.",
    );
  }
  const runtime = new Runtime(plan, {
    logger: options.logger,
    baseDir: options.baseDir,
    stopSignal: options.stopSignal,
    untilIdleMs: options.untilIdleMs,
    onBatch: options.onBatch,
  });
  const lagTotal = () => {
    let n = 0;
    for (const v of runtime.source?.lag?.().values() ?? []) n += v;
    return n;
  };
  const ops = await startOperations(options.operations, runtime.metrics, options.logger, () => ({
    open_sessions: runtime.openSessions,
    ...(plan.sourceTraits.live ? { lag: lagTotal() } : {}),
  }));
  ops.gauges.set("open_sessions", () => runtime.openSessions);
  ops.gauges.set("consumer_lag", () =>
    [...(runtime.source?.lag?.() ?? new Map<string, number>())].map(([lane, value]) => ({
      labels: { partition: lane },
      value,
    })),
  );
  ops.gauges.set("offsets_held", () =>
    runtime
      .heldByLane()
      .map(({ lane, held }) => ({ labels: { partition: lane.split("/").pop()! }, value: held })),
  );
  ops.gauges.set("memory_held_bytes", () =>
    Object.entries(runtime.holdings()).map(([part, value]) => ({ labels: { part }, value })),
  );
  try {
    return await runtime.run(ops);
  } finally {
    ops.ready(false);
    await ops.close();
  }
}
