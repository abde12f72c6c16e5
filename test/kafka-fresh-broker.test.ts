/**
 * A fleet started together with its broker (a compose file, a CI job): on a broker that has just started,
 * creating a topic fails for a while (its controller has not registered it: no broker for the
 * replication factor), leaders are still being elected and the group coordinator is loading. Seen in the
 * fleet test: a replica exited KAFKA_CLIENT_FAILED ("This server does not host this topic-partition").
 * A gateway's topic and its readers wait for the broker instead. (The race needs a loaded host: on an idle
 * one the first case passed before the fix too; it guards the start path. The second case guards the
 * limit of the waiting: a refusal is not tried again, as the producer's log shows.)
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { pino } from "pino";
import { createLogger } from "../src/core/logger.ts";
import { kafkaConnectionSchema } from "../src/kafka/connection.ts";
import { KeyedProducer } from "../src/kafka/keyed-producer.ts";
import { TopicFollower, type FollowedMessage } from "../src/kafka/topic-follower.ts";
import { freePorts } from "./helpers/gateway.ts";
import { freshName, waitFor } from "./helpers/kafka.ts";

const KAFKA_SCRIPT = new URL("../scripts/kafka.sh", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-fresh-broker-"));
// A broker of its own, started by this test: the other tests' broker is long past its start. Its three
// ports (listener, controller, TLS: scripts/kafka.sh) are free ones.
const own = {
  ...process.env,
  KAFKA_PORT: String(await freePorts(3)),
  TRAJFLOW_KAFKA_DIR: join(scratch, "broker"),
};
const kafka = (command: string) =>
  execFileSync("bash", [KAFKA_SCRIPT, command], { env: own, encoding: "utf8" }).trim().split("\n").pop()!;

after(() => {
  kafka("stop");
  rmSync(scratch, { recursive: true, force: true });
});

it("starts three replicas' topic and a follower at once on a broker that has just started", async () => {
  const address = kafka("start");
  const connection = kafkaConnectionSchema.parse({ brokers: [address] });
  const logger = createLogger({ level: "silent" });
  const topic = freshName("fresh");
  // At once, right away: as the replicas of a fleet that starts with its broker.
  const producers = await Promise.all([0, 1, 2].map(() => KeyedProducer.connect(connection, topic, logger)));
  const followed: FollowedMessage[] = [];
  let follower: TopicFollower | null = null;
  try {
    assert.deepEqual(
      producers.map((p) => p.partitions),
      [4, 4, 4],
    );
    await producers[0]!.send([{ key: "s", value: "first" }]);
    // A group of its own on the new broker: its coordinator may still be loading.
    follower = await TopicFollower.start(connection, topic, 0, "fresh", logger, (m) => followed.push(m));
    await follower.ready;
    await producers[1]!.send([{ key: "s", value: "second" }]);
    await waitFor("both messages followed", () => followed.length === 2, 60_000);
    assert.deepEqual(
      followed.map((m) => m.value!.toString()),
      ["first", "second"],
    );
  } finally {
    await follower?.close();
    await Promise.all(producers.map((p) => p.close()));
  }
});

it("fails at once on a refusal that waiting does not change, not after a minute of trying again", async () => {
  const connection = kafkaConnectionSchema.parse({ brokers: [kafka("start")] });
  // What the producer logs says whether it tried again (each retry is a warning), whatever the clock says.
  const logged: Array<{ msg: string }> = [];
  const logger = pino({ level: "warn" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  // No topic has zero partitions: the broker answers INVALID_PARTITIONS whenever it is asked.
  await assert.rejects(
    KeyedProducer.connect(connection, freshName("none"), logger, 0),
    (err: { errors?: Array<{ type?: string }> }) => err.errors?.[0]?.type === "INVALID_PARTITIONS",
  );
  assert.deepEqual(
    logged.filter((l) => /trying again/.test(l.msg)),
    [],
    "the refusal was tried again",
  );
});
