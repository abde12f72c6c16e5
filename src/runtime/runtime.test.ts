import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { Plan } from "./plan.ts";
import { REGISTRY } from "./registry.ts";
import { decodeWorkers } from "./runtime.ts";

function plan(type: "kafka" | "jsonl", config: Record<string, unknown> = {}): Plan {
  return {
    source: { name: "in", type, config },
    sourceTraits: REGISTRY.sources[type]!.traits,
    transforms: [],
    sinks: [],
    deadLetters: { type: "files", config: { path: "dl" } },
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
