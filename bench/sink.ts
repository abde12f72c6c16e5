/**
 * Output benchmarks:
 * - Parquet encoding of assembled rows (Arrow batch from typed arrays → parquet-wasm → committed file),
 *   per codec, in token values/s (a value is one element of prompt_ids, response_ids, response_mask or
 *   rollout_log_probs);
 * - the whole replay path, JSONL file → Parquet files, in tokens/s of input.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { replay } from "../src/cli/replay.ts";
import { Metrics } from "../src/core/metrics.ts";
import { rowsToTable } from "../src/schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../src/schemas/trajectory.ts";
import { encodeParquet, type ParquetCompression } from "../src/sinks/parquet/encode.ts";
import { commitFile } from "../src/sinks/shared/atomic-file.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import { decodeAll, record } from "./harness.ts";
import { linearSession, type SessionShape } from "./workloads.ts";

// Realistic rows: 4k-token prompts, 8 turns, ~16k tokens per row.
const SHAPE: SessionShape = { initialPrompt: 4096, turns: 8, outputTokens: 1024, observationTokens: 512 };

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

export async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-"));
  try {
    const rows = assembledRows(256);
    let values = 0;
    for (const r of rows) values += r.prompt_ids.length + 3 * r.response_ids.length;
    for (const codec of ["zstd", "snappy", "none"] as ParquetCompression[]) {
      let best = Infinity;
      let bytes = 0;
      for (let i = 0; i < 4; i++) {
        const t = performance.now();
        const data = encodeParquet(rowsToTable(rows), { compression: codec, metadata: {} });
        await commitFile(join(dir, `${codec}-${i}.parquet`), data);
        const s = (performance.now() - t) / 1000;
        if (i > 0) best = Math.min(best, s);
        bytes = data.length;
      }
      record({
        bench: "sink",
        case: `rows → Parquet file (parquet-wasm, ${codec})`,
        value: values / best / 1e6,
        unit: "M values/s",
        note: `${rows.length} rows, ${(values / 1e6).toFixed(1)}M values, ${(bytes / 2 ** 20).toFixed(1)} MiB, ${(best * 1000).toFixed(0)} ms`,
      });
    }

    const input = join(dir, "events.jsonl");
    const lines: string[] = [];
    let tokens = 0;
    for (let s = 0; s < 128; s++) {
      for (const e of linearSession(SHAPE, "delta", {
        uid: `u${s}`,
        sessionId: "s",
        seed: s + 1,
        packed: true,
      })) {
        lines.push(JSON.stringify(e));
      }
    }
    for (const d of decodeAll(lines.map((l) => JSON.parse(l) as Record<string, unknown>))) {
      const e = d.event;
      if (e.type === "request") tokens += (e.prompt_ids ?? e.prompt_delta_ids)!.length;
      if (e.type === "response") tokens += e.output_ids.length;
    }
    writeFileSync(input, `${lines.join("\n")}\n`);
    let best = Infinity;
    let rowsOut = 0;
    for (let i = 0; i < 3; i++) {
      const result = await replay({
        inputs: [input],
        out: join(dir, `replay-${i}`),
        logger: pino({ level: "silent" }),
      });
      best = Math.min(best, result.seconds);
      rowsOut = result.metrics.total("rows_written");
    }
    record({
      bench: "replay",
      case: "JSONL (delta form, packed) → Parquet files, end to end",
      value: tokens / best / 1e6,
      unit: "M tokens/s",
      note: `${lines.length} events, ${rowsOut} rows of ~16k tokens, ${(best * 1000).toFixed(0)} ms`,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await run();
