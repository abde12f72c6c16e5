/**
 * MoE routed experts through the whole replay path (issue 26 item 3): the same sessions with and without
 * 48-layer top-8 int16 routing (768 bytes a token, vLLM's `--enable-return-routed-experts` layout), JSONL
 * file → Parquet files. Reports MB/s read and written and the peak RSS above the process's baseline.
 */
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { replay } from "../src/cli/presets.ts";
import { gc, record, tokensOfLines } from "./harness.ts";
import { linearSession, type SessionShape } from "./workloads.ts";

const SHAPE: SessionShape = { initialPrompt: 4096, turns: 8, outputTokens: 1024, observationTokens: 512 };
const ROUTING = { layers: 48, topK: 8, experts: 128 };
const SESSIONS = 8;
const silent = pino({ level: "silent" });

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += statSync(join(entry.parentPath, entry.name)).size;
  }
  return total;
}

async function once(dir: string, routed: boolean): Promise<void> {
  const input = join(dir, routed ? "routed.jsonl" : "plain.jsonl");
  const lines: string[] = [];
  for (let s = 0; s < SESSIONS; s++) {
    const events = linearSession(SHAPE, "delta", {
      uid: `u${s}`,
      sessionId: "s",
      seed: s + 1,
      packed: true,
      ...(routed ? { routing: ROUTING } : {}),
    });
    for (const e of events) lines.push(JSON.stringify(e));
  }
  writeFileSync(input, `${lines.join("\n")}\n`);
  const tokens = tokensOfLines(lines);
  lines.length = 0;
  const inBytes = statSync(input).size;
  let best = Infinity;
  let outBytes = 0;
  let peak = 0;
  let rows = 0;
  for (let i = 0; i < 2; i++) {
    gc();
    const base = process.memoryUsage().rss;
    let high = base;
    const sampler = setInterval(() => (high = Math.max(high, process.memoryUsage().rss)), 5);
    const out = join(dir, `${routed ? "routed" : "plain"}-${i}`);
    const result = await replay({ inputs: [input], out, logger: silent, files: { max_rows_per_file: 4 } });
    clearInterval(sampler);
    best = Math.min(best, result.seconds);
    peak = Math.max(peak, high - base);
    outBytes = dirBytes(out);
    rows = result.metrics.total("rows_written");
    rmSync(out, { recursive: true, force: true });
  }
  const label = routed ? "48 layers x top-8 routed experts (int16)" : "the same sessions, no routing";
  record({
    bench: "routing",
    case: `replay in, ${label}`,
    value: inBytes / best / 2 ** 20,
    unit: "MiB/s",
    note: `${(inBytes / 2 ** 20).toFixed(0)} MiB of JSONL, ${SESSIONS} sessions, ${(tokens / best / 1e3).toFixed(0)}k tokens/s, ${(best * 1000).toFixed(0)} ms`,
  });
  record({
    bench: "routing",
    case: `replay out, ${label}`,
    value: outBytes / best / 2 ** 20,
    unit: "MiB/s",
    note: `${rows} rows, ${(outBytes / 2 ** 20).toFixed(1)} MiB of Parquet (zstd); peak RSS +${(peak / 2 ** 20).toFixed(0)} MiB`,
  });
}

export async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-routing-"));
  try {
    await once(dir, false);
    await once(dir, true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await run();
