/** Rows → file bytes, for every format and engine. Runs on a worker thread (see ../worker.ts). */
import { tableToIPC } from "apache-arrow";
import { rowsToTable } from "../../../schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../../../schemas/trajectory.ts";
import { encodeParquetjs } from "./parquetjs.ts";
import { encodeParquetWasm } from "./parquet-wasm.ts";
import type { EncodeOptions } from "./types.ts";

export async function encodeRows(rows: TrajectoryRow[], options: EncodeOptions): Promise<Uint8Array> {
  if (options.format === "arrow") {
    // Arrow IPC file format (random access, memory-mappable); metadata goes on the schema.
    return tableToIPC(rowsToTable(rows, options.metadata), "file");
  }
  if (options.engine === "parquetjs-lite") return encodeParquetjs(rows, options);
  return encodeParquetWasm(rowsToTable(rows), options);
}

export function fileExtension(options: Pick<EncodeOptions, "format">): string {
  return options.format === "arrow" ? ".arrow" : ".parquet";
}
