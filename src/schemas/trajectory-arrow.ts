/**
 * Trajectory rows → one Arrow record batch, built column by column from flat typed arrays plus offsets
 * (`makeData`), never value by value: token columns are copied once into one buffer each.
 */
import {
  Bool,
  Field,
  Float32,
  Float64,
  Int32,
  Int8,
  List,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  Utf8,
  type Data,
  type DataType,
} from "apache-arrow";
import type { TrajectoryRow } from "./trajectory.ts";

const list = (name: string, type: Int32 | Int8 | Float32 | Utf8, nullable = false) =>
  new Field(name, new List(new Field("element", type, false)), nullable);

/** The Arrow schema of trajectory rows. Lists use `element` children so Parquet gets the standard LIST. */
export const trajectoryArrowSchema = new Schema([
  new Field("key", new Utf8(), false),
  new Field("uid", new Utf8(), false),
  new Field("session_id", new Utf8(), false),
  new Field("index", new Int32(), false),
  new Field("sample_index", new Int32(), true),
  new Field("group_size", new Int32(), true),
  list("prompt_ids", new Int32()),
  list("response_ids", new Int32()),
  list("response_mask", new Int8()),
  list("rollout_log_probs", new Float32(), true),
  new Field("reward", new Float64(), true),
  new Field("episode_finished", new Bool(), true),
  list("finish_reasons", new Utf8()),
  list("finish_reasons_raw", new Utf8()),
  new Field("weight_version_min", new Int32(), true),
  new Field("weight_version_max", new Int32(), true),
  new Field("num_turns", new Int32(), false),
  new Field("num_trained_tokens", new Int32(), false),
  new Field("status", new Utf8(), false),
  list("flags", new Utf8()),
  new Field("parent_index", new Int32(), true),
  new Field("shared_prefix_len", new Int32(), false),
  new Field("sample_mask", new Int8(), false),
  new Field("ended_at_ms", new Float64(), false),
  new Field("last_trained_index", new Int32(), true),
  list("reward_names", new Utf8()),
  new Field("reward_values", new List(new Field("element", new Float64(), true)), false),
  new Field("reward_info", new Utf8(), true),
  list("turn_end_indices", new Int32()),
  new Field("turn_rewards", new List(new Field("element", new Float64(), true)), true),
]);

const encoder = new TextEncoder();

/** Validity bitmap for a nullable column; null when every value is present (Arrow's convention). */
function validity(
  n: number,
  present: (i: number) => boolean,
): { bitmap: Uint8Array | undefined; nulls: number } {
  const bitmap = new Uint8Array((n + 7) >> 3);
  let nulls = 0;
  for (let i = 0; i < n; i++) {
    if (present(i)) bitmap[i >> 3]! |= 1 << (i & 7);
    else nulls++;
  }
  return { bitmap: nulls === 0 ? undefined : bitmap, nulls };
}

function field(name: string): Field {
  const f = trajectoryArrowSchema.fields.find((x) => x.name === name);
  if (f === undefined) throw new Error(`no column ${name} in the trajectory schema`);
  return f;
}

function utf8Data(values: string[]): Data {
  return nullableUtf8Data("key", values);
}

/** A string column; `null` entries allowed when the column is nullable. */
function nullableUtf8Data(name: string, values: Array<string | null>): Data {
  const parts = values.map((v) => encoder.encode(v ?? ""));
  const offsets = new Int32Array(values.length + 1);
  let total = 0;
  parts.forEach((p, i) => {
    total += p.length;
    offsets[i + 1] = total;
  });
  const data = new Uint8Array(total);
  parts.forEach((p, i) => data.set(p, offsets[i]!));
  const { bitmap, nulls } = validity(values.length, (i) => values[i] !== null);
  return makeData({
    type: field(name).type as Utf8,
    length: values.length,
    valueOffsets: offsets,
    data,
    nullBitmap: bitmap,
    nullCount: nulls,
  });
}

type NumericArray = Int32Array | Int8Array | Float32Array;

/** List offsets: row i's values are [offsets[i], offsets[i + 1]) of the flat child; a null row is empty. */
function listOffsets(rows: ArrayLike<{ length: number } | null>): Int32Array {
  const offsets = new Int32Array(rows.length + 1);
  for (let i = 0; i < rows.length; i++) offsets[i + 1] = offsets[i]! + (rows[i]?.length ?? 0);
  return offsets;
}

/** A list column of numbers from per-row typed arrays (`null` entries allowed when the column is nullable). */
function numericListData(
  name: string,
  rows: Array<NumericArray | null>,
  Ctor: new (n: number) => NumericArray,
): Data {
  const type = field(name).type as List;
  const n = rows.length;
  const offsets = listOffsets(rows);
  const total = offsets[n]!;
  const flat = new Ctor(total);
  for (let i = 0; i < n; i++) {
    const r = rows[i];
    if (r != null) (flat as Int32Array).set(r as Int32Array, offsets[i]!);
  }
  const child = makeData({ type: type.children[0]!.type as DataType, length: total, data: flat } as never);
  const { bitmap, nulls } = validity(n, (i) => rows[i] !== null);
  return makeData({ type, length: n, valueOffsets: offsets, child, nullBitmap: bitmap, nullCount: nulls });
}

/** A list of nullable float64 values per row (reward_values, turn_rewards); `null` rows when nullable. */
function nullableFloatListData(name: string, rows: Array<Array<number | null> | null>): Data {
  const type = field(name).type as List;
  const n = rows.length;
  const offsets = listOffsets(rows);
  const total = offsets[n]!;
  const flat = new Float64Array(total);
  const present: boolean[] = new Array<boolean>(total);
  for (let i = 0; i < n; i++) {
    const r = rows[i];
    if (r == null) continue;
    for (let j = 0; j < r.length; j++) {
      flat[offsets[i]! + j] = r[j] ?? 0;
      present[offsets[i]! + j] = r[j] !== null;
    }
  }
  const values = validity(total, (k) => present[k]!);
  const child = makeData({
    type: type.children[0]!.type as Float64,
    length: total,
    data: flat,
    nullBitmap: values.bitmap,
    nullCount: values.nulls,
  });
  const { bitmap, nulls } = validity(n, (i) => rows[i] !== null);
  return makeData({ type, length: n, valueOffsets: offsets, child, nullBitmap: bitmap, nullCount: nulls });
}

function stringListData(name: string, rows: string[][]): Data {
  const type = field(name).type as List;
  const offsets = new Int32Array(rows.length + 1);
  const flat: string[] = [];
  rows.forEach((r, i) => {
    flat.push(...r);
    offsets[i + 1] = flat.length;
  });
  return makeData({ type, length: rows.length, valueOffsets: offsets, child: utf8Data(flat) });
}

/** A nullable numeric column: nulls are stored as 0 under a cleared validity bit. */
function numericData(
  name: string,
  values: Array<number | null>,
  Ctor: Int32ArrayConstructor | Int8ArrayConstructor | Float64ArrayConstructor,
): Data {
  const data = new Ctor(values.length);
  values.forEach((v, i) => (data[i] = v ?? 0));
  const { bitmap, nulls } = validity(values.length, (i) => values[i] !== null);
  return makeData({
    type: field(name).type as never,
    length: values.length,
    data,
    nullBitmap: bitmap,
    nullCount: nulls,
  });
}

const int32Data = (name: string, values: Array<number | null>) => numericData(name, values, Int32Array);
const int8Data = (name: string, values: number[]) => numericData(name, values, Int8Array);
const float64Data = (name: string, values: Array<number | null>) => numericData(name, values, Float64Array);

function boolData(name: string, values: Array<boolean | null>): Data {
  const data = new Uint8Array((values.length + 7) >> 3);
  values.forEach((v, i) => {
    if (v === true) data[i >> 3]! |= 1 << (i & 7);
  });
  const { bitmap, nulls } = validity(values.length, (i) => values[i] !== null);
  return makeData({
    type: field(name).type as never,
    length: values.length,
    data,
    nullBitmap: bitmap,
    nullCount: nulls,
  });
}

/** Builds one record batch of trajectory rows, with optional schema metadata. */
export function rowsToRecordBatch(rows: TrajectoryRow[], metadata?: Record<string, string>): RecordBatch {
  const schema =
    metadata === undefined
      ? trajectoryArrowSchema
      : new Schema(trajectoryArrowSchema.fields, new Map(Object.entries(metadata)));
  const col = <K extends keyof TrajectoryRow>(k: K): Array<TrajectoryRow[K]> => rows.map((r) => r[k]);
  const children: Record<string, Data> = {
    key: utf8Data(col("key")),
    uid: utf8Data(col("uid")),
    session_id: utf8Data(col("session_id")),
    index: int32Data("index", col("index")),
    sample_index: int32Data("sample_index", col("sample_index")),
    group_size: int32Data("group_size", col("group_size")),
    prompt_ids: numericListData("prompt_ids", col("prompt_ids"), Int32Array),
    response_ids: numericListData("response_ids", col("response_ids"), Int32Array),
    response_mask: numericListData("response_mask", col("response_mask"), Int8Array),
    rollout_log_probs: numericListData("rollout_log_probs", col("rollout_log_probs"), Float32Array),
    reward: float64Data("reward", col("reward")),
    episode_finished: boolData("episode_finished", col("episode_finished")),
    finish_reasons: stringListData("finish_reasons", col("finish_reasons")),
    finish_reasons_raw: stringListData("finish_reasons_raw", col("finish_reasons_raw")),
    weight_version_min: int32Data("weight_version_min", col("weight_version_min")),
    weight_version_max: int32Data("weight_version_max", col("weight_version_max")),
    num_turns: int32Data("num_turns", col("num_turns")),
    num_trained_tokens: int32Data("num_trained_tokens", col("num_trained_tokens")),
    status: utf8Data(col("status")),
    flags: stringListData("flags", col("flags")),
    parent_index: int32Data("parent_index", col("parent_index")),
    shared_prefix_len: int32Data("shared_prefix_len", col("shared_prefix_len")),
    sample_mask: int8Data("sample_mask", col("sample_mask")),
    ended_at_ms: float64Data("ended_at_ms", col("ended_at_ms")),
    last_trained_index: int32Data("last_trained_index", col("last_trained_index")),
    reward_names: stringListData("reward_names", col("reward_names")),
    reward_values: nullableFloatListData("reward_values", col("reward_values")),
    reward_info: nullableUtf8Data("reward_info", col("reward_info")),
    turn_end_indices: numericListData("turn_end_indices", col("turn_end_indices"), Int32Array),
    turn_rewards: nullableFloatListData("turn_rewards", col("turn_rewards")),
  };
  const ordered = trajectoryArrowSchema.fields.map((f) => {
    const data = children[f.name];
    if (data === undefined) throw new Error(`column ${f.name} is not built`);
    return data;
  });
  const struct = makeData({
    type: new Struct(trajectoryArrowSchema.fields),
    length: rows.length,
    children: ordered,
  });
  return new RecordBatch(schema, struct);
}

export function rowsToTable(rows: TrajectoryRow[], metadata?: Record<string, string>): Table {
  const batch = rowsToRecordBatch(rows, metadata);
  return new Table(batch.schema, [batch]);
}

/** Reads rows back from an Arrow table (inspect, tests). */
export function tableToRows(table: Table): TrajectoryRow[] {
  const out: TrajectoryRow[] = [];
  for (const r of table) {
    const o = r!.toJSON() as Record<string, unknown>;
    const list = <T>(v: unknown): T[] => (v == null ? [] : ([...(v as Iterable<T>)] as T[]));
    out.push({
      ...(o as unknown as TrajectoryRow),
      prompt_ids: Int32Array.from(list<number>(o.prompt_ids)),
      response_ids: Int32Array.from(list<number>(o.response_ids)),
      response_mask: Int8Array.from(list<number>(o.response_mask)),
      rollout_log_probs:
        o.rollout_log_probs == null ? null : Float32Array.from(list<number>(o.rollout_log_probs)),
      finish_reasons: list(o.finish_reasons),
      finish_reasons_raw: list(o.finish_reasons_raw),
      flags: list(o.flags),
      reward_names: list(o.reward_names),
      reward_values: list(o.reward_values),
      turn_end_indices: Int32Array.from(list<number>(o.turn_end_indices)),
      turn_rewards: o.turn_rewards == null ? null : list(o.turn_rewards),
    });
  }
  return out;
}
