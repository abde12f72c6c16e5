/**
 * The kafka source's consumer on kafkajs (the default client): a consumer and an admin client
 * (group-admin.ts), each with its own connections. kafkajs heartbeats only between handler calls, announces every join (GROUP_JOIN)
 * but no revocation, restarts its consumer itself after retriable errors and calls others final (CRASH);
 * the group coordinator answers who owns a partition (DescribeGroup).
 */
import type { Logger } from "../core/logger.ts";
import { assignedPartitions, connectClient, createKafka, disconnectWithin, type Consumer } from "./client.ts";
import { GroupAdmin } from "./group-admin.ts";
import {
  FETCH_DEFAULTS,
  heartbeatInterval,
  type ConsumerEvents,
  type TopicConsumer,
  type TopicConsumerSettings,
} from "./topic-consumer.ts";

export class KafkajsConsumer implements TopicConsumer {
  private readonly settings: TopicConsumerSettings;
  private readonly consumer: Consumer;
  private readonly admin: GroupAdmin;
  private events: ConsumerEvents | null = null;
  /** This member's id at its last join (it changes when the member rejoins). */
  private memberId: string | null = null;

  constructor(settings: TopicConsumerSettings, logger: Logger) {
    this.settings = settings;
    const heartbeatIntervalMs = heartbeatInterval(settings.session_timeout_ms);
    const kafka = createKafka(settings.connection, logger);
    this.admin = new GroupAdmin(kafka.admin(), settings.topic, settings.group_id);
    this.consumer = kafka.consumer({
      groupId: settings.group_id,
      sessionTimeout: settings.session_timeout_ms,
      heartbeatInterval: heartbeatIntervalMs,
      // The broker answers one request per connection at a time, and kafkajs fetches ahead while a batch
      // is handled: a long-poll fetch on the coordinator's connection would hold heartbeats back past the
      // session timeout. measured: with the 5 s default and a 3 s session timeout a lone member was
      // expelled every ~5 s. A stop also waits for the fetch in flight: with 5 s, `consume` took 4 s to
      // disconnect after its files were written; an idle member's empty fetches every 500 ms cost nothing.
      maxWaitTimeInMs: Math.min(500, heartbeatIntervalMs),
      allowAutoTopicCreation: false,
      maxBytes: settings.fetch_max_bytes ?? FETCH_DEFAULTS.total,
      maxBytesPerPartition: settings.fetch_max_bytes ?? FETCH_DEFAULTS.perPartition,
    });
  }

  /** Both clients' handshakes at once (each probes the listener first). */
  async connect(): Promise<void> {
    const { connection } = this.settings;
    await Promise.all([this.admin.connect(connection), connectClient(this.consumer, connection)]);
  }

  async start(events: ConsumerEvents): Promise<void> {
    this.events = events;
    const { topic } = this.settings;
    await this.consumer.subscribe({ topic, fromBeginning: this.settings.from_beginning });
    this.consumer.on(this.consumer.events.GROUP_JOIN, (e) => {
      this.memberId = e.payload.memberId;
      events.joined(e.payload.memberAssignment[topic] ?? []);
    });
    this.consumer.on(this.consumer.events.CRASH, (e) => events.crashed(e.payload.error, e.payload.restart));
    await this.run();
  }

  private run(): Promise<void> {
    const events = this.events!;
    return this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: (payload) => events.batch(payload.batch, payload),
    });
  }

  async restart(): Promise<void> {
    await this.consumer.stop();
    await this.run();
  }

  async reconnect(): Promise<void> {
    await this.consumer.connect();
    await this.run();
  }

  seek(partition: number, offset: number): void {
    this.consumer.seek({ topic: this.settings.topic, partition, offset: String(offset) });
  }

  async commit(offsets: Array<{ partition: number; offset: number }>): Promise<void> {
    const { topic } = this.settings;
    await this.consumer.commitOffsets(
      offsets.map((o) => ({ topic, partition: o.partition, offset: String(o.offset) })),
    );
  }

  /** Asks the group coordinator: a stable group whose assignment of this member holds the partition. */
  async owns(partition: number): Promise<boolean> {
    const group = await this.consumer.describeGroup();
    const me = group.members.find((m) => m.memberId === this.memberId);
    if (group.state !== "Stable" || me === undefined) return false;
    return assignedPartitions(me.memberAssignment, this.settings.topic).includes(partition);
  }

  topicOffsets(): Promise<Array<{ partition: number; low: number; high: number }>> {
    return this.admin.topicOffsets();
  }

  committedOffsets(): Promise<Map<number, number>> {
    return this.admin.committedOffsets();
  }

  /** Files and offsets are settled by then: a client that does not hang up must not keep the process. */
  async disconnect(ms: number, stuck: (client: string) => void): Promise<void> {
    if (!(await disconnectWithin(this.consumer, ms))) stuck("consumer");
    if (!(await this.admin.disconnect(ms))) stuck("admin");
  }
}
