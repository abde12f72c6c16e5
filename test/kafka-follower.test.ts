/**
 * A gateway replica's readers of its event topic (src/kafka/topic-follower.ts) through a new group
 * membership: kafkajs restarts a failed consumer (a coordinator still loading on a broker just started, a
 * broker restart) as a new membership that keeps no seek made before, and a follower that did not seek
 * again read on from the topic's end, losing what came meanwhile.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { createKafka, connectClient, disconnectWithin } from "../src/kafka/client.ts";
import { kafkaConnectionSchema } from "../src/kafka/connection.ts";
import { runJoined } from "../src/kafka/topic-follower.ts";
import { createLogger } from "../src/core/logger.ts";
import { createTopic, freshName, kafkaTestScope, produceTo, waitFor } from "./helpers/kafka.ts";

const { broker } = kafkaTestScope("kafka-follower");

describe("event topic readers", () => {
  it("seek again at every join, so a restarted membership reads on from where the last one was", async () => {
    const topic = freshName("follow");
    await createTopic(broker(), topic, 1);
    await produceTo(broker(), topic, [
      { key: "a", value: "m0", partition: 0 },
      { key: "a", value: "m1", partition: 0 },
    ]);
    const connection = kafkaConnectionSchema.parse({ brokers: [broker()] });
    const logger = createLogger({ level: "silent" });
    const consumer = createKafka(connection, logger).consumer({
      groupId: freshName("g"),
      maxWaitTimeInMs: 100,
    });
    const read: string[] = [];
    let next = 0;
    let joins = 0;
    const eachBatch = async ({
      batch,
    }: {
      batch: { messages: Array<{ offset: string; value: Buffer | null }> };
    }) => {
      for (const m of batch.messages) {
        if (Number(m.offset) !== next) continue;
        next++;
        read.push(m.value!.toString());
      }
    };
    try {
      await connectClient(consumer, connection);
      // Not from the beginning: without a seek a membership starts at the end, as the follower's does.
      await consumer.subscribe({ topic, fromBeginning: false });
      await runJoined(
        consumer,
        eachBatch,
        () => {
          joins++;
          consumer.seek({ topic, partition: 0, offset: String(next) });
        },
        (err) => assert.fail(String(err)),
        "Following the test topic",
        logger,
      );
      await waitFor("the first two messages", () => read.length === 2);
      // A new membership, as kafkajs's restart after a failure makes one; the messages sent meanwhile
      // are before the topic's end when it joins.
      await consumer.stop();
      await produceTo(broker(), topic, [
        { key: "a", value: "m2", partition: 0 },
        { key: "a", value: "m3", partition: 0 },
      ]);
      await consumer.run({ autoCommit: false, eachBatch });
      await waitFor("the messages sent while the membership was gone", () => read.length === 4);
      assert.deepEqual(read, ["m0", "m1", "m2", "m3"]);
      assert.equal(joins, 2);
    } finally {
      await disconnectWithin(consumer, 5_000);
    }
  });
});
