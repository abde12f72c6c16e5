import { strict as assert } from "node:assert";
import { it } from "node:test";
import { rowsToTable, tableToRows, trajectoryArrowSchema } from "./trajectory-arrow.ts";
import { describeColumnType, emptyRow, ROW_COLUMNS, rowToJson, type TrajectoryRow } from "./trajectory.ts";

/** A row with a value other than the empty one in every column, nulls inside lists included. */
function fullRow(): TrajectoryRow {
  return {
    ...emptyRow(),
    key: "u_s%5F1_2",
    uid: "u",
    session_id: "s_1",
    index: 2,
    sample_index: 3,
    group_size: 4,
    prompt_ids: Int32Array.of(1, 2, 3),
    response_ids: Int32Array.of(4, 5),
    response_mask: Int8Array.of(1, 0),
    rollout_log_probs: Float32Array.of(-0.5, 0),
    reward: 0.25,
    episode_finished: false,
    finish_reasons: ["abort"],
    finish_reasons_raw: ["preempted"],
    weight_version_min: 7,
    weight_version_max: 8,
    num_turns: 1,
    num_trained_tokens: 1,
    status: "timeout",
    flags: ["aborted_turn", "drift"],
    parent_index: 1,
    shared_prefix_len: 2,
    sample_mask: 1,
    ended_at_ms: 1_700_000_000_123.5,
    last_trained_index: 0,
    reward_names: ["a", "b"],
    reward_values: [1.5, null],
    reward_info: '{"a":{"status":"ok"}}',
    turn_end_indices: Int32Array.of(0),
    turn_rewards: [null],
    token_policy_versions: Int32Array.of(-1, 7),
    policy_version_min: 7,
    policy_version_max: 7,
    routed_experts: Uint8Array.of(0, 1, 255, 254, 7, 0),
    routed_experts_dtype: "int16",
    routed_experts_layers: 1,
    routed_experts_top_k: 1,
    routed_experts_missing: 1,
    sampling: [
      null,
      {
        temperature: 1,
        top_p: null,
        top_k: 20,
        min_p: 0.05,
        repetition_penalty: null,
        logprobs_mode: "raw",
        engine: "sglang",
      },
    ],
  };
}

it("the Arrow schema is ROW_COLUMNS, in order, with their nullability", () => {
  assert.deepEqual(
    trajectoryArrowSchema.fields.map((f) => [f.name, f.nullable]),
    ROW_COLUMNS.map((c) => [c.name, c.type.nullable]),
  );
  const full = fullRow();
  assert.deepEqual(
    Object.keys(emptyRow()),
    ROW_COLUMNS.map((c) => c.name),
    "emptyRow has every column, in order",
  );
  for (const c of ROW_COLUMNS) {
    assert.notDeepEqual(full[c.name], c.empty(), `fullRow leaves ${c.name} empty`);
  }
});

it("rows go through Arrow and back unchanged, typed arrays as typed arrays", () => {
  const rows = [
    fullRow(),
    emptyRow(),
    { ...fullRow(), rollout_log_probs: null, turn_rewards: null, reward: null },
  ];
  assert.deepEqual(tableToRows(rowsToTable(rows)), rows);
});

it("a row as JSON has its typed arrays as plain arrays, in column order", () => {
  const json = JSON.parse(rowToJson(fullRow())) as Record<string, unknown>;
  assert.deepEqual(
    Object.keys(json),
    ROW_COLUMNS.map((c) => c.name),
  );
  assert.deepEqual(json.prompt_ids, [1, 2, 3]);
  assert.deepEqual(json.rollout_log_probs, [-0.5, 0]);
  assert.deepEqual(json.reward_values, [1.5, null]);
  assert.equal(
    json.routed_experts,
    Buffer.from([0, 1, 255, 254, 7, 0]).toString("base64"),
    "bytes as base64",
  );
});

it("describes column types as docs/output.md writes them", () => {
  const type = (name: string) => describeColumnType(ROW_COLUMNS.find((c) => c.name === name)!.type);
  assert.equal(type("key"), "string");
  assert.equal(type("sample_index"), "int32, nullable");
  assert.equal(type("rollout_log_probs"), "list<float32 not null>, nullable");
  assert.equal(type("turn_rewards"), "list<float64>, elements nullable, nullable");
  assert.equal(
    type("sampling"),
    "list<struct<temperature: float64, top_p: float64, top_k: int32, min_p: float64, " +
      "repetition_penalty: float64, logprobs_mode: string, engine: string>>, elements nullable",
  );
});
