/**
 * A two-part stream of linear agent sessions for the Kafka crash, rebalance and broker-restart tests,
 * with the rows a replay of it gives.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { linearSession } from "../../bench/workloads.ts";
import { listDataFiles, readRows } from "../../src/sinks/files/read.ts";
import { assemble, plain } from "./sessions.ts";

export const byKey = (a: Record<string, unknown>, b: Record<string, unknown>) =>
  (a.key as string) < (b.key as string) ? -1 : 1;

/** Writes `sessions` sessions over `uids` uids as first.jsonl and second.jsonl (half each) in `dir`. */
export function twoPartWorkload(dir: string, sessions = 160, uids = 40) {
  const shape = { initialPrompt: 256, turns: 4, outputTokens: 64, observationTokens: 32 };
  const first: string[] = [];
  const second: string[] = [];
  for (let s = 0; s < sessions; s++) {
    const lines = linearSession(shape, "delta", {
      uid: `task-${s % uids}`,
      sessionId: `r${s}`,
      seed: s + 1,
      t0: s * 1_000,
    }).map((e) => JSON.stringify(e));
    (s < sessions / 2 ? first : second).push(...lines);
  }
  const firstPath = join(dir, "first.jsonl");
  const secondPath = join(dir, "second.jsonl");
  writeFileSync(firstPath, `${first.join("\n")}\n`);
  writeFileSync(secondPath, `${second.join("\n")}\n`);
  const expected = assemble([...first, ...second])
    .rows.map(plain)
    .sort(byKey);
  return { first: firstPath, second: secondPath, expected };
}

/** Every row of every data file under `dir`, as plain objects sorted by key (duplicates kept). */
export async function rowsIn(dir: string): Promise<Array<Record<string, unknown>>> {
  const rows = [];
  for (const f of await listDataFiles(dir)) rows.push(...(await readRows(f)));
  return rows.map(plain).sort(byKey);
}
