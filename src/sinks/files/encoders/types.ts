/** File formats the file sink writes. */
export type FileFormat = "parquet" | "arrow";
/** Parquet engines: parquet-wasm (default, fast) or parquetjs-lite (pure JavaScript). */
export type ParquetEngine = "parquet-wasm" | "parquetjs-lite";
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

/** Which codecs each engine can write. */
export const ENGINE_CODECS: Record<ParquetEngine, readonly Compression[]> = {
  "parquet-wasm": ["zstd", "snappy", "gzip", "lz4", "none"],
  "parquetjs-lite": ["snappy", "gzip", "none"],
};
