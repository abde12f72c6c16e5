/**
 * A file's rows packed for the trip to an encoder worker (issue 24, BENCHMARKS.md). Handing over 20,000
 * rows as objects cost the ingest thread 0.7 s of a 9 s replay: transferring each row's five typed arrays
 * (100,000 small buffers, a few microseconds each) costs more than copying them, and the structured clone
 * writes every object's property names. Here a typed-array column's small values are copied into one
 * buffer, large ones that own their buffer move on their own (a copy would cost more than the move, and
 * the row would keep its buffer until its file is written), the other columns go as one array each, and
 * the worker's encoder reads the columns as they came (`unpackColumns`: one view per value, no row objects).
 */
import { ROW_COLUMNS, VALUE_KINDS, type TrajectoryRow, type ValueKind } from "../../schemas/trajectory.ts";

const COLUMN_NAMES = ROW_COLUMNS.map((c) => c.name);

type TypedArray = Int8Array | Uint8Array | Int32Array | Float32Array | Float64Array;
/** A kind whose values rows hold in typed arrays (VALUE_KINDS). */
type TypedName = { [K in ValueKind]: (typeof VALUE_KINDS)[K]["array"] extends null ? never : K }[ValueKind];
const arrayOf = (kind: TypedName) => VALUE_KINDS[kind].array;

/** A value at least this large that owns its buffer moves to the worker instead of being copied. */
const MOVE_BYTES = 64 * 1024;

/** One typed-array column: small values back to back (8-byte aligned), large ones apart, null rows marked. */
interface PackedColumn {
  /** The kind of its values, whose typed array holds them. */
  type: TypedName;
  buffer: ArrayBuffer;
  /** Byte offset of each row's values in `buffer`; -1 for null, -2 - i for `moved[i]`. */
  offsets: Int32Array;
  /** Element count of each row's values. */
  lengths: Int32Array;
  /** The values that move with their own buffers, in row order. */
  moved: TypedArray[];
}

export interface ColumnBatch {
  count: number;
  /** Per column (ROW_COLUMNS order): packed typed arrays, or the values as an array. */
  columns: Array<PackedColumn | unknown[]>;
}

/**
 * The kind of typed array each column holds, by ROW_COLUMNS: a list of a kind with one (no null elements),
 * or a binary value.
 */
const TYPED: Array<TypedName | null> = ROW_COLUMNS.map((c) => {
  const kind = c.type.kind;
  if (kind === "struct" || VALUE_KINDS[kind].array === null) return null;
  if (c.type.list ? c.type.elementNullable : kind !== "binary") return null;
  return kind as TypedName;
});

export function toColumns(rows: readonly TrajectoryRow[]): ColumnBatch {
  const columns: ColumnBatch["columns"] = [];
  const values = rows as unknown as ReadonlyArray<Record<string, unknown>>;
  const moving = new Set<ArrayBuffer>();
  for (let c = 0; c < COLUMN_NAMES.length; c++) {
    const name = COLUMN_NAMES[c]!;
    const type = TYPED[c]!;
    const packed = type === null ? null : pack(values, name, type, moving);
    columns.push(packed ?? values.map((r) => r[name]));
  }
  return { count: rows.length, columns };
}

/** A typed-array column's values in one buffer; null if a row holds something else (kept as it is). */
function pack(
  rows: ReadonlyArray<Record<string, unknown>>,
  name: string,
  type: TypedName,
  moving: Set<ArrayBuffer>,
): PackedColumn | null {
  const Typed = arrayOf(type);
  const offsets = new Int32Array(rows.length);
  const lengths = new Int32Array(rows.length);
  const moved: TypedArray[] = [];
  let bytes = 0;
  for (let r = 0; r < rows.length; r++) {
    const v = rows[r]![name];
    if (v === null) {
      offsets[r] = -1;
      continue;
    }
    if (!(v instanceof Typed)) return null;
    lengths[r] = v.length;
    const own = v.buffer as ArrayBuffer;
    // A buffer moves once: a second row holding the same array gets a copy.
    if (v.byteLength >= MOVE_BYTES && own.byteLength === v.byteLength && !moving.has(own)) {
      moving.add(own);
      offsets[r] = -2 - moved.length;
      moved.push(v);
      continue;
    }
    offsets[r] = bytes;
    bytes += (v.byteLength + 7) & ~7;
  }
  const buffer = new ArrayBuffer(bytes);
  const into = new Typed(buffer);
  for (let r = 0; r < rows.length; r++) {
    const at = offsets[r]!;
    if (at >= 0) into.set(rows[r]![name] as never, at / Typed.BYTES_PER_ELEMENT);
  }
  return { type, buffer, offsets, lengths, moved };
}

/** What moves to the worker instead of being copied again: each packed column's buffers. */
export function columnBuffers(batch: ColumnBatch): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const c of batch.columns) {
    if (Array.isArray(c)) continue;
    out.push(c.buffer, c.offsets.buffer as ArrayBuffer, c.lengths.buffer as ArrayBuffer);
    for (const v of c.moved) out.push(v.buffer as ArrayBuffer);
  }
  return out;
}

/**
 * A file's rows column by column, as encoders read them: per column (ROW_COLUMNS order) each row's value.
 */
export interface Columns {
  count: number;
  values: ReadonlyArray<readonly unknown[]>;
}

/** Rows as columns without packing (an encoder on the same thread: nothing crosses). */
export function columnsOfRows(rows: readonly TrajectoryRow[]): Columns {
  const values = rows as unknown as ReadonlyArray<Record<string, unknown>>;
  return { count: rows.length, values: COLUMN_NAMES.map((name) => values.map((r) => r[name])) };
}

/** The hand-over's columns as encoders read them: a packed value becomes a view of its buffer. */
export function unpackColumns(batch: ColumnBatch): Columns {
  const values = batch.columns.map((column) => {
    if (Array.isArray(column)) return column;
    const Typed = arrayOf(column.type);
    const out = new Array<unknown>(batch.count);
    for (let r = 0; r < batch.count; r++) {
      const at = column.offsets[r]!;
      out[r] =
        at >= 0 ? new Typed(column.buffer, at, column.lengths[r]) : at === -1 ? null : column.moved[-2 - at];
    }
    return out;
  });
  return { count: batch.count, values };
}
