/**
 * Crash safety of the replay path: a replay killed with SIGKILL at named points of its commit path
 * (src/core/kill-points.ts: before a file is encoded, with its temporary durable but not linked, linked but
 * not settled, committed), the n-th time it reaches one (n from a seed), and restarted, ends with exactly
 * the files of an uninterrupted run, byte for byte: every row exactly once, no partial file ever visible to
 * a reader, no temporary file left.
 */
import { mulberry32 } from "./helpers/prng.ts";
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, describe, it } from "node:test";
import { linearSession } from "../bench/workloads.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import type { KillPoint } from "../src/core/kill-points.ts";
import { killAt, runCli } from "./helpers/cli.ts";

const RUNS = 20;
// Every point of a replay's commit path, each in turn (a replay has no offsets to commit).
const POINTS: KillPoint[] = ["sink.commit-begin", "file.temp-durable", "file.linked", "sink.committed"];
const scratch = mkdtempSync(join(tmpdir(), "trajflow-crash-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
const input = join(scratch, "events.jsonl");
// Small files so that many commits happen during a run: kills land before, between and inside them.
const ARGS = ["--rows-per-file", "8", "--compression", "snappy"];

/** Every file under `dir` (hidden ones too), relative path → bytes. */
function snapshot(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p));
    }
  };
  walk(dir);
  return out;
}

describe("crash and restart", () => {
  let reference: Map<string, Buffer>;
  let referenceKeys: string[];
  let dataFiles: number;

  before(async () => {
    const lines: string[] = [];
    const shape = { initialPrompt: 1024, turns: 6, outputTokens: 256, observationTokens: 128 };
    for (let s = 0; s < 240; s++) {
      for (const e of linearSession(shape, "delta", {
        uid: `task-${s % 60}`,
        sessionId: `r${s}`,
        seed: s + 1,
        packed: true,
      })) {
        lines.push(JSON.stringify(e));
      }
    }
    lines.splice(100, 0, "{ this line is broken"); // a dead letter too
    writeFileSync(input, `${lines.join("\n")}\n`);
    const out = join(scratch, "reference");
    const result = await runCli(["replay", input, "--out", out, ...ARGS]);
    assert.equal(result.code, 0, result.stderr);
    reference = snapshot(out);
    referenceKeys = [];
    const files = await listDataFiles(out);
    dataFiles = files.length;
    for (const f of files) referenceKeys.push(...(await readRows(f)).map((r) => r.key));
    assert.equal(referenceKeys.length, 240);
    assert.ok(reference.size > 20, `the reference run wrote ${reference.size} files`);
  });

  it(`ends with the files of an uninterrupted run after ${RUNS} SIGKILLs at named points`, async () => {
    const random = mulberry32(20261121);
    let interrupted = 0;
    for (let run = 0; run < RUNS; run++) {
      const out = join(scratch, `run-${run}`);
      const point = POINTS[run % POINTS.length]!;
      // The n-th of the run's data files to reach the point.
      const n = 1 + Math.floor(random() * dataFiles);
      const where = `at ${point}:${n}`;
      const ended = await killAt(["replay", input, "--out", out, ...ARGS], {}, point, n);
      assert.equal(ended, "killed", `run ${run}: the replay finished before reaching ${point} ${n} times`);
      // Whatever a reader lists right after the crash is complete and readable.
      let files: string[] = [];
      try {
        files = await listDataFiles(out);
      } catch {
        // killed before the output directory existed
      }
      for (const f of files) await readRows(f);
      const visible = files.length;
      if (visible > 0 && visible < reference.size - 1) interrupted++;
      const restarted = await runCli(["replay", input, "--out", out, ...ARGS]);
      assert.equal(restarted.code, 0, `run ${run} (killed ${where}): ${restarted.stderr}`);
      const after = snapshot(out);
      assert.deepEqual([...after.keys()].sort(), [...reference.keys()].sort(), `run ${run}: killed ${where}`);
      for (const [name, bytes] of reference)
        assert.ok(after.get(name)!.equals(bytes), `run ${run}: ${name} differs`);
      const keys: string[] = [];
      for (const f of await listDataFiles(out)) keys.push(...(await readRows(f)).map((r) => r.key));
      assert.deepEqual(keys, referenceKeys, `run ${run}: every row exactly once`);
      rmSync(out, { recursive: true, force: true });
    }
    // The kills must really land mid-run, with some files committed and others not.
    assert.ok(interrupted >= RUNS / 4, `only ${interrupted} of ${RUNS} runs were killed mid-write`);
  });
});
