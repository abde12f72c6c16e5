/**
 * The parquetjs-lite engine: pure JavaScript, much slower than parquet-wasm (BENCHMARKS.md). Rows are
 * appended strictly one after another: overlapping appendRow calls were measured duplicating rows.
 *
 * The schema uses the standard three-level LIST (`<name> (LIST) { repeated group list { element } }`) and
 * the same logical types as the Arrow schema, so pyarrow reads exactly the schema parquet-wasm writes.
 */
import { Writable } from "node:stream";
import parquet from "parquetjs-lite";
import type { TrajectoryRow } from "../../../schemas/trajectory.ts";
import type { Compression } from "./types.ts";

const CODECS: Partial<Record<Compression, string>> = { snappy: "SNAPPY", gzip: "GZIP", none: "UNCOMPRESSED" };

type FieldSpec = Record<string, unknown>;

function schemaFor(compression: string): unknown {
  const leaf = (type: string, optional = false): FieldSpec => ({
    type,
    compression,
    ...(optional ? { optional } : {}),
  });
  const list = (type: string, optional = false, optionalElements = false): FieldSpec => ({
    type: "LIST",
    ...(optional ? { optional } : {}),
    fields: { list: { repeated: true, fields: { element: leaf(type, optionalElements) } } },
  });
  return new parquet.ParquetSchema({
    key: leaf("UTF8"),
    uid: leaf("UTF8"),
    session_id: leaf("UTF8"),
    index: leaf("INT32"),
    sample_index: leaf("INT32", true),
    group_size: leaf("INT32", true),
    prompt_ids: list("INT32"),
    response_ids: list("INT32"),
    response_mask: list("INT_8"),
    rollout_log_probs: list("FLOAT", true),
    reward: leaf("DOUBLE", true),
    episode_finished: leaf("BOOLEAN", true),
    finish_reasons: list("UTF8"),
    finish_reasons_raw: list("UTF8"),
    weight_version_min: leaf("INT32", true),
    weight_version_max: leaf("INT32", true),
    num_turns: leaf("INT32"),
    num_trained_tokens: leaf("INT32"),
    status: leaf("UTF8"),
    flags: list("UTF8"),
    parent_index: leaf("INT32", true),
    shared_prefix_len: leaf("INT32"),
    sample_mask: leaf("INT_8"),
    ended_at_ms: leaf("DOUBLE"),
    last_trained_index: leaf("INT32", true),
    reward_names: list("UTF8"),
    reward_values: list("DOUBLE", false, true),
    reward_info: leaf("UTF8", true),
    turn_end_indices: list("INT32"),
    turn_rewards: list("DOUBLE", true, true),
  });
}

// parquetjs-lite shreds nested values from objects: one { element } object per list value.
const listOf = (values: ArrayLike<number> | string[]) => ({
  list: Array.from(values as ArrayLike<number | string>, (element) => ({ element })),
});
// A null element is an element object without the field.
const nullableListOf = (values: Array<number | null>) => ({
  list: values.map((element) => (element === null ? {} : { element })),
});
const orUndefined = <T>(v: T | null): T | undefined => (v === null ? undefined : v);

function toParquetjsRow(r: TrajectoryRow): Record<string, unknown> {
  return {
    key: r.key,
    uid: r.uid,
    session_id: r.session_id,
    index: r.index,
    sample_index: orUndefined(r.sample_index),
    group_size: orUndefined(r.group_size),
    prompt_ids: listOf(r.prompt_ids),
    response_ids: listOf(r.response_ids),
    response_mask: listOf(r.response_mask),
    rollout_log_probs: r.rollout_log_probs === null ? undefined : listOf(r.rollout_log_probs),
    reward: orUndefined(r.reward),
    episode_finished: orUndefined(r.episode_finished),
    finish_reasons: listOf(r.finish_reasons),
    finish_reasons_raw: listOf(r.finish_reasons_raw),
    weight_version_min: orUndefined(r.weight_version_min),
    weight_version_max: orUndefined(r.weight_version_max),
    num_turns: r.num_turns,
    num_trained_tokens: r.num_trained_tokens,
    status: r.status,
    flags: listOf(r.flags),
    parent_index: orUndefined(r.parent_index),
    shared_prefix_len: r.shared_prefix_len,
    sample_mask: r.sample_mask,
    ended_at_ms: r.ended_at_ms,
    last_trained_index: orUndefined(r.last_trained_index),
    reward_names: listOf(r.reward_names),
    reward_values: nullableListOf(r.reward_values),
    reward_info: orUndefined(r.reward_info),
    turn_end_indices: listOf(r.turn_end_indices),
    turn_rewards: r.turn_rewards === null ? undefined : nullableListOf(r.turn_rewards),
  };
}

export interface ParquetjsOptions {
  compression: Compression;
  metadata: Record<string, string>;
  rowGroupSize: number;
}

export async function encodeParquetjs(rows: TrajectoryRow[], options: ParquetjsOptions): Promise<Uint8Array> {
  const codec = CODECS[options.compression];
  if (codec === undefined) throw new Error(`parquetjs-lite cannot write ${options.compression}`);
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk);
      callback();
    },
  });
  const writer = await parquet.ParquetWriter.openStream(schemaFor(codec), sink, {
    rowGroupSize: options.rowGroupSize,
  });
  for (const [key, value] of Object.entries(options.metadata)) writer.setMetadata(key, value);
  for (const row of rows) await writer.appendRow(toParquetjsRow(row)); // strictly sequential
  await writer.close();
  return Buffer.concat(chunks);
}
