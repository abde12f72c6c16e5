/** Small helpers shared by the benchmarks: timing with warm-up, and result records. */
import { readFileSync, writeFileSync } from "node:fs";
import { decodeEvent, type DecodedEvent } from "../src/transforms/assemble/decode/decode.ts";

export interface Result {
  bench: string;
  case: string;
  value: number;
  unit: string;
  note?: string;
}

export const results: Result[] = [];

export function record(r: Result): void {
  results.push(r);
  const v = r.value >= 100 ? Math.round(r.value).toLocaleString("en-US") : r.value.toFixed(2);
  console.log(
    `${r.bench.padEnd(10)} ${r.case.padEnd(52)} ${v.padStart(14)} ${r.unit}${r.note ? `  (${r.note})` : ""}`,
  );
}

/** The fastest of `runs` runs of an async case that times itself (run i gets i, e.g. for its own topic). */
export async function fastestOf<T extends { seconds: number }>(
  runs: number,
  once: (run: number) => Promise<T>,
): Promise<T> {
  let best: T | null = null;
  for (let i = 0; i < runs; i++) {
    const result = await once(i);
    if (best === null || result.seconds < best.seconds) best = result;
  }
  return best!;
}

/** Best of `runs` timed runs after one warm-up; returns seconds. Best-of filters scheduler noise. */
export function bestOf(runs: number, fn: () => void): number {
  fn();
  let best = Infinity;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    fn();
    best = Math.min(best, (performance.now() - t) / 1000);
  }
  return best;
}

export function decodeAll(events: Array<Record<string, unknown>>): DecodedEvent[] {
  return events.map((e, i) => {
    const r = decodeEvent({ raw: JSON.stringify(e), origin: { kind: "file", file: "bench", line: i + 1 } });
    if (r.kind !== "event") throw new Error(`bench workload has a ${r.kind} event`);
    return r.value;
  });
}

export function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/** Tokens arriving in events: prompt tokens as sent (full or delta) plus output tokens. */
export function tokensOf(events: DecodedEvent[]): number {
  let n = 0;
  for (const { event: e } of events) {
    if (e.type === "request") n += (e.prompt_ids ?? e.prompt_delta_ids)!.length;
    if (e.type === "response") n += e.output_ids.length;
  }
  return n;
}

/** `tokensOf` for wire lines (JSON text). */
export function tokensOfLines(lines: string[]): number {
  return tokensOf(decodeAll(lines.map((l) => JSON.parse(l) as Record<string, unknown>)));
}

/**
 * Puts `report` into BENCHMARKS.md between its `<!-- bench:<name> begin -->` and `end` markers (the prose
 * around them is written by hand), and says so; says why not when the markers are missing.
 */
export function writeBenchmarksSection(name: string, report: string): void {
  const file = new URL("../BENCHMARKS.md", import.meta.url).pathname;
  const [begin, end] = [`<!-- bench:${name} begin -->`, `<!-- bench:${name} end -->`];
  const text = readFileSync(file, "utf8");
  const from = text.indexOf(begin);
  const to = text.indexOf(end);
  if (from < 0 || to < from) {
    console.log(`\n(BENCHMARKS.md has no ${begin} ... ${end} section to update)`);
    return;
  }
  writeFileSync(file, `${text.slice(0, from + begin.length)}\n\n${report}\n\n${text.slice(to)}`);
  console.log("\nBENCHMARKS.md updated (run `npx prettier --write BENCHMARKS.md` to align the tables).");
}
