/**
 * trajflow's own Parquet writer against parquet-wasm on rows built to hit every corner of the format:
 * null and empty lists, null list elements, null scalars, booleans across byte boundaries, multi-byte and
 * astral UTF-8, int32 extremes, rows big enough to span several pages, many row groups, every codec.
 * pyarrow and DuckDB must see the same tables in both files, and arrow-rs (trajflow's reader) the rows.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { rowsToTable } from "../src/schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../src/schemas/trajectory.ts";
import { encodeRows } from "../src/sinks/files/encoders/index.ts";
import { encodeParquetWasm } from "../src/sinks/files/encoders/parquet-wasm.ts";
import type { Compression } from "../src/sinks/files/encoders/types.ts";
import { parquetMetadata } from "../src/sinks/files/encoders/parquet-wasm.ts";
import { readFileMetadata, readRows } from "../src/sinks/files/read.ts";
import { readWithPython } from "./helpers/python.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-parquet-engine-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

function mulberry32(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const UIDS = ["task", "tâche-ü", "任务", "emoji-🙂", "", "a_b%c"];

function rows(): TrajectoryRow[] {
  const random = mulberry32(7);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  const maybe = <T>(v: T): T | null => (random() < 0.3 ? null : v);
  const out: TrajectoryRow[] = [];
  for (let i = 0; i < 61; i++) {
    // Rows 10-13 hold 300k prompt tokens each (1.2 MB): pages are cut inside the column chunk.
    const promptLength = i >= 10 && i < 14 ? 300_000 : Math.floor(random() * 40);
    const responseLength = i % 9 === 0 ? 0 : 1 + Math.floor(random() * 30);
    const prompt = Int32Array.from({ length: promptLength }, () => Math.floor(random() * 200_000));
    if (promptLength > 1) prompt[0] = -2_147_483_648;
    if (promptLength > 2) prompt[1] = 2_147_483_647;
    const uid = pick(UIDS);
    out.push({
      key: `${uid}_s${i}_${i % 3}`,
      uid,
      session_id: `s${i}`,
      index: i % 3,
      sample_index: maybe(i),
      group_size: maybe(8),
      prompt_ids: prompt,
      response_ids: Int32Array.from({ length: responseLength }, (_, j) => j * 31),
      response_mask: Int8Array.from({ length: responseLength }, (_, j) => (j % 4 === 0 ? 0 : 1)),
      rollout_log_probs:
        i % 5 === 0 ? null : Float32Array.from({ length: responseLength }, (_, j) => (j === 0 ? -0 : -j / 7)),
      reward: maybe(random() < 0.5 ? -1.25 : random()),
      episode_finished: i % 7 === 0 ? null : i % 2 === 0,
      finish_reasons:
        i % 6 === 0 ? [] : (["stop", "length"].slice(0, 1 + (i % 2)) as TrajectoryRow["finish_reasons"]),
      finish_reasons_raw: i % 6 === 0 ? [] : ["stop", "max_tokens ✂"].slice(0, 1 + (i % 2)),
      weight_version_min: maybe(i),
      weight_version_max: maybe(i + 1),
      num_turns: i,
      num_trained_tokens: responseLength,
      status: pick(["ok", "failed", "timeout"] as const),
      flags: i % 4 === 0 ? [] : (["retokenized", "cut"].slice(0, i % 3) as TrajectoryRow["flags"]),
      parent_index: maybe(0),
      shared_prefix_len: i * 3,
      sample_mask: i % 11 === 0 ? 0 : 1,
      ended_at_ms: 1_767_225_600_000 + i * 250.5,
      last_trained_index: responseLength === 0 ? null : responseLength - 1,
      reward_names: i % 3 === 0 ? [] : ["env", "judge"],
      reward_values: i % 3 === 0 ? [] : [random(), i % 2 === 0 ? null : -3],
      reward_info: i % 4 === 0 ? null : JSON.stringify({ note: "réponse ✓ 🙂", i }),
      turn_end_indices: Int32Array.from({ length: i % 4 }, (_, j) => j * 5),
      turn_rewards: i % 4 === 1 ? null : Array.from({ length: i % 4 }, (_, j) => (j === 1 ? null : j / 2)),
      token_policy_versions:
        i % 5 === 2
          ? null
          : Int32Array.from({ length: responseLength }, (_, j) => (j % 4 === 0 ? -1 : i + (j % 2))),
      policy_version_min: maybe(i),
      policy_version_max: maybe(i + 1),
      // Bytes, with every value 0..255 appearing and an empty blob on some rows.
      routed_experts:
        i % 3 === 0 ? null : Uint8Array.from({ length: (i % 5) * 2 * 6 }, (_, j) => (j * 37 + i) & 0xff),
      routed_experts_dtype: i % 3 === 0 ? "" : "int16",
      routed_experts_layers: i % 3 === 0 ? 0 : 3,
      routed_experts_top_k: i % 3 === 0 ? 0 : 2,
      routed_experts_missing: i % 7,
      // Empty lists, null turns, null fields and full settings.
      sampling: Array.from({ length: i % 4 }, (_, j) =>
        (i + j) % 3 === 0
          ? null
          : {
              temperature: j === 1 ? null : 0.7 + i / 100,
              top_p: maybe(0.95),
              top_k: maybe(j * 10 - 1),
              min_p: null,
              repetition_penalty: maybe(1.05),
              logprobs_mode: maybe(j % 2 === 0 ? "raw" : "processed"),
              engine: maybe("vllm-0.11 ✓"),
            },
      ),
    });
  }
  return out;
}

interface Comparison {
  schema_equal: boolean;
  schema: string;
  rows: [number, number];
  differs: string[];
  duckdb_equal: boolean;
  duckdb_reward_over_half: number;
  row_groups: number;
  created_by: string;
  stats: Record<string, [string, string, number]>;
  key_value: Record<string, string>;
}

const plain = (r: TrajectoryRow) =>
  JSON.parse(
    JSON.stringify(r, (_k, v: unknown) => (ArrayBuffer.isView(v) ? [...(v as Int32Array)] : v)),
  ) as unknown;

describe("trajflow's Parquet writer", () => {
  const input = rows();
  const metadata = { "trajflow.rows": String(input.length), "trajflow.note": "ü 🙂" };

  for (const compression of ["zstd", "snappy", "gzip", "lz4", "none"] as Compression[]) {
    it(`writes what parquet-wasm writes, as pyarrow and DuckDB read it (${compression})`, async () => {
      const options = { format: "parquet", compression, rowGroupSize: 7, metadata } as const;
      const ours = join(scratch, `trajflow-${compression}.parquet`);
      const theirs = join(scratch, `wasm-${compression}.parquet`);
      writeFileSync(ours, await encodeRows(rows(), { ...options, engine: "trajflow" }));
      writeFileSync(theirs, encodeParquetWasm(rowsToTable(rows()), options));
      const seen = await readWithPython<Comparison>("compare_parquet.py", ours, theirs);
      assert.deepEqual(seen.differs, []);
      assert.ok(seen.schema_equal, seen.schema);
      assert.deepEqual(seen.rows, [input.length, input.length]);
      assert.ok(seen.duckdb_equal);
      assert.equal(
        seen.duckdb_reward_over_half,
        input.filter((r) => r.reward !== null && r.reward > 0.5).length,
      );
      assert.equal(seen.row_groups, Math.ceil(input.length / 7));
      assert.equal(seen.created_by, "trajflow");
      assert.deepEqual(seen.key_value, metadata);
      // Chunk statistics of the first row group, as readers use them to skip row groups.
      const first = input.slice(0, 7);
      const present = first.map((r) => r.reward).filter((v): v is number => v !== null);
      assert.deepEqual(seen.stats.reward, [
        String(Math.min(...present)),
        String(Math.max(...present)),
        first.length - present.length,
      ]);
      const keys = first.map((r) => Buffer.from(r.key)).sort(Buffer.compare);
      assert.deepEqual(seen.stats.key, [`'${keys[0]!.toString()}'`, `'${keys.at(-1)!.toString()}'`, 0]);
      assert.equal(seen.stats["prompt_ids.list.element"], undefined);

      // arrow-rs, trajflow's own reader (inspect, recovery), gets every row back.
      assert.deepEqual((await readRows(ours)).map(plain), input.map(plain));
    });
  }

  it("reads key-value metadata from the footer alone, for every engine's files", async () => {
    const few = rows().slice(0, 8);
    for (const engine of ["trajflow", "parquet-wasm", "parquetjs-lite"] as const) {
      const path = join(scratch, `footer-${engine}.parquet`);
      const compression = engine === "parquetjs-lite" ? "snappy" : "zstd";
      const bytes = await encodeRows(few, {
        format: "parquet",
        engine,
        compression,
        rowGroupSize: 3,
        metadata,
      });
      writeFileSync(path, bytes);
      const read = await readFileMetadata(path);
      for (const [k, v] of Object.entries(metadata)) assert.equal(read[k], v, `${engine}: ${k}`);
      // The same pairs arrow-rs reads (parquet-wasm reads whole files).
      const reference = parquetMetadata(bytes);
      for (const [k, v] of Object.entries(reference)) assert.equal(read[k], v, `${engine}: ${k}`);
    }
  });

  it("refuses a file that is not whole Parquet with a coded error naming it", async () => {
    const whole = await encodeRows(rows().slice(0, 2), {
      format: "parquet",
      engine: "trajflow",
      compression: "zstd",
      rowGroupSize: 8,
      metadata,
    });
    const cases: Array<[string, Uint8Array, RegExp]> = [
      ["short", whole.subarray(0, 6), /too short/],
      ["cut", whole.subarray(0, whole.length - 100), /no PAR1 at its end/],
      ["not-parquet", Buffer.from("x".repeat(100)), /no PAR1 at its end/],
    ];
    // A footer whose length points before the file's start, and one whose bytes are not Thrift.
    const lying = Buffer.from(whole);
    lying.writeUInt32LE(whole.length + 5, whole.length - 8);
    cases.push(["lying", lying, /out of range/]);
    const garbage = Buffer.from(whole);
    const footerLength = garbage.readUInt32LE(garbage.length - 8);
    garbage.fill(0xff, garbage.length - 8 - footerLength, garbage.length - 8);
    cases.push(["garbage", garbage, /cannot read the Parquet footer/]);
    for (const [name, bytes, message] of cases) {
      const path = join(scratch, `${name}.parquet`);
      writeFileSync(path, bytes);
      await assert.rejects(readFileMetadata(path), (err: Error & { code?: string }) => {
        assert.equal(err.code, "SOURCE_READ_FAILED", name);
        assert.match(err.message, message, name);
        assert.ok(err.message.includes(path), name);
        return true;
      });
    }
  });
});
