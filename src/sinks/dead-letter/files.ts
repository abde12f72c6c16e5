/**
 * The dead-letter file sink: rejected events as JSON lines under `<dir>/`, committed atomically like the
 * data files. Letters are buffered until a file's worth, a file's age (unbounded sources) or the end;
 * each letter's ack is released once its file is in place, so a Kafka offset is never committed past a
 * dead letter that is not durable.
 *
 * Names: `dead-letters-NNNNN.jsonl` in order for a replay (the same input gives the same files), or with a
 * writer tag (`dead-letters-<tag>-NNNNN.jsonl`) where several processes share the directory.
 */
import { z } from "zod";
import type { DeadLetterSink } from "../../contract/components.ts";
import type { Ack } from "../../contract/ledger.ts";
import { isTrajflowError, TrajflowError } from "../../core/errors.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import { displayLocation } from "../shared/location.ts";
import { outputLocationSchema } from "../shared/location-schema.ts";
import { DEFAULT_S3_OPTIONS, s3OptionsSchema, type S3Options } from "../shared/s3-options.ts";
import { openStore } from "../shared/open-store.ts";
import type { Store } from "../shared/store.ts";

/** `dead_letters: { type: files, ... }` in a pipeline. */
export const deadLetterFilesConfigSchema = z.strictObject({
  path: outputLocationSchema.describe("Directory of dead-letter files, or s3://bucket/prefix."),
  s3: s3OptionsSchema.prefault({}).describe("The S3 client when `path` is s3://."),
});
export type DeadLetterFilesConfig = z.output<typeof deadLetterFilesConfigSchema>;

export interface DeadLetterFilesOptions {
  /** A directory or `s3://bucket/prefix`. */
  dir: string;
  /** The S3 client, when `dir` is s3://. */
  s3?: S3Options;
  /** Letters per file. */
  maxPerFile?: number;
  /**
   * Bytes of letters per file (default 8 MiB): letters wait in memory until their file is cut, and
   * 100,000 letters of a garbage flood held 80 MB (issue 27 item 10, under a 192 MB heap).
   */
  maxBytesPerFile?: number;
  /** Write buffered letters after this long (ms); absent: only when full or at the end. */
  maxAgeMs?: number;
  /** Other writers share the directory: names carry this tag. */
  writerTag?: string;
}

export class DeadLetterFiles implements DeadLetterSink {
  private readonly options: DeadLetterFilesOptions;
  private readonly maxPerFile: number;
  private readonly maxBytesPerFile: number;
  private readonly metrics: Metrics;
  private lines: string[] = [];
  private acks: Ack[] = [];
  private bufferedBytes = 0;
  private inFlightBytes = 0;
  private fileIndex = 0;
  private pending: Promise<void> = Promise.resolve();
  private failure: Error | null = null;
  private timer: NodeJS.Timeout | null = null;
  private oldest = 0;
  readonly files: string[] = [];
  readonly location: string;
  private store: Store | null = null;

  constructor(options: DeadLetterFilesOptions, metrics: Metrics) {
    this.options = options;
    this.location = displayLocation(options.dir);
    this.maxPerFile = options.maxPerFile ?? 100_000;
    this.maxBytesPerFile = options.maxBytesPerFile ?? 8 * 2 ** 20;
    this.metrics = metrics;
  }

  get backlogBytes(): number {
    return this.bufferedBytes + this.inFlightBytes;
  }

  async open(): Promise<void> {
    this.store = await openStore(this.options.dir, this.options.s3 ?? DEFAULT_S3_OPTIONS);
    await this.store.assertWritable("dead letters", false);
    await this.store.removeStale();
    const age = this.options.maxAgeMs;
    if (age !== undefined) {
      this.timer = setInterval(
        () => {
          if (this.lines.length > 0 && Date.now() - this.oldest >= age) this.cut();
        },
        Math.max(50, Math.floor(age / 4)),
      );
      this.timer.unref();
    }
  }

  write(letter: DeadLetter, ack: Ack | null): void {
    const line = JSON.stringify(letter);
    if (this.lines.length === 0) this.oldest = Date.now();
    this.lines.push(line);
    this.bufferedBytes += line.length + 1;
    if (ack !== null) this.acks.push(ack);
    // Cut here, not when the write runs, so file boundaries depend on the input alone.
    if (this.lines.length >= this.maxPerFile || this.bufferedBytes >= this.maxBytesPerFile) this.cut();
  }

  private cut(): void {
    const lines = this.lines;
    const acks = this.acks;
    const bytes = this.bufferedBytes;
    this.lines = [];
    this.acks = [];
    this.bufferedBytes = 0;
    this.inFlightBytes += bytes;
    this.pending = this.pending
      .then(() => this.commit(lines))
      .then(
        () => {
          for (const ack of acks) ack.release();
        },
        (err: Error) => {
          this.failure ??= err;
        },
      )
      .finally(() => (this.inFlightBytes -= bytes));
  }

  private async commit(lines: string[]): Promise<void> {
    if (lines.length === 0) return;
    const tag = this.options.writerTag === undefined ? "" : `${this.options.writerTag}-`;
    const name = `dead-letters-${tag}${String(this.fileIndex++).padStart(5, "0")}.jsonl`;
    const path = this.store!.url(name);
    let outcome;
    try {
      ({ outcome } = await this.store!.write(name, [Buffer.from(`${lines.join("\n")}\n`)]));
    } catch (err) {
      if (isTrajflowError(err)) throw err;
      throw new TrajflowError(
        "SINK_WRITE_FAILED",
        `could not write dead letters to ${path}: ${(err as Error).message}`,
        { cause: err },
      );
    }
    this.files.push(path);
    this.metrics.inc("dead_letter_files_committed", outcome);
  }

  async waitBelow(bytes: number): Promise<void> {
    if (this.backlogBytes <= bytes) return;
    if (this.bufferedBytes > 0) this.cut();
    await this.pending;
    if (this.failure !== null) throw this.failure;
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.cut();
    await this.pending;
    this.store?.close();
    if (this.failure !== null) throw this.failure;
  }
}
