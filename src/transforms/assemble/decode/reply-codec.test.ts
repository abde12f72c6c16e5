import { strict as assert } from "node:assert";
import { MessageChannel, type MessagePort } from "node:worker_threads";
import { describe, it } from "node:test";
import { EventPacker, EventUnpacker, packedArrays, type PackedEvents } from "./reply-codec.ts";

/** Packs `events` over a real MessagePort (transferring what a decode worker transfers) and unpacks them. */
async function roundTrip(
  packer: EventPacker,
  unpacker: EventUnpacker,
  events: object[],
  buffers: ArrayBuffer[],
): Promise<{ out: object[]; packed: PackedEvents; refused: number[] }> {
  packer.begin(buffers);
  const refused: number[] = [];
  events.forEach((e, i) => {
    if (!packer.add(e)) refused.push(i);
  });
  const packed = packer.take();
  const got = await send(packed, [...packed.buffers, ...packedArrays(packed)]);
  unpacker.begin(got);
  const out: object[] = [];
  for (let i = 0; i < events.length - refused.length; i++) out.push(unpacker.next());
  return { out, packed, refused };
}

async function send(packed: PackedEvents, transfer: ArrayBuffer[]): Promise<PackedEvents> {
  const { port1, port2 } = new MessageChannel();
  try {
    const got = new Promise<PackedEvents>((resolve) => (port2 as MessagePort).once("message", resolve));
    port1.postMessage(packed, transfer);
    return await got;
  } finally {
    port1.close();
    port2.close();
  }
}

describe("decode reply codec", () => {
  it("gives back every value exactly, keys in their order, typed arrays over the moved buffers", async () => {
    const block = new ArrayBuffer(64);
    const own = new ArrayBuffer(8);
    const ids = new Int32Array(block, 8, 3);
    ids.set([7, -1, 2147483647]);
    const logprobs = new Float32Array(block, 20, 2);
    logprobs.set([-0.5, -0]);
    const packedIds = new Int32Array(own);
    packedIds.set([4, 5]);
    const events = [
      {
        v: 1,
        session_id: "s é 🙂",
        uid: "",
        seq: 0,
        ts: 1700000000123,
        type: "response",
        output_ids: ids,
        logprobs,
        finish_reason: "stop",
        weight_version: -0,
        flag: true,
        off: false,
        none: null,
        missing: undefined,
        big: Number.MAX_SAFE_INTEGER,
        frac: 0.1,
      },
      { v: 1, type: "request", prompt_ids: packedIds, $x: 2, _y: "z" },
    ];
    const want = structuredClone(events);
    const packer = new EventPacker();
    const unpacker = new EventUnpacker();
    const { out, refused } = await roundTrip(packer, unpacker, events, [block, own]);
    assert.deepEqual(refused, []);
    assert.deepEqual(out, want);
    assert.deepEqual(out.map(Object.keys), events.map(Object.keys));
    assert.ok("missing" in out[0]! && Object.is((out[0] as { weight_version: number }).weight_version, -0));
    const back = out[0] as { output_ids: Int32Array; logprobs: Float32Array };
    // Views over the one moved block, where the worker's lay: nothing copied.
    assert.equal(back.output_ids.buffer, back.logprobs.buffer);
    assert.equal(back.output_ids.byteOffset, 8);
    assert.equal(back.logprobs.byteOffset, 20);
    assert.equal(block.byteLength, 0, "the block was moved, not copied");
    assert.ok(Object.is(back.logprobs[1], -0));
  });

  it("sends nested values, and views of buffers it was not given, as they are", async () => {
    const stray = new Int32Array([1, 2, 3, 4]).subarray(1, 3);
    const bytes = new Uint8Array([1, 2]);
    const event = {
      v: 1,
      type: "session.start",
      metadata: { answer: "4", deep: [{ a: [1] }] },
      tags: ["a", "b"],
      stray,
      bytes,
    };
    const { out } = await roundTrip(new EventPacker(), new EventUnpacker(), [event], []);
    assert.deepEqual(out, [event]);
    assert.equal(stray.length, 2, "a view of a buffer not given is copied, not moved");
    assert.ok((out[0] as { stray: Int32Array }).stray instanceof Int32Array);
  });

  it("refuses events whose keys an object literal cannot name as they are", async () => {
    const proto = JSON.parse('{"v":1,"type":"request","__proto__":{"polluted":true}}') as object;
    const events = [
      { v: 1, type: "request", call_id: "a" },
      { v: 1, type: "request", "call-id": "b" },
      proto,
      { v: 1, type: "request", "a b": 1 },
      { v: 1, type: "request", "1x": 1 },
      { v: 1, type: "request", call_id: "c" },
    ];
    const { out, refused } = await roundTrip(new EventPacker(), new EventUnpacker(), events, []);
    assert.deepEqual(refused, [1, 2, 3, 4]);
    assert.deepEqual(out, [events[0], events[5]]);
    assert.equal(Object.getPrototypeOf(out[0]), Object.prototype);
  });

  it("sends each shape once per packer, and tells shapes of one type apart", async () => {
    const packer = new EventPacker();
    const unpacker = new EventUnpacker();
    // Six shapes of one type (more than it compares first), one without a type, and one whose keys are
    // another's (a shape is its keys, whatever the values): seven shapes, interleaved.
    const shapes = [
      { type: "response", a: 1 },
      { type: "response", a: 1, b: 2 },
      { type: "response", b: 2, a: 1 },
      { type: "response", a: 1, b: 2, c: 3 },
      { type: "response", c: 3 },
      { type: "response" },
      { a: "untyped" },
      { type: 7, a: 1 },
    ];
    const first = shapes.flatMap((s, i) => [s, shapes[(i * 5) % shapes.length]!]);
    const one = await roundTrip(packer, unpacker, first, []);
    assert.deepEqual(one.out, first);
    assert.deepEqual(one.out.map(Object.keys), first.map(Object.keys));
    assert.equal(one.packed.newShapes.length, 7);
    const second = [...shapes].reverse();
    const two = await roundTrip(packer, unpacker, second, []);
    assert.deepEqual(two.out, second);
    assert.deepEqual(two.out.map(Object.keys), second.map(Object.keys));
    assert.equal(two.packed.newShapes.length, 0, "shapes already sent are not sent again");
  });

  it("grows past its first scratch sizes", async () => {
    const events = Array.from({ length: 3000 }, (_, i) => ({
      v: 1,
      type: "reward",
      seq: i,
      value: i / 7,
      key: `k${i}`,
    }));
    const { out } = await roundTrip(new EventPacker(), new EventUnpacker(), events, []);
    assert.deepEqual(out, events);
  });

  it("sends a short string once per message and every event gets it back; long strings each time", async () => {
    const long = "x".repeat(65);
    const events = Array.from({ length: 6 }, (_, i) => ({
      type: i % 2 === 0 ? "request" : "response",
      uid: "u1",
      session_id: i < 3 ? "s1" : "s2",
      call_id: `c${i >> 1}`,
      text: long,
      e: "",
    }));
    const packer = new EventPacker();
    const unpacker = new EventUnpacker();
    const one = await roundTrip(packer, unpacker, events, []);
    assert.deepEqual(one.out, events);
    // Each short string once, in order of first use; the 65-character text every time.
    assert.deepEqual(one.packed.strings, [
      ...["request", "u1", "s1", "c0", long, ""],
      ...["response", long],
      ...["c1", long],
      ...["s2", long],
      ...["c2", long],
      long,
    ]);
    // The next message starts afresh: its strings are not taken from the last one.
    const two = await roundTrip(packer, unpacker, [{ type: "request", uid: "u1" }], []);
    assert.deepEqual(two.out, [{ type: "request", uid: "u1" }]);
    assert.deepEqual(two.packed.strings, ["request", "u1"]);
  });
});
