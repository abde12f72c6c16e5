import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import {
  addUsage,
  MEMORY_SAMPLE_MS,
  registerThread,
  resetThreads,
  ThreadMeter,
  threadUsages,
} from "./thread-usage.ts";

describe("thread usage", () => {
  it("measures this thread's CPU as it works, and keeps the heap and off-heap peaks", () => {
    const meter = new ThreadMeter();
    const sampledAt = performance.now();
    const before = meter.sample();
    let x = 0;
    for (let i = 0; i < 5e7; i++) x += i % 7;
    const held = Buffer.alloc(32 * 2 ** 20, x % 2);
    // Memory is read again once MEMORY_SAMPLE_MS passed (until then the last figures stand).
    while (performance.now() - sampledAt < MEMORY_SAMPLE_MS) x += 1;
    const after = meter.sample();
    assert.ok(after.cpu_seconds > before.cpu_seconds, `${after.cpu_seconds} vs ${before.cpu_seconds}`);
    assert.ok(after.external_peak_bytes >= held.length, String(after.external_peak_bytes));
    assert.ok(after.heap_peak_bytes > 0);
    assert.ok(after.external_bytes >= held.length && after.heap_bytes > 0, JSON.stringify(after));
  });

  it("lists registered threads in order, names made unique, and folds a replaced thread into its slot", () => {
    resetThreads();
    const a = {
      cpu_seconds: 1,
      heap_peak_bytes: 10,
      external_peak_bytes: 5,
      heap_bytes: 8,
      external_bytes: 1,
    };
    const b = {
      cpu_seconds: 2,
      heap_peak_bytes: 7,
      external_peak_bytes: 9,
      heap_bytes: 6,
      external_bytes: 2,
    };
    registerThread("main", () => a);
    registerThread("encoder 1", () => addUsage(a, b));
    registerThread("encoder 1", () => b);
    registerThread("decode 1", () => null); // has not reported yet
    assert.deepEqual(threadUsages(), [
      { thread: "main", ...a },
      {
        thread: "encoder 1",
        cpu_seconds: 3,
        heap_peak_bytes: 10,
        external_peak_bytes: 9,
        heap_bytes: 6,
        external_bytes: 2,
      },
      { thread: "encoder 1 #2", ...b },
    ]);
    resetThreads();
    assert.deepEqual(threadUsages(), []);
  });
});
