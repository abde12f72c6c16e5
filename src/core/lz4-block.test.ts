import assert from "node:assert/strict";
import { test } from "node:test";
import * as lz4 from "lz4js";
import { lz4Block, lz4LiteralBlock } from "./lz4-block.ts";

/** Where each sequence's match starts and ends in the decoded output, and the block's decoded size. */
function sequences(block: Uint8Array): { matches: Array<[number, number]>; size: number } {
  const matches: Array<[number, number]> = [];
  let at = 0;
  let out = 0;
  for (;;) {
    const token = block[at++]!;
    let literals = token >> 4;
    if (literals === 15) for (let b = 255; b === 255; literals += b = block[at++]!);
    at += literals;
    out += literals;
    if (at >= block.length) return { matches, size: out };
    at += 2;
    let length = (token & 15) + 4;
    if ((token & 15) === 15) for (let b = 255; b === 255; length += b = block[at++]!);
    matches.push([out, out + length]);
    out += length;
  }
}

function decode(block: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(size);
  assert.equal(lz4.decompressBlock(block, out, 0, block.length, 0), size);
  return out;
}

// Regression: lz4js let a block's last match start 9 bytes before its end; liblz4 (pyarrow, librdkafka,
// the Java client) refuses such a block as corrupt.
test("lz4 blocks end as the format requires: last match 12+ bytes before the end, last 5 bytes literal", () => {
  for (const n of [32, 100, 1_000, 65_536, 70_001, 1 << 20]) {
    const noise = (i: number) => Math.imul(i, 2654435761) >>> 24;
    for (const pattern of [noise, (i: number) => i % 7, (i: number) => (i * 7919) >> 3, () => 0]) {
      const src = Uint8Array.from({ length: n }, (_, i) => pattern(i) & 0xff);
      // The input's last 11 bytes repeat its first: lz4js alone matched them, 11 bytes before the end.
      src.copyWithin(n - 11, 0, 11);
      const block = lz4Block(src);
      if (block === null) continue;
      const { matches, size } = sequences(block);
      assert.equal(size, n);
      const [start, end] = matches.at(-1)!;
      assert.ok(start <= n - 12, `n=${n}: last match starts ${n - start} bytes before the end`);
      assert.ok(end <= n - 5, `n=${n}: last match ends ${n - end} bytes before the end`);
      assert.deepEqual(decode(block, n), src);
    }
  }
});

test("lz4 literal blocks decode to their bytes, for every length-extension width", () => {
  for (const n of [0, 1, 14, 15, 16, 269, 270, 271, 100_000]) {
    const src = Uint8Array.from({ length: n }, (_, i) => (i * 31) & 0xff);
    assert.deepEqual(decode(lz4LiteralBlock(src), n), src);
  }
  // Nothing to gain on random bytes: the caller stores them as they are.
  const noise = Uint8Array.from({ length: 4_096 }, (_, i) => (Math.imul(i, 2654435761) >>> 24) & 0xff);
  const block = lz4Block(noise);
  if (block !== null) assert.deepEqual(decode(block, noise.length), noise);
});
