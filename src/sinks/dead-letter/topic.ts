/**
 * The dead-letter topic: rejected events as JSON messages (keyed by uid when known), produced in batches
 * with acks=all. A letter's ack is released once the topic acknowledged it; a failed send is retried with
 * backoff for as long as the pipeline runs, holding its offsets meanwhile, so a broker away for minutes
 * delays commits but loses nothing. The backlog (bytes not yet acknowledged) is bounded by the runtime,
 * which stops reading while it is over its limit: a flood of garbage cannot exhaust memory.
 */
import { z } from "zod";
import type { DeadLetterSink, Resolved, SharedSettings } from "../../contract/components.ts";
import type { Ack } from "../../contract/ledger.ts";
import { TrajflowError } from "../../core/errors.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import {
  connectClient,
  createKafka,
  createOrderedProducer,
  disconnectWithin,
  type Producer,
} from "../../kafka/client.ts";
import { kafkaConnectionSchema, withConnection, type KafkaConnection } from "../../kafka/connection.ts";

/** `dead_letters: { type: kafka, ... }` in a pipeline. */
export const deadLetterTopicConfigSchema = z.strictObject({
  topic: z.string().min(1).describe("Dead-letter topic."),
  connection: kafkaConnectionSchema
    .optional()
    .describe("Brokers of the topic; default: the kafka source's connection."),
});
export type DeadLetterTopicConfig = z.output<typeof deadLetterTopicConfigSchema>;

/** The config with its connection: its own, else the source's (a kafka source shares it). */
export const resolveDeadLetterTopic = (
  config: DeadLetterTopicConfig,
  shared: SharedSettings,
): Resolved<DeadLetterTopicConfig> =>
  withConnection(config, shared, "dead letters to a topic need a connection when the source has none");

/** Messages per produce request; a batch is also cut at this many bytes (under message.max.bytes). */
const BATCH_MESSAGES = 500;
const BATCH_BYTES = 512 * 1024;

interface Queued {
  key: string | null;
  value: string;
  ack: Ack | null;
}

export class DeadLetterTopic implements DeadLetterSink {
  private readonly topic: string;
  private readonly producer: Producer;
  private readonly metrics: Metrics;
  private readonly log: Logger;
  private queue: Queued[] = [];
  private queuedBytes = 0;
  private inFlightBytes = 0;
  private sending: Promise<void> | null = null;
  private stopping = false;

  private readonly connection: KafkaConnection;

  readonly location: string;

  constructor(topic: string, connection: KafkaConnection, ctx: { metrics: Metrics; logger: Logger }) {
    this.topic = topic;
    this.location = `topic ${topic}`;
    this.connection = connection;
    this.metrics = ctx.metrics;
    this.log = ctx.logger.child({ component: "dead-letters" });
    this.producer = createOrderedProducer(createKafka(connection, ctx.logger));
  }

  get backlogBytes(): number {
    return this.queuedBytes + this.inFlightBytes;
  }

  async open(): Promise<void> {
    await connectClient(this.producer, this.connection);
  }

  write(letter: DeadLetter, ack: Ack | null): void {
    const value = JSON.stringify(letter);
    this.queue.push({ key: letter.uid ?? null, value, ack });
    this.queuedBytes += value.length;
    this.sending ??= this.sendAll().finally(() => (this.sending = null));
  }

  /** Sends the queue in batches until it is empty. */
  private async sendAll(): Promise<void> {
    while (this.queue.length > 0) {
      let bytes = 0;
      let n = 0;
      while (n < this.queue.length && n < BATCH_MESSAGES && bytes < BATCH_BYTES)
        bytes += this.queue[n++]!.value.length;
      const batch = this.queue.splice(0, n);
      this.queuedBytes -= bytes;
      this.inFlightBytes += bytes;
      try {
        if (!(await this.send(batch))) return;
        for (const q of batch) q.ack?.release();
      } finally {
        this.inFlightBytes -= bytes;
      }
    }
  }

  /** One batch, retried with backoff until acknowledged; false when stopping gave up on it. */
  private async send(batch: Queued[]): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.producer.send({
          topic: this.topic,
          acks: -1,
          messages: batch.map((q) => ({ key: q.key, value: q.value })),
        });
        return true;
      } catch (err) {
        // Its offsets stay uncommitted: the next owner dead-letters these events again.
        if (this.stopping) return false;
        this.metrics.inc("kafka_produce_retries");
        this.log.warn({ err, topic: this.topic, attempt }, "Could not produce dead letters; retrying.");
        await new Promise((r) => setTimeout(r, Math.min(30_000, 500 * 2 ** attempt)));
      }
    }
  }

  async waitBelow(bytes: number): Promise<void> {
    while (this.backlogBytes > bytes && this.sending !== null) await this.sending;
  }

  /**
   * Waits until every letter is acknowledged, for as long as batches keep being acknowledged; when none
   * is for 30 s (the topic is gone), fails: the run must not end as if its dead letters were delivered
   * (their offsets stay uncommitted, so the next run sends them again).
   */
  async close(): Promise<void> {
    try {
      let last = this.backlogBytes;
      let since = Date.now();
      while (this.sending !== null) {
        await Promise.race([this.sending, new Promise((r) => setTimeout(r, 1_000).unref())]);
        if (this.backlogBytes !== last) {
          last = this.backlogBytes;
          since = Date.now();
        } else if (Date.now() - since >= 30_000) {
          throw new TrajflowError(
            "SINK_WRITE_FAILED",
            `${this.queue.length} dead letters were not acknowledged by ${this.topic} within 30 s; their ` +
              `offsets stay uncommitted and the next run sends them again`,
          );
        }
      }
    } finally {
      this.stopping = true;
      await disconnectWithin(this.producer, 10_000);
    }
  }
}
