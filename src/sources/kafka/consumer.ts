/**
 * The Kafka pipeline: topic → decode → assemble (one assembler per partition) → file sink, with
 * exactly-once output.
 *
 * - Events are keyed by uid, so a session (and its GRPO group) lives in one partition.
 * - A session's rows are written to a file named after the partition's offset range; only once the file
 *   is renamed into place may the session's offsets be committed, and the committed offset never passes
 *   the first offset of a session that is still open (progress.ts).
 * - After a crash or a rebalance, consumption restarts at the committed offset and the sessions already in
 *   files are skipped (recovery.ts), so none is written twice.
 * - Rejected events go to a dead-letter topic; their offsets commit only after the topic acknowledged them.
 */
import type { EachBatchPayload } from "kafkajs";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, type DeadLetterOutput } from "../../core/records.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import type { FileSinkConfig } from "../../sinks/files/config.ts";
import { EncoderPool } from "../../sinks/files/pool.ts";
import type { TrajectoryTopicConfig } from "../../sinks/kafka/config.ts";
import { TrajectoryTopicSink } from "../../sinks/kafka/topic.ts";
import type { RewardsConfig } from "../../transforms/reward/config.ts";
import { RewardTransform } from "../../transforms/reward/rewards.ts";
import { FileSink } from "../../sinks/files/sink.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { Assembler, type SessionOutput } from "../../transforms/assemble/assembler.ts";
import type { AssembleConfig } from "../../transforms/assemble/config.ts";
import type { DecodeResult } from "../../transforms/decode/decode.ts";
import { DecodePool } from "../../transforms/decode/pool.ts";
import type { StalenessFilter } from "../../transforms/staleness/staleness.ts";
import {
  createKafka,
  describeConnection,
  isBrokerAway,
  isClientError,
  Partitioners,
  type Consumer,
  type Producer,
} from "./client.ts";
import type { KafkaSourceConfig } from "./config.ts";
import { PartitionProgress } from "./progress.ts";
import { rangeName, SESSIONS_KEY, writtenSessions, type SessionSpan } from "./recovery.ts";

export interface KafkaPipelineOptions {
  source: KafkaSourceConfig;
  assemble: AssembleConfig;
  sink: FileSinkConfig;
  /** Topic for dead letters (JSON, keyed by uid when known). */
  deadLetterTopic: string;
  /** Also produce finished rows to a topic (acknowledged before the files are written). */
  trajectoryTopic?: TrajectoryTopicConfig;
  /** Reward stages scoring each session before it is written. */
  rewards?: RewardsConfig;
  /** Directory relative model and module paths in `rewards` are resolved from. */
  rewardsBaseDir?: string;
  staleness?: StalenessFilter;
  metrics: Metrics;
  logger: Logger;
}

interface PartitionState {
  partition: number;
  assembler: Assembler;
  progress: PartitionProgress;
  sink: FileSink;
  /** Sessions already in files: key → last offset applied there. */
  written: Map<string, number>;
  /** Open sessions, oldest first: key → [first offset, last offset, bytes of its events, opening order]. */
  spans: Map<string, [number, number, number, number]>;
  deadLetters: DeadLetterOutput;
}

const sessionKey = (uid: string, sessionId: string) => `${uid}\u0000${sessionId}`;

interface KafkaRecord {
  raw: Buffer;
  origin: { kind: "kafka"; topic: string; partition: number; offset: string };
}

const EMPTY = Buffer.alloc(0);
/**
 * Chunks a batch is decoded in: small enough that the ingest thread starts assembling soon, large enough
 * that the hand-over to a worker is a small part of the chunk's cost.
 */
const DECODE_CHUNK_EVENTS = 256;
const DECODE_CHUNK_BYTES = 1 << 20;

export class KafkaPipeline {
  private readonly options: KafkaPipelineOptions;
  private readonly consumer: Consumer;
  private readonly producer: Producer;
  private readonly pool: EncoderPool;
  private readonly decoders: DecodePool;
  private states = new Map<number, PartitionState>();
  /** Bytes of events held by open sessions, all partitions. */
  private openBytes = 0;
  /** Sessions opened so far: orders open sessions across partitions, to cut the oldest first. */
  private opened = 0;
  /** Sinks of earlier generations still finishing their files. */
  private retiring: FileSink[] = [];
  private commitTimer: NodeJS.Timeout | null = null;
  private lagTimer: NodeJS.Timeout | null = null;
  private readonly admin: ReturnType<ReturnType<typeof createKafka>["admin"]>;
  /** Messages behind the high watermark, per assigned partition (refreshed every lag_interval_ms). */
  private lagByPartition = new Map<number, number>();
  /** For the watchdog: the message count at the last progress, and when that was. */
  private lastProgress = { messages: 0, at: Date.now() };
  private restarting = false;
  private failure: Error | null = null;
  private stopping = false;
  private readonly log: Logger;
  private readonly heartbeatIntervalMs: number;
  private readonly topicSink: TrajectoryTopicSink | null;
  /** Sessions waiting for the trajectory topic's acknowledgement before their files are written. */
  private pending: Array<{ state: PartitionState; rows: TrajectoryRow[]; key: string; tag: SessionSpan }> =
    [];
  private pendingRows = 0;
  private rewarder: RewardTransform | null = null;
  /** Sessions being scored: where their reward dead letters hold the partition's offset. */
  private readonly scoringSessions = new Map<string, { progress: PartitionProgress; offset: number }>();
  private rewardLetters = 0;
  /** When each session in flight to the files ended (was finalized), for the latency histogram. */
  private readonly endedAt = new Map<string, number>();
  /** Sessions being scored by the reward stages, in the order they finished assembling. */
  private scoring: Array<{
    state: PartitionState;
    key: string;
    tag: SessionSpan;
    scored: Promise<SessionOutput>;
  }> = [];

  constructor(options: KafkaPipelineOptions) {
    this.options = options;
    this.log = options.logger.child({ component: "kafka" });
    this.heartbeatIntervalMs = Math.max(100, Math.floor(options.source.session_timeout_ms / 3));
    const kafka = createKafka(options.source.connection, options.logger);
    this.admin = kafka.admin();
    this.consumer = kafka.consumer({
      groupId: options.source.group_id,
      sessionTimeout: options.source.session_timeout_ms,
      heartbeatInterval: this.heartbeatIntervalMs,
      // The broker answers one request per connection at a time, and kafkajs fetches ahead while a batch
      // is handled: a long-poll fetch on the coordinator's connection would hold heartbeats back past the
      // session timeout. measured: with the 5 s default and a 3 s session timeout a lone member was
      // expelled every ~5 s.
      maxWaitTimeInMs: Math.min(5_000, this.heartbeatIntervalMs),
      allowAutoTopicCreation: false,
    });
    this.producer = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
    });
    this.pool = new EncoderPool(options.sink.encode_workers);
    this.decoders = new DecodePool(options.source.decode_workers);
    this.topicSink =
      options.trajectoryTopic === undefined
        ? null
        : new TrajectoryTopicSink(options.trajectoryTopic, this.producer);
  }

  get error(): Error | null {
    return this.failure;
  }

  async start(): Promise<void> {
    const { source } = this.options;
    // Stages start (models load) before any connection opens: one that cannot start fails the run first.
    if (this.options.rewards !== undefined) {
      this.rewarder = await RewardTransform.build(this.options.rewards, {
        metrics: this.options.metrics,
        logger: this.options.logger,
        baseDir: this.options.rewardsBaseDir,
        deadLetters: { write: (letter) => this.rewardDeadLetter(letter) },
      });
    }
    this.log.info(
      { ...describeConnection(source.connection), topic: source.topic, group: source.group_id },
      "Connecting to Kafka.",
    );
    await this.producer.connect();
    await this.admin.connect();
    await this.consumer.connect();
    await this.consumer.subscribe({ topic: source.topic, fromBeginning: source.from_beginning });
    // Every (re)join restarts all assigned partitions at their committed offsets (kafkajs drops resolved
    // offsets on rebalance), so every partition's in-memory state starts over too.
    this.consumer.on(this.consumer.events.GROUP_JOIN, () => this.resetPartitions());
    // kafkajs restarts the consumer itself after retriable failures. Some failures of a broker that is
    // only away it calls final (a restarting single broker); those restart here. Any other crash it
    // gives up on (authentication, authorization) ends the pipeline.
    this.consumer.on(this.consumer.events.CRASH, (e) => {
      if (e.payload.restart) this.log.warn({ err: e.payload.error }, "The Kafka consumer restarts.");
      else if (isBrokerAway(e.payload.error)) void this.restartAfterCrash(e.payload.error);
      else this.fail(e.payload.error);
    });
    await this.runConsumer();
    this.lagTimer = setInterval(() => void this.checkLag(), source.lag_interval_ms);
    // A failed commit (broker away, group rebalancing) is retried by the next one; until then the
    // next owner would only re-read more, never write twice.
    this.commitTimer = setInterval(
      () =>
        void this.commit().catch((err: Error) => {
          this.options.metrics.inc("kafka_commit_failures");
          this.log.warn({ err }, "Could not commit offsets; retrying at the next interval.");
        }),
      source.commit_interval_ms,
    );
  }

  private runConsumer(): Promise<void> {
    return this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: (payload) => this.onBatch(payload),
    });
  }

  /** Messages behind the high watermarks of the assigned partitions (as of the last refresh). */
  lag(): Map<number, number> {
    return this.lagByPartition;
  }

  /** Refreshes the lag and restarts a consumer that stalled while messages wait (the watchdog). */
  private async checkLag(): Promise<void> {
    if (this.stopping || this.restarting) return;
    const { topic, watchdog_ms } = this.options.source;
    try {
      const offsets = await this.admin.fetchTopicOffsets(topic);
      const lag = new Map<number, number>();
      for (const o of offsets) {
        const state = this.states.get(o.partition);
        if (state !== undefined) lag.set(o.partition, Math.max(0, Number(o.high) - state.progress.next));
      }
      this.lagByPartition = lag;
    } catch (err) {
      this.log.warn({ err }, "Could not fetch the topic's offsets for the lag.");
      return;
    }
    const messages = this.options.metrics.total("kafka_messages");
    const now = Date.now();
    if (messages !== this.lastProgress.messages) this.lastProgress = { messages, at: now };
    let behind = 0;
    for (const v of this.lagByPartition.values()) behind += v;
    if (watchdogShouldRestart({ behind, stalledMs: now - this.lastProgress.at, watchdogMs: watchdog_ms })) {
      this.restarting = true;
      this.options.metrics.inc("kafka_watchdog_restarts");
      this.log.error(
        { behind, stalled_ms: now - this.lastProgress.at },
        "The consumer received nothing while messages wait; restarting it.",
      );
      try {
        await this.consumer.stop();
        await this.runConsumer();
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
    this.options.metrics.inc("kafka_consumer_restarts");
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
        await this.consumer.connect();
        await this.runConsumer();
        return;
      } catch (e) {
        err = e as Error;
      }
    }
  }

  private fail(err: Error): void {
    if (this.failure === null) {
      this.failure = err;
      this.log.error({ err }, "The Kafka pipeline failed.");
    }
  }

  private resetPartitions(): void {
    for (const state of this.states.values()) {
      // Buffered rows must not land later (an age cut) beside the new owner's: their offsets were never
      // committed, so whoever owns the partition now rebuilds them.
      state.sink.abandon();
      this.retiring.push(state.sink);
    }
    this.pending = [];
    this.pendingRows = 0;
    this.scoring = [];
    this.scoringSessions.clear();
    this.endedAt.clear();
    this.states = new Map();
    this.openBytes = 0;
    this.options.metrics.inc("kafka_rebalances");
  }

  private async partitionState(partition: number, firstOffset: number): Promise<PartitionState> {
    let state = this.states.get(partition);
    if (state !== undefined) return state;
    // Files of the previous generation must be in place before this one looks at what is written.
    const retiring = this.retiring;
    this.retiring = [];
    for (const sink of retiring) await sink.drain().catch(() => {});
    const { topic } = this.options.source;
    const { metrics, logger } = this.options;
    const written = await writtenSessions(this.options.sink.path, topic, partition, firstOffset);
    const progress = new PartitionProgress(firstOffset);
    const deadLetters = this.deadLetterOutput(progress);
    const spans = new Map<string, [number, number, number, number]>();
    const sink = new FileSink(this.options.sink, {
      metrics,
      logger: logger.child({ component: "sink", partition }),
      pool: this.pool,
      // The group's other members write here too: only a temporary untouched for 10 minutes is a
      // crashed writer's.
      sharedDirectoryTempAgeMs: 10 * 60_000,
      nameCut: (_cut, tags) => rangeName(topic, partition, tags as SessionSpan[]),
      describeCut: (tags) => ({
        "trajflow.source": "kafka",
        "trajflow.kafka.topic": topic,
        "trajflow.kafka.partition": String(partition),
        [SESSIONS_KEY]: JSON.stringify(tags),
      }),
    });
    await sink.open();
    state = {
      partition,
      progress,
      sink,
      written,
      spans,
      deadLetters,
      assembler: new Assembler({
        config: this.options.assemble,
        deadLetters,
        metrics,
        logger: logger.child({ component: "assemble", partition }),
      }),
    };
    this.states.set(partition, state);
    this.log.info({ partition, offset: firstOffset, skipping: written.size }, "Started a partition.");
    return state;
  }

  /** Dead letters to the dead-letter topic, holding their offset until the topic acknowledged them. */
  private deadLetterOutput(progress: PartitionProgress): DeadLetterOutput {
    return {
      write: (letter: DeadLetter) => {
        this.options.metrics.inc("dead_letters", letter.code);
        const offset = letter.origin.kind === "kafka" ? Number(letter.origin.offset) : progress.next;
        const token = `dl:${offset}:${letter.code}`;
        progress.hold(token, offset);
        const message = { key: letter.uid ?? null, value: JSON.stringify(letter) };
        // Stopping gives up on it: the offset stays uncommitted and the next owner dead-letters it again.
        this.sendUntilAcknowledged(this.options.deadLetterTopic, message).then(
          () => progress.release(token),
          () => {},
        );
      },
    };
  }

  /**
   * A reward stage's dead letter (its row is still written, with the value null and a flag) goes to the
   * dead-letter topic and holds its session's first offset until the topic acknowledged it.
   */
  private rewardDeadLetter(letter: DeadLetter): void {
    this.options.metrics.inc("dead_letters", letter.code);
    const session = this.scoringSessions.get(sessionKey(letter.uid ?? "", letter.session_id ?? ""));
    const token = `rw:${this.rewardLetters++}`;
    session?.progress.hold(token, session.offset);
    const message = { key: letter.uid ?? null, value: JSON.stringify(letter) };
    this.sendUntilAcknowledged(this.options.deadLetterTopic, message).then(
      () => session?.progress.release(token),
      () => {},
    );
  }

  /**
   * Sends one message, retrying with backoff for as long as the pipeline runs: the offset it holds stays
   * uncommitted meanwhile, so a broker away for minutes delays commits but loses nothing.
   */
  private async sendUntilAcknowledged(topic: string, message: { key: string | null; value: string }) {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.producer.send({ topic, acks: -1, messages: [message] });
        return;
      } catch (err) {
        if (this.stopping) throw err;
        this.options.metrics.inc("kafka_produce_retries");
        this.log.warn({ err, topic, attempt }, "Could not produce to Kafka; retrying.");
        await new Promise((r) => setTimeout(r, Math.min(30_000, 500 * 2 ** attempt)));
      }
    }
  }

  private async onBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, heartbeat, isRunning, isStale } = payload;
    if (batch.messages.length === 0) return;
    // kafkajs heartbeats only between handler calls, and a batch can wait on the sink (backpressure) or on
    // a previous generation's files: a timer keeps the membership alive meanwhile. A failed heartbeat means
    // the group is rebalancing; the batch then stops early and kafkajs rejoins.
    let rebalancing = false;
    const keepAlive = setInterval(() => {
      heartbeat().catch(() => {
        rebalancing = true;
      });
    }, this.heartbeatIntervalMs);
    try {
      const state = await this.partitionState(batch.partition, Number(batch.messages[0]!.offset));
      // Every chunk goes to the decoders at once: they decode the next chunk while this thread assembles one.
      const chunks = this.decodeChunks(state.partition, batch.messages);
      // Offsets are resolved once per chunk, not per message: kafkajs only needs them to know where to
      // fetch next, and anything it delivers again is skipped by progress.next.
      let resolved: string | null = null;
      batch: for (const chunk of chunks) {
        const decoded = await chunk.results;
        for (let i = 0; i < chunk.records.length; i++) {
          if (!isRunning() || isStale() || this.stopping || rebalancing) break batch;
          if (this.failure !== null) throw this.failure;
          const record = chunk.records[i]!;
          const offset = Number(record.origin.offset);
          if (offset < state.progress.next) continue; // redelivered within this generation
          await this.onMessage(state, offset, record, decoded[i]!);
          state.progress.next = offset + 1;
          resolved = record.origin.offset;
        }
        if (resolved !== null) payload.resolveOffset(resolved);
      }
      if (resolved !== null) payload.resolveOffset(resolved); // after an early break, too
      await this.releaseScored();
      await this.flushPending();
    } catch (err) {
      // kafkajs retries a failing handler and restarts the consumer, which is right for its own errors
      // (a broker away) but would loop forever on ours (a sink that cannot write): those end the run.
      if (!isClientError(err)) this.fail(err as Error);
      throw err;
    } finally {
      clearInterval(keepAlive);
    }
  }

  /** A batch's messages as records, in chunks handed to the decoders. */
  private decodeChunks(
    partition: number,
    messages: EachBatchPayload["batch"]["messages"],
  ): Array<{ records: KafkaRecord[]; results: Promise<DecodeResult[]> }> {
    const { topic } = this.options.source;
    const chunks: Array<{ records: KafkaRecord[]; results: Promise<DecodeResult[]> }> = [];
    let records: KafkaRecord[] = [];
    let bytes = 0;
    const cut = () => {
      const results = this.decoders.decode(records);
      // A chunk left behind by a rebalance may fail after nobody awaits it any more.
      results.catch(() => {});
      chunks.push({ records, results });
      records = [];
      bytes = 0;
    };
    for (const message of messages) {
      const raw = message.value ?? EMPTY;
      records.push({ raw, origin: { kind: "kafka", topic, partition, offset: message.offset } });
      bytes += raw.length;
      if (records.length >= DECODE_CHUNK_EVENTS || bytes >= DECODE_CHUNK_BYTES) cut();
    }
    if (records.length > 0) cut();
    return chunks;
  }

  private async onMessage(
    state: PartitionState,
    offset: number,
    record: KafkaRecord,
    decoded: DecodeResult,
  ): Promise<void> {
    const { metrics } = this.options;
    const value = record.raw;
    metrics.inc("kafka_messages");
    metrics.inc("kafka_bytes", "", value.length);
    if (decoded.kind === "control") {
      metrics.inc("control_events", decoded.control.type);
      this.options.staleness?.announce(decoded.control.weight_version);
      return;
    }
    const envelope = decoded.kind === "event" ? decoded.value.event : decoded.envelope;
    // Dead letters hold their offset until the dead-letter topic acknowledged them (at least once).
    if (decoded.kind === "rejected") state.deadLetters.write(decoded.deadLetter);
    if (envelope === undefined) return;
    const key = sessionKey(envelope.uid, envelope.session_id);
    const writtenUpTo = state.written.get(key);
    if (writtenUpTo !== undefined) {
      if (offset <= writtenUpTo) {
        metrics.inc("kafka_events_already_written");
        return;
      }
      if (decoded.kind === "event") {
        state.deadLetters.write(
          makeDeadLetter(
            "LATE_EVENT",
            `${envelope.session_id} of uid ${envelope.uid} was already written before this event (offset ${offset})`,
            "assemble",
            record,
            { uid: envelope.uid, session_id: envelope.session_id, seq: envelope.seq },
          ),
        );
      }
      return;
    }
    let outputs: SessionOutput[];
    if (state.assembler.isFinalized(envelope.uid, envelope.session_id)) {
      outputs = decoded.kind === "event" ? state.assembler.push(decoded.value) : [];
    } else {
      state.progress.hold(`s:${key}`, offset);
      const span = state.spans.get(key);
      if (span === undefined) state.spans.set(key, [offset, offset, value.length, this.opened++]);
      else {
        span[1] = offset;
        span[2] += value.length;
      }
      this.openBytes += value.length;
      outputs =
        decoded.kind === "event"
          ? state.assembler.push(decoded.value)
          : state.assembler.pushRejected(decoded.envelope!);
    }
    for (const o of outputs) await this.emit(state, o);
    await this.enforceLimits();
  }

  /**
   * Open sessions hold their events' data in memory until they end. Past `max_open_sessions` or
   * `max_buffered_bytes`, the oldest open sessions of the partition are cut (finalized early, flagged
   * `session_cut`, counted in `sessions_cut`): pausing instead would stall, since only new events let
   * sessions end.
   */
  private async enforceLimits(): Promise<void> {
    const { max_open_sessions, max_buffered_bytes } = this.options.source;
    while (this.openSessions > max_open_sessions || this.openBytes > max_buffered_bytes) {
      // The oldest open session of all partitions: each partition's spans are in opening order.
      let state: PartitionState | undefined;
      let oldest = Infinity;
      for (const s of this.states.values()) {
        const first = s.spans.values().next().value;
        if (first !== undefined && first[3] < oldest) {
          oldest = first[3];
          state = s;
        }
      }
      if (state === undefined) return;
      const key = state.spans.keys().next().value!;
      const [uid, sessionId] = key.split("\u0000") as [string, string];
      const output = state.assembler.cut(uid, sessionId);
      if (output === null) {
        this.openBytes -= state.spans.get(key)![2];
        state.spans.delete(key);
        continue;
      }
      await this.emit(state, output);
    }
  }

  private async emit(state: PartitionState, o: SessionOutput): Promise<void> {
    const key = sessionKey(o.uid, o.sessionId);
    this.endedAt.set(key, performance.now());
    const span = state.spans.get(key) ?? [state.progress.next, state.progress.next, 0, 0];
    state.spans.delete(key);
    this.openBytes -= span[2];
    const tag: SessionSpan = [o.uid, o.sessionId, span[0], span[1]];
    if (this.rewarder !== null) {
      // Scored concurrently (the stages batch across sessions); written in order at the end of the batch.
      this.scoringSessions.set(key, { progress: state.progress, offset: span[0] });
      this.scoring.push({ state, key, tag, scored: this.rewarder.score(o) });
      if (this.scoring.length >= this.options.rewards!.max_pending_sessions) await this.releaseScored();
      return;
    }
    await this.emitRows(state, o, key, tag);
  }

  /** Writes sessions whose scoring was started, in the order they finished assembling. */
  private async releaseScored(): Promise<void> {
    const scoring = this.scoring;
    this.scoring = [];
    this.scoringSessions.clear();
    for (const s of scoring) {
      const scored = await s.scored;
      this.scoringSessions.delete(s.key);
      await this.emitRows(s.state, scored, s.key, s.tag);
    }
  }

  private async emitRows(state: PartitionState, o: SessionOutput, key: string, tag: SessionSpan) {
    let rows = o.rows;
    const staleness = this.options.staleness;
    if (staleness !== undefined) {
      staleness.observe(rows);
      const fresh = rows.filter((r) => !staleness.isStale(r));
      this.options.metrics.inc("rows_stale_dropped", "", rows.length - fresh.length);
      rows = fresh;
    }
    if (this.topicSink === null) return this.writeFiles(state, rows, key, tag);
    this.pending.push({ state, rows, key, tag });
    this.pendingRows += rows.length;
    if (this.pendingRows >= this.options.trajectoryTopic!.max_batch_rows) await this.flushPending();
  }

  private async writeFiles(state: PartitionState, rows: TrajectoryRow[], key: string, tag: SessionSpan) {
    const progress = state.progress;
    const endedAt = this.endedAt.get(key);
    this.endedAt.delete(key);
    const durable = () => {
      progress.release(`s:${key}`);
      if (endedAt !== undefined) {
        this.options.metrics.observe("session_durable_seconds", (performance.now() - endedAt) / 1000);
      }
    };
    await state.sink.write(rows, durable, tag);
  }

  /**
   * Produces the waiting sessions' rows to the trajectory topic, then, once acknowledged, writes them to
   * files: a session in a file (which recovery skips) is always on the topic too.
   */
  private async flushPending(): Promise<void> {
    if (this.pending.length === 0) return;
    const pending = this.pending;
    this.pending = [];
    this.pendingRows = 0;
    this.scoring = [];
    this.scoringSessions.clear();
    await this.topicSink!.write(pending.flatMap((p) => p.rows));
    this.options.metrics.inc(
      "topic_rows_produced",
      "",
      pending.reduce((n, p) => n + p.rows.length, 0),
    );
    for (const p of pending) await this.writeFiles(p.state, p.rows, p.key, p.tag);
  }

  /** Commits every partition's settled offset. */
  async commit(): Promise<void> {
    const { topic } = this.options.source;
    const offsets: Array<{ topic: string; partition: number; offset: string }> = [];
    for (const state of this.states.values()) {
      const c = state.progress.committable();
      if (c > state.progress.committed)
        offsets.push({ topic, partition: state.partition, offset: String(c) });
    }
    if (offsets.length === 0) return;
    await this.consumer.commitOffsets(offsets);
    for (const o of offsets) {
      const state = this.states.get(o.partition);
      if (state !== undefined) state.progress.committed = Number(o.offset);
    }
    this.options.metrics.inc("kafka_commits");
  }

  /**
   * Finalizes idle sessions of every partition by event time, even when no new events arrive (called
   * periodically and at shutdown when `flushOpen` is true: then open sessions are written as they are).
   */
  async flushIdle(flushOpen: boolean): Promise<void> {
    for (const state of this.states.values()) {
      const outputs = flushOpen ? state.assembler.flush() : [];
      for (const o of outputs) await this.emit(state, o);
    }
    await this.releaseScored();
    await this.flushPending();
    for (const state of this.states.values()) await state.sink.cut();
  }

  /** Number of sessions open in all partitions. */
  get openSessions(): number {
    let n = 0;
    for (const s of this.states.values()) n += s.assembler.openSessions;
    return n;
  }

  /** Lag: offsets consumed per partition, for status reports and tests. */
  positions(): Record<number, { next: number; committed: number; held: number }> {
    const out: Record<number, { next: number; committed: number; held: number }> = {};
    for (const s of this.states.values())
      out[s.partition] = { next: s.progress.next, committed: s.progress.committed, held: s.progress.held };
    return out;
  }

  /**
   * Stops consuming, writes what is buffered, waits for every file, commits, and disconnects. Open
   * sessions are NOT written (their events will be consumed again by the next owner), unless
   * `flushOpen`, which a bounded run (tests, benchmarks, draining a topic) uses.
   */
  async stop(flushOpen = false): Promise<void> {
    this.stopping = true;
    if (this.commitTimer !== null) clearInterval(this.commitTimer);
    if (this.lagTimer !== null) clearInterval(this.lagTimer);
    // Batch handlers return at once now; files and offsets are settled while the group is still joined
    // (kafkajs cannot commit after the consumer stopped).
    await this.flushIdle(flushOpen);
    for (const state of this.states.values()) await state.sink.close();
    for (const sink of this.retiring) await sink.drain().catch(() => {});
    // Each step of a stop is logged: a stop that hangs then says where.
    this.log.info("Files written; committing offsets.");
    // A commit during a rebalance can wait for the group indefinitely; the files are in place either way
    // and recovery skips their sessions, so an uncommitted offset costs re-reading, never a duplicate.
    const committed = await Promise.race([
      this.commit().then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 10_000).unref()),
    ]).catch(() => false);
    if (!committed)
      this.log.warn("Could not commit offsets while stopping; the next owner re-reads from the last commit.");
    this.log.info("Disconnecting from Kafka.");
    // Files and offsets are settled by now: a client that does not hang up (kafkajs has been seen to wait
    // forever after a broker restart) must not keep the process from exiting.
    for (const [name, client] of [
      ["consumer", this.consumer],
      ["producer", this.producer],
      ["admin", this.admin],
    ] as const) {
      const done = await Promise.race([
        client.disconnect().then(() => true),
        new Promise<false>((resolve) => setTimeout(() => resolve(false), 10_000).unref()),
      ]).catch(() => false);
      if (!done)
        this.log.warn({ client: name }, "The Kafka client did not disconnect within 10 s; going on.");
    }
    await this.pool.close();
    await this.decoders.close();
    await this.rewarder?.close();
    this.log.info("Stopped.");
  }
}

/**
 * The watchdog's decision: restart when messages wait (lag) and none arrived for `watchdogMs` (0: never).
 * A consumer that is merely slow still receives messages, so it is never restarted.
 */
export function watchdogShouldRestart(s: { behind: number; stalledMs: number; watchdogMs: number }): boolean {
  return s.watchdogMs > 0 && s.behind > 0 && s.stalledMs >= s.watchdogMs;
}
