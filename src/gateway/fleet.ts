/**
 * One replica of a fleet of gateways writing one Kafka topic behind a proxy that hashes sessions to
 * replicas (docs/gateway.md#a-fleet-of-replicas). A replica holds only the sessions it serves. Beside the
 * event topic, the fleet keeps a small **session directory** topic (`<topic>.sessions`, one partition): a
 * record when a session begins (its partition, its first event's offset, its key's hash) and one per
 * takeover (the claim: the session's new owner generation). Every replica follows the directory, never
 * the event topic, so what following costs a replica does not grow with the fleet's calls.
 * - A session a replica does not hold is taken on its first call here: the claim goes to the directory
 *   first, then the session's events are read back from its partition (from its first event to the
 *   partition's end, read after the claim was acknowledged), the session rebuilt from them as the pipeline
 *   sees them, and its next events written with the claim's generation (schemas/ownership.ts), which fence
 *   whoever wrote it before. Once that first call's events are written, the partition is read once more,
 *   from where the read back ended to them: another replica's write in between means the claim lost.
 * - Before a call's answer is released, the replica asks for the directory's end (a request sent after its
 *   events were acknowledged, shared by the calls waiting then) and reads the directory up to it: a claim
 *   of the session by a newer generation means another replica took it meanwhile, and the answer is
 *   withheld (SESSION_MOVED: 503 session_moved, which the proxy or the agent retries); the session is let
 *   go. A claim acknowledged before this call's events were is below that end; one acknowledged after came
 *   with a read back that holds this call's events, which the new owner then continues.
 */
import type { ServerResponse } from "node:http";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { TrajflowError } from "../core/errors.ts";
import { PartitionReader, TopicFollower, type FollowedMessage } from "../kafka/topic-follower.ts";
import { KeyedProducer } from "../kafka/keyed-producer.ts";
import { nextGeneration } from "../schemas/ownership.ts";
import type { KafkaOutputConfig } from "./config.ts";
import { sendError } from "./http.ts";
import type { AppendedAt } from "./outputs/output.ts";
import type { GatewaySession, SessionTable } from "./sessions.ts";

/** A directory record: a session begun here, a takeover, or the policy version (POST /weights). */
interface DirectoryRecord {
  kind: "start" | "claim" | "policy";
  session_id?: string;
  partition?: number;
  /** start: the offset of the session's first event. */
  first?: number;
  gen?: number;
  key_sha256?: string;
  version?: number;
  replica: string;
}

/** Where a session's events are, and its claims, as the directory says. */
interface Entry {
  /** Its partition, and an offset there below which none of its events lies. */
  partition: number;
  first: number;
  /** The newest claim's generation, and the first record's (the replica that began the session). */
  gen: number;
  creator: number;
  /** The broker time of its last directory record (for forgetting it after the window). */
  ts: number;
}

/** How long a call waits to confirm its session before its answer is withheld. */
const CONFIRM_TIMEOUT_MS = 10_000;
/** A session's events read back on a takeover: at most this many bytes, within this long. */
const TAKE_LIMITS = { maxBytes: 512 * 1024 * 1024, timeoutMs: 60_000 };

export class Fleet {
  private readonly replica: string;
  private readonly sessions: SessionTable;
  private readonly events: KeyedProducer;
  private readonly directory: KeyedProducer;
  private readonly metrics: Metrics;
  private readonly logger: Logger;
  private readonly windowMs: number;
  private follower!: TopicFollower;
  private reader!: PartitionReader;
  private readonly entries = new Map<string, Entry>();
  /** Session ids by their key's SHA-256. */
  private readonly byKeyHash = new Map<string, string>();
  /**
   * Sessions take() left for this replica to begin (until adopt()): their generation and whereabouts, and
   * (begun over another replica's record) where the read back ended, past which that one's events would lie.
   */
  private readonly reserved = new Map<
    string,
    { gen: number; partition: number; first: number; restoredTo: number }
  >();
  /** Takeovers in progress, so concurrent first calls of one session read it back once. */
  private readonly taking = new Map<string, Promise<GatewaySession | null>>();
  /** The directory's end, asked once for the calls that wait at the same time (directoryEnd()). */
  private asking: Promise<number> | null = null;
  private nextAsk: Promise<number> | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private policyTs = 0;
  /** Told each policy version announced in the directory (POST /weights to any replica), newest last. */
  onPolicy: ((version: number) => void) | null = null;
  /** Whether the directory's window has been read: /readyz waits for it. */
  ready = false;

  private constructor(
    replica: string,
    sessions: SessionTable,
    events: KeyedProducer,
    directory: KeyedProducer,
    windowMs: number,
    metrics: Metrics,
    logger: Logger,
  ) {
    this.replica = replica;
    this.sessions = sessions;
    this.events = events;
    this.directory = directory;
    this.windowMs = windowMs;
    this.metrics = metrics;
    this.logger = logger;
  }

  /** The directory topic of an event topic. */
  static directoryOf(topic: string): string {
    return `${topic}.sessions`;
  }

  /** Starts following the directory from `restore_window_ms` ago; `ready` turns true once that is read. */
  static async start(
    replica: string,
    output: KafkaOutputConfig,
    events: KeyedProducer,
    sessions: SessionTable,
    metrics: Metrics,
    logger: Logger,
  ): Promise<Fleet> {
    const topic = Fleet.directoryOf(output.topic);
    const directory = await KeyedProducer.connect(output.connection, topic, logger, 1);
    const fleet = new Fleet(replica, sessions, events, directory, output.restore_window_ms, metrics, logger);
    fleet.reader = await PartitionReader.start(output.connection, output.topic, replica, logger);
    fleet.follower = await TopicFollower.start(
      output.connection,
      topic,
      Date.now() - output.restore_window_ms,
      replica,
      logger,
      (m) => fleet.seen(m),
    );
    void fleet.follower.ready.then(() => {
      fleet.ready = true;
      logger.info({ sessions: fleet.entries.size }, "The session directory's window is read; taking calls.");
    });
    fleet.sweeper = setInterval(() => fleet.sweep(), 60_000);
    fleet.sweeper.unref();
    return fleet;
  }

  /** One directory record: where a session is, a claim (which lets ours go), or the policy version. */
  private seen(m: FollowedMessage): void {
    if (m.value === null) return;
    let r: DirectoryRecord;
    try {
      r = JSON.parse(m.value.toString("utf8")) as DirectoryRecord;
    } catch {
      return;
    }
    if (r.kind === "policy") {
      if (typeof r.version === "number" && m.timestamp >= this.policyTs) {
        this.policyTs = m.timestamp;
        this.onPolicy?.(r.version);
      }
      return;
    }
    const id = r.session_id;
    if (typeof id !== "string" || typeof r.gen !== "number") return;
    let e = this.entries.get(id);
    if (e === undefined) {
      if (r.kind !== "start" || typeof r.partition !== "number" || typeof r.first !== "number") return;
      e = { partition: r.partition, first: r.first, gen: r.gen, creator: r.gen, ts: m.timestamp };
      this.entries.set(id, e);
    }
    e.ts = m.timestamp;
    if (r.gen > e.gen) e.gen = r.gen;
    if (typeof r.key_sha256 === "string") this.byKeyHash.set(r.key_sha256, id);
    // Taken over by a newer generation: let it go now unless a call of ours is in flight (its confirmation
    // finds the claim); a later call here takes it back, with what the other replica wrote.
    const s = this.sessions.get(id);
    if (r.kind === "claim" && s !== undefined && s.fleet !== null && r.gen > s.gen && s.inFlight === 0)
      this.release(s, "taken");
  }

  private release(s: GatewaySession, why: "taken" | "fenced"): void {
    if (this.sessions.get(s.id) === s) this.sessions.drop(s);
    this.metrics.inc("gateway_sessions_released", why);
  }

  /** Forgets sessions with no directory record in the window. */
  private sweep(): void {
    const oldest = Date.now() - this.windowMs;
    for (const [id, e] of this.entries) if (e.ts < oldest) this.entries.delete(id);
    for (const [hash, id] of this.byKeyHash) if (!this.entries.has(id)) this.byKeyHash.delete(hash);
  }

  /** The session id a key was issued for, where the directory says so. */
  sessionOfKey(keyHash: string): string | undefined {
    return this.byKeyHash.get(keyHash);
  }

  /** Appends a directory record; resolves with its offset once acknowledged. */
  private async record(r: DirectoryRecord): Promise<number> {
    const at = await this.directory.send([{ key: r.session_id ?? "", value: JSON.stringify(r) }]);
    return at.get(0) ?? 0;
  }

  /** Resolves once the directory is read up to `offset` (its record included); throws past the timeout. */
  private async readTo(offset: number): Promise<void> {
    if (!(await this.follower.reached(0, offset, CONFIRM_TIMEOUT_MS)))
      throw new TrajflowError("KAFKA_CLIENT_FAILED", "the session directory was not read in time");
  }

  /** Announces a policy version to every replica (POST /weights reached this one). */
  async announcePolicy(version: number): Promise<void> {
    await this.record({ kind: "policy", version, replica: this.replica });
  }

  /**
   * Makes sure this replica holds session `id` (of `uid`, for a session that begins here) if it exists:
   * claimed and rebuilt from its events. Resolves null when it is held already, or new (then reserved for
   * this replica: adopt() gives it its generation).
   */
  take(id: string, uid: string): Promise<GatewaySession | null> {
    if (this.sessions.get(id) !== undefined) return Promise.resolve(null);
    let taking = this.taking.get(id);
    if (taking === undefined) {
      taking = (this.entries.has(id) ? this.claim(id) : this.reserve(id, uid)).finally(() =>
        this.taking.delete(id),
      );
      this.taking.set(id, taking);
    }
    return taking;
  }

  /**
   * A session the directory does not know: recorded before any of its events is written (its partition,
   * and that partition's end now, below which none of them lies), so that a replica that takes it over
   * later, even before its first events land, reads them all back. Two replicas that begin it at once (a
   * ring that changed under its first calls) agree: the first record is the one; the other takes it over.
   */
  private async reserve(id: string, uid: string): Promise<GatewaySession | null> {
    const partition = this.events.partitionOf(uid);
    const first = (await this.events.endOffsets()).get(partition) ?? 0;
    const gen = nextGeneration(0);
    await this.readTo(
      await this.record({ kind: "start", session_id: id, partition, first, gen, replica: this.replica }),
    );
    if (this.entries.get(id)?.creator !== gen) return this.claim(id);
    this.reserved.set(id, { gen, partition, first, restoredTo: -1 });
    return null;
  }

  private async claim(id: string): Promise<GatewaySession | null> {
    const started = performance.now();
    const e = this.entries.get(id)!;
    const gen = nextGeneration(e.gen);
    // The claim first: a write of the old owner acknowledged after it is fenced, or read back below.
    await this.record({ kind: "claim", session_id: id, partition: e.partition, gen, replica: this.replica });
    const end = (await this.events.endOffsets()).get(e.partition) ?? 0;
    const values = await this.reader.read(
      e.partition,
      e.first,
      end,
      (h) => h["trajflow-session"] === id,
      TAKE_LIMITS,
    );
    for (const v of values) this.sessions.restoreFrom(v);
    this.sessions.restored();
    const s = this.sessions.get(id);
    if (s === undefined) {
      // Begun elsewhere, none of its events written yet (that replica died, or its first call is still in
      // flight): begun here, above it; its first events are checked against what lands meanwhile.
      this.reserved.set(id, { gen, partition: e.partition, first: e.first, restoredTo: end });
      return null;
    }
    const highest = s.ownership?.highest ?? 0;
    s.ownership = null;
    if (highest >= gen) {
      // Events of a newer claim than the directory showed yet: claim above it, from a fresh read back.
      this.sessions.drop(s);
      e.gen = Math.max(e.gen, highest);
      return this.claim(id);
    }
    s.gen = gen;
    s.fleet = { partition: e.partition, first: e.first, restoredTo: end, recordedAt: Date.now() };
    this.sessions.touch(s);
    const ms = performance.now() - started;
    this.metrics.inc("gateway_sessions_taken");
    this.metrics.observe("gateway_take_seconds", ms / 1000, TAKE_BUCKETS);
    this.logger.debug(
      { session_id: id, events: values.length, ms: Math.round(ms), gen: s.gen },
      "Took a session over from the topic.",
    );
    return s;
  }

  /** Gives a session new here its generation and whereabouts, as take() reserved them. */
  adopt(s: GatewaySession): void {
    if (s.fleet !== null) return;
    const r = this.reserved.get(s.id);
    this.reserved.delete(s.id);
    if (r === undefined) {
      // Not reserved (take() was not asked first): recorded by its first confirmation, unchecked.
      s.gen = nextGeneration(0);
      s.fleet = { partition: this.events.partitionOf(s.uid), first: -1, restoredTo: -1, recordedAt: 0 };
      return;
    }
    s.gen = r.gen;
    s.fleet = { partition: r.partition, first: r.first, restoredTo: r.restoredTo, recordedAt: Date.now() };
  }

  /**
   * The directory's end, from a request sent after this was called: one request serves every call that
   * waits while it is in flight's successor.
   */
  private directoryEnd(): Promise<number> {
    const ask = () => this.directory.endOffsets().then((m) => m.get(0) ?? 0);
    if (this.asking === null) {
      this.asking = ask().finally(() => (this.asking = null));
      return this.asking;
    }
    this.nextAsk ??= this.asking
      .catch(() => 0)
      .then(() => {
        this.nextAsk = null;
        return this.directoryEnd();
      });
    return this.nextAsk;
  }

  /**
   * Resolves once the session's events just appended (`at`) are known to be the session's: no newer claim
   * in the directory, and (the first call since taking it) no other replica's write before them. Throws
   * SESSION_MOVED (and lets the session go) when there is one, or when this cannot be told in time.
   */
  async confirm(s: GatewaySession, at: AppendedAt | undefined): Promise<void> {
    const hold = s.fleet;
    if (hold === null) return;
    let why: string | null;
    try {
      why = at === undefined ? "its events' place is unknown" : await this.check(s, at);
    } catch (err) {
      why = `it could not be confirmed (${(err as Error).message})`;
    }
    if (why !== null) {
      this.release(s, "fenced");
      throw moved(s, why);
    }
    hold.claimedAt ??= at!.first;
  }

  /** Why the call's events are not the session's, or null when they are. */
  private async check(s: GatewaySession, at: AppendedAt): Promise<string | null> {
    const hold = s.fleet!;
    const first = hold.claimedAt === undefined;
    // The first events since the session was taken over (or begun here after overruling another replica's
    // reservation): another replica's events of it between the read back and them landed first.
    if (first && hold.restoredTo >= 0 && at.first > hold.restoredTo) {
      const between = await this.reader.read(
        at.partition,
        hold.restoredTo,
        at.first,
        (h) => h["trajflow-session"] === s.id,
        TAKE_LIMITS,
      );
      if (between.length > 0) {
        this.metrics.inc("gateway_fenced_calls", "lost_claim");
        return `another replica wrote it while this one took it over (${between.length} events)`;
      }
    }
    if (first && hold.first < 0) {
      // A session begun without take(): the directory learns where it is before its first answer.
      hold.first = at.first;
      await this.recordStart(s);
    }
    if (!(await this.follower.reached(0, (await this.directoryEnd()) - 1, CONFIRM_TIMEOUT_MS))) {
      this.metrics.inc("gateway_fenced_calls", "unconfirmed");
      return "the session directory was not read in time";
    }
    const newest = this.entries.get(s.id)?.gen ?? 0;
    if (newest > s.gen) {
      this.metrics.inc("gateway_fenced_calls", "taken");
      return `another gateway replica claimed it (generation ${newest})`;
    }
    // A session that goes on is recorded again within every window, so a replica started later finds it.
    if (Date.now() - hold.recordedAt > this.windowMs / 2) await this.recordStart(s);
    return null;
  }

  /** The directory's record of where a session held here is (written again while it goes on). */
  private async recordStart(s: GatewaySession): Promise<void> {
    const hold = s.fleet!;
    hold.recordedAt = Date.now();
    await this.record({
      kind: "start",
      session_id: s.id,
      partition: hold.partition,
      first: hold.first,
      gen: s.gen,
      ...(s.apiKeyHash !== null ? { key_sha256: s.apiKeyHash } : {}),
      replica: this.replica,
    });
  }

  async close(): Promise<void> {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    await Promise.all([this.follower.close(), this.reader.close()]);
    await this.directory.close();
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
