/**
 * Every engine and format writes the same rows with the same schema, as independent readers see them:
 * pyarrow for all, DuckDB for Parquet. Also partitioned output and GRPO group batches.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { readFileMetadata } from "../src/sinks/files/read.ts";
import { runCli } from "./helpers/cli.ts";
import { readWithPython } from "./helpers/python.ts";
import { assemble, plainWithTimes, SessionScript } from "./helpers/sessions.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-engines-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

interface View {
  files: string[];
  schema: Record<string, string>;
  rows: Array<Record<string, unknown>>;
  duckdb?: { types: Record<string, string>; rows: unknown[][] };
}

const expected = assemble(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n"))
  .rows.map(plainWithTimes)
  .sort((a, b) => ((a.key as string) < (b.key as string) ? -1 : 1));

async function replayTo(name: string, ...args: string[]): Promise<string> {
  const out = join(scratch, name);
  const result = await runCli(["replay", EXAMPLES, "--out", out, ...args]);
  assert.equal(result.code, 0, result.stderr);
  return out;
}

describe("engines and formats", () => {
  it("parquet-wasm, parquetjs-lite and Arrow IPC give identical schemas and values", async () => {
    const wasm = await readWithPython<View>("read_output.py", await replayTo("wasm", "--rows-per-file", "3"));
    const pjs = await readWithPython<View>(
      "read_output.py",
      await replayTo("parquetjs", "--engine", "parquetjs-lite", "--rows-per-file", "3"),
    );
    const arrow = await readWithPython<View>(
      "read_output.py",
      await replayTo("arrow", "--format", "arrow"),
      "--format",
      "ipc",
    );
    assert.deepEqual(pjs.schema, wasm.schema);
    assert.deepEqual(arrow.schema, wasm.schema);
    assert.equal(wasm.schema.prompt_ids, "list<element: int32 not null>");
    assert.deepEqual(wasm.rows, expected);
    assert.deepEqual(pjs.rows, expected);
    assert.deepEqual(arrow.rows, expected);
    assert.deepEqual(pjs.duckdb, wasm.duckdb);
    assert.equal(wasm.files.length, 3);
    const meta = await readFileMetadata(pjs.files[0]!);
    assert.equal(meta["trajflow.engine"], "parquetjs-lite");
    assert.equal(meta["trajflow.schema_version"], "4");
    const arrowMeta = await readFileMetadata(arrow.files[0]!);
    assert.equal(arrowMeta["trajflow.rows"], "9");
  });

  it("inspect reads every engine's files", async () => {
    for (const dir of ["wasm", "parquetjs", "arrow"]) {
      const result = await runCli(["inspect", join(scratch, dir), "--uid", "web-0311"]);
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /^web-0311_s0_1 .*reward=0\.8/m, dir);
    }
  });

  it("rejects a codec the engine cannot write, before writing anything", async () => {
    const out = join(scratch, "bad-codec");
    const result = await runCli([
      "replay",
      EXAMPLES,
      "--out",
      out,
      "--engine",
      "parquetjs-lite",
      "--compression",
      "zstd",
    ]);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /sinks\.files\.compression: parquetjs-lite cannot write zstd/);
    assert.throws(() => readdirSync(out));
  });
});

describe("staleness", () => {
  it("drops rows older than the policy a policy.update announced, minus the lag", async () => {
    const input = join(scratch, "staleness.jsonl");
    const session = (id: string, version: number, ts: number) =>
      new SessionScript("task", id, ts).call("c1", [1], [2], { weight_version: version }).end().lines();
    const update = JSON.stringify({ v: 1, type: "policy.update", weight_version: 10, ts: 500 });
    // Before the update the newest observed version (5) rules; after it, version 10 does.
    const lines = [
      ...session("a", 4, 0),
      ...session("b", 5, 100),
      update,
      ...session("c", 8, 1_000),
      ...session("d", 9, 2_000),
    ];
    writeFileSync(input, `${lines.join("\n")}\n`);
    const out = join(scratch, "stale");
    const result = await runCli([
      "replay",
      input,
      "--out",
      out,
      "--max-policy-lag",
      "1",
      "--reward-grace-ms",
      "0",
      "--json",
    ]);
    assert.equal(result.code, 0, result.stderr);
    const metrics = (JSON.parse(result.stdout) as { metrics: Record<string, unknown> }).metrics;
    assert.equal(metrics.rows_stale_dropped, 1);
    assert.deepEqual(metrics.control_events, { "policy.update": 1 });
    const { listDataFiles, readRows } = await import("../src/sinks/files/read.ts");
    const keys: string[] = [];
    for (const f of await listDataFiles(out)) keys.push(...(await readRows(f)).map((r) => r.key));
    assert.deepEqual(keys, ["task_a_0", "task_b_0", "task_d_0"]);
  });
});

describe("partitions and groups", () => {
  it("partitions by policy into hive directories that pyarrow reads as one dataset", async () => {
    const out = await replayTo("by-policy", "--partition-by", "policy");
    assert.deepEqual(readdirSync(out).sort(), ["policy=12", "policy=13"]);
    const view = await readWithPython<View>("read_output.py", out, "--hive");
    assert.equal(view.schema.policy, "int32");
    assert.deepEqual(
      view.rows.map((r) => [r.key, r.policy]),
      expected.map((r) => [r.key, r.weight_version_max]),
    );
  });

  it("writes each GRPO group in one file, padded to its size", async () => {
    const out = await replayTo("groups", "--group", "--rows-per-file", "1");
    const view = await readWithPython<View>("read_output.py", out);
    // Each group lands whole in one file even with one row per file requested.
    const byFile = new Map<string, string[]>();
    for (const file of view.files) byFile.set(file, []);
    const { readRows } = await import("../src/sinks/files/read.ts");
    for (const file of view.files)
      byFile.set(
        file,
        (await readRows(file)).map((r) => r.key),
      );
    const gsm = [...byFile.values()].find((keys) => keys.includes("gsm8k-0042_rollout-0_0"));
    assert.deepEqual(gsm, ["gsm8k-0042_rollout-0_0", "gsm8k-0042_rollout-1_0"]);
    assert.equal(view.rows.length, 9);
    assert.ok(view.rows.every((r) => r.sample_mask === 1));
    // A group of 3 with one failed rollout and one that never arrived.
    const input = join(scratch, "group.jsonl");
    const rollout = (i: number, status: string) =>
      new SessionScript("task", `r${i}`, i * 100)
        .start({ sample_index: i, group_size: 3 })
        .call("c1", [1, 2], [3 + i])
        .end(status);
    writeFileSync(input, `${[...rollout(0, "ok").lines(), ...rollout(2, "failed").lines()].join("\n")}\n`);
    const padded = join(scratch, "padded");
    const result = await runCli(["replay", input, "--out", padded, "--group"]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /groups {8}1 written, 1 padded \(placeholders: failed 1, missing 1\)/);
    const view2 = await readWithPython<View>("read_output.py", padded);
    assert.deepEqual(
      view2.rows.map((r) => [r.key, r.sample_index, r.sample_mask, r.status, r.response_ids]),
      [
        ["task_missing-1_0", 1, 0, "missing", []],
        ["task_r0_0", 0, 1, "ok", [3]],
        ["task_r2_0", 2, 0, "failed", []],
      ],
    );
  });
});
