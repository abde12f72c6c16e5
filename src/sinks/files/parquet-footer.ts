/**
 * A Parquet file's key-value metadata, read from its footer alone: the last 8 bytes give the footer's
 * length, the footer is Thrift's compact protocol, and only FileMetaData's field 5 is decoded (every
 * other field is skipped by its wire type). Kafka recovery reads the metadata of every file past the
 * committed offsets at start; reading whole files (50-200 MB each) and loading a Parquet library for it
 * cost time and memory the footer does not need.
 */
import { promises as fs } from "node:fs";
import { TrajflowError } from "../../core/errors.ts";

const MAGIC = "PAR1";
/** A footer larger than this is not one trajflow wrote or can trust (ours are ~20 KB). */
const MAX_FOOTER = 64 << 20;

class CompactReader {
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

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Decodes FileMetaData's key_value_metadata (field 5: list<KeyValue{1: key, 2: value}>). */
export function footerKeyValues(footer: Uint8Array): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  const r = new CompactReader(footer);
  r.struct((id, type) => {
    if (id !== 5 || type !== 9) return false;
    const { size } = r.listHeader();
    for (let i = 0; i < size; i++) {
      let key: string | null = null;
      let value = "";
      r.struct((field, t) => {
        if (field === 1 && t === 8) key = utf8.decode(r.binary());
        else if (field === 2 && t === 8) value = utf8.decode(r.binary());
        else return false;
        return true;
      });
      if (key !== null) out[key] = value;
    }
    return true;
  });
  return out;
}

/** The key-value metadata of the Parquet file at `path`, reading only its footer. */
export async function readParquetKeyValues(path: string): Promise<Record<string, string>> {
  const fail = (why: string, cause?: unknown) =>
    new TrajflowError("SOURCE_READ_FAILED", `cannot read the Parquet footer of ${path}: ${why}`, { cause });
  let file;
  try {
    file = await fs.open(path, "r");
  } catch (err) {
    throw fail((err as Error).message, err);
  }
  try {
    const { size } = await file.stat();
    if (size < 12) throw fail(`${size} bytes is too short for Parquet`);
    const tail = Buffer.alloc(8);
    await file.read(tail, 0, 8, size - 8);
    const length = tail.readUInt32LE(0);
    if (tail.toString("latin1", 4) !== MAGIC) throw fail("no PAR1 at its end");
    if (length > MAX_FOOTER || length + 12 > size) throw fail(`footer length ${length} out of range`);
    const footer = Buffer.alloc(length);
    await file.read(footer, 0, length, size - 8 - length);
    try {
      return footerKeyValues(footer);
    } catch (err) {
      throw fail((err as Error).message, err);
    }
  } finally {
    await file.close();
  }
}
