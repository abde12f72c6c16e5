import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { Plan } from "./plan.ts";
import { REGISTRY } from "./registry.ts";
import { decodeWorkers } from "./decode-workers.ts";

function plan(type: "kafka" | "jsonl", config: Record<string, unknown> = {}): Plan {
  return {
    source: { name: "in", type, config },
    sourceTraits: REGISTRY.sources[type]!.traits,
    transforms: [],
    sinks: [],
    deadLetters: { type: "files", config: { path: "dl" } },
    memory: null,
  };
}

describe("decodeWorkers", () => {
  it("scales a Kafka source's default with the host's cores", () => {
    assert.deepEqual(
      [1, 2, 4, 7, 8, 16, 64].map((cores) => decodeWorkers(plan("kafka"), cores)),
      [0, 1, 1, 1, 2, 2, 2],
    );
  });

  it("keeps a replay on its main thread unless configured", () => {
    assert.equal(decodeWorkers(plan("jsonl"), 16), 0);
    assert.equal(decodeWorkers(plan("jsonl", { decode_workers: 3 }), 16), 3);
  });

  it("takes a configured count as is, 0 included", () => {
    assert.equal(decodeWorkers(plan("kafka", { decode_workers: 0 }), 16), 0);
    assert.equal(decodeWorkers(plan("kafka", { decode_workers: 4 }), 2), 4);
  });
});

// Regression (issue 36): a live source whose lanes named no input range had its files numbered per run
// (part-00000, ...), so a restart collided with its own earlier files. Now such a lane is refused.
describe("live sources", () => {
  it("refuses a lane of a live source that names no input range", async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const { z } = await import("zod");
    const { Ledger } = await import("../contract/ledger.ts");
    const { createLogger } = await import("../core/logger.ts");
    const { planPipeline } = await import("./plan.ts");
    const { Runtime } = await import("./runtime.ts");
    const out = mkdtempSync(join(tmpdir(), "trajflow-live-lane-"));
    const source = {
      error: null,
      delivered: 0,
      ended: new Promise<void>(() => {}),
      async start(handler: { assigned(lane: unknown): Promise<void> }) {
        const lane = {
          id: "no-range",
          ledger: new Ledger(0),
          live: true,
          fence: () => Promise.resolve(true),
          files: { describe: () => ({}) },
        };
        await handler.assigned(lane);
      },
      pause: () => Promise.resolve(),
      commit: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
    REGISTRY.sources.test_live_without_range = {
      schema: z.strictObject({}),
      description: "a live source whose lanes have no input range (test)",
      build: () => source as never,
      traits: { live: true, pipelined: false, sharedOutputs: false, recordNoun: "events" },
      decodeWorkers: () => 0,
    };
    try {
      const planned = planPipeline({
        file: "test",
        where: () => "test",
        value: {
          sources: { in: { type: "test_live_without_range" } },
          transforms: { assemble: { type: "assemble", inputs: ["in"] } },
          sinks: { files: { type: "parquet", inputs: ["assemble"], path: out } },
        },
      });
      const runtime = new Runtime(planned, { logger: createLogger({ level: "silent" }), baseDir: out });
      await assert.rejects(runtime.run(), (err: { code?: string; message: string }) => {
        assert.equal(err.code, "INTERNAL_ERROR");
        assert.match(err.message, /lane no-range of a live source has no input range/);
        return true;
      });
    } finally {
      delete REGISTRY.sources.test_live_without_range;
      rmSync(out, { recursive: true, force: true });
    }
  });
});
