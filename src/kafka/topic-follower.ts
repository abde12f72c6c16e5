/**
 * Two readers a gateway replica of a fleet keeps on its event topic (gateway/fleet.ts), each a kafkajs
 * consumer in a group of its own (joined once, at start: a group per read would pay a join, seconds on a
 * broker with the default group.initial.rebalance.delay.ms), committing nothing:
 * - TopicFollower reads every partition from a point in time on, for ever, handing each message to a
 *   callback, and tells when a partition has been read past an offset;
 * - PartitionReader reads one partition's range on demand (a session's events when a replica takes it
 *   over), its partitions paused in between.
 */
import { randomBytes } from "node:crypto";
import { TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import {
  connectClient,
  createKafka,
  disconnectWithin,
  type Consumer,
  type EachBatchPayload,
} from "./client.ts";
import type { KafkaConnection } from "./connection.ts";

/** One message as the follower hands it on: where it is, its key, value, headers and broker time. */
export interface FollowedMessage {
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestamp: number;
}

function headersOf(raw: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw === undefined) return out;
  for (const k in raw) {
    const v = raw[k];
    if (Buffer.isBuffer(v)) out[k] = v.toString("utf8");
    else if (typeof v === "string") out[k] = v;
  }
  return out;
}

/** Each partition's offsets from `sinceMs` on and its end now (the high watermark). */
async function windowOf(
  kafka: ReturnType<typeof createKafka>,
  connection: KafkaConnection,
  topic: string,
  sinceMs: number,
): Promise<Map<number, { from: number; end: number }>> {
  const admin = kafka.admin();
  await connectClient(admin, connection);
  try {
    const starts = await admin.fetchTopicOffsetsByTimestamp(topic, sinceMs);
    const ends = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)]));
    const out = new Map<number, { from: number; end: number }>();
    for (const s of starts) {
      const end = ends.get(s.partition) ?? 0;
      out.set(s.partition, { from: s.offset === "-1" ? end : Math.min(Number(s.offset), end), end });
    }
    return out;
  } finally {
    await disconnectWithin(admin, 5_000);
  }
}

/** How long a reader waits for its first group join at start (kafkajs retries meanwhile). */
const JOIN_TIMEOUT_MS = 60_000;

type EachBatch = (payload: EachBatchPayload) => Promise<void>;

/**
 * Runs `consumer` and resolves at its first group join. kafkajs restarts a consumer itself after a
 * retriable failure (a group coordinator still loading on a broker just started, a broker restart) as a
 * new group membership that keeps none of the seeks and pauses made before: `onJoin` runs at every join,
 * before that membership's first fetch, to make them again. `onFailed`: a failure kafkajs does not restart
 * from. Rejects when that comes before the first join, or no join comes within JOIN_TIMEOUT_MS.
 */
export function runJoined(
  consumer: Consumer,
  eachBatch: EachBatch,
  onJoin: () => void,
  onFailed: (err: unknown) => void,
  what: string,
  logger: Logger,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let joined = false;
    let lastError = "";
    const fail = (err: unknown) => {
      if (joined) return;
      joined = true;
      clearTimeout(timer);
      reject(err);
    };
    const timer = setTimeout(() => {
      const last = lastError === "" ? "" : ` (last error: ${lastError})`;
      fail(
        new TrajflowError(
          "KAFKA_CLIENT_FAILED",
          `${what}: no group join within ${JOIN_TIMEOUT_MS} ms${last}`,
        ),
      );
    }, JOIN_TIMEOUT_MS);
    consumer.on(consumer.events.GROUP_JOIN, () => {
      onJoin();
      if (joined) return;
      joined = true;
      clearTimeout(timer);
      resolve();
    });
    consumer.on(consumer.events.CRASH, (e) => {
      const err = e.payload.error as Error;
      lastError = err.message;
      if (e.payload.restart) {
        logger.warn({ err: err.message }, `${what}: the Kafka client failed; it restarts and reads on.`);
        return;
      }
      logger.error({ err: err.message }, `${what} failed.`);
      onFailed(err);
      fail(new TrajflowError("KAFKA_CLIENT_FAILED", `${what} failed: ${err.message}`, { cause: err }));
    });
    consumer.run({ autoCommit: false, eachBatch }).catch(fail);
  });
}

/**
 * Connects `consumer`, subscribes it to `topic` (not from the beginning: `onJoin` seeks) and runs it until
 * its first join (`runJoined`); when any of that fails, hangs the consumer up before passing it on.
 */
async function startReader(
  consumer: Consumer,
  connection: KafkaConnection,
  topic: string,
  reader: { eachBatch: EachBatch; onJoin: () => void; onFailed: (err: unknown) => void; what: string },
  logger: Logger,
): Promise<void> {
  try {
    await connectClient(consumer, connection);
    await consumer.subscribe({ topic, fromBeginning: false });
    await runJoined(consumer, reader.eachBatch, reader.onJoin, reader.onFailed, reader.what, logger);
  } catch (err) {
    await disconnectWithin(consumer, 5_000);
    throw err;
  }
}

/** kafkajs's answer to a seek or pause while it has no group membership (between a failure and its restart). */
const notRunning = (err: unknown) => /consumer#run must be called first/.test((err as Error)?.message ?? "");

export class TopicFollower {
  private readonly consumer: Consumer;
  private readonly topic: string;
  /** Per partition: the next offset not read yet. */
  private readonly done = new Map<number, number>();
  /** Partitions whose window (from the start time to the end at start) is not read yet. */
  private readonly catchingUp = new Map<number, number>();
  private readonly waiters = new Map<number, Array<{ offset: number; resolve: (ok: boolean) => void }>>();
  private readonly onMessage: (m: FollowedMessage) => void;
  private readyResolve: (() => void) | null = null;
  /** Resolves once every partition's window is read. */
  readonly ready: Promise<void>;
  private failed: unknown = null;

  private constructor(consumer: Consumer, topic: string, onMessage: (m: FollowedMessage) => void) {
    this.consumer = consumer;
    this.topic = topic;
    this.onMessage = onMessage;
    this.ready = new Promise((r) => (this.readyResolve = r));
  }

  /** Starts following `topic` from `sinceMs` (the broker's timestamps) on. */
  static async start(
    connection: KafkaConnection,
    topic: string,
    sinceMs: number,
    name: string,
    logger: Logger,
    onMessage: (m: FollowedMessage) => void,
  ): Promise<TopicFollower> {
    const kafka = createKafka(connection, logger);
    const window = await windowOf(kafka, connection, topic, sinceMs);
    const consumer = kafka.consumer({
      groupId: `trajflow-gateway-follow-${name}-${randomBytes(6).toString("hex")}`,
      // A fetch returns as soon as a message arrives; this is only how long an idle one is parked.
      maxWaitTimeInMs: 200,
    });
    const f = new TopicFollower(consumer, topic, onMessage);
    for (const [p, w] of window) {
      f.done.set(p, w.from);
      if (w.from < w.end) f.catchingUp.set(p, w.end);
    }
    await startReader(
      consumer,
      connection,
      topic,
      {
        eachBatch: async ({ batch }) => f.take(batch.partition, batch.messages),
        // At every join (a restart's too): on from the next offset not read yet, the window's start first.
        onJoin: () => {
          for (const p of window.keys())
            consumer.seek({ topic, partition: p, offset: String(f.position(p)) });
        },
        onFailed: (err) => (f.failed = err),
        what: "Following the event topic",
      },
      logger,
    );
    if (f.catchingUp.size === 0) f.readyResolve!();
    return f;
  }

  private take(
    partition: number,
    messages: Array<{
      offset: string;
      key: Buffer | null;
      value: Buffer | null;
      headers?: Record<string, unknown>;
      timestamp: string;
    }>,
  ): void {
    const end = this.catchingUp.get(partition);
    let next = this.done.get(partition) ?? 0;
    for (const m of messages) {
      const offset = Number(m.offset);
      // Before the seek to the window's start lands, a fetch may give messages past its end: they come
      // again after the window, in order.
      if (end !== undefined && offset >= end && next < end) break;
      if (offset < next) continue;
      next = offset + 1;
      this.onMessage({
        partition,
        offset,
        key: m.key,
        value: m.value,
        headers: headersOf(m.headers),
        timestamp: Number(m.timestamp),
      });
    }
    this.done.set(partition, next);
    if (end !== undefined && next >= end) {
      this.catchingUp.delete(partition);
      if (this.catchingUp.size === 0) this.readyResolve?.();
    }
    const waiting = this.waiters.get(partition);
    if (waiting === undefined) return;
    const still = waiting.filter((w) => {
      if (w.offset >= next) return true;
      w.resolve(true);
      return false;
    });
    if (still.length === 0) this.waiters.delete(partition);
    else this.waiters.set(partition, still);
  }

  /** The next offset of `partition` not read yet. */
  position(partition: number): number {
    return this.done.get(partition) ?? 0;
  }

  /** Resolves true once `partition` is read past `offset`; false after `timeoutMs` or when following failed. */
  reached(partition: number, offset: number, timeoutMs: number): Promise<boolean> {
    if (this.position(partition) > offset) return Promise.resolve(true);
    if (this.failed !== null) return Promise.resolve(false);
    return new Promise((resolve) => {
      const w = {
        offset,
        resolve: (ok: boolean) => {
          clearTimeout(timer);
          resolve(ok);
        },
      };
      const timer = setTimeout(() => {
        const list = this.waiters.get(partition);
        if (list !== undefined)
          this.waiters.set(
            partition,
            list.filter((x) => x !== w),
          );
        resolve(false);
      }, timeoutMs);
      const list = this.waiters.get(partition);
      if (list === undefined) this.waiters.set(partition, [w]);
      else list.push(w);
    });
  }

  async close(): Promise<void> {
    for (const list of this.waiters.values()) for (const w of list) w.resolve(false);
    this.waiters.clear();
    await disconnectWithin(this.consumer, 10_000);
  }
}

/** One range read: what it keeps, up to where, and who waits. */
interface ReadJob {
  next: number;
  to: number;
  keep: (headers: Record<string, string>) => boolean;
  values: Buffer[];
  bytes: number;
  maxBytes: number;
  resolve: (values: Buffer[]) => void;
  reject: (err: unknown) => void;
}

export class PartitionReader {
  private readonly consumer: Consumer;
  private readonly topic: string;
  private readonly jobs = new Map<number, ReadJob>();
  /** Reads of one partition, one after another. */
  private readonly queues = new Map<number, Promise<unknown>>();

  private constructor(consumer: Consumer, topic: string) {
    this.consumer = consumer;
    this.topic = topic;
  }

  static async start(
    connection: KafkaConnection,
    topic: string,
    name: string,
    logger: Logger,
  ): Promise<PartitionReader> {
    const kafka = createKafka(connection, logger);
    const consumer = kafka.consumer({
      groupId: `trajflow-gateway-read-${name}-${randomBytes(6).toString("hex")}`,
      // With every partition paused the client sleeps this long between looks: a read starts within it.
      maxWaitTimeInMs: 20,
    });
    const r = new PartitionReader(consumer, topic);
    await startReader(
      consumer,
      connection,
      topic,
      {
        eachBatch: async ({ batch }) => r.take(batch.partition, batch.messages),
        onJoin: () => r.rejoined(),
        onFailed: () => r.failAll(),
        what: "Reading the event topic",
      },
      logger,
    );
    return r;
  }

  /**
   * The values of `partition`'s messages in [from, to) whose headers `keep` accepts; fails past `maxBytes`
   * kept or `timeoutMs`.
   */
  read(
    partition: number,
    from: number,
    to: number,
    keep: (headers: Record<string, string>) => boolean,
    limits: { maxBytes: number; timeoutMs: number },
  ): Promise<Buffer[]> {
    if (from >= to) return Promise.resolve([]);
    const before = this.queues.get(partition) ?? Promise.resolve();
    const run = before.then(
      () =>
        new Promise<Buffer[]>((resolve, reject) => {
          const timer = setTimeout(() => {
            finish(
              new TrajflowError(
                "KAFKA_CLIENT_FAILED",
                `reading partition ${partition} of ${this.topic} from ${from} to ${to} took longer than ${limits.timeoutMs} ms`,
              ),
            );
          }, limits.timeoutMs);
          const finish = (err: unknown, values?: Buffer[]) => {
            clearTimeout(timer);
            this.jobs.delete(partition);
            this.fetchOnlyJobs();
            if (err !== null) reject(err);
            else resolve(values!);
          };
          this.jobs.set(partition, {
            next: from,
            to,
            keep,
            values: [],
            bytes: 0,
            maxBytes: limits.maxBytes,
            resolve: (values) => finish(null, values),
            reject: (err) => finish(err),
          });
          this.seekJob(partition, from);
          this.fetchOnlyJobs();
        }),
    );
    this.queues.set(
      partition,
      run.catch(() => undefined),
    );
    return run;
  }

  /**
   * Pauses every partition but those being read. (The client's pause of one partition clears a pause of
   * the whole topic: the topic is paused whole, then the partitions of the reads in progress resumed.)
   * Between a failure and kafkajs's restart the client has no membership to pause: the next join does it.
   */
  private fetchOnlyJobs(): void {
    try {
      this.consumer.pause([{ topic: this.topic }]);
      if (this.jobs.size > 0)
        this.consumer.resume([{ topic: this.topic, partitions: [...this.jobs.keys()] }]);
    } catch (err) {
      if (!notRunning(err)) throw err;
    }
  }

  /** Seeks a read's partition to `offset`, or leaves it to the next join (as fetchOnlyJobs). */
  private seekJob(partition: number, offset: number): void {
    try {
      this.consumer.seek({ topic: this.topic, partition, offset: String(offset) });
    } catch (err) {
      if (!notRunning(err)) throw err;
    }
  }

  /** At every join: the pauses, and each read in progress on from where it is. */
  private rejoined(): void {
    this.fetchOnlyJobs();
    for (const [partition, job] of this.jobs) this.seekJob(partition, job.next);
  }

  /** The client failed for good: the reads in progress fail now rather than at their time limits. */
  private failAll(): void {
    for (const job of this.jobs.values()) {
      job.reject(new TrajflowError("KAFKA_CLIENT_FAILED", "reading the event topic failed"));
    }
  }

  private take(
    partition: number,
    messages: Array<{ offset: string; value: Buffer | null; headers?: Record<string, unknown> }>,
  ): void {
    const job = this.jobs.get(partition);
    if (job === undefined) return;
    for (const m of messages) {
      const offset = Number(m.offset);
      // Only the messages from the read's start on, one after another: a batch fetched before the seek
      // landed (past the start, or before it) is not the read's.
      if (offset !== job.next) continue;
      if (offset >= job.to) break;
      job.next = offset + 1;
      if (m.value === null || !job.keep(headersOf(m.headers))) continue;
      job.bytes += m.value.length;
      if (job.bytes > job.maxBytes) {
        job.reject(
          new TrajflowError(
            "KAFKA_CLIENT_FAILED",
            `a session's events in partition ${partition} exceed ${job.maxBytes} bytes; not read back`,
          ),
        );
        return;
      }
      job.values.push(m.value);
    }
    if (job.next >= job.to) job.resolve(job.values);
  }

  async close(): Promise<void> {
    for (const job of this.jobs.values()) job.reject(new Error("the reader is closing"));
    await disconnectWithin(this.consumer, 10_000);
  }
}
