/**
 * `trajflow inspect`: reads trajectory files (Parquet; a file or a directory of them) and prints rows in
 * a form a person can read: key, lengths, mask runs, reward, flags.
 */
import { promises as fs } from "node:fs";
import { join } from "node:path";
import { tableFromIPC } from "apache-arrow";
import { TrajflowError } from "../core/errors.ts";
import { tableToRows } from "../schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../schemas/trajectory.ts";
import { parquetToIPC } from "../sinks/parquet/encode.ts";

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
    if (entry.name.startsWith(".") || entry.name.startsWith("_")) continue;
    const full = join(path, entry.name);
    if (entry.isDirectory()) out.push(...(await listDataFiles(full)));
    else if (entry.name.endsWith(".parquet")) out.push(full);
  }
  return out;
}

export async function readRows(file: string): Promise<TrajectoryRow[]> {
  const bytes = await fs.readFile(file);
  return tableToRows(tableFromIPC(parquetToIPC(bytes)));
}

/** Runs of equal mask values over the whole sequence: prompt first, then gen (mask 1) / ctx (mask 0). */
export function maskRuns(row: TrajectoryRow): string {
  const runs: string[] = [];
  if (row.prompt_ids.length > 0) runs.push(`prompt ${row.prompt_ids.length}`);
  const mask = row.response_mask;
  let i = 0;
  while (i < mask.length) {
    const v = mask[i];
    let j = i;
    while (j < mask.length && mask[j] === v) j++;
    runs.push(`${v === 1 ? "gen" : "ctx"} ${j - i}`);
    i = j;
  }
  return runs.join(" · ");
}

export interface InspectFilter {
  uid?: string;
  session?: string;
  limit?: number;
  tokens?: boolean;
}

export function formatRow(row: TrajectoryRow, showTokens: boolean): string {
  const reward = row.reward === null ? "none" : String(row.reward);
  const wv =
    row.weight_version_min === null
      ? "-"
      : row.weight_version_min === row.weight_version_max
        ? String(row.weight_version_min)
        : `${row.weight_version_min}..${row.weight_version_max}`;
  const lines = [
    `${row.key}  status=${row.status}  reward=${reward}  turns=${row.num_turns} [${row.finish_reasons_raw.join(", ")}]  ` +
      `policy=${wv}  flags=${row.flags.length > 0 ? row.flags.join(",") : "-"}`,
    `    tokens: prompt ${row.prompt_ids.length}, response ${row.response_ids.length}, trained ${row.num_trained_tokens}` +
      `${row.parent_index !== null ? `, shares ${row.shared_prefix_len} with row ${row.parent_index}` : ""}` +
      `${row.rollout_log_probs === null ? ", no logprobs" : ""}`,
    `    mask:   ${maskRuns(row)}`,
  ];
  if (showTokens) {
    lines.push(`    prompt_ids:   ${[...row.prompt_ids].join(" ")}`);
    lines.push(`    response_ids: ${[...row.response_ids].join(" ")}`);
    lines.push(`    mask:         ${[...row.response_mask].join("")}`);
  }
  return lines.join("\n");
}

export async function inspect(
  path: string,
  filter: InspectFilter,
  print: (line: string) => void,
): Promise<number> {
  const files = await listDataFiles(path);
  let shown = 0;
  for (const file of files) {
    for (const row of await readRows(file)) {
      if (filter.uid !== undefined && row.uid !== filter.uid) continue;
      if (filter.session !== undefined && row.session_id !== filter.session) continue;
      if (filter.limit !== undefined && shown >= filter.limit) return shown;
      print(formatRow(row, filter.tokens === true));
      shown++;
    }
  }
  return shown;
}
