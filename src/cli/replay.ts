/**
 * `trajflow replay`: recorded events → assembled trajectories in Parquet (or Arrow IPC), rejected events in
 * `<out>/dead-letter/`. The embedded pipeline: jsonl source → decode → assemble → [group] → file sink.
 */
import { join, resolve } from "node:path";
import { CountingDeadLetters } from "../core/dead-letters.ts";
import { ConfigProblems } from "../core/config.ts";
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import { formatOrigin, type Origin } from "../schemas/origin.ts";
import type { TrajectoryRow } from "../schemas/trajectory.ts";
import { DeadLetterFileSink } from "../sinks/dead-letter/jsonl.ts";
import { fileSinkConfigSchema, type FileSinkConfigInput } from "../sinks/files/config.ts";
import { FileSink } from "../sinks/files/sink.ts";
import { readJsonl, type JsonlProgress } from "../sources/jsonl/jsonl.ts";
import { Assembler, type SessionOutput } from "../transforms/assemble/assembler.ts";
import { assembleConfigSchema, type AssembleConfigInput } from "../transforms/assemble/config.ts";
import { decodeEvent } from "../transforms/decode/decode.ts";
import { startOperations, type OperationsOptions } from "./operations.ts";
import { rewardsConfigSchema, type RewardsConfigInput } from "../transforms/reward/config.ts";
import { RewardTransform } from "../transforms/reward/rewards.ts";
import { groupConfigSchema, type GroupConfigInput } from "../transforms/group/config.ts";
import { GroupBatcher } from "../transforms/group/group.ts";
import {
  stalenessConfigSchema,
  StalenessFilter,
  type StalenessConfigInput,
} from "../transforms/staleness/staleness.ts";

export interface ReplayOptions {
  inputs: string[];
  out: string;
  /** Where rejected events go; default `<out>/dead-letter`. */
  deadLetterDir?: string;
  assemble?: AssembleConfigInput;
  /** The file sink (format, engine, codec, rotation, partitioning); `path` is `out`. */
  sink?: Omit<FileSinkConfigInput, "path">;
  /** GRPO group mode: write each uid's sessions together, padded to the group size. Off when absent. */
  group?: GroupConfigInput;
  /** Drop (or, in group mode, replace with placeholders) rows of stale policies. Off when absent. */
  staleness?: StalenessConfigInput;
  /** Reward stages scoring each session before it is written. Off when absent (rewards from events only). */
  rewards?: RewardsConfigInput;
  /** Directory that relative paths in `rewards` (models, modules) are resolved from; default the cwd. */
  rewardsBaseDir?: string;
  logger: Logger;
  /** Metrics endpoint and status line (docs/operations.md). */
  operations?: OperationsOptions;
  /** Called every few thousand events with the source's progress. */
  onProgress?: (progress: JsonlProgress, metrics: Metrics) => void;
}

export interface ReplayResult {
  metrics: Metrics;
  files: string[];
  deadLetterFiles: string[];
  events: number;
  seconds: number;
}

/** Validates every option first and lists all problems at once. */
function validate(options: ReplayOptions) {
  const problems = new ConfigProblems();
  const assemble = problems.check("assemble", assembleConfigSchema.safeParse(options.assemble ?? {}));
  const sink = problems.check("sink", fileSinkConfigSchema.safeParse({ ...options.sink, path: options.out }));
  const group = problems.optional("group", groupConfigSchema, options.group);
  const staleness = problems.optional("staleness", stalenessConfigSchema, options.staleness);
  const rewards = problems.optional("rewards", rewardsConfigSchema, options.rewards);
  if (options.inputs.length === 0) problems.add("no input files: give at least one events .jsonl file");
  problems.throwIfAny();
  return { assemble: assemble!, sink: sink!, group, staleness, rewards };
}

export async function replay(options: ReplayOptions): Promise<ReplayResult> {
  const config = validate(options);
  const started = performance.now();
  const metrics = new Metrics();
  const out = resolve(options.out);
  let position: Origin | null = null;
  const deadLetterSink = new DeadLetterFileSink(
    { dir: options.deadLetterDir ?? join(out, "dead-letter") },
    metrics,
  );
  const deadLetters = new CountingDeadLetters(metrics, deadLetterSink);
  // Stages start (models load, modules import) before any output is opened: a stage that cannot start
  // fails the run with nothing written.
  const rewarder =
    config.rewards === null
      ? null
      : await RewardTransform.build(config.rewards, {
          metrics,
          logger: options.logger,
          deadLetters,
          baseDir: options.rewardsBaseDir,
        });
  const sink = new FileSink(config.sink, {
    metrics,
    logger: options.logger.child({ component: "sink" }),
    describeInput: () => ({
      "trajflow.source": "replay",
      "trajflow.inputs": JSON.stringify(options.inputs),
      "trajflow.position": position === null ? "" : formatOrigin(position),
    }),
  });
  const assembler = new Assembler({
    config: config.assemble,
    deadLetters,
    metrics,
    logger: options.logger.child({ component: "assemble" }),
  });
  const staleness = config.staleness === null ? undefined : new StalenessFilter(config.staleness);
  const grouper = config.group === null ? null : new GroupBatcher(config.group, { metrics, staleness });

  const writeBatches = async (batches: TrajectoryRow[][]) => {
    for (const batch of batches) if (batch.length > 0) await sink.write(batch);
  };
  const emit = async (outputs: SessionOutput[]) => {
    if (rewarder === null) return write(outputs);
    for (const o of outputs) await write(await rewarder.push(o));
  };
  const write = async (outputs: SessionOutput[]) => {
    for (const o of outputs) {
      if (grouper !== null) {
        await writeBatches(grouper.push(o, assembler.eventTime));
        continue;
      }
      let rows = o.rows;
      if (staleness !== undefined) {
        staleness.observe(rows);
        const fresh = rows.filter((r) => !staleness.isStale(r));
        metrics.inc("rows_stale_dropped", "", rows.length - fresh.length);
        rows = fresh;
      }
      if (rows.length > 0) await sink.write(rows);
    }
  };

  const progress: JsonlProgress = { bytesRead: 0 };
  const ops = await startOperations(options.operations, metrics, options.logger, () => ({
    open_sessions: assembler.openSessions,
  }));
  ops.gauges.set("open_sessions", () => assembler.openSessions);
  ops.ready(true);
  let events = 0;
  try {
    await sink.open();
    await deadLetterSink.open();
    for await (const record of readJsonl({ paths: options.inputs }, progress)) {
      events++;
      metrics.inc("events_read");
      position = record.origin;
      const decoded = decodeEvent(record);
      if (decoded.kind === "control") {
        metrics.inc("control_events", decoded.control.type);
        staleness?.announce(decoded.control.weight_version);
      } else if (decoded.kind === "event") {
        await emit(assembler.push(decoded.value));
      } else {
        deadLetters.write(decoded.deadLetter);
        if (decoded.envelope !== undefined) await emit(assembler.pushRejected(decoded.envelope));
      }
      if (grouper !== null && events % 1024 === 0) await writeBatches(grouper.tick(assembler.eventTime));
      if (options.onProgress !== undefined && events % 4096 === 0) options.onProgress(progress, metrics);
    }
    await emit(assembler.flush());
    if (rewarder !== null) await write(await rewarder.drain());
    if (grouper !== null) await writeBatches(grouper.flush(assembler.eventTime));
  } finally {
    ops.ready(false);
    await ops.close();
    await rewarder?.close();
    await sink.close();
    await deadLetterSink.close();
  }
  return {
    metrics,
    files: sink.files,
    deadLetterFiles: deadLetterSink.files,
    events,
    seconds: (performance.now() - started) / 1000,
  };
}

const fmt = (n: number) => n.toLocaleString("en-US");

/** The summary a person reads after a replay. */
export function formatSummary(result: ReplayResult, out: string): string {
  const m = result.metrics;
  const byLabel = (name: string) =>
    m
      .byLabel(name)
      .map(([k, v]) => `${k} ${fmt(v)}`)
      .join(", ");
  const sessions = m.total("sessions_finalized");
  const deadLetters = m.total("dead_letters");
  const tokensIn = m.total("tokens_received");
  const lines = [
    `trajflow replay: ${fmt(result.events)} events in ${result.seconds.toFixed(2)} s ` +
      `(${fmt(Math.round(tokensIn / Math.max(result.seconds, 1e-9)))} tokens/s)`,
    `  sessions      ${fmt(sessions)} finalized${sessions > 0 ? ` (${byLabel("sessions_finalized")})` : ""}` +
      `, ${fmt(m.total("sessions_without_rows"))} without rows`,
    `  rows          ${fmt(m.total("rows_written"))} in ${fmt(result.files.length)} file(s) under ${out}`,
    `  tokens        ${fmt(tokensIn)} received, ${fmt(m.total("tokens_emitted"))} in rows, ` +
      `${fmt(m.total("tokens_trained"))} trained (mask 1)`,
    `  assembly      drift ${fmt(m.total("drift_detected"))}, history edited ${fmt(m.total("history_edited"))}, ` +
      `retry orphans dropped ${fmt(m.total("orphans_dropped"))}, duplicates ignored ` +
      `${fmt(m.total("duplicate_events_ignored"))}, truncated ${fmt(m.total("rows_truncated"))}, ` +
      `missing logprobs ${fmt(m.total("rows_missing_logprobs"))}`,
    ...(m.total("groups_emitted") > 0
      ? [
          `  groups        ${fmt(m.total("groups_emitted"))} written, ${fmt(m.total("groups_timed_out") + m.total("groups_incomplete_at_end"))} ` +
            `padded${m.total("placeholders") > 0 ? ` (placeholders: ${byLabel("placeholders")})` : ""}`,
        ]
      : []),
    ...(m.total("rows_stale_dropped") > 0
      ? [`  staleness     ${fmt(m.total("rows_stale_dropped"))} stale rows dropped`]
      : []),
    `  dead letters  ${fmt(deadLetters)}${deadLetters > 0 ? ` (${byLabel("dead_letters")}) in ${join(out, "dead-letter")}` : ""}`,
  ];
  return lines.join("\n");
}
