import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { planPipeline } from "./plan.ts";

const doc = (value: unknown) => ({ file: "p.yaml", value, where: () => "p.yaml" });
const source = { type: "kafka", connection: { brokers: ["src:9092"] }, topic: "events", group_id: "g" };

describe("planPipeline: what the source shares", () => {
  it("gives a topic without a connection the Kafka source's, resolved by the topic's own entry", () => {
    const plan = planPipeline(
      doc({
        sources: { in: source },
        transforms: { assemble: { type: "assemble", inputs: ["in"] } },
        sinks: {
          files: { type: "parquet", inputs: ["assemble"], path: "out" },
          rows: { type: "kafka", inputs: ["assemble"], topic: "rows" },
          mirror: {
            type: "kafka",
            inputs: ["assemble"],
            topic: "mirror",
            connection: { brokers: ["other:9092"] },
          },
        },
      }),
    );
    const brokersOf = (config: unknown) =>
      (config as { connection: { brokers: string[] } }).connection.brokers;
    const sinks = Object.fromEntries(plan.sinks.map((s) => [s.name, s.config]));
    assert.deepEqual(brokersOf(sinks.rows), ["src:9092"]);
    assert.deepEqual(brokersOf(sinks.mirror), ["other:9092"]);
    // The source's default dead letters: a topic beside its own, on its brokers.
    assert.equal(plan.deadLetters.type, "kafka");
    assert.equal((plan.deadLetters.config as { topic: string }).topic, "events.dead-letter");
    assert.deepEqual(brokersOf(plan.deadLetters.config), ["src:9092"]);
    assert.equal(plan.sinks.at(-1)!.name, "files");
    assert.equal("sourceConnection" in plan, false);
  });
});

describe("planPipeline: a memory limit", () => {
  const pipeline = (files: Record<string, unknown> = {}) =>
    doc({
      sources: { in: source },
      transforms: { assemble: { type: "assemble", inputs: ["in"] } },
      sinks: { files: { type: "parquet", inputs: ["assemble"], path: "out", ...files } },
    });
  const MiB = 2 ** 20;

  it("sizes the defaults that bound held data, and keeps the pipeline's own settings", () => {
    const plan = planPipeline(pipeline({ max_in_flight: 3 }), [], {
      bytes: 384 * MiB,
      source: "--max-memory",
    });
    const config = (c: unknown) => c as Record<string, unknown>;
    const files = config(plan.sinks.at(-1)!.config);
    // A data budget of 64 MiB: half for a file's rows at 80 bytes a token, a quarter of bytes.
    assert.equal(files.max_tokens_per_file, 419_430);
    assert.equal(files.max_bytes_per_file, 16 * MiB);
    assert.equal(files.max_in_flight, 3);
    assert.equal(config(plan.source.config).fetch_max_bytes, 256 * 1024);
    assert.equal(config(plan.source.config).decode_workers, 0);
    assert.equal(config(plan.transforms[0]!.config).max_buffered_bytes, 16 * MiB);
    assert.deepEqual(plan.memory, {
      limit: { bytes: 384 * MiB, source: "--max-memory" },
      sized: [
        "in.fetch_max_bytes = 262144",
        "in.decode_workers = 0",
        "assemble.max_buffered_bytes = 16777216",
        "files.max_tokens_per_file = 419430",
        "files.max_bytes_per_file = 16777216",
        "files.max_buffered_bytes = 16777216",
      ],
    });
  });

  it("leaves the defaults alone above what they need, and without a limit", () => {
    const big = planPipeline(pipeline(), [], { bytes: 8 * 2 ** 30, source: "cgroup" });
    const files = big.sinks.at(-1)!.config as Record<string, unknown>;
    assert.equal(files.max_tokens_per_file, 500_000);
    assert.equal(files.max_in_flight, 2);
    assert.equal((big.source.config as Record<string, unknown>).fetch_max_bytes, undefined);
    assert.equal(planPipeline(pipeline()).memory, null);
  });
});
