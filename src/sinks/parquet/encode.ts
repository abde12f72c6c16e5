/** Arrow table → Parquet bytes with parquet-wasm (Rust's parquet crate compiled to WebAssembly). */
import { tableToIPC, type Table } from "apache-arrow";
import * as wasm from "parquet-wasm/node";

export type ParquetCompression = "zstd" | "snappy" | "gzip" | "lz4" | "none";

const CODECS: Record<ParquetCompression, wasm.Compression> = {
  zstd: wasm.Compression.ZSTD,
  snappy: wasm.Compression.SNAPPY,
  gzip: wasm.Compression.GZIP,
  lz4: wasm.Compression.LZ4_RAW,
  none: wasm.Compression.UNCOMPRESSED,
};

export interface ParquetEncodeOptions {
  compression: ParquetCompression;
  /** Parquet key-value metadata (schema version, the input range the file covers). */
  metadata: Record<string, string>;
  /** Rows per row group. */
  rowGroupSize?: number;
}

export function encodeParquet(table: Table, options: ParquetEncodeOptions): Uint8Array {
  const ipc = tableToIPC(table, "stream");
  const wasmTable = wasm.Table.fromIPCStream(ipc);
  let builder = new wasm.WriterPropertiesBuilder()
    .setCompression(CODECS[options.compression])
    .setCreatedBy("trajflow")
    .setKeyValueMetadata(new Map(Object.entries(options.metadata)));
  if (options.rowGroupSize !== undefined) builder = builder.setMaxRowGroupSize(options.rowGroupSize);
  const props = builder.build();
  // writeParquet consumes the table and the properties; WASM memory is released when it returns.
  return wasm.writeParquet(wasmTable, props);
}

/** Parquet bytes → Arrow IPC stream bytes (for readers: inspect and tests). */
export function parquetToIPC(bytes: Uint8Array): Uint8Array {
  const table = wasm.readParquet(bytes);
  return table.intoIPCStream();
}

/** A Parquet file's key-value metadata. */
export function parquetMetadata(bytes: Uint8Array): Record<string, string> {
  // The Arrow schema read from a Parquet file carries the file's key-value metadata.
  const schema = wasm.readSchema(bytes);
  try {
    return Object.fromEntries(schema.metadata());
  } finally {
    schema.free();
  }
}
