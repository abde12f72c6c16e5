/** Rows → file bytes, for every format and engine. Runs on a worker thread (see ../worker.ts). */
import { tableToIPC } from "apache-arrow";
import { rowsToTable, trajectoryArrowSchema } from "../../../schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../../../schemas/trajectory.ts";
import { encodeParquetjs } from "./parquetjs.ts";
import { parquetTrajflowChunks } from "./parquet-trajflow.ts";
import type * as ParquetWasm from "./parquet-wasm.ts";
import { STATISTICS_COLUMNS, type EncodeOptions } from "./types.ts";

const statistics = new Set(STATISTICS_COLUMNS);

// parquet-wasm is loaded only by a worker that writes with it: its WebAssembly instance costs memory.
let parquetWasm: typeof ParquetWasm | null = null;

/** Bytes of WebAssembly memory parquet-wasm holds in this thread (0 when it was never loaded). */
export function wasmMemoryBytes(): number {
  return parquetWasm?.wasmMemoryBytes() ?? 0;
}

export async function encodeRows(rows: TrajectoryRow[], options: EncodeOptions): Promise<Uint8Array> {
  return Buffer.concat([...(await encodeRowsInChunks(rows, options))]);
}

/**
 * The file's bytes as chunks in order. trajflow's Parquet engine makes them lazily, a column chunk at a
 * time, as the consumer pulls (the file is never whole in memory); the other engines encode the whole
 * file first and hand it over as one chunk.
 */
export async function encodeRowsInChunks(
  rows: TrajectoryRow[],
  options: EncodeOptions,
): Promise<Iterable<Uint8Array>> {
  if (options.format === "arrow") {
    // Arrow IPC file format (random access, memory-mappable); metadata goes on the schema.
    return [tableToIPC(rowsToTable(rows, options.metadata), "file")];
  }
  if (options.engine === "parquetjs-lite") return [await encodeParquetjs(rows, options)];
  if (options.engine === "trajflow") {
    return parquetTrajflowChunks(rows, trajectoryArrowSchema, statistics, options);
  }
  parquetWasm ??= await import("./parquet-wasm.ts");
  return [parquetWasm.encodeParquetWasm(rowsToTable(rows), options)];
}
