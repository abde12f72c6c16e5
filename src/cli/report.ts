/**
 * What a run prints when it ends: the same for `replay` / `consume` and for `trajflow run` of a pipeline
 * with a jsonl / kafka source, as text for a person or as JSON (`--json`).
 */
import type { Metrics } from "../core/metrics.ts";
import { formatSummary, type ReplayResult } from "./replay.ts";

export function replayReport(result: ReplayResult, out: string, json: boolean): string {
  if (!json) return `${formatSummary(result, out)}\n`;
  const { events, seconds, files, deadLetterFiles, metrics } = result;
  return `${JSON.stringify({ events, seconds, files, dead_letter_files: deadLetterFiles, metrics: metrics.snapshot() }, null, 2)}\n`;
}

export function consumeReport(command: string, metrics: Metrics, seconds: number, json: boolean): string {
  const p50 = metrics.quantile("session_durable_seconds", 0.5);
  const p99 = metrics.quantile("session_durable_seconds", 0.99);
  if (json) {
    const latency = p50 === null ? {} : { session_durable_seconds: { p50, p99 } };
    return `${JSON.stringify({ seconds, metrics: metrics.snapshot(), ...latency }, null, 2)}\n`;
  }
  const latency =
    p50 === null || p99 === null
      ? ""
      : `; session end -> durable file p50 ${(p50 * 1000).toFixed(0)} ms, p99 ${(p99 * 1000).toFixed(0)} ms`;
  return (
    `trajflow ${command}: ${metrics.total("kafka_messages")} messages in ${seconds.toFixed(1)} s, ` +
    `${metrics.total("rows_written")} rows in ${metrics.total("files_committed")} file(s), ` +
    `${metrics.total("dead_letters")} dead letters${latency}\n`
  );
}
