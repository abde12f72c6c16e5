/**
 * The dead-letter file sink: rejected events as JSON lines under `<dir>/`, committed atomically like the
 * data files. Letters are buffered in memory until a file's worth (or the end) is reached; dead letters are
 * rare, and a run that rejects everything still writes every letter.
 */
import { join } from "node:path";
import type { Metrics } from "../../core/metrics.ts";
import type { DeadLetterOutput } from "../../core/records.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import { commitFile, removeStaleTemps } from "../shared/atomic-file.ts";

export interface DeadLetterFileSinkOptions {
  dir: string;
  /** Letters per file. */
  maxPerFile?: number;
}

export class DeadLetterFileSink implements DeadLetterOutput {
  private readonly dir: string;
  private readonly maxPerFile: number;
  private readonly metrics: Metrics;
  private lines: string[] = [];
  private fileIndex = 0;
  private pending: Promise<void> = Promise.resolve();
  readonly files: string[] = [];

  constructor(options: DeadLetterFileSinkOptions, metrics: Metrics) {
    this.dir = options.dir;
    this.maxPerFile = options.maxPerFile ?? 100_000;
    this.metrics = metrics;
  }

  async open(): Promise<void> {
    await removeStaleTemps(this.dir);
  }

  write(letter: DeadLetter): void {
    this.lines.push(JSON.stringify(letter));
    if (this.lines.length >= this.maxPerFile) {
      // Cut the file here, not when the write runs, so file boundaries depend on the input alone.
      const batch = this.lines;
      this.lines = [];
      this.pending = this.pending.then(() => this.commit(batch));
    }
  }

  private async commit(lines: string[]): Promise<void> {
    if (lines.length === 0) return;
    const path = join(this.dir, `dead-letters-${String(this.fileIndex++).padStart(5, "0")}.jsonl`);
    const outcome = await commitFile(path, Buffer.from(`${lines.join("\n")}\n`));
    this.files.push(path);
    this.metrics.inc("dead_letter_files_committed", outcome);
  }

  async close(): Promise<void> {
    await this.pending;
    const rest = this.lines;
    this.lines = [];
    await this.commit(rest);
  }
}
