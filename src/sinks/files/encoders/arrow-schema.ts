/**
 * The Arrow schema of trajectory columns as one IPC schema message, the value Parquet writers store under
 * `ARROW:schema` so Arrow readers (pyarrow, arrow-rs, DuckDB) get the exact types back. Written from
 * ROW_COLUMNS with the flatbuffers builder alone: loading apache-arrow to serialize one constant message
 * cost each encoder thread ~190 ms of CPU and ~23 MiB (measured); the Arrow format and parquet-wasm
 * still load it, when chosen.
 *
 * The layout follows Arrow's format/Schema.fbs and Message.fbs (metadata version V5); the test reads the
 * message back with apache-arrow and compares it with trajectory-arrow.ts's schema.
 */
import { Builder } from "flatbuffers";
import {
  arrowShape,
  VALUE_KINDS,
  type ArrowLeaf,
  type ArrowShape,
  type ColumnType,
} from "../../../schemas/trajectory.ts";

// Message.fbs / Schema.fbs enums and union tags.
const METADATA_V5 = 4;
const HEADER_SCHEMA = 1;
const TYPE = { Int: 2, FloatingPoint: 3, Binary: 4, Utf8: 5, Bool: 6, List: 12, Struct: 13 } as const;

/** The type table of a field: [union tag, offset]. A value kind's comes from VALUE_KINDS. */
function typeTable(b: Builder, type: ArrowShape["type"]): [number, number] {
  const empty = (): number => {
    b.startObject(0);
    return b.endObject();
  };
  if (type === "list" || type === "struct") return [type === "list" ? TYPE.List : TYPE.Struct, empty()];
  const leaf: ArrowLeaf = VALUE_KINDS[type].arrow;
  switch (leaf.type) {
    case "Int":
      b.startObject(2);
      b.addFieldInt32(0, leaf.bits, 0);
      b.addFieldInt8(1, 1, 0); // is_signed
      return [TYPE.Int, b.endObject()];
    case "FloatingPoint":
      b.startObject(1);
      b.addFieldInt16(0, leaf.precision, 0);
      return [TYPE.FloatingPoint, b.endObject()];
    default:
      return [TYPE[leaf.type], empty()];
  }
}

function offsetVector(b: Builder, offsets: number[]): number {
  b.startVector(4, offsets.length, 4);
  for (let i = offsets.length - 1; i >= 0; i--) b.addOffset(offsets[i]!);
  return b.endVector();
}

/**
 * A field table. The order of creation and of the adds is apache-arrow's (ipc/metadata/message.ts), so
 * the bytes are the ones it writes: files stay byte for byte what earlier versions wrote.
 */
function writeField(b: Builder, field: ArrowShape): number {
  const [tag, type] = typeTable(b, field.type);
  const children = offsetVector(
    b,
    field.children.map((c) => writeField(b, c)),
  );
  const name = b.createString(field.name);
  b.startObject(7);
  b.addFieldOffset(3, type, 0);
  b.addFieldInt8(2, tag, 0);
  b.addFieldOffset(5, children, 0);
  b.addFieldInt8(1, field.nullable ? 1 : 0, 0);
  b.addFieldOffset(0, name, 0);
  return b.endObject();
}

/** The encapsulated IPC message (continuation marker, padded length, flatbuffer) of `columns`' schema. */
export function arrowSchemaMessage(
  columns: ReadonlyArray<{ name: string; type: ColumnType<unknown> }>,
): Uint8Array {
  const b = new Builder(1024);
  const fields = offsetVector(
    b,
    columns.map((c) => writeField(b, arrowShape(c.name, c.type))),
  );
  b.startObject(4);
  b.addFieldOffset(1, fields, 0);
  b.addFieldInt16(0, 0, 0); // endianness: little (the default, so not stored)
  const schema = b.endObject();
  b.startObject(5);
  b.addFieldInt16(0, METADATA_V5, 0);
  b.addFieldOffset(2, schema, 0);
  b.addFieldInt8(1, HEADER_SCHEMA, 0);
  b.addFieldInt64(3, 0n, 0n); // bodyLength: a schema message has no body
  b.finish(b.endObject());
  const flat = b.asUint8Array();
  const padded = (flat.length + 7) & ~7;
  const out = new Uint8Array(8 + padded);
  const view = new DataView(out.buffer);
  view.setUint32(0, 0xffffffff, true);
  view.setInt32(4, padded, true);
  out.set(flat, 8);
  return out;
}
