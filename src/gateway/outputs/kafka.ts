/**
 * Events to a Kafka topic, keyed by uid (all sessions of a GRPO group in one partition), through an
 * idempotent producer. With `ack: all` a call's answer waits for the in-sync replicas; with `ack: async`
 * it does not, and events wait in a bounded buffer instead (a crash loses what the buffer holds).
 *
 * While no broker answers, `accepting()` is false and the gateway refuses calls with 503 before forwarding
 * them; a probe every second finds the broker back.
 */
import { TrajflowError } from "../../core/errors.ts";
import type { Logger } from "../../core/logger.ts";
import { KeyedProducer, readTopicSince } from "../../kafka/keyed-producer.ts";
import type { KafkaOutputConfig } from "../config.ts";
import type { AppendedAt, EventOutput, EventRecord } from "./output.ts";

const RESTORE_ATTEMPTS = 3;

export class KafkaEventOutput implements EventOutput {
  readonly where: string;
  private readonly config: KafkaOutputConfig;
  private readonly producer: KeyedProducer;
  private readonly logger: Logger;
  private healthy = true;
  private probing: NodeJS.Timeout | null = null;
  /** ack async: events sent and not yet acknowledged, and the sends in order. */
  private buffered = 0;
  private tail: Promise<void> = Promise.resolve();
  /** ack all: calls waiting for the next produce request, and whether one is in flight. */
  private readonly queue: Array<{
    records: EventRecord[];
    resolve: (at: AppendedAt | undefined) => void;
    reject: (err: unknown) => void;
  }> = [];
  private sending = false;

  private constructor(config: KafkaOutputConfig, producer: KeyedProducer, logger: Logger) {
    this.config = config;
    this.producer = producer;
    this.logger = logger;
    this.where = `Kafka topic ${config.topic}`;
  }

  /** The producer, for a fleet's replica to tell which partition a session's events go to. */
  get keyedProducer(): KeyedProducer {
    return this.producer;
  }

  static async open(config: KafkaOutputConfig, logger: Logger): Promise<KafkaEventOutput> {
    const producer = await KeyedProducer.connect(config.connection, config.topic, logger);
    return new KafkaEventOutput(config, producer, logger);
  }

  accepting(): boolean {
    return this.healthy && (this.config.ack === "all" || this.buffered < this.config.async_buffer_events);
  }

  append(records: EventRecord[]): Promise<AppendedAt | undefined> {
    if (this.config.ack === "all")
      return new Promise<AppendedAt | undefined>((resolve, reject) => {
        this.queue.push({ records, resolve, reject });
        if (!this.sending) void this.drain();
      });
    this.buffered += records.length;
    // Sends stay in order: one after the other, each retried until the broker takes it.
    this.tail = this.tail.then(async () => {
      for (;;) {
        try {
          await this.sendNow(records);
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 1_000));
        }
      }
      this.buffered -= records.length;
    });
    return Promise.resolve(undefined);
  }

  /**
   * Sends what waits, one produce request at a time: the events of every call that arrived while a request
   * was in flight go together in the next (group commit, as the event log's fsync). One request per call
   * measured 572 calls/s at 64 sessions (BENCHMARKS.md, Gateway).
   */
  private async drain(): Promise<void> {
    this.sending = true;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0);
      try {
        const base = await this.sendNow(
          batch.length === 1 ? batch[0]!.records : batch.flatMap((b) => b.records),
        );
        // Each call's place in its partition: the partition's messages of one send are contiguous, in order.
        const taken = new Map<number, number>();
        for (const b of batch) {
          const partition = this.producer.partitionOf(b.records[0]!.key);
          const first = base.get(partition);
          if (first === undefined) {
            b.resolve(undefined);
            continue;
          }
          const before = taken.get(partition) ?? 0;
          taken.set(partition, before + b.records.length);
          b.resolve({ partition, first: first + before, last: first + before + b.records.length - 1 });
        }
      } catch (err) {
        for (const b of batch) b.reject(err);
      }
    }
    this.sending = false;
  }

  private async sendNow(records: EventRecord[]): Promise<Map<number, number>> {
    try {
      return await this.producer.send(records);
    } catch (err) {
      this.markDown(err);
      throw new TrajflowError(
        "EVENT_OUTPUT_FAILED",
        `Kafka did not acknowledge the events: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  async broadcast(value: string): Promise<void> {
    try {
      await this.producer.sendToAll(value);
    } catch (err) {
      this.markDown(err);
      throw new TrajflowError(
        "EVENT_OUTPUT_FAILED",
        `Kafka did not acknowledge the event: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  private markDown(err: unknown): void {
    if (!this.healthy) return;
    this.healthy = false;
    this.logger.warn(
      { err: (err as Error).message, topic: this.config.topic },
      "Kafka does not acknowledge events; calls are refused until a broker answers.",
    );
    this.probing = setInterval(() => {
      void this.producer.probe().then((ok) => {
        if (!ok || this.healthy) return;
        this.healthy = true;
        clearInterval(this.probing!);
        this.probing = null;
        this.logger.info({ topic: this.config.topic }, "Kafka answers again; calls are taken.");
      });
    }, 1_000);
  }

  /**
   * The window's events, read whole before any is applied, so a read that fails (a coordinator still
   * loading on a broker that just started) is tried again from the start without applying anything twice.
   */
  async *restore(sinceMs: number): AsyncIterable<Uint8Array> {
    for (let attempt = 1; ; attempt++) {
      const values: Uint8Array[] = [];
      try {
        for await (const v of readTopicSince(this.config.connection, this.config.topic, sinceMs, this.logger))
          values.push(v);
      } catch (err) {
        if (attempt >= RESTORE_ATTEMPTS) throw err;
        this.logger.warn(
          { err: (err as Error).message, attempt },
          "Reading the sessions back from the topic failed; trying again.",
        );
        continue;
      }
      yield* values;
      return;
    }
  }

  async close(): Promise<void> {
    if (this.probing !== null) clearInterval(this.probing);
    await this.tail;
    while (this.sending) await new Promise((r) => setTimeout(r, 10));
    await this.producer.close();
  }
}
