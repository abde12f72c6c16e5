/**
 * The parquetjs-lite engine: pure JavaScript, much slower than parquet-wasm (BENCHMARKS.md). It is the one
 * engine that takes rows (`appendRow`), so the columns are turned back into its row objects here, and only
 * here. Rows are appended strictly one after another: overlapping appendRow calls were measured
 * duplicating rows.
 *
 * The schema uses the standard three-level LIST (`<name> (LIST) { repeated group list { element } }`) and
 * the same logical types as the Arrow schema, so pyarrow reads exactly the schema parquet-wasm writes.
 */
import { Writable } from "node:stream";
import parquet from "parquetjs-lite";
import { ROW_COLUMNS, type ColumnType, type ValueKind } from "../../../schemas/trajectory.ts";
import type { Columns } from "../row-columns.ts";
import type { Compression } from "./types.ts";

const CODECS: Partial<Record<Compression, string>> = { snappy: "SNAPPY", gzip: "GZIP", none: "UNCOMPRESSED" };

const PARQUETJS_TYPES: Record<ValueKind, string> = {
  utf8: "UTF8",
  binary: "BYTE_ARRAY",
  int8: "INT_8",
  int32: "INT32",
  float32: "FLOAT",
  float64: "DOUBLE",
  bool: "BOOLEAN",
};

type FieldSpec = Record<string, unknown>;

function fieldSpec(type: ColumnType<unknown>, compression: string): FieldSpec {
  const optional = (yes: boolean) => (yes ? { optional: true } : {});
  const fields = type.fields;
  const leaf = (elementOptional: boolean): FieldSpec =>
    fields === null
      ? { type: PARQUETJS_TYPES[type.kind as ValueKind], compression, ...optional(elementOptional) }
      : {
          ...optional(elementOptional),
          fields: Object.fromEntries(
            fields.map((f) => [f.name, { type: PARQUETJS_TYPES[f.kind], compression, optional: true }]),
          ),
        };
  if (!type.list) return { ...leaf(false), ...optional(type.nullable) };
  return {
    type: "LIST",
    ...optional(type.nullable),
    fields: { list: { repeated: true, fields: { element: leaf(type.elementNullable) } } },
  };
}

function schemaFor(compression: string): unknown {
  return new parquet.ParquetSchema(
    Object.fromEntries(ROW_COLUMNS.map((c) => [c.name, fieldSpec(c.type, compression)])),
  );
}

/**
 * parquetjs-lite shreds nested values from objects: one { element } object per list value, a null element
 * is an element object without the field, and a null value is an absent field.
 */
function parquetjsValue(value: unknown, type: ColumnType<unknown>): unknown {
  if (value === null) return undefined;
  if (type.kind === "binary")
    return Buffer.from(
      (value as Uint8Array).buffer,
      (value as Uint8Array).byteOffset,
      (value as Uint8Array).byteLength,
    );
  if (!type.list) return value;
  // A struct element's null fields are absent keys, as a null value is.
  const shred = (element: unknown) =>
    type.fields === null
      ? element
      : Object.fromEntries(Object.entries(element as object).filter(([, v]) => v !== null));
  return {
    list: Array.from(value as ArrayLike<unknown>, (element) =>
      element === null ? {} : { element: shred(element) },
    ),
  };
}

/** Row `r` of the columns, as parquetjs-lite takes it: the row adapter of this engine alone. */
function parquetjsRow(columns: Columns, r: number): Record<string, unknown> {
  return Object.fromEntries(
    ROW_COLUMNS.map((c, i) => [c.name, parquetjsValue(columns.values[i]![r], c.type)]),
  );
}

export interface ParquetjsOptions {
  compression: Compression;
  metadata: Record<string, string>;
  rowGroupSize: number;
}

export async function encodeParquetjs(columns: Columns, options: ParquetjsOptions): Promise<Uint8Array> {
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
  for (let r = 0; r < columns.count; r++) await writer.appendRow(parquetjsRow(columns, r)); // strictly sequential
  await writer.close();
  return Buffer.concat(chunks);
}
