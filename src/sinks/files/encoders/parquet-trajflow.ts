/**
 * trajflow's own Parquet writer: trajectory columns → Parquet bytes with no intermediate copy of the table.
 *
 * It reads the columns as the file sink hands them over (../row-columns.ts): token columns go from each
 * row's typed array into a page buffer in one `set` (PLAIN encoding of a
 * little-endian int32/float32 array is its bytes), pages are compressed by Node's own zstd or gzip (C,
 * not WebAssembly) or snappyjs, and the footer is written with Thrift's compact protocol (./thrift.ts).
 * The layout is the one parquet-wasm writes for the same schema (standard 3-level LISTs with `element`
 * children, the Arrow schema embedded as `ARROW:schema`), so readers see the same types either way.
 *
 * Written: data pages v1 (levels RLE, values PLAIN, ≈1 MiB of values per page, split at row boundaries),
 * one column chunk per column per row group, chunk statistics (min, max, null count) on the scalar
 * columns readers filter by. Not written: dictionaries (token ids do not repeat enough to pay for them),
 * page indexes, bloom filters.
 */
import { constants, gzipSync, zstdCompressSync } from "node:zlib";
import * as snappy from "snappyjs";
import { lz4Block, lz4LiteralBlock } from "../../../core/lz4-block.ts";
import type { ColumnType, ValueKind } from "../../../schemas/trajectory.ts";
import { arrowSchemaMessage } from "./arrow-schema.ts";
import { Bytes, Converted, KINDS, Levels, Physical, Stats } from "./parquet-values.ts";
import { CompactWriter } from "./thrift.ts";
import type { Compression } from "./types.ts";

/** parquet.thrift's enums, the members used here. */
const Repetition = { REQUIRED: 0, OPTIONAL: 1, REPEATED: 2 } as const;
const Encoding = { PLAIN: 0, RLE: 3 } as const;
const Codec = { UNCOMPRESSED: 0, SNAPPY: 1, GZIP: 2, ZSTD: 6, LZ4_RAW: 7 } as const;
const PAGE_DATA = 0;

const CODECS: Record<Compression, number> = {
  zstd: Codec.ZSTD,
  snappy: Codec.SNAPPY,
  gzip: Codec.GZIP,
  lz4: Codec.LZ4_RAW,
  none: Codec.UNCOMPRESSED,
};

/** zstd level 1, the default of pyarrow (Arrow C++) and parquet-rs: files the size parquet-wasm wrote. */
const ZSTD_LEVEL = 1;

// Typed arrays are in the host's byte order and their bytes are copied into pages as they are: Parquet's
// PLAIN encoding is little-endian, as x86-64 and arm64 are.
if (new Uint8Array(Uint16Array.of(1).buffer)[0] !== 1) {
  throw new Error("parquet (trajflow engine): this host is big-endian; use engine parquet-wasm");
}
/** Values per page, about: pages are cut at the first row boundary past it. */
const PAGE_VALUE_BYTES = 1 << 20;
const MAGIC = new Uint8Array([0x50, 0x41, 0x52, 0x31]); // "PAR1"

export interface ParquetTrajflowOptions {
  compression: Compression;
  metadata: Record<string, string>;
  rowGroupSize: number;
}

type Kind = ValueKind;

/** A column to write: its name and its type (schemas/trajectory.ts). */
export interface ParquetColumn {
  name: string;
  type: ColumnType<unknown>;
}

/** One leaf column: a top-level field, the element of a top-level list, or a field of a list's struct element. */
interface Leaf {
  name: string;
  /** The top-level column's index in the columns written. */
  column: number;
  kind: Kind;
  /** For a field of a list's struct element: its name, and the struct's field count (first field only: > 0). */
  structField: string | null;
  structWidth: number;
  /** path_in_schema. */
  path: string[];
  /** The top-level field is a list. */
  list: boolean;
  /** The top-level field may be null. */
  nullable: boolean;
  /** A list's elements may be null. */
  elementNullable: boolean;
  stats: boolean;
  maxDef: number;
  maxRep: number;
}

function leavesOf(columns: readonly ParquetColumn[], statsColumns: ReadonlySet<string>): Leaf[] {
  return columns.flatMap(({ name, type }, column): Leaf[] => {
    const base = { name, column, nullable: type.nullable, structField: null, structWidth: 0 };
    if (!type.list) {
      const maxDef = type.nullable ? 1 : 0;
      const kind = type.kind as Kind;
      const stats = statsColumns.has(name);
      return [{ ...base, kind, path: [name], list: false, elementNullable: false, stats, maxDef, maxRep: 0 }];
    }
    // A list's levels: the list itself (when nullable), its repeated entry, the element (when nullable).
    const listed = { ...base, list: true, elementNullable: type.elementNullable, stats: false, maxRep: 1 };
    const maxDef = (type.nullable ? 1 : 0) + 1 + (type.elementNullable ? 1 : 0);
    if (type.fields === null) {
      return [{ ...listed, kind: type.kind as Kind, path: [name, "list", "element"], maxDef }];
    }
    // list<struct>: one leaf per field, each an optional scalar (one more level).
    const fields = type.fields;
    return fields.map((field, i) => ({
      ...listed,
      kind: field.kind,
      structField: field.name,
      structWidth: i === 0 ? fields.length : 0,
      path: [name, "list", "element", field.name],
      maxDef: maxDef + 1,
    }));
  });
}

interface ChunkMeta {
  leaf: Leaf;
  offset: number;
  values: number;
  compressed: number;
  uncompressed: number;
  stats: Stats | null;
}

function compress(codec: Compression, body: Uint8Array): Uint8Array {
  switch (codec) {
    case "zstd":
      return zstdCompressSync(body, { params: { [constants.ZSTD_c_compressionLevel]: ZSTD_LEVEL } });
    case "gzip":
      return gzipSync(body);
    case "snappy":
      return snappy.compress(body);
    case "lz4":
      // LZ4_RAW: one block, no frame.
      return lz4Block(body) ?? lz4LiteralBlock(body);
    case "none":
      return body;
  }
}

/** Writes one column chunk (pages and all) of a column's rows [from, to) to `parts`. */
class ChunkWriter {
  private readonly values = new Bytes();
  private readonly rep = new Levels();
  private readonly def = new Levels();
  private levelCount = 0;
  private bits = 0; // values written into the page (booleans are bit-packed by it)

  private readonly codec: Compression;
  private readonly parts: Uint8Array[];

  constructor(codec: Compression, parts: Uint8Array[]) {
    this.codec = codec;
    this.parts = parts;
  }

  write(leaf: Leaf, values: readonly unknown[], from: number, to: number, offset: number): ChunkMeta {
    const meta: ChunkMeta = {
      leaf,
      offset,
      values: 0,
      compressed: 0,
      uncompressed: 0,
      stats: leaf.stats ? new Stats() : null,
    };
    for (let r = from; r < to; r++) {
      const v = values[r];
      if (leaf.structField !== null)
        this.structListRow(leaf, v as ArrayLike<Record<string, unknown> | null> | null);
      else if (leaf.list) this.listRow(leaf, v as ArrayLike<unknown> | null);
      else this.scalar(leaf, v, meta.stats);
      if (this.values.pos >= PAGE_VALUE_BYTES) this.page(leaf, meta);
    }
    if (this.levelCount > 0 || meta.values === 0) this.page(leaf, meta);
    return meta;
  }

  private scalar(leaf: Leaf, v: unknown, stats: Stats | null): void {
    this.levelCount++;
    if (v === null || v === undefined) {
      if (!leaf.nullable) throw new Error(`parquet (trajflow engine): ${leaf.name} is null in a row`);
      this.def.push(0);
      if (stats !== null) stats.nulls++;
      return;
    }
    if (leaf.maxDef > 0) this.def.push(1);
    this.value(leaf.kind, v, stats);
  }

  private listRow(leaf: Leaf, v: ArrayLike<unknown> | null): void {
    if (v === null || v === undefined) {
      if (!leaf.nullable) throw new Error(`parquet (trajflow engine): ${leaf.name} is null in a row`);
      this.levelCount++;
      this.rep.push(0);
      this.def.push(0);
      return;
    }
    const n = v.length;
    if (n === 0) {
      this.levelCount++;
      this.rep.push(0);
      this.def.push(leaf.nullable ? 1 : 0);
      return;
    }
    this.levelCount += n;
    this.rep.push(0);
    this.rep.push(1, n - 1);
    if (ArrayBuffer.isView(v)) {
      // Typed arrays have no nulls: one run of full definition, values in one copy (narrow ints widened).
      this.def.push(leaf.maxDef, n);
      if (KINDS[leaf.kind].physical === Physical.INT32 && (v as Int32Array).BYTES_PER_ELEMENT < 4) {
        this.widen(v as Int8Array);
      } else this.values.bytes(v);
      return;
    }
    const items = v as ArrayLike<unknown>;
    for (let i = 0; i < n; i++) {
      const item = items[i];
      if (item === null || item === undefined) {
        if (!leaf.elementNullable) throw new Error(`parquet (trajflow engine): ${leaf.name} holds a null`);
        this.def.push(leaf.maxDef - 1);
      } else {
        this.def.push(leaf.maxDef);
        this.value(leaf.kind, item, null);
      }
    }
  }

  /** One field of a list of structs: a null element, a null field and a value each have their level. */
  private structListRow(leaf: Leaf, v: ArrayLike<Record<string, unknown> | null> | null): void {
    const present = leaf.nullable ? 1 : 0;
    if (v === null || v === undefined || v.length === 0) {
      if (v == null && !leaf.nullable)
        throw new Error(`parquet (trajflow engine): ${leaf.name} is null in a row`);
      this.levelCount++;
      this.rep.push(0);
      this.def.push(v == null ? 0 : present);
      return;
    }
    for (let i = 0; i < v.length; i++) {
      this.levelCount++;
      this.rep.push(i === 0 ? 0 : 1);
      const element = v[i];
      if (element === null || element === undefined) {
        if (!leaf.elementNullable) throw new Error(`parquet (trajflow engine): ${leaf.name} holds a null`);
        this.def.push(present + 1);
        continue;
      }
      const value = element[leaf.structField!];
      if (value === null || value === undefined) {
        this.def.push(leaf.maxDef - 1);
        continue;
      }
      this.def.push(leaf.maxDef);
      this.value(leaf.kind, value, null);
    }
  }

  /** Narrow ints are INT32 in Parquet: widened in one typed-array set where the page buffer is aligned. */
  private widen(v: Int8Array): void {
    const b = this.values;
    b.ensure(v.length * 4);
    if (((b.buf.byteOffset + b.pos) & 3) === 0) {
      new Int32Array(b.buf.buffer, b.buf.byteOffset + b.pos, v.length).set(v);
    } else {
      for (let i = 0; i < v.length; i++) b.buf.writeInt32LE(v[i]!, b.pos + i * 4);
    }
    b.pos += v.length * 4;
  }

  private value(kind: Kind, v: unknown, stats: Stats | null): void {
    KINDS[kind].write(this.values, v, stats, this.bits++);
  }

  /** Ends a page: levels and values into one body, compressed, after its header. */
  private page(leaf: Leaf, meta: ChunkMeta): void {
    const rep = leaf.maxRep > 0 ? this.rep.take() : null;
    const def = leaf.maxDef > 0 ? this.def.take() : null;
    const values = this.values.view();
    const size = (rep === null ? 0 : 4 + rep.length) + (def === null ? 0 : 4 + def.length) + values.length;
    const body = new Uint8Array(size);
    const view = new DataView(body.buffer);
    let at = 0;
    for (const levels of [rep, def]) {
      if (levels === null) continue;
      view.setUint32(at, levels.length, true);
      body.set(levels, at + 4);
      at += 4 + levels.length;
    }
    body.set(values, at);
    const compressed = compress(this.codec, body);
    const header = new CompactWriter()
      .i32(1, PAGE_DATA)
      .i32(2, body.length)
      .i32(3, compressed.length)
      .struct(5, (w) =>
        w.i32(1, this.levelCount).i32(2, Encoding.PLAIN).i32(3, Encoding.RLE).i32(4, Encoding.RLE),
      )
      .finish();
    this.parts.push(Uint8Array.prototype.slice.call(header), compressed);
    meta.values += this.levelCount;
    meta.compressed += header.length + compressed.length;
    meta.uncompressed += header.length + body.length;
    this.values.pos = 0;
    this.levelCount = 0;
    this.bits = 0;
  }
}

function schemaElements(w: CompactWriter, leaves: readonly Leaf[]): void {
  type Element = (w: CompactWriter) => void;
  const columns = new Set(leaves.map((l) => l.name)).size;
  const elements: Element[] = [(e) => e.binary(4, "arrow_schema").i32(5, columns)];
  const primitive = (leaf: Leaf, name: string, repetition: number): Element => {
    return (e) => {
      e.i32(1, KINDS[leaf.kind].physical).i32(3, repetition).binary(4, name);
      KINDS[leaf.kind].annotate?.(e);
    };
  };
  /** The standard 3-level LIST's two groups: `<name> (LIST)` and its `repeated group list`. */
  const listGroups = (leaf: Leaf) => {
    elements.push((e) =>
      e
        .i32(3, leaf.nullable ? Repetition.OPTIONAL : Repetition.REQUIRED)
        .binary(4, leaf.name)
        .i32(5, 1)
        .i32(6, Converted.LIST)
        .struct(10, (l) => l.struct(3, () => {})),
    );
    elements.push((e) => e.i32(3, Repetition.REPEATED).binary(4, "list").i32(5, 1));
  };
  for (const leaf of leaves) {
    if (leaf.structField !== null) {
      if (leaf.structWidth > 0) {
        listGroups(leaf);
        elements.push((e) =>
          e
            .i32(3, leaf.elementNullable ? Repetition.OPTIONAL : Repetition.REQUIRED)
            .binary(4, "element")
            .i32(5, leaf.structWidth),
        );
      }
      elements.push(primitive(leaf, leaf.structField, Repetition.OPTIONAL));
      continue;
    }
    if (!leaf.list) {
      elements.push(primitive(leaf, leaf.name, leaf.nullable ? Repetition.OPTIONAL : Repetition.REQUIRED));
      continue;
    }
    listGroups(leaf);
    elements.push(
      primitive(leaf, "element", leaf.elementNullable ? Repetition.OPTIONAL : Repetition.REQUIRED),
    );
  }
  w.structList(2, elements, (e, write) => write(e));
}

/** The Arrow schema as pyarrow and arrow-rs store it in `ARROW:schema`: one IPC schema message, base64. */
const schemaValues = new WeakMap<readonly ParquetColumn[], string>();

/**
 * The file's bytes in order, a column chunk at a time: a writer streams them to disk or to an upload, so
 * the encoded file is never whole in memory.
 */
export function* parquetTrajflowChunks(
  values: ReadonlyArray<readonly unknown[]>,
  count: number,
  columns: readonly ParquetColumn[],
  statsColumns: ReadonlySet<string>,
  options: ParquetTrajflowOptions,
): Generator<Uint8Array> {
  const leaves = leavesOf(columns, statsColumns);
  let arrowSchema = schemaValues.get(columns);
  if (arrowSchema === undefined) {
    arrowSchema = Buffer.from(arrowSchemaMessage(columns)).toString("base64");
    schemaValues.set(columns, arrowSchema);
  }
  const parts: Uint8Array[] = [MAGIC];
  let offset = MAGIC.length;
  const writer = new ChunkWriter(options.compression, parts);
  const groups: Array<{ rows: number; chunks: ChunkMeta[] }> = [];
  const groupSize = Math.max(1, options.rowGroupSize);
  for (let from = 0; from < count || groups.length === 0; from += groupSize) {
    const to = Math.min(count, from + groupSize);
    const chunks: ChunkMeta[] = [];
    for (const leaf of leaves) {
      const meta = writer.write(leaf, values[leaf.column]!, from, to, offset);
      offset += meta.compressed;
      chunks.push(meta);
      yield* parts.splice(0);
    }
    groups.push({ rows: to - from, chunks });
    if (count === 0) break;
  }

  const footer = new CompactWriter().i32(1, 1);
  schemaElements(footer, leaves);
  footer.i64(3, count).structList(4, groups, (g, group) => {
    g.structList(1, group.chunks, (c, chunk) => {
      const path = chunk.leaf.path;
      c.i64(2, chunk.offset).struct(3, (m) => {
        m.i32(1, KINDS[chunk.leaf.kind].physical)
          .i32List(2, [Encoding.PLAIN, Encoding.RLE])
          .binaryList(3, path)
          .i32(4, CODECS[options.compression])
          .i64(5, chunk.values)
          .i64(6, chunk.uncompressed)
          .i64(7, chunk.compressed)
          .i64(9, chunk.offset);
        const stats = chunk.stats;
        if (stats !== null) {
          const minMax = stats.encoded(chunk.leaf.kind);
          m.struct(12, (s) => {
            s.i64(3, stats.nulls);
            if (minMax !== null) s.binary(5, minMax[1]).binary(6, minMax[0]);
          });
        }
      });
    });
    const uncompressed = group.chunks.reduce((s, c) => s + c.uncompressed, 0);
    const compressed = group.chunks.reduce((s, c) => s + c.compressed, 0);
    g.i64(2, uncompressed)
      .i64(3, group.rows)
      .i64(5, group.chunks[0]!.offset)
      .i64(6, compressed)
      .i16(7, groups.indexOf(group));
  });
  const metadata = [...Object.entries(options.metadata), ["ARROW:schema", arrowSchema] as const];
  footer
    .structList(5, metadata, (kv, [k, v]) => kv.binary(1, k).binary(2, v))
    .binary(6, "trajflow")
    // Column orders make readers trust min/max (TypeDefinedOrder: signed ints, UTF-8 bytes unsigned).
    .structList(7, leaves, (o) => o.struct(1, () => {}));
  const tail = footer.finish();
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, tail.length, true);
  parts.push(tail, length, MAGIC);
  yield* parts.splice(0);
}
