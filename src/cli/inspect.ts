/**
 * `trajflow inspect`: reads trajectory files (Parquet from either engine, or Arrow IPC; a file or a
 * directory of them, partitions included) and prints rows in
 * a form a person can read: key, lengths, mask runs, reward, flags.
 */
import type { TrajectoryRow } from "../schemas/trajectory.ts";
import { listDataFiles, readRows, rowsOfFile } from "../sinks/files/read.ts";
import { isRemote } from "../sinks/shared/location.ts";
import { DEFAULT_S3_OPTIONS } from "../sinks/shared/s3-options.ts";
import { openStore } from "../sinks/shared/open-store.ts";

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

/**
 * Text from the input (keys, raw finish reasons) with control characters escaped: an id holding a
 * terminal escape sequence must not drive the terminal of whoever inspects the files.
 */
export function printable(text: string): string {
  let out = "";
  for (const ch of text) {
    const c = ch.charCodeAt(0);
    out += c < 0x20 || (c >= 0x7f && c <= 0x9f) ? `\\u${c.toString(16).padStart(4, "0")}` : ch;
  }
  return out;
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
    `${printable(row.key)}  status=${row.status}  reward=${reward}  turns=${row.num_turns} ` +
      `[${printable(row.finish_reasons_raw.join(", "))}]  ` +
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

/** Reads the rows `inspect` would print, for the HTML view. */
export async function selectRows(path: string, filter: InspectFilter): Promise<TrajectoryRow[]> {
  const out: TrajectoryRow[] = [];
  await inspect(
    path,
    filter,
    () => {},
    (row) => out.push(row),
  );
  return out;
}

export async function inspect(
  path: string,
  filter: InspectFilter,
  print: (line: string) => void,
  onRow?: (row: TrajectoryRow) => void,
): Promise<number> {
  // An s3:// prefix is listed and read through its store; a directory or a file directly.
  const store = isRemote(path) ? await openStore(path, DEFAULT_S3_OPTIONS) : null;
  try {
    const files =
      store === null
        ? (await listDataFiles(path)).map((name) => ({ name, rows: () => readRows(name) }))
        : (await store.list()).map((name) => ({
            name,
            rows: async () => rowsOfFile(await store.read(name), name.endsWith(".arrow")),
          }));
    let shown = 0;
    for (const file of files) {
      for (const row of await file.rows()) {
        if (filter.uid !== undefined && row.uid !== filter.uid) continue;
        if (filter.session !== undefined && row.session_id !== filter.session) continue;
        if (filter.limit !== undefined && shown >= filter.limit) return shown;
        print(formatRow(row, filter.tokens === true));
        onRow?.(row);
        shown++;
      }
    }
    return shown;
  } finally {
    store?.close();
  }
}
