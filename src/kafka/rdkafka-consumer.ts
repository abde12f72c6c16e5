/**
 * The kafka source's consumer on librdkafka (`connection.client: librdkafka`; the addon and its settings:
 * rdkafka-binding.ts). librdkafka fetches ahead on its own threads into one queue, bounded by the fetch
 * settings, and heartbeats there too, so a batch that waits on the sinks never costs the membership; this
 * class takes messages from the queue (woken by the queue, never blocking a libuv thread), hands them on
 * one partition at a time, and applies rebalances: librdkafka hands them to its rebalance callback, where
 * this member revokes everything (eager protocol) and later takes the new assignment, each partition
 * fetched from its committed offset, as kafkajs does after every join.
 *
 * Ownership (fencing) is asked of the group coordinator, as with kafkajs: a stable group whose assignment
 * of this member holds the partition. The binding does not tell the member id; librdkafka's group debug
 * log does (its MEMBERID line). librdkafka's own view must agree too: the partition assigned and the
 * assignment not lost (it marks it lost when it learns the coordinator expelled it).
 */
import type { Logger } from "../core/logger.ts";
import { connectClient, createKafka } from "./client.ts";
import { GroupAdmin } from "./group-admin.ts";
import {
  clientFailed,
  consumerConfig,
  loadRdkafka,
  RD,
  setupFailure,
  type RdError,
  type RdKafkaConsumer,
  type RdMessage,
  type RdTopicPartition,
} from "./rdkafka-binding.ts";
import {
  heartbeatInterval,
  type Batch,
  type BatchControl,
  type ConsumerEvents,
  type TopicConsumer,
  type TopicConsumerSettings,
} from "./topic-consumer.ts";

/** Messages taken from librdkafka's queue at once (split into batches by partition). */
const TAKE = 1_000;
/** How long an empty queue is waited on before it is looked at again anyway (the wake-up can be missed). */
const IDLE_POLL_MS = 250;

export class RdkafkaConsumer implements TopicConsumer {
  private readonly settings: TopicConsumerSettings;
  private readonly log: Logger;
  private readonly consumer: RdKafkaConsumer;
  /** The broker's view of the topic and the group, asked through kafkajs (group-admin.ts says why). */
  private readonly admin: GroupAdmin;
  /** Native requests in flight (seeks, commits): the consumer's handle must outlive them. */
  private readonly inflight = new Set<Promise<unknown>>();
  private events: ConsumerEvents | null = null;
  /** Partitions assigned now (none between a revocation and the next assignment). */
  private readonly assigned = new Set<number>();
  /** Bumped at every seek of a partition: a batch fetched before is stale (as is one before a rebalance). */
  private readonly epochs = new Map<number, number>();
  /**
   * Partitions sought and the offset sought, until a batch starts there or the seek is done: what the
   * queue still holds of the partition from before the seek is dropped meanwhile.
   */
  private readonly seeking = new Map<number, number>();
  private rebalances = 0;
  private running = false;
  private closing = false;
  /** Bumped by every stop: a loop of an older generation ends at its next turn. */
  private generation = 0;
  private loop: Promise<void> | null = null;
  /** Wake-ups of the queue (it went from empty to non-empty) and the waiter for the next one. */
  private wakeups = 0;
  private wake: (() => void) | null = null;
  /** The first error no retry fixes (refused credentials, failed TLS), while connecting. */
  private setupError: Error | null = null;
  private onSetupError: ((err: Error) => void) | null = null;
  /** The client connected (its first metadata came back). */
  private connected = false;
  /** This member's id in its group, from librdkafka's log; null before a join and after leaving. */
  private memberId: string | null = null;
  private warnedNoMemberId = false;

  constructor(settings: TopicConsumerSettings, logger: Logger) {
    this.settings = settings;
    this.log = logger.child({ component: "librdkafka" });
    const rd = loadRdkafka();
    this.admin = new GroupAdmin(
      createKafka(settings.connection, logger).admin(),
      settings.topic,
      settings.group_id,
    );
    const config = {
      ...consumerConfig(settings, heartbeatInterval(settings.session_timeout_ms)),
      rebalance_cb: (err: RdError, assignment: RdTopicPartition[]) => this.rebalanced(err, assignment),
      queue_non_empty_cb: () => this.woken(),
    };
    this.consumer = new rd.KafkaConsumer(config);
    this.consumer.setDefaultConsumeTimeout(0);
    this.consumer.setDefaultIsTimeoutOnlyForFirstMessage(true);
    this.consumer.on("event.error", (err) => this.clientError(err));
    this.consumer.on("event.log", (entry) => this.logEntry(entry));
  }

  /** Probes the listener (TLS or not) as kafkajs's clients do, then connects both clients at once. */
  async connect(): Promise<void> {
    const { connection } = this.settings;
    await Promise.all([
      this.admin.connect(connection),
      connectClient({ connect: () => this.connectNative() }, connection),
    ]);
  }

  private connectNative(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.onSetupError = reject;
      // The first metadata answer, within the connection timeout (librdkafka keeps connecting meanwhile).
      const timeout = this.settings.connection.connection_timeout_ms;
      this.consumer.connect({ timeout, topic: this.settings.topic }, (err) => {
        this.connected = err === null || err === undefined;
        if (this.connected) resolve();
        else reject(this.setupError ?? clientFailed(err));
      });
    }).finally(() => (this.onSetupError = null));
  }

  /** librdkafka's error events: most it retries by itself (a broker away); some end the pipeline. */
  private clientError(err: RdError): void {
    const failure = setupFailure(err, this.settings.connection);
    if (failure === null) this.log.warn({ error: err.message }, "librdkafka reported an error; it retries.");
    else this.failed(failure);
  }

  /** An error no retry fixes: the connect in progress fails with it, or the running consumer crashes. */
  private failed(failure: Error): void {
    if (this.setupError !== null) return;
    this.setupError = failure;
    if (this.onSetupError !== null) this.onSetupError(failure);
    else this.events?.crashed(failure, false);
  }

  /**
   * librdkafka's log (syslog severities): errors it retries are warnings, as with kafkajs. A broker
   * connection that failed on credentials or on the broker's certificate ends the run (the error event
   * saying so waits in the consumer's queue while the client connects).
   */
  private logEntry(entry: { severity: number; fac: string; message: string }): void {
    const fields = { facility: entry.fac };
    if (entry.severity <= 2) this.log.error(fields, entry.message);
    else if (entry.severity <= 4) this.log.warn(fields, entry.message);
    else this.log.debug(fields, entry.message);
    if (entry.fac === "MEMBERID") {
      const id = /updating member id "[^"]*" -> "([^"]*)"/.exec(entry.message)?.[1];
      if (id !== undefined) this.memberId = id === "" || id === "(not-set)" ? null : id;
    }
    if (entry.fac === "FAIL" && entry.severity <= 4) {
      const failure = setupFailure({ message: entry.message }, this.settings.connection);
      if (failure !== null && failure.code !== "KAFKA_CLIENT_FAILED") this.failed(failure);
    }
  }

  async start(events: ConsumerEvents): Promise<void> {
    this.events = events;
    if (this.setupError !== null) throw this.setupError;
    this.consumer.subscribe([this.settings.topic]);
    this.run();
  }

  private run(): void {
    this.running = true;
    const generation = ++this.generation;
    this.loop = this.consumeLoop(generation).catch((err: unknown) => {
      if (generation !== this.generation) return;
      this.running = false;
      this.events?.crashed(clientFailed(err), false);
    });
  }

  /** Stops taking messages: waits up to `ms` for the batch in hand; true when the loop ended in time. */
  private async stopLoop(ms: number): Promise<boolean> {
    this.running = false;
    this.generation++;
    this.woken();
    const late = new Promise<false>((resolve) => setTimeout(() => resolve(false), ms).unref());
    return Promise.race([(this.loop ?? Promise.resolve()).then(() => true), late]);
  }

  /** Leaves the group and rejoins it: every partition is revoked, then assigned again. */
  async restart(): Promise<void> {
    if (!(await this.stopLoop(10_000)))
      this.log.warn("The batch in hand did not return within 10 s; restarting the consumer anyway.");
    this.rejoin();
    this.run();
  }

  /** Leaves the group (its partitions revoked at the next take) and joins it again. */
  private rejoin(): void {
    this.consumer.unsubscribe();
    this.consumer.subscribe([this.settings.topic]);
  }

  /** librdkafka reconnects by itself: nothing crashes for this to follow. */
  reconnect(): Promise<void> {
    if (!this.running) this.run();
    return Promise.resolve();
  }

  /**
   * The rebalance callback (on the main thread, between takes). Revocation first: the lanes end, then the
   * member may rejoin; the assignment next: each partition is fetched from its committed offset.
   */
  private rebalanced(err: RdError, assignment: RdTopicPartition[]): void {
    this.rebalances++;
    // Closing revokes too: the source has settled its lanes by then, nothing is to start over.
    const events = this.closing ? null : this.events;
    try {
      if (err.code === RD.ASSIGN_PARTITIONS) {
        const mine = assignment.filter((p) => p.topic === this.settings.topic).map((p) => p.partition);
        this.consumer.assign(assignment);
        this.assigned.clear();
        this.seeking.clear();
        for (const p of mine) this.assigned.add(p);
        events?.joined(mine);
      } else {
        this.consumer.unassign();
        this.assigned.clear();
        events?.revoked();
      }
    } catch (e) {
      // Unassigning while the consumer closes: nothing is left to revoke.
      this.log.debug({ err: e }, "Could not apply a rebalance.");
    }
  }

  private woken(): void {
    this.wakeups++;
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** Takes what librdkafka's queue holds (rebalances are applied during the take) and hands it on. */
  private async consumeLoop(generation: number): Promise<void> {
    const running = () => this.running && generation === this.generation;
    while (running()) {
      const before = this.wakeups;
      const messages = await this.take();
      if (!running()) return;
      for (const batch of byPartition(messages)) {
        if (!running()) return;
        if (!this.assigned.has(batch.partition)) continue; // fetched before a revocation
        if (this.fetchedBeforeSeek(batch)) continue;
        if (!(await this.hand(batch, running))) break;
      }
      if (messages.length < TAKE && this.wakeups === before) await this.idle();
    }
  }

  /**
   * Hands a batch on; false when its handler failed. As kafkajs does then, the consumer restarts (a
   * second later, leaving and rejoining the group), so the partitions start over from their committed
   * offsets; the source decides whether the failure ends the pipeline.
   */
  private async hand(batch: Batch, running: () => boolean): Promise<boolean> {
    try {
      await this.events!.batch(batch, this.control(batch.partition, running));
      return true;
    } catch (err) {
      this.events!.crashed(err as Error, true);
      await new Promise((r) => setTimeout(r, 1_000));
      if (running()) this.rejoin();
      return false;
    }
  }

  private fetchedBeforeSeek(batch: Batch): boolean {
    const sought = this.seeking.get(batch.partition);
    if (sought === undefined) return false;
    if (Number(batch.messages[0]!.offset) !== sought) return true;
    this.seeking.delete(batch.partition);
    return false;
  }

  private take(): Promise<RdMessage[]> {
    return new Promise((resolve) =>
      this.consumer.consume(TAKE, (err, messages) => {
        if (err === null || err === undefined) return resolve(messages);
        this.log.warn(
          { err: { code: err.code, message: err.message } },
          "Could not take messages; retrying.",
        );
        resolve([]);
      }),
    );
  }

  private idle(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, IDLE_POLL_MS);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private control(partition: number, running: () => boolean): BatchControl {
    const epoch = this.epochOf(partition);
    const rebalances = this.rebalances;
    return {
      isRunning: running,
      isStale: () => this.rebalances !== rebalances || this.epochOf(partition) !== epoch,
      // librdkafka heartbeats on its own thread.
      heartbeat: () => Promise.resolve(),
      // librdkafka fetches on from where it is; a lane that restarts seeks.
      resolveOffset: () => {},
    };
  }

  private epochOf(partition: number): number {
    return this.epochs.get(partition) ?? 0;
  }

  seek(partition: number, offset: number): void {
    if (!this.assigned.has(partition))
      throw new Error(`partition ${partition} is not assigned to this member`);
    this.epochs.set(partition, this.epochOf(partition) + 1);
    this.seeking.set(partition, offset);
    this.trySeek(partition, offset, this.epochOf(partition));
  }

  /**
   * One seek of the native consumer. A failed one (it times out while the broker is away) is tried again
   * until it holds, as long as the partition stays assigned and no later seek replaced it: otherwise
   * librdkafka would fetch on from where it was, past the lane's committed offset, and the restarted lane
   * would wait for messages that never come again (seen: a broker restart mid-stream stalled the run).
   */
  private trySeek(partition: number, offset: number, epoch: number): void {
    const current = () => this.assigned.has(partition) && this.epochOf(partition) === epoch && !this.closing;
    // Refused only while the consumer closes: its lanes end with it.
    void this.native<void>((done) =>
      this.consumer.seek({ topic: this.settings.topic, partition, offset }, 1_000, (err) => {
        done();
        if (err !== null && err !== undefined) {
          this.log.debug(
            { err: { code: err.code, message: err.message }, partition },
            "Could not seek the partition; trying again.",
          );
          if (current()) setTimeout(() => current() && this.trySeek(partition, offset, epoch), 500);
          return;
        }
        // Done: what the queue holds of the partition now is from the new position (or, past the log's
        // ends, from where auto.offset.reset put it).
        if (this.seeking.get(partition) === offset) this.seeking.delete(partition);
      }),
    ).catch(() => {});
  }

  commit(offsets: Array<{ partition: number; offset: number }>): Promise<void> {
    const { topic } = this.settings;
    return this.native<void>((done, fail) =>
      this.consumer.commitCb(
        offsets.map((o) => ({ topic, partition: o.partition, offset: o.offset })),
        (err) => (err === null || err === undefined ? done() : fail(clientFailed(err))),
      ),
    );
  }

  /**
   * A request of the native consumer, tracked until its callback: the binding's seeks and commits use
   * the consumer's handle without a lock, so closing it under them crashes the process. Refused once the
   * consumer closes.
   */
  private native<T>(call: (done: (value: T) => void, fail: (err: Error) => void) => void): Promise<T> {
    if (this.closing) return Promise.reject(new Error("the librdkafka consumer is closing"));
    const request = new Promise<T>((resolve, reject) => call(resolve, reject));
    const tracked = request.then(
      () => {},
      () => {},
    );
    this.inflight.add(tracked);
    void tracked.then(() => this.inflight.delete(tracked));
    return request;
  }

  /**
   * Assigned now in librdkafka's view (the assignment not lost), and in the coordinator's: a stable group
   * whose assignment of this member holds the partition.
   */
  async owns(partition: number): Promise<boolean> {
    if (!this.assigned.has(partition) || this.consumer.assignmentLost()) return false;
    const memberId = this.memberId;
    if (memberId !== null) return this.admin.owns(memberId, partition);
    // librdkafka's log did not say (another version words it otherwise): its own view decides.
    if (!this.warnedNoMemberId)
      this.log.warn("librdkafka's log gave no member id: fencing relies on librdkafka's assignment only.");
    this.warnedNoMemberId = true;
    return true;
  }

  topicOffsets(): Promise<Array<{ partition: number; low: number; high: number }>> {
    return this.admin.topicOffsets();
  }

  committedOffsets(): Promise<Map<number, number>> {
    return this.admin.committedOffsets();
  }

  /** Stops taking messages and closes the consumer (it leaves the group), given up on after `ms`. */
  async disconnect(ms: number, stuck: (client: string) => void): Promise<void> {
    this.closing = true;
    await this.stopLoop(ms);
    const late = () => new Promise<false>((resolve) => setTimeout(() => resolve(false), ms).unref());
    // A connect still in progress (it failed on credentials) closes the client itself when it ends.
    if (this.connected && this.consumer.isConnected()) {
      const closed = Promise.all(this.inflight).then(
        () => new Promise<boolean>((resolve) => this.consumer.disconnect(() => resolve(true))),
      );
      if (!(await Promise.race([closed, late()]))) stuck("consumer");
    }
    if (!(await this.admin.disconnect(ms))) stuck("admin");
  }
}

/** Messages in queue order as batches of one partition each (a partition's messages stay in order). */
function byPartition(messages: RdMessage[]): Batch[] {
  if (messages.length === 0) return [];
  const batches = new Map<number, Batch>();
  for (const m of messages) {
    let batch = batches.get(m.partition);
    if (batch === undefined) batches.set(m.partition, (batch = { partition: m.partition, messages: [] }));
    batch.messages.push(m);
  }
  return [...batches.values()];
}
