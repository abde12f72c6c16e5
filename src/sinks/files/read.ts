/** Reading trajectory files back (inspect, recovery, tests): Parquet from any engine, and Arrow IPC files. */
import { promises as fs } from "node:fs";
import { basename, dirname, join } from "node:path";
import { TrajflowError } from "../../core/errors.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { LocalStore } from "../shared/local-store.ts";
import { DATA_FILE, hidden, type Store } from "../shared/store.ts";
import { storedParquetKeyValues } from "./parquet-footer.ts";

// Loaded on first use: parquet-wasm's WebAssembly instance and apache-arrow cost memory and start-up time
// a writing process does not need (recovery reads Parquet footers only).
const parquetWasm = () => import("./encoders/parquet-wasm.ts");
const arrow = () => import("apache-arrow");

/** Data files under `path` in name order, skipping hidden and temporary names as dataset readers do. */
export async function listDataFiles(path: string): Promise<string[]> {
  let stat;
  try {
    stat = await fs.stat(path);
  } catch (err) {
    throw new TrajflowError("SOURCE_READ_FAILED", `cannot read ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (stat.isFile()) return [path];
  const out: string[] = [];
  const entries = (await fs.readdir(path, { withFileTypes: true })).sort((a, b) =>
    a.name < b.name ? -1 : 1,
  );
  for (const entry of entries) {
    if (hidden(entry.name)) continue;
    const full = join(path, entry.name);
    if (entry.isDirectory()) out.push(...(await listDataFiles(full)));
    else if (DATA_FILE.test(entry.name)) out.push(full);
  }
  return out;
}

export async function readRows(file: string): Promise<TrajectoryRow[]> {
  return rowsOfFile(await fs.readFile(file), file.endsWith(".arrow"));
}

/** The rows of a file's bytes (Parquet from any engine, or Arrow IPC). */
export async function rowsOfFile(bytes: Uint8Array, isArrow: boolean): Promise<TrajectoryRow[]> {
  const { tableFromIPC } = await arrow();
  const { tableToRows } = await import("../../schemas/trajectory-arrow.ts");
  const table = isArrow ? tableFromIPC(bytes) : tableFromIPC((await parquetWasm()).parquetToIPC(bytes));
  return tableToRows(table);
}

/**
 * Key-value metadata of a trajectory file in a store: Parquet's from its footer alone (./parquet-footer.ts),
 * Arrow's from the schema.
 */
export async function fileKeyValues(store: Store, name: string): Promise<Record<string, string>> {
  if (!name.endsWith(".arrow")) return storedParquetKeyValues(store, name);
  const { tableFromIPC } = await arrow();
  return Object.fromEntries(tableFromIPC(await store.read(name)).schema.metadata);
}

/** Key-value metadata of the trajectory file at `file`. */
export function readFileMetadata(file: string): Promise<Record<string, string>> {
  return fileKeyValues(new LocalStore(dirname(file)), basename(file));
}
