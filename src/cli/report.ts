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
  if (json) return `${JSON.stringify({ seconds, metrics: metrics.snapshot() }, null, 2)}\n`;
  return (
    `trajflow ${command}: ${metrics.total("kafka_messages")} messages in ${seconds.toFixed(1)} s, ` +
    `${metrics.total("rows_written")} rows in ${metrics.total("files_committed")} file(s), ` +
    `${metrics.total("dead_letters")} dead letters\n`
  );
}
