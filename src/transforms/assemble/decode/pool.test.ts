import { strict as assert } from "node:assert";
import { after, it } from "node:test";
import type { RawRecord } from "../../../core/records.ts";
import { packLogprobs, packTokenIds } from "../../../schemas/tokens.ts";
import { decodeEvent } from "./decode.ts";
import {
  DECODE_WINDOW,
  DECODE_WINDOW_BYTES,
  DECODE_WINDOW_MIN,
  DecodePool,
  JobBuffers,
  packRecords,
} from "./pool.ts";

const pools: DecodePool[] = [];
after(async () => {
  for (const p of pools) await p.close();
});

const envelope = { v: 1, uid: "u", session_id: "s", ts: 1 };
const lines = [
  { ...envelope, seq: 0, type: "session.start", metadata: { answer: "4" } },
  { ...envelope, seq: 1, type: "request", call_id: "c0", prompt_ids: [1, 2, 3] },
  {
    ...envelope,
    seq: 2,
    type: "response",
    call_id: "c0",
    output_ids: packTokenIds([4, 5]),
    logprobs: packLogprobs([-0.5, -0.25]),
    finish_reason: "stop",
  },
  { ...envelope, seq: 3, type: "response", call_id: "c1", output_ids: [-1], finish_reason: "stop" },
  { v: 1, type: "policy.update", weight_version: 3, ts: 5 },
  // Handed over by the fast path: zod strips the unknown setting, and rejects the other with its message
  // (workers do not load zod: the ingest thread decodes these two again).
  { ...envelope, seq: 5, type: "request", call_id: "c2", prompt_ids: [1], sampling: { top_k: 5, seed: 7 } },
  { ...envelope, seq: 6, type: "request", call_id: "c3", prompt_ids: [1], sampling: { top_p: 0 } },
  { ...envelope, seq: 4, type: "session.end", status: "ok" },
].map((e) => JSON.stringify(e));

function records(): RawRecord[] {
  const raws: Array<string | Uint8Array> = [
    ...lines.map((l) => Buffer.from(l)),
    "{broken",
    new Uint8Array([0x7b, 0xff, 0xfe]),
    lines[1]!, // a string source (replay) gives the same results as bytes
  ];
  return raws.map((raw, i) => ({
    raw,
    origin: { kind: "kafka", topic: "t", partition: 2, offset: String(i) },
  }));
}

for (const size of [0, 1, 2]) {
  it(`decodes exactly as decodeEvent does, with ${size} worker(s)`, async () => {
    const pool = new DecodePool(size);
    pools.push(pool);
    const input = records();
    // Several chunks in flight at once come back in order.
    const chunks = await Promise.all([
      pool.decode(input.slice(0, 4)).results,
      pool.decode(input.slice(4)).results,
    ]);
    const got = chunks.flat();
    const want = records().map(decodeEvent);
    assert.equal(got.length, want.length);
    assert.deepEqual(
      got.map((r) => r.kind),
      [
        "event",
        "event",
        "event",
        "rejected",
        "control",
        "event",
        "rejected",
        "event",
        "rejected",
        "rejected",
        "event",
      ],
    );
    for (let i = 0; i < want.length; i++) {
      // Dead letters name the real origin: the worker sends the reason, the ingest thread adds where.
      assert.deepEqual(got[i], want[i], `record ${i}`);
    }
    const response = got[2]!;
    assert.ok(response.kind === "event" && response.value.event.type === "response");
    assert.ok(response.value.event.output_ids instanceof Int32Array);
    assert.deepEqual([...response.value.event.logprobs!], [-0.5, -0.25]);
    // The same bytes, read as a string or as bytes, have the same digest (redeliveries are recognised).
    const [asBytes, asString] = [got[1]!, got[10]!];
    assert.ok(asBytes.kind === "event" && asString.kind === "event");
    assert.equal(asBytes.value.digest, asString.value.digest);
  });
}

// Regression: metadata nested 20,000 levels killed the decode worker ("decode worker crashed").
it("rejects deeply nested events on a worker without crashing it", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const deep = `{"v":1,"uid":"u","session_id":"s","seq":0,"ts":1,"type":"session.start","metadata":{"a":${"[".repeat(20_000)}1${"]".repeat(20_000)}}}`;
  const records: RawRecord[] = [deep, lines[1]!].map((raw, i) => ({
    raw: new TextEncoder().encode(raw),
    origin: { kind: "file", file: "x.jsonl", line: i + 1 },
  }));
  const [rejected, ok] = await pool.decode(records).results;
  assert.ok(rejected!.kind === "rejected");
  assert.equal(rejected!.deadLetter.code, "NESTING_TOO_DEEP");
  assert.equal(ok!.kind, "event");
});

// Regression: an event the fast path hands back travels to the ingest thread parsed; output_ids nested
// 100,000 deep (not a free-form field, so not refused for its depth) overflowed the worker's stack as it
// was cloned, and the worker crashed. Such an event is decoded again from its bytes instead.
it("gives the ingest thread an event too deep to clone as its bytes, rejected as decodeEvent does", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const deep = `{"v":1,"uid":"u","session_id":"s","seq":1,"ts":2,"type":"response","call_id":"c","output_ids":${"[".repeat(100_000)}1${"]".repeat(100_000)}}`;
  const records: RawRecord[] = [deep, lines[1]!].map((raw, i) => ({
    raw: new TextEncoder().encode(raw),
    origin: { kind: "file", file: "x.jsonl", line: i + 1 },
  }));
  const [rejected, ok] = await pool.decode(records).results;
  assert.deepEqual(rejected, decodeEvent(records[0]!));
  assert.equal(rejected!.kind, "rejected");
  assert.equal(ok!.kind, "event");
});

/** Token ids and logprobs for large and small arrays. */
const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => (from + i * 7) % 150_000);
const lps = (n: number) => Array.from({ length: n }, (_, i) => -((i % 97) + 1) / 128);

// Regression: on a worker, small JSON arrays share transferred blocks and large ones get their own buffer;
// an event with two large arrays listed one buffer twice and the worker crashed (DataCloneError).
it("decodes small and large JSON arrays on a worker as decodeEvent does", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const events = [
    { ...envelope, seq: 1, type: "request", call_id: "big", prompt_ids: ids(40_000, 3) },
    {
      ...envelope,
      seq: 2,
      type: "response",
      call_id: "big",
      output_ids: ids(20_000, 5),
      logprobs: lps(20_000),
      finish_reason: "length",
    },
    ...Array.from({ length: 300 }, (_, k) => ({
      ...envelope,
      seq: 3 + k,
      type: "response",
      call_id: `c${k}`,
      prompt_ids: ids(200 + k, k),
      output_ids: ids(64, k + 1),
      logprobs: lps(64),
      finish_reason: "stop",
    })),
  ];
  const input: RawRecord[] = events.map((e, i) => ({
    raw: Buffer.from(JSON.stringify(e)),
    origin: { kind: "kafka", topic: "t", partition: 0, offset: String(i) },
  }));
  const got = (
    await Promise.all([pool.decode(input.slice(0, 150)).results, pool.decode(input.slice(150)).results])
  ).flat();
  const want = input.map(decodeEvent);
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `record ${i}`);
  const big = got[1]!;
  assert.ok(big.kind === "event" && big.value.event.type === "response");
  assert.equal(big.value.event.output_ids.length, 20_000);
  assert.equal(big.value.event.logprobs!.length, 20_000);
});

// Packed arrays (the delta form's) were each decoded into a buffer of their own, one more buffer per array
// to transfer: now small ones share the arena's blocks as JSON arrays do, and large ones keep their own.
it("decodes small and large packed arrays on a worker as decodeEvent does, small ones sharing blocks", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const events = [
    ...Array.from({ length: 40 }, (_, k) => ({
      ...envelope,
      seq: 1 + k,
      type: "response",
      call_id: `c${k}`,
      parent_call_id: k === 0 ? undefined : `c${k - 1}`,
      prompt_delta_ids: k === 0 ? undefined : packTokenIds(ids(30 + k, k)),
      prompt_ids: k === 0 ? packTokenIds(ids(100, 1)) : undefined,
      output_ids: packTokenIds(ids(64 + k, k + 1)),
      logprobs: packLogprobs(lps(64 + k)),
      finish_reason: "stop",
    })),
    {
      ...envelope,
      seq: 41,
      type: "response",
      call_id: "big",
      prompt_ids: packTokenIds(ids(40_000, 3)),
      output_ids: packTokenIds(ids(20_000, 5)),
      logprobs: packLogprobs(lps(20_000)),
      finish_reason: "length",
    },
  ];
  const input: RawRecord[] = events.map((e, i) => ({
    raw: Buffer.from(JSON.stringify(e)),
    origin: { kind: "kafka", topic: "t", partition: 0, offset: String(i) },
  }));
  const got = await pool.decode(input).results;
  const want = input.map(decodeEvent);
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `record ${i}`);
  const arrays = got.map((r) => {
    assert.ok(r.kind === "event" && r.value.event.type === "response");
    return r.value.event;
  });
  const small = arrays.slice(0, 40).flatMap((e) => [e.output_ids, e.logprobs!]);
  assert.equal(new Set(small.map((a) => a.buffer)).size, 1, "the small arrays share one block");
  const big = arrays[40]!;
  for (const a of [big.prompt_ids!, big.output_ids, big.logprobs!]) {
    assert.equal(a.byteLength, a.buffer.byteLength, "a large array has a buffer of its own");
  }
  assert.equal(big.output_ids.length, 20_000);
});

// Decoding ran a whole fetch ahead of assembly, and every decoded chunk waited on the ingest thread's heap
// long enough to be promoted (issue 46): at most DECODE_WINDOW chunks are decoded and not yet done.
it("decodes at most DECODE_WINDOW chunks ahead of the caller, in order, skipping chunks given up", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const input = records();
  const tickets = Array.from({ length: DECODE_WINDOW + 2 }, (_, i) => pool.decode(input.slice(i, i + 1)));
  assert.equal(pool.queued, 2);
  const first = await tickets[0]!.results;
  assert.deepEqual(first, [decodeEvent(input[0]!)]);
  // The last one is given up before it was sent (a revoked lane): it never takes a place.
  tickets[DECODE_WINDOW + 1]!.done();
  assert.equal(pool.queued, 1);
  tickets[0]!.done();
  tickets[0]!.done(); // twice is once
  assert.equal(pool.queued, 0);
  for (let i = 1; i <= DECODE_WINDOW; i++) {
    assert.deepEqual(await tickets[i]!.results, [decodeEvent(input[i]!)]);
    tickets[i]!.done();
  }
  // The window is free again: a new chunk is sent at once.
  const next = pool.decode(input.slice(0, 1));
  assert.equal(pool.queued, 0);
  assert.deepEqual(await next.results, [decodeEvent(input[0]!)]);
  next.done();
});

// Chunks of long prompts held 8 MiB of events decoded ahead, and peak RSS rose ~20 MiB on the shared
// harness's long workload at no gain: past DECODE_WINDOW_MIN chunks, only as many as fit in the bytes.
it("decodes large chunks only DECODE_WINDOW_MIN ahead, small ones up to DECODE_WINDOW", async () => {
  const pool = new DecodePool(1);
  pools.push(pool);
  const big = Math.ceil(DECODE_WINDOW_BYTES / DECODE_WINDOW_MIN) + 1;
  const prompt = Array.from({ length: Math.ceil(big / 6) }, (_, i) => 10_000 + (i % 80_000));
  const line = JSON.stringify({ ...envelope, seq: 1, type: "request", call_id: "c0", prompt_ids: prompt });
  assert.ok(line.length > big);
  const origin = { kind: "kafka", topic: "t", partition: 0, offset: "0" } as const;
  const large = Array.from({ length: DECODE_WINDOW }, () =>
    pool.decode([{ raw: Buffer.from(line), origin }]),
  );
  assert.equal(pool.queued, DECODE_WINDOW - DECODE_WINDOW_MIN);
  for (const t of large) {
    const [result] = await t.results;
    assert.equal(result!.kind, "event");
    t.done();
  }
  assert.equal(pool.queued, 0);
  const small = Array.from({ length: DECODE_WINDOW + 1 }, () => pool.decode(records().slice(0, 1)));
  assert.equal(pool.queued, 1);
  for (const t of small) {
    await t.results;
    t.done();
  }
});

it("packs records that say where their bytes lie (a Kafka batch's) as one span, with no view per record", () => {
  const batch = Buffer.from('..{"a":1}..{"b":2}.{"c":3}');
  const at: Array<[number, number]> = [
    [2, 7],
    [11, 7],
    [18, 0], // a null value: no bytes, where its value would be
    [19, 7],
  ];
  const origin = { kind: "kafka", topic: "t", partition: 0, offset: "0" } as const;
  const located = (buffer: Buffer, spans: Array<[number, number]>): RawRecord[] =>
    spans.map(([offset, length]) => ({
      origin,
      rawBuffer: buffer,
      rawOffset: offset,
      rawLength: length,
      get raw(): Uint8Array {
        throw new Error("a view was made");
      },
    }));
  const viewed = at.map(([offset, length]) => ({ origin, raw: batch.subarray(offset, offset + length) }));
  const job = packRecords(1, located(batch, at), new JobBuffers());
  const want = packRecords(1, viewed, new JobBuffers());
  assert.deepEqual([...job.starts!], [0, 9, 16, 17]);
  assert.deepEqual([...job.ends], [7, 16, 16, 24]);
  assert.deepEqual(job, want);
  assert.equal(Buffer.from(job.bytes).toString(), '{"a":1}..{"b":2}.{"c":3}');

  // Records in two buffers are read through their views, packed back to back.
  const other = Buffer.from('{"d":4}');
  const mixed = [
    ...located(batch, at.slice(0, 1)),
    { origin, rawBuffer: other, rawOffset: 0, rawLength: 7, raw: other },
  ];
  mixed[0] = { ...viewed[0]!, rawBuffer: batch, rawOffset: 2, rawLength: 7 };
  const packed = packRecords(2, mixed, new JobBuffers());
  assert.equal(packed.starts, undefined);
  assert.deepEqual([...packed.ends], [7, 14]);
  assert.equal(Buffer.from(packed.bytes).toString(), '{"a":1}{"d":4}');
});
