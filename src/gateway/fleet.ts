/**
 * One replica of a fleet of gateways writing one Kafka topic behind a proxy that hashes sessions to
 * replicas (docs/gateway.md#a-fleet-of-replicas). A replica holds only the sessions it serves:
 * - a session it does not hold is taken on its first call here: its events are read back from its
 *   partition (where they begin is known from following the topic), the session rebuilt from them as the
 *   pipeline sees them, and its next events written with a new owner generation: the claim
 *   (schemas/ownership.ts), which fences whoever wrote it before;
 * - before a call's answer is released, the replica reads its partition past the call's own events: if
 *   another replica wrote the session in between (it took the session over, or won a race for it), the
 *   answer is withheld (SESSION_MOVED: 503 session_moved, which the proxy or the agent retries) and the
 *   session let go.
 */
import type { ServerResponse } from "node:http";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { TrajflowError } from "../core/errors.ts";
import { PartitionReader, TopicFollower, type FollowedMessage } from "../kafka/topic-follower.ts";
import type { KeyedProducer } from "../kafka/keyed-producer.ts";
import { nextGeneration } from "../schemas/ownership.ts";
import type { KafkaOutputConfig } from "./config.ts";
import { sendError } from "./http.ts";
import type { AppendedAt } from "./outputs/output.ts";
import type { GatewaySession, SessionTable } from "./sessions.ts";

/** Where a session's events are in the topic, as following it found them. */
interface Whereabouts {
  partition: number;
  /** Its first and last event's offsets within the window followed. */
  first: number;
  last: number;
  /** The broker time of its last event. */
  ts: number;
}

/** How long a call waits to see its own events come back before its answer is withheld. */
const CONFIRM_TIMEOUT_MS = 10_000;
/** A session's events read back on a takeover: at most this many bytes, within this long. */
const TAKE_LIMITS = { maxBytes: 512 * 1024 * 1024, timeoutMs: 60_000 };

export class Fleet {
  private readonly sessions: SessionTable;
  private readonly producer: KeyedProducer;
  private readonly metrics: Metrics;
  private readonly logger: Logger;
  private readonly windowMs: number;
  private follower!: TopicFollower;
  private reader!: PartitionReader;
  private readonly where = new Map<string, Whereabouts>();
  /** Session ids by their key's SHA-256 (session.start's trajflow-key header). */
  private readonly byKeyHash = new Map<string, string>();
  /** Takeovers in progress, so concurrent first calls of one session read it back once. */
  private readonly taking = new Map<string, Promise<GatewaySession | null>>();
  private sweeper: NodeJS.Timeout | null = null;
  /** Told each policy version announced on the topic (POST /weights to any replica), newest last. */
  onPolicy: ((version: number) => void) | null = null;
  private policyTs = 0;
  /** Whether the window has been read (every session's whereabouts known): /readyz waits for it. */
  ready = false;

  private constructor(
    sessions: SessionTable,
    producer: KeyedProducer,
    windowMs: number,
    metrics: Metrics,
    logger: Logger,
  ) {
    this.sessions = sessions;
    this.producer = producer;
    this.windowMs = windowMs;
    this.metrics = metrics;
    this.logger = logger;
  }

  /** Starts following the topic from `restore_window_ms` ago; `ready` turns true once that is read. */
  static async start(
    replica: string,
    output: KafkaOutputConfig,
    producer: KeyedProducer,
    sessions: SessionTable,
    metrics: Metrics,
    logger: Logger,
  ): Promise<Fleet> {
    const fleet = new Fleet(sessions, producer, output.restore_window_ms, metrics, logger);
    fleet.reader = await PartitionReader.start(output.connection, output.topic, replica, logger);
    fleet.follower = await TopicFollower.start(
      output.connection,
      output.topic,
      Date.now() - output.restore_window_ms,
      replica,
      logger,
      (m) => fleet.seen(m),
    );
    void fleet.follower.ready.then(() => {
      fleet.ready = true;
      logger.info({ sessions: fleet.where.size }, "The event topic's window is read; taking calls.");
    });
    fleet.sweeper = setInterval(() => fleet.sweep(), 60_000);
    fleet.sweeper.unref();
    return fleet;
  }

  /** One event of the topic, by its headers: where its session is, and whether someone else wrote ours. */
  private seen(m: FollowedMessage): void {
    const id = m.headers["trajflow-session"];
    if (id === undefined) {
      const policy = m.headers["trajflow-policy"];
      // POST /weights reached one replica; every replica stamps calls with the newest version.
      if (policy !== undefined && m.timestamp >= this.policyTs) {
        this.policyTs = m.timestamp;
        this.onPolicy?.(Number(policy));
      }
      return;
    }
    const w = this.where.get(id);
    if (w === undefined)
      this.where.set(id, { partition: m.partition, first: m.offset, last: m.offset, ts: m.timestamp });
    else {
      w.last = m.offset;
      w.ts = m.timestamp;
    }
    const keyHash = m.headers["trajflow-key"];
    if (keyHash !== undefined) this.byKeyHash.set(keyHash, id);
    const s = this.sessions.get(id);
    if (s === undefined || s.fleet === null || m.offset < s.fleet.restoredTo) return;
    const gen = Number(m.headers["trajflow-gen"] ?? "0");
    if (gen === s.gen) return;
    s.fleet.foreign.push({ offset: m.offset, gen });
    // Taken over by a newer generation: let it go now unless a call of ours is in flight (its own check
    // finds the takeover); a later call here takes it back, with what the other replica wrote.
    if (gen > s.gen && s.inFlight === 0) this.release(s, "taken");
  }

  private release(s: GatewaySession, why: "taken" | "fenced"): void {
    if (this.sessions.get(s.id) === s) this.sessions.drop(s);
    this.metrics.inc("gateway_sessions_released", why);
  }

  /** Forgets the whereabouts of sessions with no event in the window. */
  private sweep(): void {
    const oldest = Date.now() - this.windowMs;
    for (const [id, w] of this.where) if (w.ts < oldest) this.where.delete(id);
    for (const [hash, id] of this.byKeyHash) if (!this.where.has(id)) this.byKeyHash.delete(hash);
  }

  /** The session id a key was issued for, where the topic says so. */
  sessionOfKey(keyHash: string): string | undefined {
    return this.byKeyHash.get(keyHash);
  }

  /**
   * Makes sure this replica holds session `id` when the topic has it: rebuilt from its events and given a
   * new generation. Resolves null when the topic has no such session (a new one), or it is held already.
   */
  take(id: string): Promise<GatewaySession | null> {
    if (this.sessions.get(id) !== undefined || !this.where.has(id)) return Promise.resolve(null);
    let taking = this.taking.get(id);
    if (taking === undefined) {
      taking = this.readBack(id).finally(() => this.taking.delete(id));
      this.taking.set(id, taking);
    }
    return taking;
  }

  private async readBack(id: string): Promise<GatewaySession | null> {
    const started = performance.now();
    const w = this.where.get(id)!;
    let from = w.first;
    let events = 0;
    // Read up to what following has seen; if the session was written meanwhile, read that too.
    for (;;) {
      const to = this.follower.position(w.partition);
      const values = await this.reader.read(
        w.partition,
        from,
        to,
        (h) => h["trajflow-session"] === id,
        TAKE_LIMITS,
      );
      for (const v of values) this.sessions.restoreFrom(v);
      events += values.length;
      from = to;
      if (w.last < to) break;
    }
    this.sessions.restored();
    const s = this.sessions.get(id);
    if (s === undefined) return null;
    s.gen = nextGeneration(s.ownership?.highest ?? 0);
    s.ownership = null;
    s.fleet = { partition: w.partition, restoredTo: from, foreign: [] };
    this.sessions.touch(s);
    const ms = performance.now() - started;
    this.metrics.inc("gateway_sessions_taken");
    this.metrics.observe("gateway_take_seconds", ms / 1000, TAKE_BUCKETS);
    this.logger.debug(
      { session_id: id, events, ms: Math.round(ms), gen: s.gen },
      "Took a session over from the topic.",
    );
    return s;
  }

  /** Gives a session new here (the topic has none of it) its generation and whereabouts. */
  adopt(s: GatewaySession): void {
    if (s.fleet !== null) return;
    const partition = this.producer.partitionOf(s.uid);
    s.gen = nextGeneration(0);
    s.fleet = { partition, restoredTo: this.follower.position(partition), foreign: [] };
  }

  /**
   * Resolves once the session's events just appended (`at`) are known to be the session's: the topic read
   * past them, and no other replica wrote it in between. Throws SESSION_MOVED (and lets the session go)
   * when one did, or when this cannot be told in time.
   */
  async confirm(s: GatewaySession, at: AppendedAt | undefined): Promise<void> {
    const hold = s.fleet;
    if (hold === null) return;
    const seen = at !== undefined && (await this.follower.reached(at.partition, at.last, CONFIRM_TIMEOUT_MS));
    if (!seen) {
      this.release(s, "fenced");
      this.metrics.inc("gateway_fenced_calls", "unconfirmed");
      throw moved(s, "its events were not seen back on the topic in time");
    }
    // Another replica's write before ours: a newer generation took the session, or (before our first event
    // since taking it) an older one's write landed first and our claim lost.
    const claim = hold.claimedAt ?? at.first;
    const before = hold.foreign.find((f) => f.offset < at.first && (f.gen > s.gen || f.offset < claim));
    if (before !== undefined) {
      this.release(s, "fenced");
      this.metrics.inc("gateway_fenced_calls", before.gen > s.gen ? "taken" : "lost_claim");
      throw moved(
        s,
        `another gateway replica (generation ${before.gen}) wrote it at offset ${before.offset}`,
      );
    }
    hold.claimedAt = claim;
    hold.foreign = hold.foreign.filter((f) => f.offset > at.last);
  }

  async close(): Promise<void> {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    await Promise.all([this.follower.close(), this.reader.close()]);
  }
}

/**
 * Answers a call whose session moved: 503 session_moved with Retry-After 0, which the proxy (retry-on 503)
 * or the agent sends again, to the session's owner now. A stream already begun is cut instead: agents
 * retry that as a connection error.
 */
export function withholdMoved(res: ServerResponse, err: Error): void {
  if (!res.headersSent)
    sendError(res, 503, "session_moved", err.message, {
      "retry-after": "0",
      "x-trajflow-session-moved": "1",
    });
  else if (!res.writableEnded) res.destroy(err);
}

function moved(s: GatewaySession, why: string): TrajflowError {
  return new TrajflowError(
    "SESSION_MOVED",
    `session ${s.id} moved to another gateway replica: ${why}; its answer was withheld (retry the call)`,
  );
}

/** Buckets for a takeover's read back (seconds). */
const TAKE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
