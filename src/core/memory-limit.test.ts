import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { clampSize, dataBudget, memoryLimit, MEMORY_FLOOR, parseMemorySize } from "./memory-limit.ts";

const MiB = 2 ** 20;

describe("memory limit", () => {
  it("reads sizes as operators write a pod's limit", () => {
    assert.equal(parseMemorySize("512"), 512 * MiB);
    assert.equal(parseMemorySize("768MiB"), 768 * MiB);
    assert.equal(parseMemorySize("2Gi"), 2 * 2 ** 30);
    assert.equal(parseMemorySize("1.5G"), 1.5 * 2 ** 30);
    assert.equal(parseMemorySize(" 400 mi "), 400 * MiB);
    assert.equal(parseMemorySize("65536k"), 64 * MiB);
    for (const bad of ["", "lots", "-1", "2TB", "1e9"]) assert.equal(parseMemorySize(bad), null, bad);
  });

  it("takes the flag first; the budget is what the limit leaves above the floor", () => {
    assert.deepEqual(memoryLimit(600 * MiB), { bytes: 600 * MiB, source: "--max-memory" });
    assert.equal(dataBudget(MEMORY_FLOOR + 100 * MiB), 100 * MiB);
    assert.equal(dataBudget(200 * MiB), 32 * MiB); // a cgroup below the minimum: the least budget
    assert.equal(clampSize(3 * MiB + 5, MiB, 2 * MiB), 2 * MiB);
    assert.equal(clampSize(1000, 4096, MiB), 4096);
  });
});
