/**
 * The file sinks (`parquet`, `arrow`): trajectory rows → files committed exactly once.
 *
 * Rows are buffered and cut into a file by row count, token count or (optionally) age. A batch passed to
 * one `write` call (e.g. a whole GRPO group) always lands in one file. Encoding and the atomic commit run
 * on worker threads; `write` waits only when `max_in_flight` files are already being written
 * (backpressure). Each write's `onDurable` callback runs once its file is renamed into place: that is when
 * a source may acknowledge the input.
 *
 * File names follow the order of rows (part-00000, part-00001, ...), so the same input gives the same
 * files; with partitioning each cut writes one file per partition directory.
 */
import { killPoint } from "../../core/kill-points.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { OUTPUT_SCHEMA_VERSION, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { openStore } from "../shared/open-store.ts";
import type { Store } from "../shared/store.ts";
import type { FileSinkConfig } from "./config.ts";
import { fileExtension } from "./encoders/types.ts";
import type { EncodeOptions } from "./encoders/types.ts";
import { EncoderPool } from "./pool.ts";

export interface FileSinkContext {
  metrics: Metrics;
  logger: Logger;
  /**
   * Names a cut (without extension) from the tags of the writes it holds; default `part-NNNNN`. Sources
   * whose input has ranges (Kafka offsets) name files after the range they cover.
   */
  nameCut?: (cutIndex: number, tags: unknown[]) => string;
  /**
   * Extra file metadata computed from the tags of the writes a file holds (e.g. which sessions and
   * offsets it holds: with partitioning, each file lists only its own).
   */
  describeCut?: (tags: unknown[]) => Record<string, string>;
  /**
   * Asked just before a file is renamed into place: false means this process no longer owns the input
   * (a consumer expelled from its group), and the file is dropped instead (counted in files_fenced).
   */
  fence?: () => Promise<boolean>;
  /** An encoder pool shared with other sinks (one per partition); the sink then does not close it. */
  pool?: EncoderPool;
  /** The store of `config.path`, shared with other sinks; default: one of its own. */
  store?: Store;
  /**
   * The lowest name position (a Kafka offset, for files named by offsets) a file of this lane committed
   * from now on can have: the lane's committable offset. Default, for files numbered by cut: the cut
   * number less `max_in_flight - 1`, every cut below it landed first. Recorded as `trajflow.low_water`:
   * a reader that consumed a file knows no later file of its lane sorts below that (docs/sinks.md), so
   * its cursor needs no list of every file ever read.
   */
  lowWater?: () => number;
  /**
   * Temporaries of writers that cannot be identified as crashed (another host) are removed once older
   * than this; default 10 minutes (atomic-file.ts).
   */
  sharedDirectoryTempAgeMs?: number;
}

interface Buffered {
  rows: TrajectoryRow[];
  onDurable: (() => void) | undefined;
  tag: unknown;
}

/**
 * The partition directory of one write (a session, or a GRPO group): chosen from its newest row, so a
 * write is never split across directories (a group stays whole; a session's rows stay together).
 */
/** The bytes of a row's array columns: what a buffered row holds beyond a few small fields. */
export function rowBytes(r: TrajectoryRow): number {
  return (
    r.prompt_ids.byteLength +
    r.response_ids.byteLength +
    r.response_mask.byteLength +
    (r.rollout_log_probs?.byteLength ?? 0) +
    (r.token_policy_versions?.byteLength ?? 0) +
    (r.routed_experts?.byteLength ?? 0)
  );
}

function partitionOf(rows: readonly TrajectoryRow[], by: FileSinkConfig["partition_by"]): string {
  if (by === "none") return "";
  if (by === "date") {
    let newest = -Infinity;
    for (const r of rows) if (r.ended_at_ms > newest) newest = r.ended_at_ms;
    return `date=${new Date(newest).toISOString().slice(0, 10)}`;
  }
  let version: number | null = null;
  for (const r of rows)
    if (r.weight_version_max !== null && (version === null || r.weight_version_max > version))
      version = r.weight_version_max;
  return `policy=${version ?? "none"}`;
}

/** A cut's writes grouped by partition directory ("" without partitioning), in the order they came. */
function byPartition(
  batches: readonly Buffered[],
  by: FileSinkConfig["partition_by"],
): Map<string, { rows: TrajectoryRow[]; tags: unknown[] }> {
  const out = new Map<string, { rows: TrajectoryRow[]; tags: unknown[] }>();
  for (const b of batches) {
    if (b.rows.length === 0) continue;
    const p = partitionOf(b.rows, by);
    let part = out.get(p);
    if (part === undefined) {
      part = { rows: [], tags: [] };
      out.set(p, part);
    }
    for (const row of b.rows) part.rows.push(row);
    if (b.tag !== undefined) part.tags.push(b.tag);
  }
  return out;
}

export class FileSink {
  private readonly config: FileSinkConfig;
  private readonly ctx: FileSinkContext;
  private readonly pool: EncoderPool;
  private readonly ownsPool: boolean;
  private store: Store | null;
  private buffer: Buffered[] = [];
  private bufferedRows = 0;
  private bufferedTokens = 0;
  /** rowBytes of the buffered rows. */
  private bufferedBytes = 0;
  /** rowBytes of the rows cut and not yet landed (being encoded, written, uploaded). */
  private writingBytes = 0;
  private oldestBuffered = 0;
  private cutIndex = 0;
  private rowsCut = 0;
  private readonly inFlight = new Set<Promise<void>>();
  /** Cuts dispatched and not settled (committed, fenced or failed). */
  private readonly cutsInFlight = new Set<number>();
  private failure: Error | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Committed file paths, in the order they were cut. */
  readonly files: string[] = [];
  /** Of `files`, the names (within the store) of those this sink created, not found committed already. */
  readonly created: string[] = [];

  constructor(config: FileSinkConfig, ctx: FileSinkContext) {
    this.config = config;
    this.ctx = ctx;
    this.ownsPool = ctx.pool === undefined;
    this.pool =
      ctx.pool ??
      new EncoderPool(config.encode_workers, { warmUp: config, location: config.path, s3: config.s3 });
    this.store = ctx.store ?? null;
  }

  /** Removes what a crashed writer left behind and starts the age timer. Call once before writing. */
  async open(): Promise<void> {
    this.store ??= await openStore(this.config.path, this.config.s3);
    const removed = await this.store.removeStale(this.ctx.sharedDirectoryTempAgeMs);
    if (removed > 0) {
      this.ctx.logger.warn(
        { removed, path: this.store.location },
        "Removed temporary files (or unfinished uploads) left by an earlier crash.",
      );
      this.ctx.metrics.inc("stale_temp_files_removed", "", removed);
    }
    const age = this.config.max_file_age_ms;
    if (age !== undefined) {
      this.timer = setInterval(
        () => {
          if (this.bufferedRows > 0 && Date.now() - this.oldestBuffered >= age) {
            this.cut().catch((err: Error) => (this.failure ??= err));
          }
        },
        // Checked often enough that a file lands within 250 ms of its age (latency is a product figure).
        Math.max(50, Math.min(250, Math.floor(age / 4))),
      );
      this.timer.unref();
    }
  }

  private throwIfFailed(): void {
    if (this.failure !== null) throw this.failure;
  }

  /**
   * Adds rows (kept together in one file). The rows are handed over to the sink. Resolves when they are
   * buffered, or dispatched for writing if they completed a file.
   */
  async write(rows: TrajectoryRow[], onDurable?: () => void, tag?: unknown): Promise<void> {
    this.throwIfFailed();
    if (rows.length === 0) {
      // Nothing to write: durable once the files already dispatched are. Never buffered: a flood of
      // sessions without rows would pile up behind a cut that no row triggers (measured: 200,000 of
      // them exhausted a 192 MB heap).
      if (onDurable === undefined) return;
      if (this.inFlight.size === 0) onDurable();
      else {
        void Promise.all([...this.inFlight]).then(() => {
          if (this.failure === null) onDurable();
        });
      }
      return;
    }
    if (this.bufferedRows === 0) this.oldestBuffered = Date.now();
    this.buffer.push({ rows, onDurable, tag });
    this.bufferedRows += rows.length;
    for (const r of rows) {
      this.bufferedTokens += r.prompt_ids.length + r.response_ids.length;
      this.bufferedBytes += rowBytes(r);
    }
    if (
      this.bufferedRows >= this.config.max_rows_per_file ||
      this.bufferedTokens >= this.config.max_tokens_per_file ||
      this.bufferedBytes >= this.config.max_bytes_per_file
    ) {
      await this.cut();
    }
  }

  /** Bytes of the rows' arrays it holds: buffered for the next file, and cut but not yet landed. */
  get held(): { buffered: number; writing: number } {
    return { buffered: this.bufferedBytes, writing: this.writingBytes };
  }

  /** Cuts the buffered rows into file(s) now and dispatches them; waits while too many are in flight. */
  async cut(): Promise<void> {
    this.throwIfFailed();
    if (this.buffer.length === 0) return;
    const batches = this.buffer;
    this.buffer = [];
    const rows = batches.flatMap((b) => b.rows);
    const callbacks = batches.map((b) => b.onDurable).filter((f) => f !== undefined);
    const tokens = this.bufferedTokens;
    const bytes = this.bufferedBytes;
    this.bufferedRows = 0;
    this.bufferedTokens = 0;
    this.bufferedBytes = 0;
    if (rows.length === 0) {
      this.acknowledgeEmpty(callbacks);
      return;
    }

    const tags = batches.filter((b) => b.rows.length > 0 && b.tag !== undefined).map((b) => b.tag);
    const base = this.ctx.nameCut?.(this.cutIndex, tags) ?? `part-${String(this.cutIndex).padStart(5, "0")}`;
    this.cutIndex++;
    const name = `${base}${fileExtension(this.config)}`;
    const cut = this.cutIndex - 1;
    const firstRow = this.rowsCut;
    this.rowsCut += rows.length;
    const lowWater = this.ctx.lowWater?.() ?? Math.max(0, cut - (this.config.max_in_flight - 1));
    if (this.ctx.lowWater === undefined) {
      // Files numbered by cut: every cut below the low water has landed before this one is dispatched,
      // so the recorded value holds in whatever order the workers finish, and is the same in every run
      // (a replay rerun after a crash must write the same bytes).
      while ([...this.cutsInFlight].some((c) => c < lowWater)) await Promise.race(this.inFlight);
      this.throwIfFailed();
    }
    this.cutsInFlight.add(cut);
    const writes: Array<Promise<boolean>> = [];
    for (const [partition, part] of byPartition(batches, this.config.partition_by)) {
      const file = partition === "" ? name : `${partition}/${name}`;
      const metadata = { cut, lowWater, firstRow, rows: part.rows.length };
      writes.push(this.commit(file, part.rows, this.encodeOptions(metadata, part.tags)));
    }
    this.track(writes, callbacks, bytes, cut);
    this.ctx.logger.debug({ file: name, rows: rows.length, tokens }, "Cut a file.");
    while (this.inFlight.size >= this.config.max_in_flight) await Promise.race(this.inFlight);
    this.throwIfFailed();
  }

  /** Only acknowledgements of empty writes: they are durable once everything before them is. */
  private acknowledgeEmpty(callbacks: Array<() => void>): void {
    const before = [...this.inFlight];
    const tracked: Promise<void> = Promise.all(before)
      .then(() => {
        if (this.failure === null) for (const f of callbacks) f();
      })
      .finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }

  /** How a cut's file is encoded, with the metadata that says where its rows sit in the output. */
  private encodeOptions(
    cut: { cut: number; lowWater: number; firstRow: number; rows: number },
    tags: unknown[],
  ): EncodeOptions {
    return {
      format: this.config.format,
      engine: this.config.engine,
      compression: this.config.compression,
      rowGroupSize: this.config.row_group_size,
      metadata: {
        "trajflow.schema_version": OUTPUT_SCHEMA_VERSION,
        "trajflow.engine": this.config.format === "arrow" ? "apache-arrow" : this.config.engine,
        "trajflow.cut": String(cut.cut),
        "trajflow.low_water": String(cut.lowWater),
        "trajflow.first_row": String(cut.firstRow),
        "trajflow.rows": String(cut.rows),
        ...this.ctx.describeCut?.(tags),
      },
    };
  }

  /** Tracks a cut in flight until its files land; its writes' callbacks run once all of them did. */
  private track(
    writes: Array<Promise<boolean>>,
    callbacks: Array<() => void>,
    bytes: number,
    cut: number,
  ): void {
    // A cut is durable once every one of its files is; a fenced file leaves its input unacknowledged.
    const all = Promise.all(writes).then((landed) => {
      if (landed.every((l) => l)) for (const f of callbacks) f();
    });
    this.writingBytes += bytes;
    const tracked: Promise<void> = all
      .catch((err: Error) => {
        this.failure ??= err;
      })
      .finally(() => {
        this.writingBytes -= bytes;
        this.inFlight.delete(tracked);
        this.cutsInFlight.delete(cut);
      });
    this.inFlight.add(tracked);
  }

  /** Encodes and commits one file; false when a fence refused it (nothing landed). */
  private async commit(name: string, rows: TrajectoryRow[], options: EncodeOptions): Promise<boolean> {
    const count = rows.length;
    const fence = this.ctx.fence;
    const store = this.store!;
    const path = store.url(name);
    killPoint("sink.commit-begin");
    const done = await this.pool.run(name, rows, options, fence !== undefined);
    const { metrics } = this.ctx;
    let outcome = done.outcome;
    if (fence !== undefined) {
      const staged = done.staged!;
      const dropped = async (why: string) => {
        await store.discard(staged);
        metrics.inc("files_fenced");
        this.ctx.logger.warn({ file: path }, why);
        return false;
      };
      if (!(await fence())) return dropped("Dropped a file: this process no longer owns its input.");
      // Published in this same turn of the event loop as the fence's answer (a local link is synchronous;
      // an S3 completion is sent now).
      outcome = await store.publish(staged);
      if (outcome === null) {
        return dropped("Dropped a file: the partition's next owner aborted its upload.");
      }
    }
    killPoint("sink.committed");
    metrics.inc("files_committed", outcome!);
    metrics.fileCommitted();
    metrics.inc("rows_written", "", count);
    metrics.inc("bytes_written", "", outcome === "written" ? done.bytes : 0);
    metrics.inc("encode_ms", "", done.encodeMs);
    this.files.push(path);
    if (outcome === "written") this.created.push(name);
    this.ctx.logger.debug(
      {
        file: path,
        rows: count,
        bytes: done.bytes,
        outcome,
        encodeMs: Math.round(done.encodeMs),
      },
      "Committed a file.",
    );
    return true;
  }

  /** Waits until every dispatched file is committed. */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.race(this.inFlight);
    this.throwIfFailed();
  }

  /**
   * Gives up what is buffered (its `onDurable` callbacks never run) and stops the age timer, so nothing
   * more of this sink lands except files already being written (`drain` waits for those). A source that
   * lost its partition calls this: the rows' offsets were never committed, so the next owner rebuilds them.
   */
  abandon(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.ctx.metrics.inc("rows_abandoned", "", this.bufferedRows);
    this.buffer = [];
    this.bufferedRows = 0;
    this.bufferedTokens = 0;
    this.bufferedBytes = 0;
  }

  /** Writes what is buffered, waits for every file, and stops the workers. */
  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    try {
      await this.cut();
      await this.drain();
    } finally {
      if (this.ownsPool) await this.pool.close();
      if (this.ctx.store === undefined) this.store?.close();
    }
  }
}
