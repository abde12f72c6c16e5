/**
 * Trajectory rows → one Arrow record batch, built column by column from flat typed arrays plus offsets
 * (`makeData`), never value by value: token columns are copied once into one buffer each.
 */
import {
  Binary,
  Bool,
  Field,
  Float,
  Int,
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
import {
  arrowShape,
  ROW_COLUMNS,
  type ArrowShape,
  type ColumnType,
  VALUE_KINDS,
  type ArrowLeaf,
  type StructField,
  type TrajectoryRow,
  type ValueKind,
} from "./trajectory.ts";

/** A value kind's Arrow type, from VALUE_KINDS (signed ints only). */
function leafType(kind: ValueKind): DataType {
  const leaf: ArrowLeaf = VALUE_KINDS[kind].arrow;
  switch (leaf.type) {
    case "Int":
      return new Int(true, leaf.bits);
    case "FloatingPoint":
      return new Float(leaf.precision);
    case "Utf8":
      return new Utf8();
    case "Binary":
      return new Binary();
    case "Bool":
      return new Bool();
  }
}

/** An Arrow field of a column's shape (trajectory.ts's arrowShape). */
function arrowField(shape: ArrowShape): Field {
  const type =
    shape.type === "list"
      ? new List(arrowField(shape.children[0]!))
      : shape.type === "struct"
        ? new Struct(shape.children.map(arrowField))
        : leafType(shape.type);
  return new Field(shape.name, type, shape.nullable);
}

/** The Arrow schema of trajectory rows, from ROW_COLUMNS. */
export const trajectoryArrowSchema = new Schema(
  ROW_COLUMNS.map((c) => arrowField(arrowShape(c.name, c.type))),
);

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

type NumericArray = Int8Array | Int32Array | Float32Array | Float64Array;
type NumericArrayConstructor = new (n: number) => NumericArray;

/** The typed array of a numeric kind's values (VALUE_KINDS). */
function arrayOf(kind: ValueKind): NumericArrayConstructor {
  const { arrow, array } = VALUE_KINDS[kind];
  if (array === null || (arrow.type !== "Int" && arrow.type !== "FloatingPoint")) {
    throw new Error(`no typed array holds ${kind} values`);
  }
  return array as NumericArrayConstructor;
}

/** A string or binary column; `null` entries allowed when the column is nullable. */
function bytesData(type: DataType, values: ReadonlyArray<string | Uint8Array | null>): Data {
  const empty = new Uint8Array(0);
  const parts = values.map((v) => (v === null ? empty : typeof v === "string" ? encoder.encode(v) : v));
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
    type: type as Utf8,
    length: values.length,
    valueOffsets: offsets,
    data,
    nullBitmap: bitmap,
    nullCount: nulls,
  });
}

/** A numeric column: nulls are stored as 0 under a cleared validity bit. */
function numericData(
  type: DataType,
  values: ReadonlyArray<number | null>,
  Ctor: NumericArrayConstructor,
): Data {
  const data = new Ctor(values.length);
  values.forEach((v, i) => (data[i] = v ?? 0));
  const { bitmap, nulls } = validity(values.length, (i) => values[i] !== null);
  return makeData({ type: type as never, length: values.length, data, nullBitmap: bitmap, nullCount: nulls });
}

function boolData(type: DataType, values: ReadonlyArray<boolean | null>): Data {
  const data = new Uint8Array((values.length + 7) >> 3);
  values.forEach((v, i) => {
    if (v === true) data[i >> 3]! |= 1 << (i & 7);
  });
  const { bitmap, nulls } = validity(values.length, (i) => values[i] !== null);
  return makeData({ type: type as never, length: values.length, data, nullBitmap: bitmap, nullCount: nulls });
}

/** List offsets: row i's values are [offsets[i], offsets[i + 1]) of the flat child; a null row is empty. */
function listOffsets(rows: ArrayLike<{ length: number } | null>): Int32Array {
  const offsets = new Int32Array(rows.length + 1);
  for (let i = 0; i < rows.length; i++) offsets[i + 1] = offsets[i]! + (rows[i]?.length ?? 0);
  return offsets;
}

/** A list column whose rows are typed arrays: each row copied once into the flat child. */
function typedListData(
  type: List,
  rows: ReadonlyArray<NumericArray | null>,
  Ctor: NumericArrayConstructor,
): Data {
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

/** A list column whose elements may be null (reward_values, turn_rewards): rows are plain arrays. */
function nullableElementListData(
  type: List,
  rows: ReadonlyArray<ReadonlyArray<number | null> | null>,
  Ctor: NumericArrayConstructor,
): Data {
  const n = rows.length;
  const offsets = listOffsets(rows);
  const flat: Array<number | null> = [];
  for (const r of rows) if (r != null) flat.push(...r);
  const child = numericData(type.children[0]!.type, flat, Ctor);
  const { bitmap, nulls } = validity(n, (i) => rows[i] !== null);
  return makeData({ type, length: n, valueOffsets: offsets, child, nullBitmap: bitmap, nullCount: nulls });
}

function stringListData(type: List, rows: ReadonlyArray<readonly string[] | null>): Data {
  const n = rows.length;
  const offsets = listOffsets(rows);
  const flat: string[] = [];
  for (const r of rows) if (r != null) flat.push(...r);
  const child = bytesData(type.children[0]!.type, flat);
  const { bitmap, nulls } = validity(n, (i) => rows[i] !== null);
  return makeData({ type, length: n, valueOffsets: offsets, child, nullBitmap: bitmap, nullCount: nulls });
}

/** A scalar column (or struct field) of `kind`, nulls allowed. */
function scalarData(type: DataType, kind: ValueKind, values: unknown[]): Data {
  const leaf = VALUE_KINDS[kind].arrow.type;
  if (leaf === "Utf8" || leaf === "Binary") return bytesData(type, values as string[]);
  if (leaf === "Bool") return boolData(type, values as boolean[]);
  return numericData(type, values as number[], arrayOf(kind));
}

/** A list of structs (sampling): each field a child column over all rows' elements. */
function structListData(
  type: List,
  rows: ReadonlyArray<ReadonlyArray<Record<string, unknown> | null> | null>,
  fields: readonly StructField[],
): Data {
  const n = rows.length;
  const offsets = listOffsets(rows);
  const flat: Array<Record<string, unknown> | null> = [];
  for (const r of rows) if (r != null) flat.push(...r);
  const structType = type.children[0]!.type as Struct;
  const children = fields.map((f, i) =>
    scalarData(
      structType.children[i]!.type,
      f.kind,
      flat.map((e) => e?.[f.name] ?? null),
    ),
  );
  const elements = validity(flat.length, (i) => flat[i] !== null);
  const child = makeData({
    type: structType,
    length: flat.length,
    children,
    nullBitmap: elements.bitmap,
    nullCount: elements.nulls,
  });
  const { bitmap, nulls } = validity(n, (i) => rows[i] !== null);
  return makeData({ type, length: n, valueOffsets: offsets, child, nullBitmap: bitmap, nullCount: nulls });
}

/** One column's data, by its type in ROW_COLUMNS. */
function columnData(field: Field, type: ColumnType<unknown>, values: unknown[]): Data {
  if (type.list) {
    const listType = field.type as List;
    if (type.fields !== null) return structListData(listType, values as [], type.fields);
    if (type.kind === "utf8") return stringListData(listType, values as string[][]);
    const kind = type.kind as ValueKind;
    if (type.elementNullable) {
      return nullableElementListData(listType, values as Array<Array<number | null>>, arrayOf(kind));
    }
    return typedListData(listType, values as NumericArray[], arrayOf(kind));
  }
  return scalarData(field.type, type.kind as ValueKind, values);
}

/**
 * Builds one record batch from columns: per column (ROW_COLUMNS order) each row's value, as the file
 * sink's encoders get them. Optional schema metadata.
 */
export function columnsToRecordBatch(
  columns: ReadonlyArray<readonly unknown[]>,
  count: number,
  metadata?: Record<string, string>,
): RecordBatch {
  const schema =
    metadata === undefined
      ? trajectoryArrowSchema
      : new Schema(trajectoryArrowSchema.fields, new Map(Object.entries(metadata)));
  const children = ROW_COLUMNS.map((c, i) =>
    columnData(trajectoryArrowSchema.fields[i]!, c.type, columns[i] as unknown[]),
  );
  const struct = makeData({ type: new Struct(trajectoryArrowSchema.fields), length: count, children });
  return new RecordBatch(schema, struct);
}

export function columnsToTable(
  columns: ReadonlyArray<readonly unknown[]>,
  count: number,
  metadata?: Record<string, string>,
): Table {
  const batch = columnsToRecordBatch(columns, count, metadata);
  return new Table(batch.schema, [batch]);
}

/** Builds one table of trajectory rows, with optional schema metadata. */
export function rowsToTable(rows: TrajectoryRow[], metadata?: Record<string, string>): Table {
  const columns = ROW_COLUMNS.map((c) => rows.map((r) => r[c.name] as unknown));
  return columnsToTable(columns, rows.length, metadata);
}

/** Reads rows back from an Arrow table (inspect, tests): typed-array columns as typed arrays again. */
export function tableToRows(table: Table): TrajectoryRow[] {
  const out: TrajectoryRow[] = [];
  for (const r of table) {
    const o = r!.toJSON() as Record<string, unknown>;
    const row: Record<string, unknown> = {};
    for (const c of ROW_COLUMNS) {
      const v = o[c.name];
      if (v == null) row[c.name] = null;
      else if (c.type.kind === "binary") row[c.name] = Uint8Array.from(v as Uint8Array);
      else if (!c.type.list) row[c.name] = v;
      else {
        const items = [...(v as Iterable<unknown>)];
        const fields = c.type.fields;
        const typed =
          fields === null && VALUE_KINDS[c.type.kind as ValueKind].array !== null && !c.type.elementNullable;
        row[c.name] =
          fields !== null
            ? items.map((e) =>
                e === null
                  ? null
                  : Object.fromEntries(
                      fields.map((f) => [f.name, (e as Record<string, unknown>)[f.name] ?? null]),
                    ),
              )
            : typed
              ? (arrayOf(c.type.kind as ValueKind) as unknown as typeof Int32Array).from(items as number[])
              : items;
      }
    }
    out.push(row as TrajectoryRow);
  }
  return out;
}
