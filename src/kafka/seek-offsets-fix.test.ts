import assert from "node:assert/strict";
import { test } from "node:test";
import { fixKafkajsSeekOffsets, kafkajsSeekOffsets } from "./seek-offsets-fix.ts";

interface Offsets {
  readonly size: number;
  getKey(topic: string, partition: number): string;
  set(topic: string, partition: number, offset: string): void;
  has(topic: string, partition: number): boolean;
  pop(topic: string, partition: number): { topic: string; partition: number; offset: string } | undefined;
}

/** A SeekOffsets map counting the keys it builds. */
function offsets(): { map: Offsets; keys: () => number } {
  const SeekOffsets = kafkajsSeekOffsets() as unknown as new () => Offsets;
  const map = new SeekOffsets();
  let keys = 0;
  const getKey = map.getKey.bind(map);
  map.getKey = (topic, partition) => {
    keys++;
    return getKey(topic, partition);
  };
  return { map, keys: () => keys };
}

test("kafkajs seek offsets: no key is built to ask an empty map, and a pending seek is still seen", () => {
  fixKafkajsSeekOffsets();
  const { map, keys } = offsets();
  for (let i = 0; i < 1000; i++) assert.equal(map.has("t", i % 4), false);
  assert.equal(keys(), 0);

  map.set("t", 2, "17");
  assert.equal(map.has("t", 2), true);
  assert.equal(map.has("t", 1), false);
  assert.equal(map.has("u", 2), false);
  assert.deepEqual(map.pop("t", 2), { topic: "t", partition: 2, offset: "17" });
  assert.equal(map.has("t", 2), false);
  assert.equal(map.size, 0);
});
