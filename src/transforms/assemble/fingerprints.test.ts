import { strict as assert } from "node:assert";
import { it } from "node:test";
import { FingerprintSet } from "./fingerprints.ts";

it("remembers every key added, through growth, and no key it was not given", () => {
  const set = new FingerprintSet(16);
  const n = 200_000;
  for (let i = 0; i < n; i++) set.add(`uid-${i}\u0000rollout-${i % 8}`);
  assert.equal(set.size, n);
  for (let i = 0; i < n; i++) assert.ok(set.has(`uid-${i}\u0000rollout-${i % 8}`), `key ${i}`);
  let false_positives = 0;
  for (let i = 0; i < n; i++) if (set.has(`uid-${i}\u0000rollout-${(i % 8) + 8}`)) false_positives++;
  assert.equal(false_positives, 0);
  // Adding again changes nothing.
  set.add("uid-0\u0000rollout-0");
  assert.equal(set.size, n);
  // 16 bytes per slot, at most half full.
  assert.ok(set.bytes <= n * 2 * 8 * 2, `${set.bytes} bytes`);
});

it("tells apart keys that differ only by the order of their parts, or by one character", () => {
  const set = new FingerprintSet();
  set.add("a\u0000bc");
  assert.equal(set.has("ab\u0000c"), false);
  assert.equal(set.has("a\u0000bd"), false);
  assert.equal(set.has(""), false);
  set.add("");
  assert.equal(set.has(""), true);
});
