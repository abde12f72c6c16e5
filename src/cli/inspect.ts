/**
 * `trajflow inspect`: reads trajectory files (Parquet from either engine, or Arrow IPC; a file or a
 * directory of them, partitions included) and prints rows in
 * a form a person can read: key, lengths, mask runs, reward, flags.
 */
import { isTrajflowError, TrajflowError } from "../core/errors.ts";
import { editDistance } from "./args.ts";
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
  /** a uid, or a row key (`{uid}_{session}_{index}`, as each printed row starts) */
  uid?: string;
  /** exactly this row key */
  key?: string;
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
  // Rounded for reading (--json has the exact value).
  const reward = row.reward === null ? "none" : String(Number(row.reward.toPrecision(5)));
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
      `${row.rollout_log_probs === null ? `, ${row.num_trained_tokens} trained without a logprob (the engine gave none for some; flag missing_logprobs)` : ""}`,
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

/** A file's rows, or NOT_A_DATA_FILE when it is no Parquet or Arrow file (a typo'd path, a README). */
async function rowsOrRefusal(file: { name: string; rows: () => Promise<TrajectoryRow[]> }) {
  try {
    return await file.rows();
  } catch (err) {
    if (isTrajflowError(err)) throw err;
    throw new TrajflowError(
      "NOT_A_DATA_FILE",
      `${file.name} is not a Parquet or Arrow IPC file of trajectory rows (${(err as Error).message}); ` +
        "inspect reads what trajflow's sinks write: a file, or a directory of them",
    );
  }
}

/** The row keys closest to what was asked for, kept while scanning, for a search that found nothing. */
export class NearestKeys {
  private readonly best: { key: string; distance: number }[] = [];
  private readonly needle: string;
  private readonly keep: number;

  constructor(needle: string, keep = 3) {
    this.needle = needle;
    this.keep = keep;
  }

  offer(key: string): void {
    if (this.best.some((b) => b.key === key)) return;
    const distance = editDistance(this.needle, key);
    if (this.best.length === this.keep && distance >= this.best[this.keep - 1]!.distance) return;
    this.best.push({ key, distance });
    this.best.sort((a, b) => a.distance - b.distance);
    this.best.length = Math.min(this.best.length, this.keep);
  }

  keys(): string[] {
    return this.best.map((b) => b.key);
  }
}

export async function inspect(
  path: string,
  filter: InspectFilter,
  print: (line: string) => void,
  onRow?: (row: TrajectoryRow) => void,
  near?: NearestKeys,
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
      for (const row of await rowsOrRefusal(file)) {
        if (filter.uid !== undefined && row.uid !== filter.uid && row.key !== filter.uid) {
          near?.offer(row.key);
          continue;
        }
        if (filter.key !== undefined && row.key !== filter.key) {
          near?.offer(row.key);
          continue;
        }
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
