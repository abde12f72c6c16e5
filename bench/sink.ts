/**
 * Output benchmarks, on realistic rows (4k-token prompts, 8 turns, ~16k tokens per row):
 * - each engine and codec: assembled rows → encoded bytes → committed file, in token values/s (a value is
 *   one element of prompt_ids, response_ids, response_mask or rollout_log_probs), and peak memory;
 * - the file sink as the pipeline uses it (encoding on a worker thread): throughput, and how long the
 *   ingest thread was blocked (event-loop delay), which must stay under 50 ms;
 * - the whole replay path, JSONL file → Parquet files.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { pino } from "pino";
import { replay } from "../src/cli/presets.ts";
import { Metrics } from "../src/core/metrics.ts";
import type { TrajectoryRow } from "../src/schemas/trajectory.ts";
import { fileSinkConfigSchema } from "../src/sinks/files/config.ts";
import { encodeRows } from "../src/sinks/files/encoders/index.ts";
import type { EncodeOptions } from "../src/sinks/files/encoders/types.ts";
import { FileSink } from "../src/sinks/files/sink.ts";
import { commitFile } from "../src/sinks/shared/atomic-file.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import { decodeAll, gc, record, tokensOfLines } from "./harness.ts";
import { linearSession, type SessionShape } from "./workloads.ts";

const SHAPE: SessionShape = { initialPrompt: 4096, turns: 8, outputTokens: 1024, observationTokens: 512 };
const silent = pino({ level: "silent" });

function assembledRows(sessions: number): TrajectoryRow[] {
  const a = new Assembler({
    config: assembleConfigSchema.parse({}),
    deadLetters: { write: () => {} },
    metrics: new Metrics(),
  });
  const rows: TrajectoryRow[] = [];
  for (let s = 0; s < sessions; s++) {
    for (const e of decodeAll(linearSession(SHAPE, "delta", { uid: `u${s}`, sessionId: "s", seed: s + 1 }))) {
      for (const o of a.push(e)) rows.push(...o.rows);
    }
  }
  for (const o of a.flush()) rows.push(...o.rows);
  return rows;
}

function valuesOf(rows: TrajectoryRow[]): number {
  let v = 0;
  for (const r of rows) v += r.prompt_ids.length + 3 * r.response_ids.length;
  return v;
}

async function engines(dir: string, rows: TrajectoryRow[]): Promise<void> {
  const values = valuesOf(rows);
  const cases: Array<[string, Omit<EncodeOptions, "metadata" | "rowGroupSize">, number]> = [
    ["trajflow, zstd (default)", { format: "parquet", engine: "trajflow", compression: "zstd" }, rows.length],
    ["trajflow, snappy", { format: "parquet", engine: "trajflow", compression: "snappy" }, rows.length],
    ["trajflow, lz4", { format: "parquet", engine: "trajflow", compression: "lz4" }, rows.length],
    ["trajflow, none", { format: "parquet", engine: "trajflow", compression: "none" }, rows.length],
    ["parquet-wasm, zstd", { format: "parquet", engine: "parquet-wasm", compression: "zstd" }, rows.length],
    [
      "parquet-wasm, snappy",
      { format: "parquet", engine: "parquet-wasm", compression: "snappy" },
      rows.length,
    ],
    ["parquet-wasm, none", { format: "parquet", engine: "parquet-wasm", compression: "none" }, rows.length],
    // parquetjs-lite builds one object per token: measured on fewer rows, reported per value.
    ["parquetjs-lite, snappy", { format: "parquet", engine: "parquetjs-lite", compression: "snappy" }, 16],
    ["parquetjs-lite, none", { format: "parquet", engine: "parquetjs-lite", compression: "none" }, 16],
    [
      "Arrow IPC file (no compression)",
      { format: "arrow", engine: "parquet-wasm", compression: "none" },
      rows.length,
    ],
  ];
  for (const [name, opts, n] of cases) {
    const subset = rows.slice(0, n);
    const subsetValues = n === rows.length ? values : valuesOf(subset);
    let best = Infinity;
    let bytes = 0;
    let peak = 0;
    for (let i = 0; i < (n === rows.length ? 3 : 2); i++) {
      gc();
      const base = process.memoryUsage().rss;
      const t = performance.now();
      const data = await encodeRows(subset, { ...opts, rowGroupSize: 4096, metadata: {} });
      await commitFile(join(dir, `${name.replace(/\W+/g, "-")}-${i}`), data);
      const s = (performance.now() - t) / 1000;
      peak = Math.max(peak, process.memoryUsage().rss - base);
      best = Math.min(best, s);
      bytes = data.length;
    }
    record({
      bench: "encode",
      case: name,
      value: subsetValues / best / 1e6,
      unit: "M values/s",
      note: `${subset.length} rows, ${(subsetValues / 1e6).toFixed(1)}M values → ${(bytes / 2 ** 20).toFixed(1)} MiB in ${(best * 1000).toFixed(0)} ms, rss +${(peak / 2 ** 20).toFixed(0)} MiB`,
    });
  }
}

async function sinkOffThread(dir: string, rowsFor: () => TrajectoryRow[]): Promise<void> {
  const rows = rowsFor();
  const values = valuesOf(rows);
  const config = fileSinkConfigSchema.parse({ path: join(dir, "sink"), max_rows_per_file: 64 });
  const sink = new FileSink(config, { metrics: new Metrics(), logger: silent });
  await sink.open();
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const t = performance.now();
  // Hand rows over one session at a time, as the assembler does, yielding like an ingest loop would.
  for (const row of rows) {
    await sink.write([row]);
    await new Promise((r) => setImmediate(r));
  }
  await sink.close();
  const s = (performance.now() - t) / 1000;
  delay.disable();
  record({
    bench: "sink",
    case: "file sink, trajflow zstd on a worker thread",
    value: values / s / 1e6,
    unit: "M values/s",
    note: `${rows.length} rows in ${sink.files.length} files, ${(s * 1000).toFixed(0)} ms end to end`,
  });
  record({
    bench: "sink",
    case: "ingest thread blocked while encoding (max event-loop delay)",
    value: delay.max / 1e6,
    unit: "ms",
    note: `p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms; target max < 50 ms`,
  });
}

async function replayEndToEnd(dir: string): Promise<void> {
  const input = join(dir, "events.jsonl");
  const lines: string[] = [];
  for (let s = 0; s < 128; s++) {
    for (const e of linearSession(SHAPE, "delta", {
      uid: `u${s}`,
      sessionId: "s",
      seed: s + 1,
      packed: true,
    }))
      lines.push(JSON.stringify(e));
  }
  const tokens = tokensOfLines(lines);
  writeFileSync(input, `${lines.join("\n")}\n`);
  let best = Infinity;
  let rowsOut = 0;
  let rowTokens = 0;
  for (let i = 0; i < 3; i++) {
    const result = await replay({
      inputs: [input],
      out: join(dir, `replay-${i}`),
      logger: silent,
      files: { max_rows_per_file: 32 },
    });
    best = Math.min(best, result.seconds);
    rowsOut = result.metrics.total("rows_written");
    rowTokens = result.metrics.total("tokens_emitted");
  }
  record({
    bench: "replay",
    case: "JSONL (delta form, packed) → Parquet files, end to end",
    value: tokens / best / 1e6,
    unit: "M tokens/s",
    note: `${lines.length} events → ${rowsOut} rows of ~16k tokens (${(rowTokens / best / 1e6).toFixed(1)}M row tokens/s written), ${(best * 1000).toFixed(0)} ms`,
  });
}

export async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-"));
  try {
    await engines(dir, assembledRows(256));
    await sinkOffThread(dir, () => assembledRows(256));
    await replayEndToEnd(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await run();
