/**
 * A progress bar with ETA for replays, drawn on stderr when it is a terminal (never into logs or pipes):
 * bytes read of the input files' total size (compressed bytes for .gz inputs).
 */
import { statSync } from "node:fs";
import type { Metrics } from "../core/metrics.ts";
import type { JsonlProgress } from "../sources/jsonl/jsonl.ts";

export function progressBar(paths: string[]): ((p: JsonlProgress, m: Metrics) => void) | undefined {
  if (process.stderr.isTTY !== true) return undefined;
  let total = 0;
  for (const path of paths) {
    try {
      total += statSync(path).size;
    } catch {
      return undefined; // the replay reports the unreadable file
    }
  }
  const started = performance.now();
  return (progress, metrics) => {
    const done = total === 0 ? 1 : Math.min(1, progress.bytesRead / total);
    const seconds = (performance.now() - started) / 1000;
    const eta = done > 0 ? (seconds / done) * (1 - done) : 0;
    const width = 30;
    const bar = "#".repeat(Math.round(done * width)).padEnd(width, ".");
    const rate = progress.bytesRead / 2 ** 20 / Math.max(seconds, 1e-9);
    process.stderr.write(
      `\r[${bar}] ${(done * 100).toFixed(0).padStart(3)}%  ${rate.toFixed(1)} MiB/s  ETA ${eta.toFixed(0)} s  ` +
        `${metrics.total("events_read").toLocaleString("en-US")} events  ${metrics.total("rows_written").toLocaleString("en-US")} rows`,
    );
    if (done >= 1) process.stderr.write("\n");
  };
}
