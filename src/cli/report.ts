/**
 * What a run prints when it ends: one report for `replay`, `consume` and `run`, whatever the source, as
 * text for a person or as JSON (`--json`).
 */
import { readFileSync } from "node:fs";
import type { Timeline } from "../core/metrics.ts";
import type { RunResult } from "../runtime/runtime.ts";

const fmt = (n: number) => n.toLocaleString("en-US");

/**
 * The process's peak resident memory: the kernel's high-water mark of this program's memory (Linux:
 * VmHWM). Not getrusage's maxrss, which Linux carries over from the parent across fork and exec, so a
 * process started by a big one reports the parent's size.
 */
function peakRss(): number {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
    if (hwm !== null) return Number(hwm[1]) * 1024;
  } catch {
    // Not Linux.
  }
  return process.resourceUsage().maxRSS * 1024;
}

function cpuSeconds(): { user: number; system: number } {
  const { user, system } = process.cpuUsage();
  return { user: user / 1e6, system: system / 1e6 };
}

/** Startup as an operator sees it: from the process's start to the first record and the first file. */
function timing(t: Timeline): string[] {
  if (t.first_record_at_ms === null) return [];
  const after = (at: number) => `${((at - t.process_started_at_ms) / 1000).toFixed(2)} s`;
  return [
    `  startup       first record ${after(t.first_record_at_ms)} after the process started` +
      (t.first_file_at_ms === null ? "" : `, first file ${after(t.first_file_at_ms)}`),
    ...(t.last_record_at_ms === null || t.last_file_at_ms === null
      ? []
      : [`  last          record applied ${after(t.last_record_at_ms)}, file ${after(t.last_file_at_ms)}`]),
  ];
}

const mib = (bytes: number) => `${Math.round(bytes / 2 ** 20)} MiB`;

/**
 * CPU and memory, whole and by thread: what to look at before adding decode workers or encoders. The
 * helper threads' share (V8's garbage collector and compiler, libuv's pool) is the process's CPU minus
 * the threads listed.
 */
function resources(result: RunResult): string[] {
  const { user, system } = cpuSeconds();
  const total = user + system;
  const listed = result.threads.reduce((sum, t) => sum + t.cpu_seconds, 0);
  const parts = result.threads.map((t) => `${t.thread} ${t.cpu_seconds.toFixed(2)}`);
  const heaps = result.threads.map((t) => `${t.thread} ${mib(t.heap_peak_bytes)}`);
  const held = result.held
    .filter((p) => p.peak_bytes > 0)
    .map((p) => `${p.part} ${mib(p.at_peak_rss_bytes)} (peak ${mib(p.peak_bytes)})`);
  const owners = result.peakAccount.owners
    .filter((o) => o.bytes >= 2 ** 19)
    .map((o) => `${o.owner} ${mib(o.bytes)}`);
  return [
    `  CPU           ${total.toFixed(2)} s: ${[...parts, `helper threads ${Math.max(0, total - listed).toFixed(2)}`].join(", ")}`,
    `  memory        peak RSS ${mib(peakRss())}; heap peaks: ${heaps.join(", ")}`,
    ...(held.length === 0 ? [] : [`  held          at the peak RSS: ${held.join(", ")}`]),
    ...(owners.length === 0 ? [] : [`  peak RSS by   ${owners.join(", ")}`]),
  ];
}

export function runReport(command: string, result: RunResult, json: boolean): string {
  const m = result.metrics;
  const p50 = m.quantile("session_durable_seconds", 0.5);
  const p99 = m.quantile("session_durable_seconds", 0.99);
  if (json) {
    const { events, seconds, files, deadLetterFiles } = result;
    return `${JSON.stringify(
      {
        events,
        seconds,
        files,
        dead_letter_files: deadLetterFiles,
        timeline: m.timeline,
        peak_rss_bytes: peakRss(),
        // CPU time of every thread of the process (encoders and decoders included), in seconds.
        cpu_seconds: cpuSeconds(),
        // The same by thread, with each thread's peak heap and off-heap memory (thread-usage.ts).
        threads: result.threads,
        // The data each part of the pipeline held: its peak and its value when the RSS peaked (held-memory.ts).
        held_memory: result.held,
        // The sample with the highest RSS, by owner (held-memory.ts): the owners add up to its RSS.
        peak_rss_account: result.peakAccount,
        metrics: m.snapshot(),
        ...(p50 === null ? {} : { session_durable_seconds: { p50, p99 } }),
      },
      null,
      2,
    )}\n`;
  }
  const byLabel = (name: string) =>
    m
      .byLabel(name)
      .map(([k, v]) => `${k} ${fmt(v)}`)
      .join(", ");
  const sessions = m.total("sessions_finalized");
  const deadLetters = m.total("dead_letters");
  const tokensIn = m.total("tokens_received");
  const where = result.deadLetters;
  const lines = [
    `trajflow ${command}: ${fmt(result.events)} ${result.recordNoun} in ` +
      `${result.seconds.toFixed(2)} s (${fmt(Math.round(tokensIn / Math.max(result.seconds, 1e-9)))} tokens/s)`,
    `  sessions      ${fmt(sessions)} finalized${sessions > 0 ? ` (${byLabel("sessions_finalized")})` : ""}` +
      `, ${fmt(m.total("sessions_without_rows"))} without rows` +
      (m.total("sessions_cut") > 0 ? `, ${fmt(m.total("sessions_cut"))} cut by the open-session limits` : ""),
    `  rows          ${fmt(m.total("rows_written"))} in ${fmt(m.total("files_committed"))} file(s) under ${result.out}`,
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
    ...(m.total("topic_rows_produced") > 0
      ? [`  topic         ${fmt(m.total("topic_rows_produced"))} rows produced`]
      : []),
    ...(p50 === null || p99 === null
      ? []
      : [
          `  latency       session end -> durable file p50 ${(p50 * 1000).toFixed(0)} ms, p99 ${(p99 * 1000).toFixed(0)} ms`,
        ]),
    ...timing(m.timeline),
    ...resources(result),
    `  dead letters  ${fmt(deadLetters)}${deadLetters > 0 ? ` (${byLabel("dead_letters")}) in ${where}` : ""}`,
  ];
  return `${lines.join("\n")}\n`;
}
