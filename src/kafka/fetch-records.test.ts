import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";
import { registerKafkaCodecs } from "./codecs.ts";
import { applyLeanFetchRecords, FetchedMessage, leanDecodeMessages } from "./fetch-records.ts";

// kafkajs's own encoder and decoder, the reference the lean decoder must agree with message for message.
const require = createRequire(import.meta.url);
const { RecordBatch } = require("kafkajs/src/protocol/recordBatch/v0/index.js");
const Record = require("kafkajs/src/protocol/recordBatch/record/v0/index.js");
const Decoder = require("kafkajs/src/protocol/decoder.js");
const Long = require("kafkajs/src/utils/long.js");
const compression = require("kafkajs/src/protocol/message/compression/index.js");
const kafkajsDecode = require("kafkajs/src/protocol/requests/fetch/v4/decodeMessages.js");
const lean = leanDecodeMessages(kafkajsDecode, compression.lookupCodecByAttributes);
registerKafkaCodecs();

interface BatchSpec {
  compression: number;
  firstOffset: bigint;
  firstTimestamp: bigint;
  records: Array<{
    offsetDelta: number;
    timestampDelta: number;
    key: Buffer | null;
    value: Buffer | null;
    headers?: Record<string, Buffer | Buffer[]>;
  }>;
  transactional?: boolean;
}

async function batchBytes(spec: BatchSpec): Promise<Buffer> {
  const encoder = await RecordBatch({
    compression: spec.compression,
    firstOffset: Long.fromValue(spec.firstOffset.toString()),
    firstTimestamp: Long.fromValue(spec.firstTimestamp.toString()),
    maxTimestamp: Long.fromValue((spec.firstTimestamp + 5000n).toString()),
    lastOffsetDelta: spec.records.at(-1)?.offsetDelta ?? 0,
    transactional: spec.transactional ?? false,
    producerId: Long.fromValue("4242"),
    producerEpoch: 3,
    firstSequence: 17,
    records: spec.records.map((r) => Record(r)),
  });
  return encoder.buffer as Buffer;
}

/** A partition's record set as a fetch response carries it: its size, then its batches. */
function recordSet(batches: Buffer[], cut = 0): Buffer {
  const body = Buffer.concat(batches);
  const kept = body.subarray(0, body.length - cut);
  const size = Buffer.alloc(4);
  size.writeInt32BE(kept.length);
  return Buffer.concat([size, kept, Buffer.from("trailing")]);
}

async function bothDecoders(set: Buffer): Promise<{ reference: unknown[]; leaner: unknown[]; at: number }> {
  const a = new Decoder(set);
  const reference = await kafkajsDecode(a);
  const b = new Decoder(set);
  // Each message as kafkajs's plain object (its fields read through the getters).
  const leaner = (await lean(b)).map((m) => (m instanceof FetchedMessage ? m.toJSON() : m));
  assert.equal(b.offset, a.offset, "both leave the response's decoder at the same place");
  return { reference, leaner, at: b.offset };
}

const records = (n: number, withHeaders: boolean) =>
  Array.from({ length: n }, (_, i) => ({
    offsetDelta: i,
    timestampDelta: i === 1 ? -250 : i * 1000,
    key: i % 3 === 0 ? null : Buffer.from(`uid-${i}`),
    value: i === 2 ? null : Buffer.from(JSON.stringify({ type: "request", seq: i, prompt_ids: [1, 2, i] })),
    ...(withHeaders && i % 2 === 0
      ? {
          headers: {
            "trajflow-session": Buffer.from(`s${i}`),
            repeated: [Buffer.from("a"), Buffer.from("b")],
          },
        }
      : {}),
  }));

test("record batches: the lean decoder gives kafkajs's messages, uncompressed and under every codec", async () => {
  for (const codec of [0, 1, 2, 3, 4]) {
    const set = recordSet([
      await batchBytes({
        compression: codec,
        firstOffset: 100n,
        firstTimestamp: 1_700_000_000_000n,
        records: records(7, true),
      }),
      await batchBytes({
        compression: codec,
        firstOffset: 107n,
        firstTimestamp: 1_700_000_009_000n,
        records: records(3, false),
        transactional: true,
      }),
    ]);
    const { reference, leaner } = await bothDecoders(set);
    assert.equal(leaner.length, 10, `codec ${codec}`);
    assert.deepEqual(leaner, reference, `codec ${codec}`);
  }
});

// Each message waited from its fetch until applied as a record object, an origin and a value view besides
// the message (40 of the 90 MiB the ingest thread promoted, issue 46): the message is the record.
test("record batches: a message is the pipeline's record once its source names topic and partition", async () => {
  const set = recordSet([
    await batchBytes({ compression: 4, firstOffset: 40n, firstTimestamp: 1n, records: records(3, false) }),
  ]);
  const messages = (await lean(new Decoder(set))) as FetchedMessage[];
  const [first, , nullValue] = messages.map((m) => m.from("events", 3));
  assert.deepEqual(first!.origin, { kind: "kafka", topic: "events", partition: 3, offset: "40" });
  assert.equal(first!.raw.toString(), JSON.stringify({ type: "request", seq: 0, prompt_ids: [1, 2, 0] }));
  assert.equal(first!.rawLength, first!.raw.length);
  assert.deepEqual(first!.value, first!.raw);
  // A null value is an empty record, as the source always read it.
  assert.equal(nullValue!.value, null);
  assert.deepEqual([nullValue!.raw.length, nullValue!.rawLength], [0, 0]);
});

test("record batches: a batch cut by the fetch's byte limit is left out, as kafkajs does", async () => {
  const whole = await batchBytes({
    compression: 4,
    firstOffset: 0n,
    firstTimestamp: 1_700_000_000_000n,
    records: records(4, false),
  });
  const second = await batchBytes({
    compression: 4,
    firstOffset: 4n,
    firstTimestamp: 1_700_000_000_000n,
    records: records(4, false),
  });
  for (const cut of [1, 20, second.length - 30]) {
    const { reference, leaner } = await bothDecoders(recordSet([whole, second], cut));
    assert.equal(leaner.length, 4, `cut ${cut}`);
    assert.deepEqual(leaner, reference, `cut ${cut}`);
  }
});

test("record batches: offsets and timestamps past 2^53 stay exact", async () => {
  const set = recordSet([
    await batchBytes({
      compression: 0,
      firstOffset: 9_007_199_254_740_990n,
      firstTimestamp: 9_007_199_254_740_000n,
      records: records(4, false).map((r) => ({ ...r, timestampDelta: 2000 })),
    }),
  ]);
  const { reference, leaner } = await bothDecoders(set);
  assert.deepEqual(leaner, reference);
  assert.deepEqual(
    (leaner as Array<{ offset: string }>).map((m) => m.offset),
    ["9007199254740990", "9007199254740991", "9007199254740992", "9007199254740993"],
  );
});

test("record batches: an empty record set, and one whose length passes the response, give no messages", async () => {
  const empty = Buffer.alloc(4);
  assert.deepEqual((await bothDecoders(empty)).leaner, []);
  const short = Buffer.alloc(8);
  short.writeInt32BE(1000);
  assert.deepEqual((await bothDecoders(short)).leaner, []);
});

test("record batches: a record whose fields pass its length is refused, not read past", async () => {
  const batch = await batchBytes({
    compression: 0,
    firstOffset: 0n,
    firstTimestamp: 0n,
    records: records(2, false),
  });
  // The first record's length varint (right after the 61-byte header) made one byte shorter.
  const bad = Buffer.from(batch);
  bad[61] = bad[61]! - 2;
  await assert.rejects(lean(new Decoder(recordSet([bad]))), /Corrupt Kafka record batch/);
});

test("put in place before kafkajs loads its fetch responses, which then decode with it", () => {
  assert.equal(applyLeanFetchRecords(), true);
  const inPlace = require("kafkajs/src/protocol/requests/fetch/v4/decodeMessages.js");
  assert.notEqual(inPlace, kafkajsDecode);
  require("kafkajs/src/protocol/requests/fetch/v11/response.js");
  assert.equal(applyLeanFetchRecords(), true, "applied once");
});
