/**
 * The `parquet` sink: trajectory rows → Parquet files committed atomically (see atomic-file.ts).
 * Rows are buffered and a file is cut by row count or token count. File numbering follows the order of
 * rows, so the same input always yields the same files.
 */
import { join } from "node:path";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { rowsToTable } from "../../schemas/trajectory-arrow.ts";
import { OUTPUT_SCHEMA_VERSION, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { commitFile, removeStaleTemps } from "../shared/atomic-file.ts";
import type { ParquetSinkConfig } from "./config.ts";
import { encodeParquet } from "./encode.ts";

export interface ParquetSinkContext {
  metrics: Metrics;
  logger: Logger;
  /** Key-value metadata written into every file (e.g. which input it came from). */
  metadata?: Record<string, string>;
}

export class ParquetSink {
  private readonly config: ParquetSinkConfig;
  private readonly ctx: ParquetSinkContext;
  private buffer: TrajectoryRow[] = [];
  private bufferedTokens = 0;
  private fileIndex = 0;
  private rowsCommitted = 0;
  readonly files: string[] = [];

  constructor(config: ParquetSinkConfig, ctx: ParquetSinkContext) {
    this.config = config;
    this.ctx = ctx;
  }

  /** Removes what a crashed writer left. Call once before writing. */
  async open(): Promise<void> {
    const removed = await removeStaleTemps(this.config.path);
    if (removed > 0) this.ctx.logger.warn({ removed }, "Removed temporary files left by an earlier crash.");
  }

  async write(rows: TrajectoryRow[]): Promise<void> {
    for (const row of rows) {
      this.buffer.push(row);
      this.bufferedTokens += row.prompt_ids.length + row.response_ids.length;
      if (
        this.buffer.length >= this.config.max_rows_per_file ||
        this.bufferedTokens >= this.config.max_tokens_per_file
      ) {
        await this.flush();
      }
    }
  }

  /** Writes buffered rows as one file now. */
  async flush(): Promise<void> {
    if (this.buffer.length === 0) return;
    const rows = this.buffer;
    const tokens = this.bufferedTokens;
    this.buffer = [];
    this.bufferedTokens = 0;
    const name = `part-${String(this.fileIndex).padStart(5, "0")}.parquet`;
    const path = join(this.config.path, name);
    const started = performance.now();
    const bytes = encodeParquet(rowsToTable(rows), {
      compression: this.config.compression,
      rowGroupSize: this.config.row_group_size,
      metadata: {
        "trajflow.schema_version": OUTPUT_SCHEMA_VERSION,
        "trajflow.first_row": String(this.rowsCommitted),
        "trajflow.rows": String(rows.length),
        ...this.ctx.metadata,
      },
    });
    const outcome = await commitFile(path, bytes);
    this.fileIndex++;
    this.rowsCommitted += rows.length;
    this.files.push(path);
    const { metrics } = this.ctx;
    metrics.inc("files_committed", outcome);
    metrics.inc("rows_written", "", rows.length);
    metrics.inc("bytes_written", "", outcome === "written" ? bytes.length : 0);
    this.ctx.logger.debug(
      {
        file: path,
        rows: rows.length,
        tokens,
        bytes: bytes.length,
        outcome,
        ms: Math.round(performance.now() - started),
      },
      "Committed a Parquet file.",
    );
  }

  async close(): Promise<void> {
    await this.flush();
  }
}
