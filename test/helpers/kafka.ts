/**
 * The real broker for integration tests: KAFKA_BROKERS when set, otherwise the one scripts/kafka.sh
 * starts (and `npm test` starts before the tests run). Every test uses fresh, random topics and groups.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";
import { randomBytes } from "node:crypto";
import kafkajs from "kafkajs";
import { pino } from "pino";
import type { SourceHandler } from "../../src/contract/components.ts";
import { Metrics } from "../../src/core/metrics.ts";
import { kafkaSourceConfigSchema } from "../../src/sources/kafka/config.ts";
import { KafkaSource } from "../../src/sources/kafka/source.ts";
import { registerKafkaCodecs } from "../../src/kafka/codecs.ts";
import { fixKafkajsRequestQueue } from "../../src/kafka/request-queue-fix.ts";
import { killRunning } from "./cli.ts";

const SCRIPT = new URL("../../scripts/kafka.sh", import.meta.url).pathname;

export function brokers(): string {
  const fromEnv = process.env.KAFKA_BROKERS;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const address = execFileSync("bash", [SCRIPT, "start"], { encoding: "utf8" }).trim().split("\n").pop()!;
  process.env.KAFKA_BROKERS = address;
  return address;
}

export function freshName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** `trajflow consume` arguments reading `topic` into `out` in a consumer group of its own, then `extra`. */
export function consumeArgs(topic: string, out: string, ...extra: string[]): string[] {
  return ["consume", "--topic", topic, "--group", freshName("g"), "--out", out, ...extra];
}

/** Waits for `check` to be true, polling; fails after `ms` (no bare sleeps in tests). */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  ms = 30_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

/** Reads `count` messages of a topic from the beginning (fails after `ms`). */
export async function readTopic(
  broker: string,
  topic: string,
  count: number,
  ms = 20_000,
): Promise<Array<{ key: string | null; value: Buffer; headers: Record<string, string> }>> {
  registerKafkaCodecs();
  fixKafkajsRequestQueue();
  const kafka = new kafkajs.Kafka({ brokers: [broker], logLevel: kafkajs.logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: freshName("reader") });
  const messages: Array<{ key: string | null; value: Buffer; headers: Record<string, string> }> = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
        messages.push({ key: message.key?.toString() ?? null, value: message.value!, headers });
      },
    });
    await waitFor(`${count} messages on ${topic}`, () => messages.length >= count, ms);
  } finally {
    await consumer.disconnect();
  }
  return messages;
}

/** How many messages a topic holds (the sum of its partitions' high watermarks: nothing is deleted). */
export async function topicMessages(broker: string, topic: string): Promise<number> {
  // Without it kafkajs re-arms a timer with a negative delay (Node's TimeoutNegativeWarning in the fleet test).
  fixKafkajsRequestQueue();
  const kafka = new kafkajs.Kafka({ brokers: [broker], logLevel: kafkajs.logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  try {
    return (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  } finally {
    await admin.disconnect();
  }
}

/**
 * A Kafka test file's scratch directory and broker: the broker is looked up before the tests, and what
 * the tests started or wrote is removed after them.
 */
export function kafkaTestScope(prefix: string): { scratch: string; broker: () => string } {
  const scratch = mkdtempSync(join(tmpdir(), `trajflow-${prefix}-`));
  let broker = "";
  before(() => {
    broker = brokers();
  });
  after(() => {
    killRunning();
    rmSync(scratch, { recursive: true, force: true });
  });
  return { scratch, broker: () => broker };
}

/** A message for `produceTo`: JSON-encoded when `value` is an object. */
export interface TestMessage {
  key: string;
  value: string | Record<string, unknown>;
  partition?: number;
}

/** Creates `topic` with `partitions` partitions (waits until it is usable). */
export async function createTopic(broker: string, topic: string, partitions: number): Promise<void> {
  fixKafkajsRequestQueue();
  const kafka = new kafkajs.Kafka({ brokers: [broker], logLevel: kafkajs.logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}

/** Produces `messages` in one request, each to its partition when given (else by key). */
export async function produceTo(broker: string, topic: string, messages: TestMessage[]): Promise<void> {
  registerKafkaCodecs();
  fixKafkajsRequestQueue();
  const kafka = new kafkajs.Kafka({ brokers: [broker], logLevel: kafkajs.logLevel.NOTHING });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    await producer.send({
      topic,
      messages: messages.map((m) => ({
        key: m.key,
        value: typeof m.value === "string" ? m.value : JSON.stringify(m.value),
        ...(m.partition === undefined ? {} : { partition: m.partition }),
      })),
    });
  } finally {
    await producer.disconnect();
  }
}

/**
 * Sets the broker's fetch quota (bytes per second) for a client id (scripts/kafka.sh quota): the broker
 * then throttles that client's fetches, as a starved or rate-limited consumer is. False when the broker
 * is not the one scripts/kafka.sh runs (KAFKA_BROKERS names another).
 */
export function setConsumerQuota(clientId: string, bytesPerSecond: number): boolean {
  let running: string;
  try {
    running = execFileSync("bash", [SCRIPT, "status"], { encoding: "utf8" }).trim();
  } catch {
    return false; // scripts/kafka.sh runs no broker here: KAFKA_BROKERS names another
  }
  if (running !== brokers()) return false;
  execFileSync("bash", [SCRIPT, "quota", clientId, String(bytesPerSecond)], { stdio: "ignore" });
  return true;
}

/**
 * A Kafka source on `client` over a fresh one-partition topic holding one event, with a handler that
 * records what the source hands it ("assigned …", "records n", "revoked n"): for the stop tests.
 */
export async function sourceOverOneEvent(broker: string, client: "kafkajs" | "librdkafka") {
  const topic = freshName("stopped");
  const event = { v: 1, type: "session.start", uid: "u", session_id: "s", seq: 0, ts: 1 };
  await createTopic(broker, topic, 1);
  await produceTo(broker, topic, [{ key: "u", value: event }]);
  const source = new KafkaSource(
    kafkaSourceConfigSchema.parse({
      connection: { brokers: [broker], client },
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
  return { source, handler, calls };
}
