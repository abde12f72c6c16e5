/**
 * The session directory of a fleet of gateway replicas (fleet.ts): a one-partition topic beside the event
 * topic (`<topic>.sessions`) with a record where each session begins (its partition, an offset below which
 * none of its events lies, its key's hash), one per takeover (a claim: the new owner generation), the
 * owners' leases (renewed together, released on a clean stop) and the policy versions posted. Every replica
 * follows it from `restore_window_ms` ago, and knows from it where each session is and who holds it.
 */
import type { Logger } from "../core/logger.ts";
import { TrajflowError } from "../core/errors.ts";
import type { KafkaConnection } from "../kafka/connection.ts";
import { KeyedProducer } from "../kafka/keyed-producer.ts";
import { TopicFollower, type FollowedMessage } from "../kafka/topic-follower.ts";

/** A directory record: a session begun here, a takeover, or the policy version (POST /weights). */
export interface DirectoryRecord {
  kind: "start" | "claim" | "lease" | "release" | "policy";
  session_id?: string;
  partition?: number;
  /** start: an offset below which none of the session's events lies. */
  first?: number;
  gen?: number;
  /** start, claim, lease: the writer holds the session (lease: each of `sessions`) until then (its clock, ms). */
  lease_until?: number;
  /** lease: the sessions renewed, as [id, generation]. */
  sessions?: Array<[string, number]>;
  key_sha256?: string;
  version?: number;
  replica: string;
}

/** Where a session's events are, and its claims, as the directory says. */
export interface Entry {
  /** Its partition, and an offset there below which none of its events lies. */
  partition: number;
  first: number;
  /** The newest claim's generation, and the first record's (the replica that began the session). */
  gen: number;
  creator: number;
  /** The replica of the newest claim, and until when it holds the session (its lease). */
  owner: string;
  leaseUntil: number;
  /** The broker time of its last directory record (for forgetting it after the window). */
  ts: number;
}

/** How long a confirmation waits for the directory to be read before it gives up. */
const READ_TIMEOUT_MS = 10_000;

export class SessionDirectory {
  private readonly producer: KeyedProducer;
  private readonly windowMs: number;
  private follower!: TopicFollower;
  readonly entries = new Map<string, Entry>();
  /** Session ids by their key's SHA-256. */
  private readonly byKeyHash = new Map<string, string>();
  /** The directory's end, asked once for the calls that wait at the same time (end()). */
  private asking: Promise<number> | null = null;
  private nextAsk: Promise<number> | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private policyTs = 0;
  /** The newest policy version announced (read before anyone listened, too). */
  policy: number | undefined;
  /** Told each policy version announced (POST /weights to any replica), newest last. */
  onPolicy: ((version: number) => void) | null = null;
  /** Told each claim of a session (its id and generation). */
  onClaim: ((id: string, gen: number) => void) | null = null;
  /** Whether the window has been read. */
  ready = false;

  private constructor(producer: KeyedProducer, windowMs: number) {
    this.producer = producer;
    this.windowMs = windowMs;
  }

  /** The directory topic of an event topic. */
  static topicOf(topic: string): string {
    return `${topic}.sessions`;
  }

  /** Opens the directory of `eventTopic` and follows it from `windowMs` ago; `ready` once that is read. */
  static async open(
    connection: KafkaConnection,
    eventTopic: string,
    windowMs: number,
    name: string,
    logger: Logger,
  ): Promise<SessionDirectory> {
    const topic = SessionDirectory.topicOf(eventTopic);
    const d = new SessionDirectory(await KeyedProducer.connect(connection, topic, logger, 1), windowMs);
    d.follower = await TopicFollower.start(connection, topic, Date.now() - windowMs, name, logger, (m) =>
      d.seen(m),
    );
    void d.follower.ready.then(() => {
      d.ready = true;
      logger.info({ sessions: d.entries.size }, "The session directory's window is read; taking calls.");
    });
    d.sweeper = setInterval(() => d.sweep(), 60_000);
    d.sweeper.unref();
    return d;
  }

  /** One directory record: where a session is, a claim (which lets ours go), or the policy version. */
  seen(m: FollowedMessage): void {
    if (m.value === null) return;
    let r: DirectoryRecord;
    try {
      r = JSON.parse(m.value.toString("utf8")) as DirectoryRecord;
    } catch {
      return;
    }
    if (r.kind === "lease" || r.kind === "release") {
      for (const [id, gen] of r.sessions ?? []) {
        const e = this.entries.get(id);
        if (e === undefined || gen !== e.gen) continue;
        // A replica that stops lets its sessions go at once: their next calls need not wait out its lease.
        if (r.kind === "release") e.leaseUntil = 0;
        else if (typeof r.lease_until === "number") e.leaseUntil = Math.max(e.leaseUntil, r.lease_until);
        e.ts = m.timestamp;
      }
      return;
    }
    if (r.kind === "policy") {
      if (typeof r.version === "number" && m.timestamp >= this.policyTs) {
        this.policyTs = m.timestamp;
        this.policy = r.version;
        this.onPolicy?.(r.version);
      }
      return;
    }
    const id = r.session_id;
    if (typeof id !== "string" || typeof r.gen !== "number") return;
    let e = this.entries.get(id);
    if (e === undefined) {
      if (r.kind !== "start" || typeof r.partition !== "number" || typeof r.first !== "number") return;
      const lease = { owner: r.replica, leaseUntil: 0 };
      e = { partition: r.partition, first: r.first, gen: r.gen, creator: r.gen, ...lease, ts: m.timestamp };
      this.entries.set(id, e);
    }
    e.ts = m.timestamp;
    if (r.gen > e.gen) {
      e.gen = r.gen;
      e.owner = r.replica;
      e.leaseUntil = 0;
    }
    if (r.gen === e.gen && typeof r.lease_until === "number")
      e.leaseUntil = Math.max(e.leaseUntil, r.lease_until);
    if (typeof r.key_sha256 === "string") this.byKeyHash.set(r.key_sha256, id);
    if (r.kind === "claim") this.onClaim?.(id, r.gen);
  }

  /** Forgets sessions with no directory record in the window. */
  sweep(): void {
    const oldest = Date.now() - this.windowMs;
    for (const [id, e] of this.entries) if (e.ts < oldest) this.entries.delete(id);
    for (const [hash, id] of this.byKeyHash) if (!this.entries.has(id)) this.byKeyHash.delete(hash);
  }

  /** The session id a key was issued for, where the directory says so. */
  sessionOfKey(keyHash: string): string | undefined {
    return this.byKeyHash.get(keyHash);
  }

  /** Appends a directory record; resolves with its offset once acknowledged. */
  async record(r: DirectoryRecord): Promise<number> {
    const at = await this.producer.send([{ key: r.session_id ?? "", value: JSON.stringify(r) }]);
    return at.get(0) ?? 0;
  }

  /** Resolves once the directory is read up to `offset` (its record included); throws past the timeout. */
  async readTo(offset: number): Promise<void> {
    if (!(await this.follower.reached(0, offset, READ_TIMEOUT_MS)))
      throw new TrajflowError("KAFKA_CLIENT_FAILED", "the session directory was not read in time");
  }

  /**
   * The directory's end, from a request sent after this was called: one request serves every call that
   * waits while it is in flight's successor.
   */
  end(): Promise<number> {
    const ask = () => this.producer.endOffsets().then((m) => m.get(0) ?? 0);
    if (this.asking === null) {
      this.asking = ask().finally(() => (this.asking = null));
      return this.asking;
    }
    this.nextAsk ??= this.asking
      .catch(() => 0)
      .then(() => {
        this.nextAsk = null;
        return this.end();
      });
    return this.nextAsk;
  }

  /** Resolves true once the directory is read past `offset`; false after the timeout. */
  reached(offset: number): Promise<boolean> {
    return this.follower.reached(0, offset, READ_TIMEOUT_MS);
  }

  async close(): Promise<void> {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    await this.follower.close();
    await this.producer.close();
  }
}
