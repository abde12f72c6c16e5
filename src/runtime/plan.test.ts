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
