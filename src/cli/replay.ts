/**
 * `trajflow replay`: recorded events → assembled trajectories in Parquet, rejected events in
 * `<out>/dead-letter/`. The embedded pipeline: jsonl source → decode → assemble → parquet sink.
 */
import { join, resolve } from "node:path";
import { CountingDeadLetters } from "../core/dead-letters.ts";
import { TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import { DeadLetterFileSink } from "../sinks/dead-letter/jsonl.ts";
import { parquetSinkConfigSchema, type ParquetSinkConfigInput } from "../sinks/parquet/config.ts";
import { ParquetSink } from "../sinks/parquet/sink.ts";
import { readJsonl, type JsonlProgress } from "../sources/jsonl/jsonl.ts";
import { Assembler, type SessionOutput } from "../transforms/assemble/assembler.ts";
import { assembleConfigSchema, type AssembleConfigInput } from "../transforms/assemble/config.ts";
import { decodeEvent } from "../transforms/decode/decode.ts";

export interface ReplayOptions {
  inputs: string[];
  out: string;
  assemble?: AssembleConfigInput;
  parquet?: Omit<ParquetSinkConfigInput, "path">;
  logger: Logger;
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
  const problems: string[] = [];
  const assemble = assembleConfigSchema.safeParse(options.assemble ?? {});
  const parquet = parquetSinkConfigSchema.safeParse({ ...options.parquet, path: join(options.out) });
  for (const [name, result] of [
    ["assemble", assemble],
    ["parquet", parquet],
  ] as const) {
    if (!result.success) {
      for (const issue of result.error.issues)
        problems.push(`${name}.${issue.path.join(".")}: ${issue.message}`);
    }
  }
  if (options.inputs.length === 0) problems.push("no input files: give at least one events .jsonl file");
  if (problems.length > 0 || !assemble.success || !parquet.success) {
    throw new TrajflowError("CONFIG_INVALID", `invalid configuration:\n  ${problems.join("\n  ")}`, {
      details: { problems },
    });
  }
  return { assemble: assemble.data, parquet: parquet.data };
}

export async function replay(options: ReplayOptions): Promise<ReplayResult> {
  const config = validate(options);
  const started = performance.now();
  const metrics = new Metrics();
  const out = resolve(options.out);
  const sink = new ParquetSink(config.parquet, {
    metrics,
    logger: options.logger.child({ component: "parquet" }),
    metadata: { "trajflow.source": "replay", "trajflow.inputs": JSON.stringify(options.inputs) },
  });
  const deadLetterSink = new DeadLetterFileSink({ dir: join(out, "dead-letter") }, metrics);
  const deadLetters = new CountingDeadLetters(metrics, deadLetterSink);
  await sink.open();
  await deadLetterSink.open();
  const assembler = new Assembler({
    config: config.assemble,
    deadLetters,
    metrics,
    logger: options.logger.child({ component: "assemble" }),
  });

  const emit = async (outputs: SessionOutput[]) => {
    for (const o of outputs) if (o.rows.length > 0) await sink.write(o.rows);
  };
  const progress: JsonlProgress = { bytesRead: 0 };
  let events = 0;
  for await (const record of readJsonl({ paths: options.inputs }, progress)) {
    events++;
    const decoded = decodeEvent(record);
    if (decoded.ok) {
      await emit(assembler.push(decoded.value));
    } else {
      deadLetters.write(decoded.deadLetter);
      if (decoded.envelope !== undefined) await emit(assembler.pushRejected(decoded.envelope));
    }
    if (options.onProgress !== undefined && events % 4096 === 0) options.onProgress(progress, metrics);
  }
  await emit(assembler.flush());
  await sink.close();
  await deadLetterSink.close();
  metrics.inc("events_read", "", events);
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
    `  rows          ${fmt(m.total("rows_written"))} in ${fmt(result.files.length)} Parquet file(s) under ${out}`,
    `  tokens        ${fmt(tokensIn)} received, ${fmt(m.total("tokens_emitted"))} in rows, ` +
      `${fmt(m.total("tokens_trained"))} trained (mask 1)`,
    `  assembly      drift ${fmt(m.total("drift_detected"))}, history edited ${fmt(m.total("history_edited"))}, ` +
      `retry orphans dropped ${fmt(m.total("orphans_dropped"))}, duplicates ignored ` +
      `${fmt(m.total("duplicate_events_ignored"))}, truncated ${fmt(m.total("rows_truncated"))}, ` +
      `missing logprobs ${fmt(m.total("rows_missing_logprobs"))}`,
    `  dead letters  ${fmt(deadLetters)}${deadLetters > 0 ? ` (${byLabel("dead_letters")}) in ${join(out, "dead-letter")}` : ""}`,
  ];
  return lines.join("\n");
}
