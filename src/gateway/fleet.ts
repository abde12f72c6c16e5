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
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { isTrajflowError, TrajflowError } from "../core/errors.ts";
import { PartitionReader } from "../kafka/topic-follower.ts";
import type { KeyedProducer } from "../kafka/keyed-producer.ts";
import { nextGeneration } from "../schemas/ownership.ts";
import type { KafkaOutputConfig } from "./config.ts";
import { SessionDirectory, type Entry } from "./fleet-directory.ts";
import { sendError } from "./http.ts";
import type { AppendedAt } from "./outputs/output.ts";
import { header } from "./requests.ts";
import { apiKey } from "./session-finder.ts";
import { keyHash, type GatewaySession, type SessionTable } from "./sessions.ts";

/**
 * A replica holds each session it serves for LEASE_MS at a time, renewed every RENEW_MS while the session
 * has calls: within its lease it answers without asking the directory, and no other replica claims the
 * session before the lease ended and LEASE_MARGIN_MS more (the clocks' skew between replicas must stay
 * below it). A session whose replica died is taken over after at most LEASE_MS + LEASE_MARGIN_MS.
 */
const LEASE_MS = 4_000;
const RENEW_MS = 1_000;
const LEASE_MARGIN_MS = 1_000;
/** How long a takeover waits for another replica's lease that keeps being renewed before it gives up. */
const LEASE_WAIT_MS = 2 * LEASE_MS + LEASE_MARGIN_MS;

/** Sessions per lease record (about 60 bytes each). */
const RENEWALS_PER_RECORD = 5_000;

/** A session's events read back on a takeover: at most this many bytes, within this long. */
const TAKE_LIMITS = { maxBytes: 512 * 1024 * 1024, timeoutMs: 60_000 };

export class Fleet {
  private readonly replica: string;
  private readonly sessions: SessionTable;
  private readonly events: KeyedProducer;
  private readonly dir: SessionDirectory;
  private readonly metrics: Metrics;
  private readonly logger: Logger;
  private readonly windowMs: number;
  private reader!: PartitionReader;
  /**
   * Sessions take() left for this replica to begin (until adopt()): their generation and whereabouts, and
   * (begun over another replica's record) where the read back ended, past which that one's events would lie.
   */
  private readonly reserved = new Map<
    string,
    { gen: number; partition: number; first: number; restoredTo: number; leaseUntil: number }
  >();
  /** Takeovers in progress, so concurrent first calls of one session read it back once. */
  private readonly taking = new Map<string, Promise<GatewaySession | null>>();
  private renewer: NodeJS.Timeout | null = null;
  private renewing = false;
  /** Whether the directory's window has been read: /readyz waits for it. */
  get ready(): boolean {
    return this.dir.ready;
  }

  /** Told each policy version announced in the directory (POST /weights to any replica), newest last. */
  set onPolicy(f: (version: number) => void) {
    this.dir.onPolicy = f;
    // A version posted before this replica started (within the window) holds until the next one.
    if (this.dir.policy !== undefined) f(this.dir.policy);
  }

  private constructor(
    replica: string,
    sessions: SessionTable,
    events: KeyedProducer,
    dir: SessionDirectory,
    windowMs: number,
    metrics: Metrics,
    logger: Logger,
  ) {
    // Each process its own owner: a replica restarted under the same name waits out its predecessor's leases.
    this.replica = `${replica}:${randomBytes(4).toString("hex")}`;
    this.sessions = sessions;
    this.events = events;
    this.dir = dir;
    dir.onClaim = (id, gen) => {
      // Taken over by a newer generation: let it go now unless a call of ours is in flight (its confirmation
      // finds the claim); a later call here takes it back, with what the other replica wrote.
      const s = this.sessions.get(id);
      if (s !== undefined && s.fleet !== null && gen > s.gen && s.inFlight === 0) this.release(s, "taken");
    };
    this.windowMs = windowMs;
    this.metrics = metrics;
    this.logger = logger;
  }

  /** Starts following the session directory from `restore_window_ms` ago; `ready` once that is read. */
  static async start(
    replica: string,
    output: KafkaOutputConfig,
    events: KeyedProducer,
    sessions: SessionTable,
    metrics: Metrics,
    logger: Logger,
  ): Promise<Fleet> {
    const window = output.restore_window_ms;
    const dir = await SessionDirectory.open(output.connection, output.topic, window, replica, logger);
    const fleet = new Fleet(replica, sessions, events, dir, window, metrics, logger);
    fleet.reader = await PartitionReader.start(output.connection, output.topic, replica, logger);
    fleet.renewer = setInterval(() => {
      if (fleet.renewing) return;
      fleet.renewing = true;
      fleet
        .renew()
        .catch((err: unknown) =>
          logger.warn(
            { err: (err as Error).message },
            "Leases could not be renewed; they lapse unless renewed soon.",
          ),
        )
        .finally(() => (fleet.renewing = false));
    }, RENEW_MS);
    fleet.renewer.unref();
    return fleet;
  }

  private release(s: GatewaySession, why: "taken" | "fenced" | "lapsed"): void {
    if (this.sessions.get(s.id) === s) this.sessions.drop(s);
    this.metrics.inc("gateway_sessions_released", why);
  }

  /**
   * The session a call names (its path's id, else its key, else X-Session-Id) taken over, or reserved
   * when new; false once the call was answered 503 (`refuse`: the gateway's answer when it cannot be).
   */
  takeCall(
    req: IncomingMessage,
    res: ServerResponse,
    pathId: string | null,
    refuse: (status: number, message: string) => void,
  ): Promise<boolean> {
    let id = pathId;
    if (id === null) {
      const key = apiKey(req);
      if (key !== null && this.sessions.byApiKey(key) === undefined)
        id = this.dir.sessionOfKey(keyHash(key)) ?? null;
      const named = req.headers["x-session-id"];
      if (id === null && typeof named === "string" && named !== "") id = named;
    }
    if (id === null) return Promise.resolve(true);
    return this.takeId(res, id, header(req, "x-trajflow-uid") ?? id, refuse);
  }

  /** Session `id` taken over, or reserved when new (`uid`: the uid it would begin with); false once answered. */
  async takeId(
    res: ServerResponse,
    id: string,
    uid: string,
    refuse: (status: number, message: string) => void,
  ): Promise<boolean> {
    try {
      await this.take(id, uid);
      return true;
    } catch (err) {
      if (isTrajflowError(err) && err.code === "SESSION_MOVED") withholdMoved(res, err);
      else {
        this.logger.warn(
          { session_id: id, err: (err as Error).message },
          "A session could not be taken over.",
        );
        refuse(503, `session ${id} could not be read back: ${(err as Error).message}`);
      }
      return false;
    }
  }

  /** Announces a policy version to every replica (POST /weights reached this one). */
  async announcePolicy(version: number): Promise<void> {
    await this.dir.record({ kind: "policy", version, replica: this.replica });
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
      taking = (this.dir.entries.has(id) ? this.claim(id) : this.reserve(id, uid)).finally(() =>
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
    const leaseUntil = Date.now() + LEASE_MS;
    const start = { kind: "start", session_id: id, partition, first, gen, lease_until: leaseUntil } as const;
    await this.dir.readTo(await this.dir.record({ ...start, replica: this.replica }));
    if (this.dir.entries.get(id)?.creator !== gen) return this.claim(id);
    this.reserved.set(id, { gen, partition, first, restoredTo: -1, leaseUntil });
    return null;
  }

  /**
   * Resolves once the session's owner's lease has ended (and the margin for the clocks' skew), or it was
   * released; throws SESSION_MOVED when it is renewed on for longer than LEASE_WAIT_MS
   * (another replica serves its calls now: the proxy's retry finds the one).
   */
  private async leaseEnded(id: string, e: Entry): Promise<void> {
    const started = Date.now();
    for (let now = started; now < e.leaseUntil + LEASE_MARGIN_MS; now = Date.now()) {
      if (now - started > LEASE_WAIT_MS)
        throw new TrajflowError("SESSION_MOVED", `session ${id} is held by gateway replica ${e.owner}`);
      await new Promise((r) => setTimeout(r, Math.min(100, e.leaseUntil + LEASE_MARGIN_MS - now)));
    }
    this.metrics.observe("gateway_lease_wait_seconds", (Date.now() - started) / 1000, TAKE_BUCKETS);
  }

  private async claim(id: string): Promise<GatewaySession | null> {
    const started = performance.now();
    const e = this.dir.entries.get(id)!;
    await this.leaseEnded(id, e);
    const gen = nextGeneration(e.gen);
    // The claim first: a write of the old owner acknowledged after it is fenced, or read back below.
    const leaseUntil = Date.now() + LEASE_MS;
    const claim = {
      kind: "claim",
      session_id: id,
      partition: e.partition,
      gen,
      lease_until: leaseUntil,
    } as const;
    await this.dir.record({ ...claim, replica: this.replica });
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
      this.reserved.set(id, { gen, partition: e.partition, first: e.first, restoredTo: end, leaseUntil });
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
    s.fleet = { partition: e.partition, first: e.first, restoredTo: end, recordedAt: Date.now(), leaseUntil };
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
      const partition = this.events.partitionOf(s.uid);
      s.fleet = { partition, first: -1, restoredTo: -1, recordedAt: 0, leaseUntil: 0 };
      return;
    }
    s.gen = r.gen;
    const { partition, first, restoredTo, leaseUntil } = r;
    s.fleet = { partition, first, restoredTo, recordedAt: Date.now(), leaseUntil };
  }

  /**
   * Resolves once the session's events just appended (`at`) are known to be the session's: no newer claim
   * in the directory, and (the first call since taking it) no other replica's write before them. Throws
   * SESSION_MOVED (and lets the session go) when there is one, or when this cannot be told in time.
   */
  async confirm(s: GatewaySession, at: AppendedAt | undefined): Promise<void> {
    const hold = s.fleet;
    if (hold === null) return;
    // Within the lease, and the first events since taking the session confirmed (or it began here): no other
    // replica can have claimed it (none claims before the lease ended).
    const settled = hold.claimedAt !== undefined || (hold.restoredTo < 0 && hold.first >= 0);
    if (settled && at !== undefined && Date.now() < hold.leaseUntil) {
      hold.claimedAt ??= at.first;
      return;
    }
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
    // A lease that lapsed (a stall longer than it) is not renewed: another replica may be claiming the
    // session now. Let it go after this call; the next call here claims it again.
    if (Date.now() >= hold.leaseUntil) this.release(s, "lapsed");
  }

  /**
   * Renews the lease of every session held here that had a call within the lease (RENEW_MS apart): one
   * directory record for all of them. A lease that already lapsed is not renewed (confirm() lets it go).
   */
  private async renew(): Promise<void> {
    const sentAt = Date.now();
    const renewed: GatewaySession[] = [];
    for (const s of this.sessions.all())
      if (
        s.fleet !== null &&
        sentAt < s.fleet.leaseUntil &&
        (s.inFlight > 0 || sentAt - s.lastActive < LEASE_MS)
      )
        renewed.push(s);
    for (let i = 0; i < renewed.length; i += RENEWALS_PER_RECORD) {
      const part = renewed.slice(i, i + RENEWALS_PER_RECORD);
      const leaseUntil = sentAt + LEASE_MS;
      const sessions = part.map((s): [string, number] => [s.id, s.gen]);
      await this.dir.record({ kind: "lease", sessions, lease_until: leaseUntil, replica: this.replica });
      // Renewed only where the lease still ran when the renewal was sent.
      for (const s of part)
        if (s.fleet !== null && sentAt < s.fleet.leaseUntil) s.fleet.leaseUntil = leaseUntil;
    }
    // A session that goes on is recorded again within every window, so a replica started later finds it.
    for (const s of renewed)
      if (s.fleet !== null && s.fleet.first >= 0 && sentAt - s.fleet.recordedAt > this.windowMs / 2)
        await this.recordStart(s);
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
    if (!(await this.dir.reached((await this.dir.end()) - 1))) {
      this.metrics.inc("gateway_fenced_calls", "unconfirmed");
      return "the session directory was not read in time";
    }
    const newest = this.dir.entries.get(s.id)?.gen ?? 0;
    if (newest > s.gen) {
      this.metrics.inc("gateway_fenced_calls", "taken");
      return `another gateway replica claimed it (generation ${newest})`;
    }
    return null;
  }

  /** The directory's record of where a session held here is (written again while it goes on). */
  private async recordStart(s: GatewaySession): Promise<void> {
    const hold = s.fleet!;
    hold.recordedAt = Date.now();
    await this.dir.record({
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
    if (this.renewer !== null) clearInterval(this.renewer);
    // Stopping (the server took its last call): the sessions held here are let go for the others to take.
    const held: Array<[string, number]> = [];
    for (const s of this.sessions.all()) if (s.fleet !== null) held.push([s.id, s.gen]);
    for (let i = 0; i < held.length; i += RENEWALS_PER_RECORD)
      await this.dir
        .record({
          kind: "release",
          sessions: held.slice(i, i + RENEWALS_PER_RECORD),
          replica: this.replica,
        })
        .catch(() => undefined);
    await Promise.all([this.dir.close(), this.reader.close()]);
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
