/**
 * What the gateway needs of Kafka: a keyed producer whose sends are acknowledged by the in-sync replicas,
 * a cheap check that a broker answers (so calls are refused before they are forwarded while none does),
 * and a reader of a topic's recent messages (to rebuild sessions after a restart).
 */
import { randomBytes } from "node:crypto";
import { TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import {
  connectClient,
  createKafka,
  createOrderedProducer,
  disconnectWithin,
  keyPartitioner,
  type Producer,
} from "./client.ts";
import type { KafkaConnection } from "./connection.ts";

/** How long reading a topic back may go without a batch before it gives up. */
const STALL_MS = 30_000;

/**
 * How long a starting gateway waits for its topic to be usable. A broker that has just started refuses
 * for a while what it will do a moment later: its controller has not registered it yet (a topic cannot
 * get its replication factor), its partitions' leaders are being elected, its coordinator is loading.
 */
const TOPIC_READY_MS = 60_000;

/**
 * Refusals that waiting does not change: permissions, the cluster's policies, an invalid name, partition
 * count or config. (Too few brokers for the replication factor is not one: a starting broker says so.)
 */
function refused(err: unknown): boolean {
  const e = err as { type?: unknown; errors?: unknown[]; name?: unknown };
  const types = [
    e.type,
    ...(Array.isArray(e.errors) ? e.errors.map((x) => (x as { type?: unknown }).type) : []),
  ];
  return (
    e.name === "KafkaJSSASLAuthenticationError" ||
    types.some(
      (t) =>
        typeof t === "string" &&
        /AUTHORIZATION|POLICY_VIOLATION|INVALID_CONFIG|INVALID_TOPIC|INVALID_PARTITIONS/.test(t),
    )
  );
}

/**
 * Creates `topic` when it does not exist (another replica may create it at the same time) and waits until
 * each of its partitions has a leader; returns its partition count. Tries again for TOPIC_READY_MS, with a
 * client of its own whose retries suit a start (the producer's are short: a call waits on them).
 */
async function ensureTopic(
  kafka: ReturnType<typeof createKafka>,
  connection: KafkaConnection,
  topic: string,
  partitions: number | undefined,
  logger: Logger,
): Promise<number> {
  const deadline = Date.now() + TOPIC_READY_MS;
  for (let attempt = 1; ; attempt++) {
    const admin = kafka.admin();
    try {
      await connectClient(admin, connection);
      const existing = await admin.listTopics();
      if (!existing.includes(topic))
        await admin
          .createTopics({
            topics: [{ topic, ...(partitions !== undefined ? { numPartitions: partitions } : {}) }],
            waitForLeaders: true,
          })
          // Another replica may have created it meanwhile.
          .catch((err: unknown) => {
            if (!/already exists/i.test((err as Error).message)) throw err;
          });
      const meta = await admin.fetchTopicMetadata({ topics: [topic] });
      const found = meta.topics[0]?.partitions ?? [];
      if (found.length > 0 && found.every((x) => x.leader >= 0)) return found.length;
      throw new TrajflowError(
        "KAFKA_CLIENT_FAILED",
        `topic ${topic}: ${found.length} partitions, not every one with a leader yet`,
      );
    } catch (err) {
      if (refused(err) || Date.now() > deadline) throw err;
      logger.warn(
        { topic, attempt, err: (err as Error).message },
        "The event topic is not usable yet (a broker starting?); trying again.",
      );
      await new Promise((r) => setTimeout(r, Math.min(250 * attempt, 2_000)));
    } finally {
      await disconnectWithin(admin, 5_000);
    }
  }
}

export class KeyedProducer {
  private readonly kafka: ReturnType<typeof createKafka>;
  private readonly producer: Producer;
  private readonly probeClient: ReturnType<typeof createKafka>;
  readonly topic: string;
  private readonly partitioner = keyPartitioner();
  /** The topic's partition count when this producer connected. */
  partitions = 0;

  private constructor(connection: KafkaConnection, topic: string, logger: Logger) {
    // Short retries: a call waits for its events, so a broker that is away must be found out in seconds
    // (the call is then answered 503), not after the client's usual half minute.
    this.kafka = createKafka(connection, logger, { retries: 3, maxRetryTime: 1_000 });
    this.probeClient = createKafka(connection, logger, { retries: 0, maxRetryTime: 500 });
    this.producer = createOrderedProducer(this.kafka, { allowAutoTopicCreation: true });
    this.topic = topic;
  }

  /** `partitions`: how many a topic created here gets (default: the broker's num.partitions). */
  static async connect(
    connection: KafkaConnection,
    topic: string,
    logger: Logger,
    partitions?: number,
  ): Promise<KeyedProducer> {
    const p = new KeyedProducer(connection, topic, logger);
    await connectClient(p.producer, connection);
    p.partitions = await ensureTopic(createKafka(connection, logger), connection, topic, partitions, logger);
    return p;
  }

  /**
   * Sends keyed messages; resolves once the in-sync replicas acknowledged them (acks = all), with each
   * partition's first offset in this send (one produce request: a partition's messages are contiguous, in
   * the order given).
   */
  async send(
    records: Array<{ key: string; value: string; headers?: Record<string, string> }>,
  ): Promise<Map<number, number>> {
    const acked = await this.producer.send({ topic: this.topic, acks: -1, messages: records });
    const base = new Map<number, number>();
    for (const m of acked) if (m.baseOffset !== undefined) base.set(m.partition, Number(m.baseOffset));
    return base;
  }

  /** The partition a key's messages go to, as this producer's partitioner puts them. */
  partitionOf(key: string): number {
    this.metadata ??= Array.from({ length: this.partitions }, (_, i) => ({
      partitionId: i,
      leader: 0,
      partitionErrorCode: 0,
      replicas: [],
      isr: [],
    }));
    return this.partitioner({
      topic: this.topic,
      partitionMetadata: this.metadata,
      message: { key, value: null },
    });
  }

  private metadata: Parameters<ReturnType<typeof keyPartitioner>>[0]["partitionMetadata"] | null = null;

  /** Each partition's end offset now (its high watermark: every acknowledged message lies below it). */
  async endOffsets(): Promise<Map<number, number>> {
    if (this.offsetsAdmin === null) {
      const admin = this.kafka.admin();
      await admin.connect();
      this.offsetsAdmin = admin;
    }
    const offsets = await this.offsetsAdmin.fetchTopicOffsets(this.topic);
    return new Map(offsets.map((o) => [o.partition, Number(o.high)]));
  }

  private offsetsAdmin: ReturnType<ReturnType<typeof createKafka>["admin"]> | null = null;

  /** Sends one unkeyed message to every partition of the topic (control events every member must see). */
  async sendToAll(value: string): Promise<void> {
    const admin = this.kafka.admin();
    await admin.connect();
    let partitions: number[];
    try {
      const meta = await admin.fetchTopicMetadata({ topics: [this.topic] });
      partitions = meta.topics[0]!.partitions.map((p) => p.partitionId);
    } finally {
      await disconnectWithin(admin, 2_000);
    }
    await this.producer.send({
      topic: this.topic,
      acks: -1,
      messages: partitions.map((partition) => ({ value, partition })),
    });
  }

  /** Whether a broker answers a metadata request for the topic now. */
  async probe(): Promise<boolean> {
    const admin = this.probeClient.admin();
    try {
      await admin.connect();
      await admin.fetchTopicMetadata({ topics: [this.topic] });
      return true;
    } catch {
      return false;
    } finally {
      await disconnectWithin(admin, 2_000);
    }
  }

  async close(): Promise<void> {
    if (this.offsetsAdmin !== null) await disconnectWithin(this.offsetsAdmin, 2_000);
    await disconnectWithin(this.producer, 10_000);
  }
}

/**
 * The values of `topic`'s messages written at or after `sinceMs` (the broker's timestamps), up to the end
 * each partition had when this began. Read by a throwaway consumer group that commits nothing.
 */
export async function* readTopicSince(
  connection: KafkaConnection,
  topic: string,
  sinceMs: number,
  logger: Logger,
): AsyncIterable<Uint8Array> {
  const kafka = createKafka(connection, logger);
  const admin = kafka.admin();
  await connectClient(admin, connection);
  let starts: Array<{ partition: number; offset: string }>;
  let ends: Map<number, bigint>;
  try {
    if (!(await admin.listTopics()).includes(topic)) return;
    starts = await admin.fetchTopicOffsetsByTimestamp(topic, sinceMs);
    ends = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, BigInt(p.high)]));
  } finally {
    await disconnectWithin(admin, 5_000);
  }
  // A partition with nothing since then answers -1 (or its end).
  const todo = new Map<number, bigint>();
  for (const s of starts) {
    const end = ends.get(s.partition) ?? 0n;
    const from = s.offset === "-1" ? end : BigInt(s.offset);
    if (from < end) todo.set(s.partition, from);
  }
  if (todo.size === 0) return;
  const consumer = kafka.consumer({ groupId: `trajflow-gateway-restore-${randomBytes(6).toString("hex")}` });
  const queue: Uint8Array[][] = [];
  let wake: (() => void) | null = null;
  let failed: unknown = null;
  const remaining = new Set(todo.keys());
  await connectClient(consumer, connection);
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        const end = ends.get(batch.partition) ?? 0n;
        const values: Uint8Array[] = [];
        for (const m of batch.messages) {
          if (BigInt(m.offset) >= end) break;
          if (m.value !== null) values.push(m.value);
        }
        if (values.length > 0) queue.push(values);
        const last = batch.messages.at(-1);
        if (last !== undefined && BigInt(last.offset) + 1n >= end) remaining.delete(batch.partition);
        wake?.();
      },
    });
    for (const [partition, offset] of todo) consumer.seek({ topic, partition, offset: offset.toString() });
    consumer.on(consumer.events.CRASH, (e) => {
      failed = e.payload.error;
      wake?.();
    });
    let progress = Date.now();
    for (;;) {
      while (queue.length > 0) {
        progress = Date.now();
        yield* queue.shift()!;
      }
      if (failed !== null) throw failed;
      if (remaining.size === 0) break;
      // A read that stops making progress (a group that never gets its partitions) fails instead of
      // holding the gateway's start forever; the caller tries again.
      if (Date.now() - progress > STALL_MS)
        throw new TrajflowError(
          "KAFKA_CLIENT_FAILED",
          `reading ${topic} back made no progress for ${STALL_MS / 1000} s (partitions ${[...remaining].join(", ")} unread)`,
        );
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 1_000).unref();
      });
      wake = null;
    }
  } finally {
    await disconnectWithin(consumer, 10_000);
  }
}
