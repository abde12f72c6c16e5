/**
 * Runs a validated pipeline plan on the runtime of `replay` (a jsonl source) or `consume` (a kafka source),
 * so `trajflow run` and those commands behave and report the same.
 */
import { dirname, resolve } from "node:path";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { consume } from "../cli/consume.ts";
import type { OperationsOptions } from "../cli/operations.ts";
import { replay, type ReplayResult } from "../cli/replay.ts";
import type { Plan } from "./plan.ts";

export interface RunOptions {
  /** The pipeline file: model and module paths of reward stages are resolved from its directory. */
  file: string;
  logger: Logger;
  /** Kafka: stop after this long without messages, writing open sessions too. */
  untilIdleMs?: number;
  /** Kafka: resolves when the run should stop (a signal). */
  stopSignal?: Promise<void>;
  operations?: OperationsOptions;
}

export type RunResult =
  | { kind: "replay"; result: ReplayResult; out: string }
  | { kind: "kafka"; metrics: Metrics; seconds: number };

export async function runPlan(plan: Plan, options: RunOptions): Promise<RunResult> {
  const { path: out, ...sink } = plan.files;
  const rewardsBaseDir = dirname(resolve(options.file));
  if (plan.source.type === "jsonl") {
    const result = await replay({
      inputs: plan.source.config.paths,
      out,
      deadLetterDir: plan.deadLetters?.type === "files" ? plan.deadLetters.path : undefined,
      assemble: plan.assemble,
      sink,
      group: plan.group ?? undefined,
      staleness: plan.staleness ?? undefined,
      rewards: plan.rewards ?? undefined,
      rewardsBaseDir,
      logger: options.logger,
      operations: options.operations,
    });
    return { kind: "replay", result, out };
  }
  const { metrics, seconds } = await consume({
    source: plan.source.config,
    out,
    deadLetterTopic: plan.deadLetters?.type === "kafka" ? plan.deadLetters.topic : undefined,
    trajectoryTopic: plan.topic ?? undefined,
    rewards: plan.rewards ?? undefined,
    rewardsBaseDir,
    assemble: plan.assemble,
    sink,
    untilIdleMs: options.untilIdleMs,
    logger: options.logger,
    stopSignal: options.stopSignal,
    operations: options.operations,
  });
  return { kind: "kafka", metrics, seconds };
}

/** One line naming what the pipeline does, for `validate` and the start of `run`. */
export function describePlan(plan: Plan): string {
  const steps = [
    `${plan.source.type} ${plan.source.name}`,
    "assemble",
    ...(plan.rewards === null ? [] : [`rewards (${plan.rewards.stages.map((s) => s.name).join(", ")})`]),
    ...(plan.staleness === null ? [] : ["staleness"]),
    ...(plan.group === null ? [] : ["group"]),
  ];
  const sinks = [
    `${plan.files.format} files in ${plan.files.path}`,
    ...(plan.topic === null ? [] : [`topic ${plan.topic.topic}`]),
  ];
  return `${steps.join(" → ")} → ${sinks.join(" + ")}`;
}
