/**
 * The memory a pipeline is given (`--max-memory`, or the container's cgroup limit read at start) and the
 * defaults it sizes: each component that holds data in proportion to a setting (fetched batches, records
 * handed to decode workers, open sessions, rows waiting for a file, files being encoded) gets that
 * setting's default from the limit, unless the pipeline sets it (docs/operations.md, "Memory").
 *
 * The shares come from the peak RSS's account by owner (BENCHMARKS.md, "Memory in catch-up"): at the
 * smallest settings a catch-up still peaks at ~300 MiB (fixed memory ~90, heaps ~70, the main thread's
 * off-heap memory ~70-100: the Kafka client's fetched and decompressed batches and Buffers not yet
 * collected; the allocator's ~50), the floor (`MEMORY_FLOOR`); what the limit leaves above it is the data
 * budget (`dataBudget`) that bounds the rows (a file's rows are held up to three times while they are
 * written: waiting, handed to the encoder, encoded) and open sessions.
 */
import { totalmem } from "node:os";

const MiB = 2 ** 20;

/** What a catch-up peaks at with the smallest settings (see above). */
export const MEMORY_FLOOR = 320 * MiB;

/** The smallest limit `--max-memory` takes: the floor and a little data. */
export const MIN_MEMORY_LIMIT = 384 * MiB;

/** What a limit leaves for data above the floor (at least 32 MiB: a cgroup limit below the minimum). */
export function dataBudget(limit: number): number {
  return Math.max(32 * MiB, limit - MEMORY_FLOOR);
}

export interface MemoryLimit {
  bytes: number;
  /** Where it came from: the flag, or the cgroup the process runs in. */
  source: "--max-memory" | "cgroup";
}

/**
 * The limit: `maxMemory` (bytes) when given, else the cgroup's (v1 or v2, as libuv reads it) when it is
 * below the host's memory, else none.
 */
export function memoryLimit(maxMemory: number | undefined): MemoryLimit | null {
  if (maxMemory !== undefined) return { bytes: maxMemory, source: "--max-memory" };
  const constrained = process.constrainedMemory();
  if (constrained > 0 && constrained < totalmem()) return { bytes: constrained, source: "cgroup" };
  return null;
}

/**
 * A size as operators write a pod's limit: a number of MiB, or with a unit (`768MiB`, `2GiB`, `2Gi`,
 * `1.5G`; K, M, G are read as binary units too). Null when it is not a size.
 */
export function parseMemorySize(text: string): number | null {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(k|ki|kib|m|mi|mib|g|gi|gib)?\s*$/i.exec(text);
  if (m === null) return null;
  const unit = (m[2] ?? "m")[0]!.toLowerCase();
  const scale = unit === "k" ? 2 ** 10 : unit === "g" ? 2 ** 30 : MiB;
  return Math.floor(Number(m[1]) * scale);
}

/** `value` kept within [low, high], rounded down to whole KiB. */
export function clampSize(value: number, low: number, high: number): number {
  return Math.floor(Math.min(high, Math.max(low, value)) / 1024) * 1024;
}

/**
 * Under this limit the sizing runs no decode worker: a thread's isolate costs 20-40 MiB before it
 * decodes anything, and the events are decoded on the ingest thread instead (slower on a host with a
 * core to spare, BENCHMARKS.md).
 */
export const DECODE_WORKER_MIN_LIMIT = 512 * MiB;

/** Decode workers under `limit`: none below DECODE_WORKER_MIN_LIMIT, else the source's own default. */
export function decodeWorkersFor(limit: number): { decode_workers?: number } {
  return limit < DECODE_WORKER_MIN_LIMIT ? { decode_workers: 0 } : {};
}
