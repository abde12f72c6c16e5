/** Rows → file bytes, for every format and engine. Runs on a worker thread (see ../worker.ts). */
import type * as Arrow from "apache-arrow";
import type * as TrajectoryArrow from "../../../schemas/trajectory-arrow.ts";
import { ROW_COLUMNS, type TrajectoryRow } from "../../../schemas/trajectory.ts";
import { parquetTrajflowChunks } from "./parquet-trajflow.ts";
import type * as Parquetjs from "./parquetjs.ts";
import type * as ParquetWasm from "./parquet-wasm.ts";
import { STATISTICS_COLUMNS, type EncodeOptions } from "./types.ts";

const statistics = new Set(STATISTICS_COLUMNS);

// The other engines and formats are loaded only by a worker that writes with them: parquet-wasm's
// WebAssembly instance costs memory; apache-arrow costs each encoder ~190 ms of CPU and ~23 MiB to load,
// parquetjs-lite ~45 ms and ~9 MiB (measured).
let parquetWasm: typeof ParquetWasm | null = null;
let parquetjs: typeof Parquetjs | null = null;
let arrow: { ipc: typeof Arrow.tableToIPC; rows: typeof TrajectoryArrow.rowsToTable } | null = null;

async function loadArrow(): Promise<NonNullable<typeof arrow>> {
  if (arrow === null) {
    const [{ tableToIPC }, { rowsToTable }] = await Promise.all([
      import("apache-arrow"),
      import("../../../schemas/trajectory-arrow.ts"),
    ]);
    arrow = { ipc: tableToIPC, rows: rowsToTable };
  }
  return arrow;
}

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
    const { ipc, rows: toTable } = await loadArrow();
    return [ipc(toTable(rows, options.metadata), "file")];
  }
  if (options.engine === "parquetjs-lite") {
    parquetjs ??= await import("./parquetjs.ts");
    return [await parquetjs.encodeParquetjs(rows, options)];
  }
  if (options.engine === "trajflow") {
    return parquetTrajflowChunks(rows, ROW_COLUMNS, statistics, options);
  }
  const { rows: toTable } = await loadArrow();
  parquetWasm ??= await import("./parquet-wasm.ts");
  return [parquetWasm.encodeParquetWasm(toTable(rows), options)];
}
