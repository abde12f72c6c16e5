/**
 * Columns → file bytes, for every format and engine, chosen from one table. Runs on a worker thread (see
 * ../worker.ts), reading the columns as the pool handed them over (../row-columns.ts).
 */
import type { TrajectoryRow } from "../../../schemas/trajectory.ts";
import { ROW_COLUMNS } from "../../../schemas/trajectory.ts";
import { columnsOfRows, type Columns } from "../row-columns.ts";
import { parquetTrajflowChunks } from "./parquet-trajflow.ts";
import type * as ParquetWasm from "./parquet-wasm.ts";
import { STATISTICS_COLUMNS, type EncodeOptions, type ParquetEngine } from "./types.ts";

const statistics = new Set(STATISTICS_COLUMNS);

/**
 * An encoder: the file's bytes as chunks in order. trajflow's Parquet engine makes them lazily, a column
 * chunk at a time, as the consumer pulls (the file is never whole in memory); the others encode the whole
 * file first and hand it over as one chunk.
 */
type Encoder = (columns: Columns, options: EncodeOptions) => Promise<Iterable<Uint8Array>>;

// The other engines and formats are loaded only by a worker that writes with them: parquet-wasm's
// WebAssembly instance costs memory; apache-arrow costs each encoder ~190 ms of CPU and ~23 MiB to load,
// parquetjs-lite ~45 ms and ~9 MiB (measured).
let parquetWasm: typeof ParquetWasm | null = null;
const arrowTable = async (columns: Columns, metadata?: Record<string, string>) =>
  (await import("../../../schemas/trajectory-arrow.ts")).columnsToTable(
    columns.values,
    columns.count,
    metadata,
  );

/** Each Parquet engine's encoder, and Arrow IPC's. */
const ENCODERS: Record<ParquetEngine | "arrow", Encoder> = {
  trajflow: (columns, options) =>
    Promise.resolve(parquetTrajflowChunks(columns.values, columns.count, ROW_COLUMNS, statistics, options)),
  "parquet-wasm": async (columns, options) => {
    const table = await arrowTable(columns);
    parquetWasm ??= await import("./parquet-wasm.ts");
    return [parquetWasm.encodeParquetWasm(table, options)];
  },
  "parquetjs-lite": async (columns, options) => [
    await (await import("./parquetjs.ts")).encodeParquetjs(columns, options),
  ],
  // Arrow IPC file format (random access, memory-mappable); metadata goes on the schema.
  arrow: async (columns, options) => {
    const { tableToIPC } = await import("apache-arrow");
    return [tableToIPC(await arrowTable(columns, options.metadata), "file")];
  },
};

/** Bytes of WebAssembly memory parquet-wasm holds in this thread (0 when it was never loaded). */
export function wasmMemoryBytes(): number {
  return parquetWasm?.wasmMemoryBytes() ?? 0;
}

/** The file's bytes as chunks in order (see Encoder). */
export function encodeColumnsInChunks(
  columns: Columns,
  options: EncodeOptions,
): Promise<Iterable<Uint8Array>> {
  return ENCODERS[options.format === "arrow" ? "arrow" : options.engine](columns, options);
}

/** Rows on this thread → the whole file's bytes (warm-up, benchmarks, tests). */
export async function encodeRows(
  rows: readonly TrajectoryRow[],
  options: EncodeOptions,
): Promise<Uint8Array> {
  return Buffer.concat([...(await encodeColumnsInChunks(columnsOfRows(rows), options))]);
}
