/** Rows → file bytes, for every format and engine. Runs on a worker thread (see ../worker.ts). */
import { tableToIPC } from "apache-arrow";
import { rowsToTable, trajectoryArrowSchema } from "../../../schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../../../schemas/trajectory.ts";
import { encodeParquetjs } from "./parquetjs.ts";
import { encodeParquetTrajflow } from "./parquet-trajflow.ts";
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
  if (options.format === "arrow") {
    // Arrow IPC file format (random access, memory-mappable); metadata goes on the schema.
    return tableToIPC(rowsToTable(rows, options.metadata), "file");
  }
  if (options.engine === "parquetjs-lite") return encodeParquetjs(rows, options);
  if (options.engine === "trajflow") {
    return encodeParquetTrajflow(rows, trajectoryArrowSchema, statistics, options);
  }
  parquetWasm ??= await import("./parquet-wasm.ts");
  return parquetWasm.encodeParquetWasm(rowsToTable(rows), options);
}
