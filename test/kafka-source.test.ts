/**
 * The Kafka source on its own, against the test broker: what it hands the pipeline around a stop.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import type { KafkajsConsumer } from "../src/kafka/kafkajs-consumer.ts";
import { kafkaTestScope, sourceOverOneEvent, waitFor } from "./helpers/kafka.ts";

const { broker } = kafkaTestScope("kafka-source");

// Regression: a SIGTERM during start-up stopped the run while the group join was in flight; kafkajs then
// handed over a batch as it disconnected, a lane opened after the stop, and the process exited with an
// unsettled await (exit code 13) instead of 0.
it("takes nothing once stopped, not even a batch kafkajs hands over after the stop", async () => {
  const { source, handler, calls } = await sourceOverOneEvent(broker(), "kafkajs");
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
