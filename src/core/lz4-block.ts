/**
 * One LZ4 block (the raw block format: Parquet's LZ4_RAW, and each block of a Kafka LZ4 frame), made
 * with lz4js's matcher but ending as the format requires.
 *
 * lz4js lets a match start up to 9 bytes before the end of the input; the format wants the last match to
 * start at least 12 bytes before the end (MFLIMIT) and the last 5 bytes to be literals. lz4js's own
 * decoder does not mind, the reference one (liblz4, so pyarrow, librdkafka, the Java client) refuses
 * the block as corrupt. So the matcher runs on all but the last 3 bytes (its matches then start at least
 * 12 and end at least 8 bytes before the end) and those 3 bytes are appended to the final literal run.
 */
import * as lz4 from "lz4js";

/** Bytes at the end the matcher is not shown (see above). */
const TAIL = 3;

/** A block of `src`, or null when LZ4 finds nothing to gain (the caller stores the bytes as they are). */
export function lz4Block(src: Uint8Array): Uint8Array | null {
  const n = src.length;
  if (n < 32) return null;
  const out = new Uint8Array(lz4.compressBound(n) + 16);
  const size = lz4.compressBlock(src, out, 0, n - TAIL, new Uint32Array(1 << 16));
  if (size === 0) return null;
  // Find the final (literal-only) sequence: walk the sequences' headers.
  let at = 0;
  let last = 0;
  let literals = 0;
  for (;;) {
    last = at;
    const token = out[at++]!;
    literals = token >> 4;
    if (literals === 15) {
      let b: number;
      do {
        b = out[at++]!;
        literals += b;
      } while (b === 255);
    }
    at += literals;
    if (at >= size) break;
    at += 2; // match offset
    if ((token & 15) === 15) while (out[at++] === 255);
  }
  // Rewrite it with the tail's bytes added.
  const count = literals + TAIL;
  at = writeLiteralRun(out, last, src.subarray(n - count));
  return at < n ? out.subarray(0, at) : null;
}

/** A final sequence of literals only: token, length extension bytes, the bytes. Returns the end. */
function writeLiteralRun(out: Uint8Array, at: number, literals: Uint8Array): number {
  const n = literals.length;
  out[at++] = Math.min(n, 15) << 4;
  if (n >= 15) {
    let rest = n - 15;
    for (; rest >= 255; rest -= 255) out[at++] = 255;
    out[at++] = rest;
  }
  out.set(literals, at);
  return at + n;
}

/** A block holding `src` as one literal run (what a reader decodes to the same bytes). */
export function lz4LiteralBlock(src: Uint8Array): Uint8Array {
  const out = new Uint8Array(src.length + 2 + Math.ceil(src.length / 255));
  return out.subarray(0, writeLiteralRun(out, 0, src));
}
