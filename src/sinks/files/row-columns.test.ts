import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { emptyRow, ROW_COLUMNS, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { columnBuffers, toColumns, unpackColumns, type ColumnBatch } from "./row-columns.ts";

/** The rows an encoder reads from a hand-over, to compare them with what was sent. */
function fromColumns(batch: ColumnBatch): TrajectoryRow[] {
  const { count, values } = unpackColumns(batch);
  return Array.from(
    { length: count },
    (_, r) => Object.fromEntries(ROW_COLUMNS.map((c, i) => [c.name, values[i]![r]])) as TrajectoryRow,
  );
}

function row(i: number, fields: Partial<TrajectoryRow>): TrajectoryRow {
  return { ...emptyRow(), key: `u_s_${i}`, uid: "u", session_id: "s", index: i, ...fields };
}

/** A row with its typed arrays as plain arrays, to compare values whatever holds them. */
function plainArrays(r: TrajectoryRow): Record<string, unknown> {
  const typed = (a: ArrayLike<number> | null) => (a === null ? null : Array.from(a));
  return {
    ...r,
    prompt_ids: typed(r.prompt_ids),
    response_ids: typed(r.response_ids),
    response_mask: typed(r.response_mask),
    rollout_log_probs: typed(r.rollout_log_probs),
    routed_experts: typed(r.routed_experts),
  };
}

describe("rows packed by column for an encoder worker", () => {
  it("gives back every row's values: typed arrays, views, empty arrays, nulls, strings and structs", () => {
    const shared = new Int32Array([1, 2, 3, 4, 5, 6]);
    const rows = [
      row(0, {
        prompt_ids: Int32Array.of(7, 8, 9),
        response_ids: shared.subarray(1, 4),
        response_mask: Int8Array.of(1, 0, 1),
        rollout_log_probs: Float32Array.of(-0.5, -1.25, 0),
        routed_experts: Uint8Array.of(255, 0, 7),
        finish_reasons: ["stop"],
        sampling: [
          {
            temperature: 0.7,
            top_p: null,
            top_k: null,
            min_p: null,
            repetition_penalty: null,
            logprobs_mode: null,
            engine: "vllm",
          },
        ],
      }),
      row(1, { prompt_ids: new Int32Array(0), rollout_log_probs: null, routed_experts: null, reward: 0.5 }),
    ];
    const expected = rows.map(plainArrays);
    const batch = structuredClone(toColumns(rows), { transfer: [] });
    const back = fromColumns(batch);
    assert.deepEqual(back.map(plainArrays), expected);
    assert.ok(back[0]!.prompt_ids instanceof Int32Array && back[0]!.response_mask instanceof Int8Array);
    assert.ok(
      back[0]!.rollout_log_probs instanceof Float32Array && back[0]!.routed_experts instanceof Uint8Array,
    );
  });

  it("copies small arrays into one buffer per column and moves large ones that own their buffer", () => {
    const small = Int32Array.of(1, 2, 3);
    const large = new Int32Array(32 * 1024).fill(9);
    const shared = new Int32Array(64 * 1024);
    const rows = [
      row(0, { prompt_ids: small, response_ids: shared.subarray(0, 32 * 1024) }),
      row(1, { prompt_ids: large, response_ids: large }),
    ];
    const batch = toColumns(rows);
    const moving = columnBuffers(batch);
    assert.ok(moving.includes(large.buffer), "the large array moves");
    assert.ok(
      !moving.includes(small.buffer) && !moving.includes(shared.buffer),
      "small ones and views are copied",
    );
    // After the move (structuredClone stands in for postMessage), the worker's rows hold the same values.
    const back = fromColumns(structuredClone(batch, { transfer: moving }));
    assert.equal(large.byteLength, 0, "moved, not copied");
    assert.deepEqual(Array.from(back[0]!.prompt_ids), [1, 2, 3]);
    assert.equal(back[0]!.response_ids.length, 32 * 1024);
    assert.ok(back[1]!.prompt_ids.every((v) => v === 9) && back[1]!.prompt_ids.length === 32 * 1024);
    assert.ok(
      back[1]!.response_ids.every((v) => v === 9),
      "a second row holding the moved array gets a copy",
    );
  });
});
