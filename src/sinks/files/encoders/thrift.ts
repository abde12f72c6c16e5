/**
 * Thrift's compact protocol: the encoding of Parquet's page headers and file footer (parquet-format's
 * parquet.thrift). The writer emits what trajflow's Parquet writer needs; the reader decodes what it is
 * asked for and skips every other field by its wire type. Fields are written in increasing id order within
 * each struct, as the protocol's field-id deltas require.
 */

const T = {
  BoolTrue: 1,
  BoolFalse: 2,
  Byte: 3,
  I16: 4,
  I32: 5,
  I64: 6,
  Binary: 8,
  List: 9,
  Struct: 12,
} as const;

const utf8 = new TextEncoder();

export class CompactWriter {
  private buf = new Uint8Array(1024);
  private pos = 0;
  private lastField = 0;
  private readonly outer: number[] = [];

  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.pos + n));
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
  }

  private byte(b: number): void {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  /** Unsigned varint of a non-negative integer up to 2^53 (Number arithmetic, no BigInt). */
  private varint(n: number): void {
    this.ensure(10);
    while (n >= 0x80) {
      this.buf[this.pos++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    this.buf[this.pos++] = n;
  }

  private zigzag(n: number): void {
    this.varint(n >= 0 ? n * 2 : -n * 2 - 1);
  }

  private fieldHeader(id: number, type: number): void {
    const delta = id - this.lastField;
    if (delta > 0 && delta <= 15) this.byte((delta << 4) | type);
    else {
      this.byte(type);
      this.zigzag(id);
    }
    this.lastField = id;
  }

  i16(id: number, value: number): this {
    this.fieldHeader(id, T.I16);
    this.zigzag(value);
    return this;
  }

  i32(id: number, value: number): this {
    this.fieldHeader(id, T.I32);
    this.zigzag(value);
    return this;
  }

  i64(id: number, value: number): this {
    this.fieldHeader(id, T.I64);
    this.zigzag(value);
    return this;
  }

  bool(id: number, value: boolean): this {
    this.fieldHeader(id, value ? T.BoolTrue : T.BoolFalse);
    return this;
  }

  byteField(id: number, value: number): this {
    this.fieldHeader(id, T.Byte);
    this.byte(value & 0xff);
    return this;
  }

  binary(id: number, value: Uint8Array | string): this {
    this.fieldHeader(id, T.Binary);
    this.rawBinary(value);
    return this;
  }

  private rawBinary(value: Uint8Array | string): void {
    const bytes = typeof value === "string" ? utf8.encode(value) : value;
    this.varint(bytes.length);
    this.ensure(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  private listHeader(id: number, size: number, elementType: number): void {
    this.fieldHeader(id, T.List);
    if (size < 15) this.byte((size << 4) | elementType);
    else {
      this.byte(0xf0 | elementType);
      this.varint(size);
    }
  }

  i32List(id: number, values: readonly number[]): this {
    this.listHeader(id, values.length, T.I32);
    for (const v of values) this.zigzag(v);
    return this;
  }

  binaryList(id: number, values: readonly string[]): this {
    this.listHeader(id, values.length, T.Binary);
    for (const v of values) this.rawBinary(v);
    return this;
  }

  /** A list of structs, each written by `write` between its own begin and end. */
  structList<T>(id: number, items: readonly T[], write: (w: this, item: T) => void): this {
    this.listHeader(id, items.length, T.Struct);
    for (const item of items) {
      this.outer.push(this.lastField);
      this.lastField = 0;
      write(this, item);
      this.byte(0);
      this.lastField = this.outer.pop()!;
    }
    return this;
  }

  /** A struct-valued field (also a union's one member), written by `write`. */
  struct(id: number, write: (w: this) => void): this {
    this.fieldHeader(id, T.Struct);
    this.outer.push(this.lastField);
    this.lastField = 0;
    write(this);
    this.byte(0);
    this.lastField = this.outer.pop()!;
    return this;
  }

  /** Ends the top-level struct and returns its bytes. */
  finish(): Uint8Array {
    this.byte(0);
    return this.buf.subarray(0, this.pos);
  }
}

/** Reads compact-protocol bytes: structs field by field, anything unwanted skipped. */
export class CompactReader {
  private at = 0;
  private readonly bytes: Uint8Array;

  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
  }

  private byte(): number {
    if (this.at >= this.bytes.length) throw new Error("footer ends early");
    return this.bytes[this.at++]!;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error("varint longer than 10 bytes");
  }

  binary(): Uint8Array {
    const n = this.varint();
    if (this.at + n > this.bytes.length) throw new Error("footer ends inside a string");
    const out = this.bytes.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }

  /** Calls `field(id, type)` for each field of a struct; `field` consumes the value or returns false to skip it. */
  struct(field: (id: number, type: number) => boolean): void {
    let last = 0;
    for (;;) {
      const header = this.byte();
      if (header === 0) return;
      const type = header & 0x0f;
      const delta = header >> 4;
      let id: number;
      if (delta !== 0) id = last + delta;
      else {
        const z = this.varint();
        id = z % 2 === 0 ? z / 2 : -(z + 1) / 2;
      }
      last = id;
      if (!field(id, type)) this.skip(type, false);
    }
  }

  /** Element count and type of a list or set. */
  listHeader(): { size: number; type: number } {
    const b = this.byte();
    const size = b >> 4 === 15 ? this.varint() : b >> 4;
    return { size, type: b & 0x0f };
  }

  skip(type: number, inList: boolean): void {
    switch (type) {
      case 1: // bool true (a field's value is in its header; a list's bools take a byte each)
      case 2:
        if (inList) this.byte();
        return;
      case 3:
        this.byte();
        return;
      case 4:
      case 5:
      case 6:
        this.varint();
        return;
      case 7:
        this.at += 8;
        return;
      case 8:
        this.binary();
        return;
      case 9:
      case 10: {
        const { size, type: element } = this.listHeader();
        for (let i = 0; i < size; i++) this.skip(element, true);
        return;
      }
      case 11: {
        const size = this.varint();
        if (size === 0) return;
        const kinds = this.byte();
        for (let i = 0; i < size; i++) {
          this.skip(kinds >> 4, true);
          this.skip(kinds & 0x0f, true);
        }
        return;
      }
      case 12:
        this.struct(() => false);
        return;
      default:
        throw new Error(`unknown Thrift type ${type}`);
    }
  }
}
