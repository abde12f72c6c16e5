import { ROW_COLUMNS } from "../../../schemas/trajectory.ts";

/** File formats the file sink writes. */
export type FileFormat = "parquet" | "arrow";
/**
 * Parquet engines: trajflow (default: the project's own writer, ./parquet-trajflow.ts), parquet-wasm
 * (Rust's parquet crate as WebAssembly) or parquetjs-lite (pure JavaScript, slow).
 */
export type ParquetEngine = "trajflow" | "parquet-wasm" | "parquetjs-lite";
export type Compression = "zstd" | "snappy" | "gzip" | "lz4" | "none";

/** Everything an encoder needs besides the rows. Plain data: it crosses to worker threads. */
export interface EncodeOptions {
  format: FileFormat;
  engine: ParquetEngine;
  compression: Compression;
  rowGroupSize: number;
  /** Key-value metadata stored in the file (Parquet key-value metadata, or Arrow schema metadata). */
  metadata: Record<string, string>;
}

export function fileExtension(options: Pick<EncodeOptions, "format">): string {
  return options.format === "arrow" ? ".arrow" : ".parquet";
}

/** Which codecs each engine can write. */
export const ENGINE_CODECS: Record<ParquetEngine, readonly Compression[]> = {
  trajflow: ["zstd", "snappy", "gzip", "lz4", "none"],
  "parquet-wasm": ["zstd", "snappy", "gzip", "lz4", "none"],
  "parquetjs-lite": ["snappy", "gzip", "none"],
};

/**
 * Columns whose chunks carry min/max/null-count statistics (`stats` in ROW_COLUMNS), so readers skip row
 * groups when filtering on them (DuckDB, pyarrow datasets). Token columns get none: no reader filters on them.
 */
export const STATISTICS_COLUMNS: readonly string[] = ROW_COLUMNS.filter((c) => c.stats).map((c) => c.name);
