/**
 * A two-part stream of linear agent sessions for the Kafka crash, rebalance and broker-restart tests,
 * with the rows a replay of it gives.
 */
import { strict as assert } from "node:assert";
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

/**
 * GRPO-shaped sessions: `uids` prompts with `groupSize` rollouts each, over policies 1-3 by uid; every
 * third uid misses its last rollout (its group is padded with a placeholder) unless `complete`. Written as
 * group-first.jsonl, group-second.jsonl (half the uids each) and group-all.jsonl in `dir`.
 */
export function groupWorkload(dir: string, uids = 24, groupSize = 4, options: { complete?: boolean } = {}) {
  const shape = { initialPrompt: 64, turns: 3, outputTokens: 16, observationTokens: 8 };
  const first: string[] = [];
  const second: string[] = [];
  let s = 0;
  for (let u = 0; u < uids; u++) {
    const rollouts = u % 3 === 0 && options.complete !== true ? groupSize - 1 : groupSize;
    const policy = 1 + (u % 3);
    for (let k = 0; k < rollouts; k++, s++) {
      const lines = linearSession(shape, "delta", {
        uid: `prompt-${u}`,
        sessionId: `r${k}`,
        seed: s + 1,
        t0: s * 1_000,
      }).map((e) =>
        JSON.stringify(
          e.type === "session.start"
            ? { ...e, sample_index: k, group_size: groupSize }
            : e.type === "request"
              ? { ...e, weight_version: policy }
              : e,
        ),
      );
      (u < uids / 2 ? first : second).push(...lines);
    }
  }
  const firstPath = join(dir, "group-first.jsonl");
  const secondPath = join(dir, "group-second.jsonl");
  const allPath = join(dir, "group-all.jsonl");
  writeFileSync(firstPath, `${first.join("\n")}\n`);
  writeFileSync(secondPath, `${second.join("\n")}\n`);
  writeFileSync(allPath, `${[...first, ...second].join("\n")}\n`);
  return { first: firstPath, second: secondPath, all: allPath };
}

/** Data files under `dir` (partition directories included) with the uids of the rows each holds. */
export async function uidsByFile(dir: string): Promise<Map<string, Set<string>>> {
  const out = new Map<string, Set<string>>();
  for (const f of await listDataFiles(dir)) out.set(f, new Set((await readRows(f)).map((r) => r.uid)));
  return out;
}

/** Each uid's rows (its GRPO group) are in exactly one file under `dir`. */
export async function assertGroupsWhole(dir: string): Promise<void> {
  const files = new Map<string, string[]>();
  for (const [file, uids] of await uidsByFile(dir))
    for (const uid of uids) files.set(uid, [...(files.get(uid) ?? []), file]);
  assert.ok(files.size > 0, `no rows in ${dir}`);
  for (const [uid, holding] of files)
    assert.equal(holding.length, 1, `the group of ${uid} is split: ${holding}`);
}
