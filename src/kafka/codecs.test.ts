import assert from "node:assert/strict";
import { test } from "node:test";
import { zstdCompressSync } from "node:zlib";
import kafkajs from "kafkajs";
import { registerKafkaCodecs, zstdOutputChunk } from "./codecs.ts";

test("zstd frames: the output chunk is the content size the frame header declares", () => {
  // Sizes that take each width of the header's size field (1, 2, 4 bytes).
  for (const size of [1, 200, 255, 256, 300, 65_791, 70_000, 3_000_000]) {
    const frame = zstdCompressSync(Buffer.alloc(size, 7));
    assert.equal(zstdOutputChunk(frame), Math.max(size, 64), `size ${size}`);
  }
});

test("zstd frames: no size in the header, not zstd, or an absurd size fall back to a bounded chunk", () => {
  assert.equal(zstdOutputChunk(Buffer.from("not zstd at all")), 1 << 20);
  assert.equal(zstdOutputChunk(Buffer.alloc(3)), 1 << 20);
  // A header claiming 2^40 bytes (8-byte size field) allocates no more than 64 MiB up front.
  const lying = Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x50, 0, 0, 0, 0, 0, 1, 0, 0]);
  assert.equal(zstdOutputChunk(lying), 64 << 20);
});

test("the registered zstd codec decompresses what it compressed", async () => {
  registerKafkaCodecs();
  const codec = kafkajs.CompressionCodecs[kafkajs.CompressionTypes.ZSTD]!();
  const input = Buffer.from(JSON.stringify({ prompt_ids: Array.from({ length: 50_000 }, (_, i) => i) }));
  const compressed = await codec.compress({ buffer: input } as never);
  assert.deepEqual(await codec.decompress(compressed as Buffer), input);
});
