import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { addHoldings, HeldMemory } from "./held-memory.ts";

describe("held memory", () => {
  it("keeps each part's peak and the parts' values at the sample where the RSS peaked", () => {
    const held = new HeldMemory();
    held.sample({ "open sessions": 10, "rows waiting for a file": 0 }, 100);
    held.sample({ "open sessions": 40, "rows waiting for a file": 5 }, 300);
    held.sample({ "open sessions": 20, "rows waiting for a file": 60, "dead letters waiting": 1 }, 200);
    assert.deepEqual(held.report(), [
      { part: "open sessions", peak_bytes: 40, at_peak_rss_bytes: 40 },
      { part: "rows waiting for a file", peak_bytes: 60, at_peak_rss_bytes: 5 },
      { part: "dead letters waiting", peak_bytes: 1, at_peak_rss_bytes: 0 },
    ]);
  });

  it("accounts for the peak RSS by owner: threads' heaps and off-heap memory, fixed, the allocator's", () => {
    const held = new HeldMemory();
    const main = (heap: number, ext: number) => ({ thread: "main", heap_bytes: heap, external_bytes: ext });
    const enc = (heap: number, ext: number) => ({
      thread: "encoder 1",
      heap_bytes: heap,
      external_bytes: ext,
    });
    held.sample({}, 100, [main(30, 5), enc(10, 5)]); // fixed: 50
    held.sample({}, 400, [main(60, 120), enc(20, 100)]); // the peak: 300 in threads, 100 rest
    held.sample({}, 350, [main(60, 200), enc(20, 10)]);
    assert.deepEqual(held.account(), {
      rss_bytes: 400,
      owners: [
        { owner: "main heap", bytes: 60 },
        { owner: "encoder 1 heap", bytes: 20 },
        { owner: "main off-heap", bytes: 120 },
        { owner: "encoder 1 off-heap", bytes: 100 },
        { owner: "fixed (code, isolates, stacks)", bytes: 50 },
        { owner: "allocator (freed, not returned)", bytes: 50 },
      ],
    });
  });

  it("adds the same part reported by two components", () => {
    const parts = addHoldings({}, { "rows waiting for a file": 3 });
    addHoldings(parts, { "rows waiting for a file": 4, "rows being written": 1 });
    addHoldings(parts, undefined);
    assert.deepEqual(parts, { "rows waiting for a file": 7, "rows being written": 1 });
  });
});
