/**
 * Token id and logprob arrays as they travel in events: either a plain JSON array or a packed
 * `{ "b64": "<base64 of little-endian int32 | float32>" }`. Both decode here with one tight loop into a
 * typed array: going element by element through a generic array schema would halve parse speed.
 *
 * Decoders return the typed array, or a string saying what is wrong (the caller turns it into an issue).
 */
import { preview } from "../core/preview.ts";
import { endianness } from "node:os";

const LITTLE_ENDIAN = endianness() === "LE";
const INT32_MAX = 2147483647;

/** The packed form of a token or logprob array. */
export interface PackedArray {
  b64: string;
}

function isPacked(value: unknown): value is PackedArray {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    typeof (value as { b64?: unknown }).b64 === "string"
  );
}

/**
 * Decodes base64 of 4-byte elements straight into where this thread's arrays go, without an intermediate
 * Buffer: on a decode worker its arena's shared blocks (a buffer of its own per array was one more
 * buffer to transfer and track per array: the decode worker's postMessage took 230 ms a run on the shared
 * harness's short workload in the packed delta form), else a fresh, aligned ArrayBuffer of its own.
 */
function unpack<T extends Int32Array | Float32Array>(
  b64: string,
  view: new (buffer: ArrayBuffer, at: number, n: number) => T,
): T | string {
  // Node's decoder skips characters outside the alphabet (whitespace, "="), so the size is an upper bound.
  const bound = Buffer.byteLength(b64, "base64");
  const [reserved, at] = arena === null ? [new ArrayBuffer(bound), 0] : arena.bytes(bound);
  let buffer = reserved;
  const length = Buffer.from(buffer, at, bound).write(b64, "base64");
  if (length % 4 !== 0) return `packed array has ${length} bytes, not a multiple of 4`;
  // A buffer of its own is exactly the array's (it is transferred and kept whole).
  if (arena === null && length !== bound) buffer = buffer.slice(0, length);
  if (!LITTLE_ENDIAN) byteSwap32(new Uint8Array(buffer, at, length));
  return new view(buffer, at, length / 4);
}

function byteSwap32(b: Uint8Array): void {
  for (let i = 0; i < b.length; i += 4) {
    const a0 = b[i]!;
    const a1 = b[i + 1]!;
    b[i] = b[i + 3]!;
    b[i + 1] = b[i + 2]!;
    b[i + 2] = a1;
    b[i + 3] = a0;
  }
}

/**
 * Where decoded JSON arrays are allocated on a decode worker: views into shared blocks, so a chunk of
 * events crosses to the ingest thread as a few transferred buffers instead of one per array (each
 * buffer of its own is an external allocation the garbage collector tracks one by one). A view keeps its
 * whole block alive; assembly copies token ids and logprobs into session storage, so a block outlives its
 * chunk only while one of its events waits (a request for its response, an event for an earlier seq).
 */
export class ArrayArena {
  private static readonly BLOCK_BYTES = 256 * 1024;
  private block: ArrayBuffer | null = null;
  private used = 0;
  private blocks: ArrayBuffer[] = [];

  /** `n` four-byte elements (int32 or float32) of a fresh, zeroed range. */
  private range(n: number): [ArrayBuffer, number] {
    const bytes = n * 4;
    // A large array gets a buffer of its own, transferred with the event like a packed array's.
    if (bytes > ArrayArena.BLOCK_BYTES / 4) return [new ArrayBuffer(bytes), 0];
    if (this.block === null || this.used + bytes > this.block.byteLength) {
      this.block = new ArrayBuffer(ArrayArena.BLOCK_BYTES);
      this.blocks.push(this.block);
      this.used = 0;
    }
    const at = this.used;
    this.used += bytes;
    return [this.block, at];
  }

  /** At least `n` bytes (rounded up to whole elements) of a fresh, zeroed range: its buffer and offset. */
  bytes(n: number): [ArrayBuffer, number] {
    return this.range(Math.ceil(n / 4));
  }

  int32(n: number): Int32Array {
    const [buffer, at] = this.range(n);
    return new Int32Array(buffer, at, n);
  }

  float32(n: number): Float32Array {
    const [buffer, at] = this.range(n);
    return new Float32Array(buffer, at, n);
  }

  /** The shared blocks allocated since the last call (to transfer); later arrays go into new blocks. */
  take(): ArrayBuffer[] {
    const out = this.blocks;
    this.blocks = [];
    this.block = null;
    return out;
  }
}

let arena: ArrayArena | null = null;

/** Allocates this thread's decoded JSON arrays in `a` from now on (decode workers); null: one buffer each. */
export function useArrayArena(a: ArrayArena | null): void {
  arena = a;
}

/**
 * Token ids a decode worker already read from JSON and checked (decode/prompt-prefix.ts), handed to the
 * event checks as they are. JSON never makes one: only that reader does.
 */
export class CheckedTokenIds {
  readonly ids: Int32Array;
  constructor(ids: Int32Array) {
    this.ids = ids;
  }
}

/** Allocates `n` int32 values where this thread's decoded JSON arrays go (the arena, on decode workers). */
export function tokenIdArray(n: number): Int32Array {
  return arena === null ? new Int32Array(n) : arena.int32(n);
}

/** Copies a JSON array of token ids into `out` from index `at`, each checked; what is wrong, or null. */
export function copyTokenIds(values: unknown[], out: Int32Array, at: number): string | null {
  const n = values.length;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > INT32_MAX) {
      return `element ${i} is ${preview(v)}, not a token id (an integer 0..${INT32_MAX})`;
    }
    out[at + i] = v;
  }
  return null;
}

/** Decodes token ids: non-negative int32 values. */
export function decodeTokenIds(value: unknown): Int32Array | string {
  if (Array.isArray(value)) {
    const out = tokenIdArray(value.length);
    return copyTokenIds(value, out, 0) ?? out;
  }
  if (value instanceof CheckedTokenIds) return value.ids;
  if (isPacked(value)) {
    const out = unpack(value.b64, Int32Array);
    if (typeof out === "string") return out;
    for (let i = 0; i < out.length; i++) {
      if (out[i]! < 0) return `packed element ${i} is ${out[i]}, token ids are never negative`;
    }
    return out;
  }
  return 'expected an array of token ids or { "b64": "<base64 little-endian int32>" }';
}

/**
 * Decodes logprobs into float32. `null` (a token the engine gave no logprob for) becomes NaN, the packed
 * form's own "missing". Infinities are kept here (JSON's 1e999 parses to Infinity) and rejected by the
 * caller with its own code, so the message can say which.
 */
export function decodeLogprobs(value: unknown): Float32Array | string {
  if (Array.isArray(value)) {
    const n = value.length;
    const out = arena === null ? new Float32Array(n) : arena.float32(n);
    for (let i = 0; i < n; i++) {
      const v = value[i];
      if (typeof v !== "number") {
        if (v === null) {
          out[i] = NaN;
          continue;
        }
        return `element ${i} is ${preview(v)}, not a number or null`;
      }
      out[i] = v;
    }
    return out;
  }
  if (isPacked(value)) return unpack(value.b64, Float32Array);
  return 'expected an array of numbers or { "b64": "<base64 little-endian float32>" }';
}

/** Index of the first infinity, or -1 (NaN is a missing logprob, not an error). */
export function firstInfinite(values: Float32Array): number {
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (v === Infinity || v === -Infinity) return i;
  }
  return -1;
}

function packBytes(view: Int32Array | Float32Array): PackedArray {
  if (LITTLE_ENDIAN) {
    return { b64: Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString("base64") };
  }
  const copy = view.slice();
  byteSwap32(new Uint8Array(copy.buffer));
  return { b64: Buffer.from(copy.buffer).toString("base64") };
}

/** Packs token ids for the wire (used by producers, tests and the example generator). */
export function packTokenIds(ids: ArrayLike<number>): PackedArray {
  return packBytes(ids instanceof Int32Array ? ids : Int32Array.from(ids));
}

/** Packs logprobs for the wire. */
export function packLogprobs(values: ArrayLike<number>): PackedArray {
  return packBytes(values instanceof Float32Array ? values : Float32Array.from(values));
}
