/**
 * The `kafka` source: a consumer-group member that turns assigned partitions into lanes.
 *
 * - Events are keyed by uid, so a session (and its GRPO group) lives in one partition: one lane each.
 * - Every (re)join restarts all assigned partitions at their committed offsets (kafkajs drops resolved
 *   offsets on rebalance), so every lane starts over too; the runtime recovers from the files which
 *   sessions are already written.
 * - A lane's offsets are committed only up to its ledger's committable offset (nothing not yet durable).
 * - Fencing: before a file lands, the coordinator is asked whether this member still owns the partition
 *   in a stable group; an expelled member's late file is dropped instead.
 * - kafkajs crashes it calls final while the broker is only away (a restarting single broker) restart the
 *   consumer with backoff; a watchdog restarts a consumer that stalled while messages wait.
 * Its parts: lane.ts (a partition's lane), fence.ts (the ownership question), watermarks.ts (lag,
 * caught up, drained); this file handles the group, the batches and the commits.
 */
import type { LiveSource, Source, SourceHandler } from "../../contract/components.ts";
import type { Holdings } from "../../core/held-memory.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { RawRecord } from "../../core/records.ts";
import { describeConnection, isBrokerAway, isClientError, setupError } from "../../kafka/client.ts";
import { createTopicConsumer } from "../../kafka/consumer.ts";
import { FetchedMessage } from "../../kafka/fetch-records.ts";
import {
  heartbeatInterval,
  type Batch,
  type BatchControl,
  type TopicConsumer,
} from "../../kafka/topic-consumer.ts";
import type { KafkaSourceConfig } from "./config.ts";
import { ownsPartition } from "./fence.ts";
import { kafkaLane, type KafkaLane } from "./lane.ts";
import { Watermarks } from "./watermarks.ts";
import { killPoint } from "../../core/kill-points.ts";

const EMPTY = Buffer.alloc(0);

export class KafkaSource implements Source {
  private readonly config: KafkaSourceConfig;
  private readonly metrics: Metrics;
  private readonly log: Logger;
  private readonly consumer: TopicConsumer;
  private readonly heartbeatIntervalMs: number;
  private handler!: SourceHandler;
  private lanes = new Map<number, KafkaLane>();
  /** Partitions restarted locally, with the offset their next lane must start at. */
  private readonly restartAt = new Map<number, number>();
  /** Partitions the group assigned to this member at its last join; null before the first. */
  private assignment: number[] | null = null;
  private failure: Error | null = null;
  private stopping = false;
  private restarting = false;
  private commitTimer: NodeJS.Timeout | null = null;
  private lagTimer: NodeJS.Timeout | null = null;
  private readonly watermarks: Watermarks;
  private lastProgress = { messages: 0, at: Date.now() };
  private count = 0;
  /** The last batch handed to the runtime, settled (failures handled) once it is applied. */
  private previousBatch: Promise<void> = Promise.resolve();
  private connecting: Promise<void> | null = null;
  /** Bytes of message values handed to the pipeline and not yet applied (being decoded or assembled). */
  private handedBytes = 0;
  /** Never resolves: a topic has no end. */
  readonly ended = new Promise<void>(() => {});

  constructor(config: KafkaSourceConfig, ctx: { metrics: Metrics; logger: Logger }) {
    this.config = config;
    this.metrics = ctx.metrics;
    this.log = ctx.logger.child({ component: "kafka" });
    this.heartbeatIntervalMs = heartbeatInterval(config.session_timeout_ms);
    // kafkajs (the default) or librdkafka (connection.client): src/kafka/topic-consumer.ts.
    this.consumer = createTopicConsumer(config, ctx.logger);
    this.watermarks = new Watermarks(this.consumer, config, () => ({
      lanes: this.lanes,
      assignment: this.assignment,
      restartAt: this.restartAt,
    }));
    this.live = {
      idleAdvanceMs: config.idle_advance_ms,
      cutFilesWhenQuiet: config.cut_files_when_quiet,
      caughtUp: (lanes) => this.watermarks.caughtUp(lanes),
      // Not while the watchdog restarts the consumer: its lanes are about to start over.
      drained: async () => !this.restarting && (await this.watermarks.drained()),
    };
  }

  readonly live: LiveSource;

  get error(): Error | null {
    return this.failure;
  }

  get delivered(): number {
    return this.count;
  }

  /** The consumer's handshakes (each client probes the listener first); kept, so `start` awaits the same. */
  connect(): Promise<void> {
    if (this.connecting !== null) return this.connecting;
    const { config } = this;
    this.log.info(
      {
        ...describeConnection(config.connection),
        topic: config.topic,
        group: config.group_id,
        ...(config.connection.client === "kafkajs" ? {} : { client: config.connection.client }),
      },
      "Connecting to Kafka.",
    );
    this.connecting = this.consumer.connect();
    return this.connecting;
  }

  async start(handler: SourceHandler): Promise<void> {
    this.handler = handler;
    const { config } = this;
    await this.connect();
    await this.consumer.start({
      joined: (partitions) => {
        this.assignment = partitions;
        this.revokeAll();
      },
      revoked: () => this.dropLanes(),
      // The client restarts the consumer itself after retriable failures. Some failures of a broker that
      // is only away kafkajs calls final (a restarting single broker); those restart here. Any other crash
      // it gives up on (authentication, authorization) ends the pipeline.
      crashed: (error, restarts) => {
        if (restarts) this.log.warn({ err: error }, "The Kafka consumer restarts.");
        else if (isBrokerAway(error)) void this.restartAfterCrash(error);
        else this.fail(error);
      },
      batch: (batch, control) => this.onBatch(batch, control),
    });
    this.lagTimer = setInterval(() => void this.checkLag(), config.lag_interval_ms);
    // A failed commit (broker away, group rebalancing) is retried by the next one; until then the next
    // owner would only re-read more, never write twice.
    this.commitTimer = setInterval(
      () =>
        void this.commit().catch((err: Error) => {
          this.metrics.inc("kafka_commit_failures");
          this.log.warn({ err }, "Could not commit offsets; retrying at the next interval.");
        }),
      config.commit_interval_ms,
    );
  }

  /** A (re)join: every lane starts over. */
  private revokeAll(): void {
    this.dropLanes();
    this.metrics.inc("kafka_rebalances");
  }

  /** Ends every lane: its batches stop, its files are dropped at the fence. */
  private dropLanes(): void {
    if (this.lanes.size > 0)
      this.log.info(
        { partitions: [...this.lanes.keys()] },
        "The group rebalanced: this member's lanes start over from the committed offsets.",
      );
    const lanes = [...this.lanes.values()];
    for (const lane of lanes) lane.live = false;
    this.lanes = new Map();
    this.restartAt.clear();
    this.handler.revoked(lanes);
  }

  /** Whether this member still owns the lane's partition (fence.ts); if not, the lane starts over. */
  private async fence(lane: KafkaLane): Promise<boolean> {
    const owns = await ownsPartition(
      { consumer: this.consumer, stopping: () => this.stopping, log: this.log },
      lane,
    );
    if (owns) return true;
    if (lane.live) {
      // Not confirmed while the lane still looked live: start it over from the committed offset, so the
      // dropped file's rows are rebuilt (by this member, or by the owner after the rejoin).
      this.log.warn({ lane: lane.id }, "This member could not confirm it owns the partition; restarting it.");
      this.metrics.inc("kafka_lane_restarts");
      this.restartLane(lane);
    }
    return false;
  }

  /** Drops a lane's state and reads its partition again from the committed offset. */
  private restartLane(lane: KafkaLane): void {
    lane.live = false;
    if (this.lanes.get(lane.partition) === lane) this.lanes.delete(lane.partition);
    this.handler.revoked([lane]);
    this.restartAt.set(lane.partition, lane.ledger.committed);
    try {
      this.consumer.seek(lane.partition, lane.ledger.committed);
    } catch (err) {
      // Not assigned any more: the rejoin restarts it anyway.
      this.log.debug({ err, lane: lane.id }, "Could not seek the partition.");
    }
  }

  private laneFor(partition: number, firstOffset: number): KafkaLane {
    return kafkaLane(this.config.topic, partition, firstOffset, (lane) => this.fence(lane));
  }

  private async onBatch(batch: Batch, control: BatchControl): Promise<void> {
    const { isRunning, isStale } = control;
    // A stop came first (a signal during start-up, while the group join was still in flight): kafkajs can
    // still hand over a batch as it disconnects. Nothing is taken, no lane opens; the next owner reads it.
    if (batch.messages.length === 0 || this.stopping) return;
    const first = Number(batch.messages[0]!.offset);
    const lastOffset = batch.messages[batch.messages.length - 1]!.offset;
    const alive = keepAlive(control.heartbeat, this.heartbeatIntervalMs);
    try {
      const lane = await this.batchLane(batch.partition, first);
      if (lane === null) return;
      // `ledger.next < first`: a batch before this one was not applied in full, and its lane restarts.
      const live = () =>
        lane.live &&
        lane.ledger.next >= first &&
        isRunning() &&
        !isStale() &&
        !this.stopping &&
        !alive.rebalancing() &&
        this.failure === null;
      const { records, offsets, bytes } = recordsOf(this.config.topic, batch);
      this.count += records.length;
      this.metrics.inc("kafka_messages", "", records.length);
      this.metrics.inc("kafka_bytes", "", bytes);
      await this.hand(lane, records, offsets, bytes, live);
      // kafkajs only needs resolved offsets to know where to fetch next. A batch that does not get
      // applied in full (a rebalance, a restart, a failure) restarts its lane from the committed offset,
      // and anything kafkajs delivers again is skipped by the ledger's next offset.
      control.resolveOffset(String(lastOffset));
      if (this.failure !== null) throw this.failure;
    } catch (err) {
      // kafkajs retries a failing handler and restarts the consumer, which is right for its own errors
      // (a broker away) but would loop forever on ours (a sink that cannot write): those end the run.
      if (!isClientError(err)) this.fail(err as Error);
      throw err;
    } finally {
      alive.stop();
    }
  }

  /**
   * The lane a batch of `partition` starting at `first` goes to, opened (and recovered by the runtime)
   * when the partition has none; null: the batch is not taken (fetched before a local restart's seek took
   * effect, or a stop came while the lane opened).
   */
  private async batchLane(partition: number, first: number): Promise<KafkaLane | null> {
    const lane = this.lanes.get(partition);
    if (lane !== undefined) return lane;
    const expected = this.restartAt.get(partition);
    this.restartAt.delete(partition);
    if (expected !== undefined && first !== expected) {
      // Fetched before the seek of a local restart took effect: not where the new lane starts.
      this.restartLane(this.laneFor(partition, expected));
      return null;
    }
    const opened = this.laneFor(partition, first);
    this.lanes.set(partition, opened);
    await this.handler.assigned(opened);
    if (this.stopping) return null;
    this.log.info({ partition, offset: opened.ledger.next }, "Started a partition.");
    return opened;
  }

  /**
   * Hands a batch to the pipeline and returns once the batch before it is applied. Pipelined: kafkajs
   * fetches the next batch only after the handler returns, so while this one assembles, the next is
   * fetched, decompressed and (with decode workers) decoded.
   */
  private async hand(
    lane: KafkaLane,
    records: RawRecord[],
    offsets: number[],
    bytes: number,
    live: () => boolean,
  ): Promise<void> {
    const last = offsets[offsets.length - 1]!;
    const applied = this.handler.records(lane, records, offsets, live);
    const previous = this.previousBatch;
    this.handedBytes += bytes;
    this.previousBatch = applied
      .finally(() => (this.handedBytes -= bytes))
      .then(
        () => this.batchApplied(lane, last),
        (err: unknown) => this.batchFailed(lane, err),
      );
    await previous;
  }

  /**
   * A batch stopped early (a heartbeat failed, kafkajs restarted its consumer) while its lane stayed:
   * kafkajs already fetches past it, so the lane reads its partition again from the committed offset.
   */
  private batchApplied(lane: KafkaLane, last: number): void {
    if (!lane.live || lane.ledger.next > last || this.stopping || this.failure !== null) return;
    this.log.info(
      { lane: lane.id, next: lane.ledger.next, batch_end: last },
      "A batch was not applied in full; reading its partition again from the committed offset.",
    );
    this.metrics.inc("kafka_lane_restarts");
    this.restartLane(lane);
  }

  /**
   * A batch failed after its handler returned. The client's own errors (a broker away while dead letters
   * were produced) restart the lane from its committed offset, so nothing after the failure is skipped;
   * any other error ends the run.
   */
  private batchFailed(lane: KafkaLane, err: unknown): void {
    if (!isClientError(err)) this.fail(err as Error);
    else if (lane.live && !this.stopping) {
      this.log.warn({ err, lane: lane.id }, "A batch failed on a client error; restarting its partition.");
      this.metrics.inc("kafka_lane_restarts");
      this.restartLane(lane);
    }
  }

  private fail(err: Error): void {
    if (this.failure === null) {
      this.failure = setupError(err, this.config.connection) as Error;
      this.log.error({ err }, "The Kafka source failed.");
    }
  }

  heldBytes(): Holdings {
    return { "records being decoded and applied": this.handedBytes };
  }

  lag(): Map<string, number> {
    return this.watermarks.lag();
  }

  /** Refreshes the lag and restarts a consumer that stalled while messages wait (the watchdog). */
  private async checkLag(): Promise<void> {
    if (this.stopping || this.restarting) return;
    const { watchdog_ms } = this.config;
    try {
      await this.watermarks.refresh();
    } catch (err) {
      this.log.warn({ err }, "Could not fetch the topic's offsets for the lag.");
      return;
    }
    const messages = this.count;
    const now = Date.now();
    if (messages !== this.lastProgress.messages) this.lastProgress = { messages, at: now };
    const behind = this.watermarks.behind();
    if (watchdogShouldRestart({ behind, stalledMs: now - this.lastProgress.at, watchdogMs: watchdog_ms })) {
      this.restarting = true;
      this.metrics.inc("kafka_watchdog_restarts");
      this.log.error(
        { behind, stalled_ms: now - this.lastProgress.at },
        "The consumer received nothing while messages wait; restarting it.",
      );
      try {
        await this.consumer.restart();
      } catch (err) {
        this.fail(err as Error);
      } finally {
        this.lastProgress = { messages, at: Date.now() };
        this.restarting = false;
      }
    }
  }

  /** Reconnects and runs the consumer again after a crash kafkajs gave up on, with backoff, while running. */
  private async restartAfterCrash(error: Error): Promise<void> {
    this.metrics.inc("kafka_consumer_restarts");
    let err = error;
    for (let attempt = 0; !this.stopping; attempt++) {
      const delay = Math.min(30_000, 500 * 2 ** attempt);
      this.log.warn(
        { err, attempt, delay_ms: delay },
        "The Kafka consumer crashed, the broker away; restarting it.",
      );
      await new Promise((r) => setTimeout(r, delay));
      if (this.stopping) return;
      try {
        await this.consumer.reconnect();
        return;
      } catch (e) {
        err = e as Error;
      }
    }
  }

  /** Commits every lane's settled offset. */
  async commit(): Promise<void> {
    const offsets: Array<{ partition: number; offset: number }> = [];
    for (const lane of this.lanes.values()) {
      const c = lane.ledger.committable();
      if (c > lane.ledger.committed) offsets.push({ partition: lane.partition, offset: c });
    }
    if (offsets.length === 0) return;
    await this.consumer.commit(offsets);
    killPoint("source.offsets-committed");
    for (const o of offsets) {
      const lane = this.lanes.get(o.partition);
      if (lane !== undefined) lane.ledger.committed = o.offset;
    }
    this.metrics.inc("kafka_commits");
  }

  /** Batch handlers return at once from now on; the group stays joined so offsets can still commit. */
  pause(): Promise<void> {
    this.stopping = true;
    if (this.commitTimer !== null) clearInterval(this.commitTimer);
    if (this.lagTimer !== null) clearInterval(this.lagTimer);
    return Promise.resolve();
  }

  async close(): Promise<void> {
    this.log.info("Disconnecting from Kafka.");
    // Files and offsets are settled by now: a client that does not hang up must not keep the process.
    await this.consumer.disconnect(10_000, (name) =>
      this.log.warn({ client: name }, "The Kafka client did not disconnect within 10 s; going on."),
    );
  }
}

/** A batch's messages as records, their offsets, and the bytes of their values. */
function recordsOf(topic: string, batch: Batch) {
  const records: RawRecord[] = new Array(batch.messages.length);
  const offsets: number[] = new Array(batch.messages.length);
  let bytes = 0;
  for (let i = 0; i < batch.messages.length; i++) {
    const m = batch.messages[i]!;
    if (m instanceof FetchedMessage) {
      // The lean decoder's message is the record itself: no record, origin or value view per message.
      records[i] = m.from(topic, batch.partition);
      bytes += m.rawLength;
      offsets[i] = Number(m.offset);
      continue;
    }
    const raw = m.value ?? EMPTY;
    bytes += raw.length;
    const offset = String(m.offset);
    records[i] = { raw, origin: { kind: "kafka", topic, partition: batch.partition, offset } };
    offsets[i] = Number(offset);
  }
  return { records, offsets, bytes };
}

/**
 * kafkajs heartbeats only between handler calls, and a batch can wait on the sinks (backpressure) or on
 * recovery: a timer keeps the membership alive meanwhile. A failed heartbeat means the group is
 * rebalancing; the batch then stops early and kafkajs rejoins.
 */
function keepAlive(heartbeat: () => Promise<void>, intervalMs: number) {
  let rebalancing = false;
  const timer = setInterval(() => {
    heartbeat().catch(() => {
      rebalancing = true;
    });
  }, intervalMs);
  return { rebalancing: () => rebalancing, stop: () => clearInterval(timer) };
}

/**
 * The watchdog's decision: restart when messages wait (lag) and none arrived for `watchdogMs` (0: never).
 * A consumer that is merely slow still receives messages, so it is never restarted.
 */
export function watchdogShouldRestart(s: { behind: number; stalledMs: number; watchdogMs: number }): boolean {
  return s.watchdogMs > 0 && s.behind > 0 && s.stalledMs >= s.watchdogMs;
}
