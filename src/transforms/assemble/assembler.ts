/**
 * The `assemble` transform: a stateful task that routes decoded events to their sessions, finalizes a
 * session once it is complete (ended, holding the rewards it awaits), or when its reward grace passed or
 * it went idle, and emits each finalized session's rows.
 *
 * Time is event time, so a replay closes sessions at the same points as the live run did, and output is
 * deterministic for the same input. The watermark is the greatest `ts` seen, but one session cannot move
 * it more than `max_clock_skew_ms` past every other session's clock: a single event with a clock a day
 * ahead would otherwise time out every open session. A live source that went quiet moves the clock on
 * with wall-clock time (`advanceTo`), since no event will (docs/assembly.md, "Time").
 */
import { RateLimitedWarning } from "../../core/logger.ts";
import { makeDeadLetter } from "../../core/records.ts";
import { RowFlags } from "../../schemas/trajectory.ts";
import type { DecodedEvent, RejectedEnvelope } from "./decode/decode.ts";
import { FingerprintSet } from "./fingerprints.ts";
import { fencedLetter } from "./owner-fence.ts";
import { extractRows } from "./rows.ts";
import { sessionKey, type RowTurn, type SessionOutput } from "../../schemas/session.ts";
import { addFlag } from "./call-state.ts";
import { COMPONENT, SessionState, type AssembleContext } from "./session.ts";
import { clockSkewMs } from "./config.ts";

export type { SessionOutput };

/** How far the watermark must move (event time) before idle sessions are looked for again. */
const SWEEP_EVERY_MS = 1_000;

/**
 * Sessions not open yet whose rejected events are remembered (their seqs, so the session's later events
 * need not wait for them). Bounded: a flood of garbage with a new session id per line must not hold memory
 * (issue 27 item 10); past it the oldest are forgotten (counted in `rejected_seqs_forgotten`).
 */
export const REJECTED_AHEAD_CAP = 16_384;

/** What a caller holds for a remembered rejection (a Kafka lane: its offset), released when forgotten. */
export interface RejectedHold {
  release(): void;
}

interface RejectedAhead {
  envelopes: RejectedEnvelope[];
  hold: RejectedHold | null;
}

export class Assembler {
  private readonly ctx: AssembleContext;
  private readonly sessions = new Map<string, SessionState>();
  /** Rejected events of sessions not open yet, oldest first (see REJECTED_AHEAD_CAP). */
  private readonly rejectedAhead = new Map<string, RejectedAhead>();
  /** Finalized sessions, to recognise their late (or redelivered) events. */
  private readonly finalized: { has(key: string): boolean; add(key: string): void };
  private watermark = 0;
  /** The least the watermark may be: where wall-clock advances of a quiet live lane took it. */
  private floor = -Infinity;
  private readonly skewMs: number;
  /** The two most advanced session clocks (latest ts per session): the watermark follows the second. */
  private top1 = { key: "", ts: -Infinity };
  private top2 = -Infinity;
  /** One warning line per 10 s however many sessions are cut (a flood wrote 45 MB of log). */
  private cutWarning: RateLimitedWarning | null | undefined;
  /**
   * The owner generation of finalized sessions written by a fleet of gateway replicas (schemas/ownership.ts),
   * the last FINAL_OWNERS_KEPT: a stale replica's write after the end is FENCED_WRITE, not LATE_EVENT.
   */
  private readonly finalOwners = new Map<string, number>();
  private lastSweep = 0;

  constructor(ctx: AssembleContext) {
    this.ctx = ctx;
    const cap = ctx.config.remember_finalized;
    this.finalized = cap === 0 ? new FingerprintSet() : new RecentKeys(cap);
    this.skewMs = clockSkewMs(ctx.config);
  }

  get openSessions(): number {
    return this.sessions.size;
  }

  /** True when the session was finalized here (its later events are dead-lettered as LATE_EVENT). */
  isFinalized(uid: string, sessionId: string, key = sessionKey(uid, sessionId)): boolean {
    return this.finalized.has(key);
  }

  /** The greatest event time seen: the clock that closes sessions (and times out groups downstream). */
  get eventTime(): number {
    return this.watermark;
  }

  /**
   * Tells the session that the decoder rejected its event `seq` (already dead-lettered), so later events
   * need not wait for it. A rejected event never opens a session: for a session not open yet, its seq is
   * remembered (bounded) until a valid event opens it, with `hold` (released if it is forgotten; a later
   * rejection's hold is released at once, the first one holds for both). Returns the sessions finalized
   * meanwhile.
   */
  pushRejected(envelope: RejectedEnvelope, hold: RejectedHold | null = null): SessionOutput[] {
    const key = sessionKey(envelope.uid, envelope.session_id);
    if (this.finalized.has(key)) {
      hold?.release();
      return [];
    }
    if (!this.sessions.has(key)) {
      this.rememberRejected(key, envelope, hold);
      return [];
    }
    hold?.release();
    return this.route(key, envelope.uid, envelope.session_id, envelope.ts, envelope);
  }

  /**
   * The hold remembered with a session's earlier rejections, handed to the caller, which now keeps it (as
   * the session's own); null when there is none.
   */
  takeRejectedHold(uid: string, sessionId: string): RejectedHold | null {
    const ahead = this.rejectedAhead.get(sessionKey(uid, sessionId));
    if (ahead === undefined) return null;
    const { hold } = ahead;
    ahead.hold = null;
    return hold;
  }

  private rememberRejected(key: string, envelope: RejectedEnvelope, hold: RejectedHold | null): void {
    const known = this.rejectedAhead.get(key);
    if (known !== undefined) {
      known.envelopes.push(envelope);
      hold?.release();
      return;
    }
    this.rejectedAhead.set(key, { envelopes: [envelope], hold });
    if (this.rejectedAhead.size > REJECTED_AHEAD_CAP) {
      const [oldest, ahead] = this.rejectedAhead.entries().next().value!;
      this.forgetRejected(oldest, ahead);
      this.ctx.metrics.inc("rejected_seqs_forgotten", "", ahead.envelopes.length);
    }
  }

  private forgetRejected(key: string, ahead: RejectedAhead): void {
    this.rejectedAhead.delete(key);
    ahead.hold?.release();
  }

  /** Forgets remembered rejections whose session would have timed out by now (oldest first). */
  private expireRejected(): void {
    const horizon = this.watermark - this.ctx.config.idle_timeout_ms;
    for (const [key, ahead] of this.rejectedAhead) {
      if (ahead.envelopes[ahead.envelopes.length - 1]!.ts > horizon) break;
      this.forgetRejected(key, ahead);
    }
  }

  /**
   * Applies one event; returns the sessions it caused to finalize (possibly none). `key`: its session's
   * key, and `open`: the caller found the session not finalized (isFinalized), both so that an event's key
   * is made and looked up once.
   */
  push(d: DecodedEvent, key = sessionKey(d.event.uid, d.event.session_id), open = false): SessionOutput[] {
    const ev = d.event;
    this.ctx.metrics.inc("events_received", ev.type);
    if (!open && this.finalized.has(key)) {
      const owner = this.finalOwners.get(key);
      if (owner !== undefined && (ev.gen ?? 0) < owner) {
        // A stale gateway replica's write to a session its new owner already ended: fenced, not late.
        this.ctx.metrics.inc("fenced_events", "stale_owner");
        this.ctx.deadLetters.write(fencedLetter(d, owner, "stale_owner", COMPONENT));
        return [];
      }
      this.ctx.deadLetters.write(
        makeDeadLetter(
          "LATE_EVENT",
          `${ev.type} event (seq ${ev.seq}) arrived after session ${ev.session_id} of uid ${ev.uid} was ` +
            `finalized; list the rewards a session waits for in await_rewards, raise reward_grace_ms, or ` +
            `raise idle_timeout_ms if this is expected`,
          COMPONENT,
          d.record,
          { uid: ev.uid, session_id: ev.session_id, seq: ev.seq },
        ),
      );
      return [];
    }
    return this.route(key, ev.uid, ev.session_id, ev.ts, d);
  }

  private route(
    key: string,
    uid: string,
    sessionId: string,
    ts: number,
    d: DecodedEvent | RejectedEnvelope,
  ): SessionOutput[] {
    let session = this.sessions.get(key);
    if (session === undefined) {
      session = new SessionState(uid, sessionId, this.ctx);
      this.sessions.set(key, session);
      this.ctx.metrics.inc("sessions_opened");
      const ahead = this.rejectedAhead.get(key);
      if (ahead !== undefined) {
        // The caller took the hold (takeRejectedHold) or had none: nothing to release here.
        this.rejectedAhead.delete(key);
        for (const envelope of ahead.envelopes) session.offer(envelope);
      }
    }
    session.offer(d);
    this.advance(key, ts);

    const out: SessionOutput[] = [];
    if (this.isFinal(session)) out.push(this.finalize(key, session, null));
    if (this.watermark - this.lastSweep >= SWEEP_EVERY_MS) {
      this.lastSweep = this.watermark;
      out.push(...this.sweep());
    }
    return out;
  }

  /** Moves the watermark with a session's clock, bounded by the second most advanced session's. */
  private advance(key: string, ts: number): void {
    if (key === this.top1.key) {
      if (ts > this.top1.ts) this.top1.ts = ts;
    } else if (ts > this.top1.ts) {
      this.top2 = this.top1.ts;
      this.top1 = { key, ts };
    } else if (ts > this.top2) {
      this.top2 = ts;
    }
    // With one session so far, nobody else can be timed out by its clock.
    const bounded = this.top2 === -Infinity ? this.top1.ts : Math.min(this.top1.ts, this.top2 + this.skewMs);
    // Non-decreasing but for one step: a first session's outlier clock stops counting once a second
    // session shows the real time. Never below where a quiet lane's wall clock took it.
    this.watermark = Math.max(bounded, this.floor);
    if (this.lastSweep > this.watermark) this.lastSweep = this.watermark;
  }

  /**
   * Moves the clock to at least `time` (a quiet live lane, with wall-clock time) and finalizes what that
   * ends: sessions whose grace passed or that went idle. Events arriving later never move it back.
   */
  advanceTo(time: number): SessionOutput[] {
    if (time <= this.watermark) return [];
    this.floor = time;
    this.watermark = time;
    this.lastSweep = time;
    return this.sweep();
  }

  /** Ended and complete, or ended and its reward grace passed. */
  private isFinal(session: SessionState): boolean {
    if (session.end === null || session.hasPending) return false;
    const { await_rewards, reward_grace_ms } = this.ctx.config;
    return this.watermark >= session.end.ts + reward_grace_ms || session.isComplete(await_rewards);
  }

  /** Finalizes sessions whose grace period passed or that went idle. */
  private sweep(): SessionOutput[] {
    const out: SessionOutput[] = [];
    const { idle_timeout_ms } = this.ctx.config;
    this.expireRejected();
    for (const [key, session] of this.sessions) {
      if (session.end !== null && !session.hasPending) {
        if (this.isFinal(session)) out.push(this.finalize(key, session, null));
      } else if (this.watermark >= session.lastTs + idle_timeout_ms) {
        out.push(this.finalize(key, session, "timeout"));
      }
    }
    return out;
  }

  /**
   * Finalizes one open session now, before its end (memory limits). Its rows are flagged `session_cut`
   * unless it had already ended, and its later events are dead-lettered as LATE_EVENT.
   */
  cut(uid: string, sessionId: string): SessionOutput | null {
    const key = sessionKey(uid, sessionId);
    const session = this.sessions.get(key);
    if (session === undefined) return null;
    if (session.end === null) addFlag(session.flags, RowFlags.SESSION_CUT);
    this.ctx.metrics.inc("sessions_cut");
    this.cutWarning ??=
      this.ctx.logger === undefined
        ? null
        : new RateLimitedWarning(
            this.ctx.logger,
            "Cut open sessions to stay within the open-session limits; their later events will be dead-lettered.",
          );
    this.cutWarning?.warn({ uid, session_id: sessionId });
    return this.finalize(key, session, "timeout");
  }

  /** End of input: finalizes every open session, in the order they opened. */
  flush(): SessionOutput[] {
    for (const [key, ahead] of this.rejectedAhead) this.forgetRejected(key, ahead);
    const out: SessionOutput[] = [];
    for (const [key, session] of this.sessions) out.push(this.finalize(key, session, "timeout"));
    return out;
  }

  private finalize(key: string, session: SessionState, status: "timeout" | null): SessionOutput {
    session.close(status);
    const turns: RowTurn[][] = [];
    const rows = extractRows(session, this.ctx.config, this.ctx.metrics, turns);
    // The rows hold copies of the tokens: the session's chunks go to the next sessions.
    session.trie.release();
    this.sessions.delete(key);
    this.finalized.add(key);
    const owner = session.fence?.gen ?? 0;
    if (owner > 0) {
      this.finalOwners.set(key, owner);
      if (this.finalOwners.size > FINAL_OWNERS_KEPT)
        this.finalOwners.delete(this.finalOwners.keys().next().value!);
    }
    const { metrics } = this.ctx;
    metrics.inc("sessions_finalized", session.end?.status ?? "timeout");
    metrics.inc("tokens_received", "", session.tokensIn);
    if (rows.length === 0) metrics.inc("sessions_without_rows");
    return {
      uid: session.uid,
      sessionId: session.sessionId,
      rows,
      status: session.end?.status ?? "timeout",
      sampleIndex: session.start?.sample_index ?? null,
      groupSize: session.start?.group_size ?? null,
      endedAt: session.end?.ts ?? session.lastTs,
      metadata: (session.start?.metadata as Record<string, unknown> | undefined) ?? null,
      turns,
      rewards: session.rewards,
      withoutRows: rows.length === 0 ? whyNoRows(session) : null,
    };
  }
}

/** Finalized fleet sessions whose owner generation is kept (16 bytes and a key each). */
const FINAL_OWNERS_KEPT = 100_000;

/** The last `cap` keys added (the opt-in bound of `remember_finalized`). */
class RecentKeys {
  private readonly keys = new Set<string>();
  private readonly cap: number;

  constructor(cap: number) {
    this.cap = cap;
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }

  add(key: string): void {
    this.keys.add(key);
    if (this.keys.size > this.cap) this.keys.delete(this.keys.values().next().value!);
  }
}

/** Why a finalized session has no row, for its SESSION_WITHOUT_ROWS dead letter. */
function whyNoRows(session: SessionState): string {
  if (session.calls.size === 0 && session.requests.size === 0) return "it made no model call";
  if (session.calls.size === 0) return `none of its ${session.requests.size} request(s) got a response`;
  return `none of its ${session.calls.size} answered call(s) was kept (retry orphans, or flagged; see the session's other dead letters)`;
}
