/**
 * The Kafka source's consumer, whichever client library runs it: kafkajs (kafkajs-consumer.ts, the
 * default) or librdkafka through @confluentinc/kafka-javascript (rdkafka-consumer.ts), chosen by
 * `connection.client` (consumer.ts builds the one named). The source talks to this interface only: one topic, one consumer group, batches of
 * one partition handed one at a time, offsets committed only when the source says so (never by the
 * client on its own), and the broker's view of the topic (high watermarks, committed offsets, who owns a
 * partition).
 */
import type { KafkaConnection } from "./connection.ts";

/** What a consumer is built from (the kafka source's config holds it). */
export interface TopicConsumerSettings {
  connection: KafkaConnection;
  topic: string;
  group_id: string;
  /** Where a group without committed offsets starts: the earliest offset, or the latest. */
  from_beginning: boolean;
  session_timeout_ms: number;
  /** Most bytes one fetch returns, per partition and in all (FETCH_DEFAULTS when absent). */
  fetch_max_bytes?: number | undefined;
}

/**
 * The fetch limits when fetch_max_bytes is not set, for both clients: 256 KiB per partition, 1 MiB in all
 * (kafkajs's own are 1 MiB and 10 MiB). The limits count compressed bytes, and a fetch's batches are
 * decompressed and decoded at once: JSON events with full prompts compress ~24x under zstd (each call
 * repeats the session's context), so kafkajs's 10 MiB fetch held ~100 MiB of events in flight. Measured on
 * the shared harness's short workload (BENCHMARKS.md, "Memory and CPU, round three"): peak RSS 570-600 MiB
 * with kafkajs's limits, 410-460 with these, at the same speed (a fetch's round trip on a broker that has
 * the data is ~1 ms; 1 MiB of even poorly compressed events is thousands of events, tens of ms of work).
 * The broker returns at least one whole batch however large, so no batch is too big for them.
 */
export const FETCH_DEFAULTS = { perPartition: 256 * 1024, total: 1024 * 1024 };

/** One message of a batch: what the source reads of it (kafkajs gives offsets as strings, librdkafka as numbers). */
export interface BatchMessage {
  offset: string | number;
  value: Buffer | null;
}

/** Consecutive messages of one partition, in offset order. */
export interface Batch {
  partition: number;
  messages: BatchMessage[];
}

/** What a batch's handler may ask of the client while it runs. */
export interface BatchControl {
  /** False once the consumer stops. */
  isRunning(): boolean;
  /** True once the batch's partition was revoked or sought since the batch was fetched. */
  isStale(): boolean;
  /** Keeps the group membership alive while the handler waits (a no-op where the client heartbeats itself). */
  heartbeat(): Promise<void>;
  /** Where the client fetches this partition from next: after `offset`. */
  resolveOffset(offset: string): void;
}

/** What the consumer tells the source. */
export interface ConsumerEvents {
  /**
   * The member (re)joined its group and holds `partitions` of the topic: every lane starts over, each
   * partition is fetched from its committed offset.
   */
  joined(partitions: number[]): void;
  /** The member gave its partitions back before rejoining (librdkafka says so; kafkajs does not). */
  revoked(): void;
  /** The client stopped on `error`; `restarts`: it restarts itself, else it gave up. */
  crashed(error: Error, restarts: boolean): void;
  /** A batch to hand on; the next one comes once the returned promise settles. */
  batch(batch: Batch, control: BatchControl): Promise<void>;
}

/** The Kafka source's view of its consumer group member. */
export interface TopicConsumer {
  /** Connects (the client and what asks the broker about the topic); idempotent for a caller that keeps the promise. */
  connect(): Promise<void>;
  /** Subscribes to the topic and starts handing batches to `events`. */
  start(events: ConsumerEvents): Promise<void>;
  /** Leaves and rejoins the group (the watchdog's restart of a consumer that stalled). */
  restart(): Promise<void>;
  /** Connects and runs again after a crash the client gave up on. */
  reconnect(): Promise<void>;
  /** Fetches `partition` from `offset` next; throws when the partition is not assigned to this member. */
  seek(partition: number, offset: number): void;
  /** Commits these offsets (Kafka's convention: the next offset to read) for the group. */
  commit(offsets: Array<{ partition: number; offset: number }>): Promise<void>;
  /**
   * Whether this member owns `partition` now, in a group that is not rebalancing; throws when that cannot
   * be known (the coordinator does not answer).
   */
  owns(partition: number): Promise<boolean>;
  /** Every partition's low and high watermark, asked of the broker now. */
  topicOffsets(): Promise<Array<{ partition: number; low: number; high: number }>>;
  /** The group's committed offset per partition of the topic (absent where none is). */
  committedOffsets(): Promise<Map<number, number>>;
  /** Disconnects every client, each given up on after `ms` (`stuck` names those that did not finish). */
  disconnect(ms: number, stuck: (client: string) => void): Promise<void>;
}

/** The heartbeat interval for a session timeout: a third of it, at least 100 ms. */
export function heartbeatInterval(sessionTimeoutMs: number): number {
  return Math.max(100, Math.floor(sessionTimeoutMs / 3));
}
