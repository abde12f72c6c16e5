/**
 * The Kafka source on its own, against the test broker: what it hands the pipeline around a stop.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import { pino } from "pino";
import type { SourceHandler } from "../src/contract/components.ts";
import { Metrics } from "../src/core/metrics.ts";
import type { KafkajsConsumer } from "../src/kafka/kafkajs-consumer.ts";
import { kafkaSourceConfigSchema } from "../src/sources/kafka/config.ts";
import { KafkaSource } from "../src/sources/kafka/source.ts";
import { createTopic, freshName, kafkaTestScope, produceTo, waitFor } from "./helpers/kafka.ts";

const { broker } = kafkaTestScope("kafka-source");

// Regression: a SIGTERM during start-up stopped the run while the group join was in flight; kafkajs then
// handed over a batch as it disconnected, a lane opened after the stop, and the process exited with an
// unsettled await (exit code 13) instead of 0.
it("takes nothing once stopped, not even a batch kafkajs hands over after the stop", async () => {
  const topic = freshName("stopped");
  const event = { v: 1, type: "session.start", uid: "u", session_id: "s", seq: 0, ts: 1 };
  await createTopic(broker(), topic, 1);
  await produceTo(broker(), topic, [{ key: "u", value: event }]);
  const source = new KafkaSource(
    kafkaSourceConfigSchema.parse({
      connection: { brokers: [broker()] },
      topic,
      group_id: freshName("g"),
      session_timeout_ms: 6_000,
    }),
    { metrics: new Metrics(), logger: pino({ level: "silent" }) },
  );
  const calls: string[] = [];
  const handler: SourceHandler = {
    assigned: (lane) => {
      calls.push(`assigned ${lane.id}`);
      return Promise.resolve();
    },
    records: (_lane, records) => {
      calls.push(`records ${records.length}`);
      return Promise.resolve();
    },
    revoked: (lanes) => {
      if (lanes.length > 0) calls.push(`revoked ${lanes.length}`);
    },
  };
  const consumer = (source["consumer"] as KafkajsConsumer)["consumer"];
  let handedOver = 0;
  consumer.on(consumer.events.END_BATCH_PROCESS, () => handedOver++);
  await source.start(handler);
  await source.pause(); // the stop, before the first fetch came back
  await waitFor("kafkajs to hand over the topic's batch", () => handedOver > 0);
  await source.close();
  assert.deepEqual(calls, []);
  assert.equal(source.delivered, 0);
});
