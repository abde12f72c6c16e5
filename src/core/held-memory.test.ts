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

  it("adds the same part reported by two components", () => {
    const parts = addHoldings({}, { "rows waiting for a file": 3 });
    addHoldings(parts, { "rows waiting for a file": 4, "rows being written": 1 });
    addHoldings(parts, undefined);
    assert.deepEqual(parts, { "rows waiting for a file": 7, "rows being written": 1 });
  });
});
