/**
 * A Parquet file's key-value metadata, read from its footer alone: the last 8 bytes give the footer's
 * length, the footer is Thrift's compact protocol, and only FileMetaData's field 5 is decoded (every
 * other field is skipped by its wire type). Kafka recovery reads the metadata of every file past the
 * committed offsets at start; reading whole files (50-200 MB each) and loading a Parquet library for it
 * cost time and memory the footer does not need.
 */
import { TrajflowError } from "../../core/errors.ts";
import type { Store } from "../shared/store.ts";
import { CompactReader } from "./encoders/thrift.ts";

const MAGIC = "PAR1";
/** A footer larger than this is not one trajflow wrote or can trust (ours are ~20 KB). */
const MAX_FOOTER = 64 << 20;

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

/** Reads `length` bytes at `offset` of a file of known size (a store's range). */
export type ReadAt = (offset: number, length: number) => Promise<Uint8Array>;

/** The key-value metadata of a Parquet file of `size` bytes, reading only its footer through `read`. */
export async function parquetKeyValuesAt(
  what: string,
  size: number,
  read: ReadAt,
): Promise<Record<string, string>> {
  const fail = (why: string, cause?: unknown) =>
    new TrajflowError("SOURCE_READ_FAILED", `cannot read the Parquet footer of ${what}: ${why}`, { cause });
  if (size < 12) throw fail(`${size} bytes is too short for Parquet`);
  const tail = Buffer.from(await read(size - 8, 8));
  const length = tail.readUInt32LE(0);
  if (tail.toString("latin1", 4) !== MAGIC) throw fail("no PAR1 at its end");
  if (length > MAX_FOOTER || length + 12 > size) throw fail(`footer length ${length} out of range`);
  const footer = await read(size - 8 - length, length);
  try {
    return footerKeyValues(footer);
  } catch (err) {
    throw fail((err as Error).message, err);
  }
}

/** The key-value metadata of the Parquet file `name` in `store`, reading only its footer. */
export async function storedParquetKeyValues(store: Store, name: string): Promise<Record<string, string>> {
  try {
    // The last 8 bytes (footer length and magic) and the file's size in one read, then the footer.
    const tail = await store.readRange(name, { last: 8 });
    return await parquetKeyValuesAt(store.url(name), tail.size, async (offset, length) =>
      offset === tail.size - 8 && length === 8
        ? tail.bytes
        : (await store.readRange(name, { offset, length })).bytes,
    );
  } catch (err) {
    if (err instanceof TrajflowError) throw err;
    throw new TrajflowError(
      "SOURCE_READ_FAILED",
      `cannot read the Parquet footer of ${store.url(name)}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}
