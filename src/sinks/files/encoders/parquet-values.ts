/**
 * How trajflow's Parquet writer (./parquet-trajflow.ts) encodes values: a growable page buffer, RLE runs
 * of repetition and definition levels, chunk statistics, and per value kind (schemas/trajectory.ts's
 * VALUE_KINDS) its physical type, schema annotation and PLAIN encoding.
 */
import type { ValueKind } from "../../../schemas/trajectory.ts";
import type { CompactWriter } from "./thrift.ts";

/** parquet.thrift's enums, the members used here. */
export const Physical = { BOOLEAN: 0, INT32: 1, FLOAT: 4, DOUBLE: 5, BYTE_ARRAY: 6 } as const;
export const Converted = { UTF8: 0, LIST: 3, INT_8: 15 } as const;

type Kind = ValueKind;

/** A growable byte buffer, reused page after page. */
export class Bytes {
  buf = Buffer.allocUnsafe(1 << 16);
  pos = 0;

  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  bytes(src: ArrayBufferView): void {
    const view = new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
    this.ensure(view.length);
    this.buf.set(view, this.pos);
    this.pos += view.length;
  }

  view(): Uint8Array {
    return this.buf.subarray(0, this.pos);
  }
}

/**
 * Repetition or definition levels, RLE runs of the RLE/bit-packing hybrid (levels here come in long runs:
 * a list is one 0 and then 1s, definition levels are mostly the maximum).
 */
export class Levels {
  private readonly out = new Bytes();
  private value = -1;
  private count = 0;

  push(value: number, count = 1): void {
    if (count === 0) return;
    if (value === this.value) {
      this.count += count;
      return;
    }
    this.flushRun();
    this.value = value;
    this.count = count;
  }

  private flushRun(): void {
    if (this.count === 0) return;
    const b = this.out;
    b.ensure(11);
    // Run header: count << 1 as an unsigned varint, then the value in one byte (levels here are <= 3).
    let n = this.count * 2;
    while (n >= 0x80) {
      b.buf[b.pos++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    b.buf[b.pos++] = n;
    b.buf[b.pos++] = this.value;
  }

  /** The encoded runs, and the buffer emptied for the next page. */
  take(): Uint8Array {
    this.flushRun();
    const bytes = Uint8Array.prototype.slice.call(this.out.view());
    this.out.pos = 0;
    this.value = -1;
    this.count = 0;
    return bytes;
  }
}

/** Min, max and null count of a scalar column chunk, kept as Parquet encodes them. */
export class Stats {
  nulls = 0;
  private minNum = Infinity;
  private maxNum = -Infinity;
  private minBytes: Buffer | null = null;
  private maxBytes: Buffer | null = null;

  number(v: number): void {
    if (Number.isNaN(v)) return; // NaN has no place in min/max (readers skip such statistics)
    if (v < this.minNum) this.minNum = v;
    if (v > this.maxNum) this.maxNum = v;
  }

  bytes(v: Buffer): void {
    if (this.minBytes === null || Buffer.compare(v, this.minBytes) < 0) this.minBytes = Buffer.from(v);
    if (this.maxBytes === null || Buffer.compare(v, this.maxBytes) > 0) this.maxBytes = Buffer.from(v);
  }

  /** [min, max] plain-encoded, or null when no value was seen. */
  encoded(kind: Kind): [Uint8Array, Uint8Array] | null {
    if (this.minBytes !== null) return [this.minBytes, this.maxBytes!];
    const plain = KINDS[kind].plainNumber;
    if (this.minNum > this.maxNum || plain === null) return null;
    return [plain(this.minNum), plain(this.maxNum)];
  }
}

/**
 * What the writer needs of each value kind (schemas/trajectory.ts's VALUE_KINDS): its physical type, the
 * annotation its schema element carries, how a value is PLAIN-encoded into a page (`bit`: the value's
 * index in the page, for booleans' bit packing), and a number's PLAIN bytes for statistics.
 */
export interface KindCodec {
  physical: number;
  annotate: ((e: CompactWriter) => void) | null;
  write(b: Bytes, v: unknown, stats: Stats | null, bit: number): void;
  plainNumber: ((v: number) => Uint8Array) | null;
}

export function int32Value(b: Bytes, v: unknown, stats: Stats | null): void {
  b.ensure(4);
  b.buf.writeInt32LE(v as number, b.pos);
  b.pos += 4;
  stats?.number(v as number);
}

export function int32Plain(v: number): Uint8Array {
  const b = Buffer.alloc(4);
  b.writeInt32LE(v);
  return b;
}

export const KINDS: Record<Kind, KindCodec> = {
  int32: { physical: Physical.INT32, annotate: null, write: int32Value, plainNumber: int32Plain },
  int8: {
    physical: Physical.INT32,
    annotate: (e) =>
      e.i32(6, Converted.INT_8).struct(10, (l) => l.struct(10, (i) => i.byteField(1, 8).bool(2, true))),
    write: int32Value,
    plainNumber: int32Plain,
  },
  float32: {
    physical: Physical.FLOAT,
    annotate: null,
    write(b, v) {
      b.ensure(4);
      b.buf.writeFloatLE(v as number, b.pos);
      b.pos += 4;
    },
    plainNumber: null,
  },
  float64: {
    physical: Physical.DOUBLE,
    annotate: null,
    write(b, v, stats) {
      b.ensure(8);
      b.buf.writeDoubleLE(v as number, b.pos);
      b.pos += 8;
      stats?.number(v as number);
    },
    plainNumber(v) {
      const b = Buffer.alloc(8);
      b.writeDoubleLE(v === 0 ? 0 : v);
      return b;
    },
  },
  bool: {
    physical: Physical.BOOLEAN,
    annotate: null,
    // Bit-packed, LSB first, from the page's first value on.
    write(b, v, _stats, bit) {
      if ((bit & 7) === 0) {
        b.ensure(1);
        b.buf[b.pos++] = 0;
      }
      if (v === true) b.buf[b.pos - 1]! |= 1 << (bit & 7);
    },
    plainNumber: null,
  },
  utf8: {
    physical: Physical.BYTE_ARRAY,
    annotate: (e) => e.i32(6, Converted.UTF8).struct(10, (l) => l.struct(1, () => {})),
    write(b, v, stats) {
      const s = v as string;
      b.ensure(4 + s.length * 3);
      const n = b.buf.write(s, b.pos + 4, "utf8");
      b.buf.writeUInt32LE(n, b.pos);
      if (stats !== null) stats.bytes(b.buf.subarray(b.pos + 4, b.pos + 4 + n));
      b.pos += 4 + n;
    },
    plainNumber: null,
  },
  binary: {
    physical: Physical.BYTE_ARRAY,
    annotate: null,
    write(b, v) {
      const bytes = v as Uint8Array;
      b.ensure(4 + bytes.length);
      b.buf.writeUInt32LE(bytes.length, b.pos);
      b.buf.set(bytes, b.pos + 4);
      b.pos += 4 + bytes.length;
    },
    plainNumber: null,
  },
};
