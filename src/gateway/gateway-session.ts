/**
 * One session as the gateway holds it: its seq counter, its branch tips for the delta form (a tip is a
 * call's prompt ++ output; a new call whose prompt starts with one is sent in the delta form against that
 * call), its upstream, its counts, and, in a fleet of replicas, its owner generation and whereabouts.
 * Only `maxTips` tips are kept: a call that extends a forgotten one is sent in the full form, which is
 * always correct, only larger.
 */
import type { ResponseStore } from "./apis/response-store.ts";
import type { Ownership } from "../schemas/ownership.ts";

export interface Tip {
  callId: string;
  /** The call's prompt ++ output. */
  tokens: Int32Array;
  /** The prompt's length within `tokens`. */
  promptLength: number;
  /** Prompt mode tokens: the conversation this tip ends (continuation/history.ts). */
  history?: TipHistory;
}

/** A tip's conversation, as digests (continuation/history.ts): what a later call's messages are matched to. */
export interface TipHistory {
  /** The digest of the call's messages (and tools) plus the answer it was given. */
  digest: string;
  /** How many messages that is (the call's messages, and its answer). */
  count: number;
  /** The digest of the call's messages alone: a call with the same messages is the same prompt again. */
  promptDigest: string;
  /** The template settings the call rendered with (history.ts settingsKey); unknown after a restore. */
  settings?: string;
}

export type SessionState = "open" | "ended";

/** What a replica of a fleet knows of a session it holds (fleet.ts). */
export interface FleetHold {
  /** The session's partition of the topic, and its first event's offset there (-1: none written yet). */
  partition: number;
  first: number;
  /** Offsets below this were read back when the session was taken (or it began at it). */
  restoredTo: number;
  /** The offset of the first event written since the session was taken, once confirmed. */
  claimedAt?: number;
  /** When the session directory last recorded it here (ms). */
  recordedAt: number;
  /** Until when this replica holds it (its lease, fleet.ts), by its own clock (ms). */
  leaseUntil: number;
}

export interface SessionInit {
  uid: string;
  sessionId: string;
  sampleIndex?: number;
  groupSize?: number;
  metadata?: Record<string, unknown>;
}

export class GatewaySession {
  readonly uid: string;
  readonly id: string;
  readonly sampleIndex: number | undefined;
  readonly groupSize: number | undefined;
  readonly metadata: Record<string, unknown> | undefined;
  /** SHA-256 of the session's API key (POST /sessions), hex; the key itself is never kept. */
  apiKeyHash: string | null = null;
  /** The upstream this session sticks to (its KV cache lives there); -1 before its first call. */
  upstream = -1;
  state: SessionState = "open";
  endStatus: string | null = null;
  /** The next event's seq. */
  seq = 0;
  /** Whether a session.start was written (a session restored without one never gets a second). */
  started = false;
  calls = 0;
  failedCalls = 0;
  sampledTokens = 0;
  inFlight = 0;
  lastActive = Date.now();
  /**
   * The session's appends, one after another: events are built (their seq taken) only when the previous
   * append settled, so a failed append can be sent again first and seq never has a gap.
   */
  chain: Promise<void> = Promise.resolve();
  /**
   * Events whose append failed with an unknown outcome (a broker that may have written them): sent again,
   * byte for byte, before the session's next events. The pipeline ignores an exact redelivery.
   */
  unsettled: Array<{ key: string; value: string }> = [];
  /** The owner generation this gateway writes the session's events with (0: not a replica of a fleet). */
  gen = 0;
  /** A replica of a fleet: where the session's events are and what others wrote since it was taken. */
  fleet: FleetHold | null = null;
  /** While events are read back: which generation owns the session (schemas/ownership.ts). */
  ownership: Ownership | null = null;
  /** The Responses this session stored (previous_response_id, GET /v1/responses/{id}); made on first use. */
  responses: ResponseStore | null = null;
  private readonly tips: Tip[] = [];
  private readonly maxTips: number;

  constructor(init: SessionInit, maxTips: number) {
    this.uid = init.uid;
    this.id = init.sessionId;
    this.sampleIndex = init.sampleIndex;
    this.groupSize = init.groupSize;
    this.metadata = init.metadata;
    this.maxTips = maxTips;
  }

  /** Takes the next `n` seq numbers. */
  takeSeq(n: number): number {
    const first = this.seq;
    this.seq += n;
    return first;
  }

  /** The longest tip the prompt starts with, or null (a prompt equal to a tip is a delta of nothing). */
  parentOf(prompt: Int32Array): Tip | null {
    let best: Tip | null = null;
    for (const tip of this.tips) {
      const t = tip.tokens;
      if (t.length > prompt.length || (best !== null && t.length <= best.tokens.length)) continue;
      if (startsWith(prompt, t)) best = tip;
    }
    return best;
  }

  /** Records a call's prompt ++ output as a tip, replacing the tip it extended. */
  addTip(
    callId: string,
    prompt: Int32Array,
    output: Int32Array,
    parent: string | null,
    history?: TipHistory,
  ): void {
    const tokens = new Int32Array(prompt.length + output.length);
    tokens.set(prompt, 0);
    tokens.set(output, prompt.length);
    if (parent !== null) {
      const at = this.tips.findIndex((t) => t.callId === parent);
      if (at >= 0) this.tips.splice(at, 1);
    }
    this.tips.push({
      callId,
      tokens,
      promptLength: prompt.length,
      ...(history !== undefined ? { history } : {}),
    });
    if (this.tips.length > this.maxTips) this.tips.shift();
  }

  /** The remembered tips (newest last), for matching a call's messages (continuation/plan.ts). */
  branches(): readonly Tip[] {
    return this.tips;
  }

  /** Forgets every tip (the size bound): the next call goes in the full prompt form. */
  dropTips(): void {
    this.tips.length = 0;
  }

  /** The tokens of a remembered tip. */
  tipOf(callId: string): Int32Array | undefined {
    return this.tips.find((t) => t.callId === callId)?.tokens;
  }

  /** A remembered tip. */
  tip(callId: string): Tip | undefined {
    return this.tips.find((t) => t.callId === callId);
  }

  tipCallIds(): string[] {
    return this.tips.map((t) => t.callId);
  }

  /** Bytes the tips hold (for the gateway's memory gauge). */
  tipBytes(): number {
    let n = 0;
    for (const t of this.tips) n += t.tokens.byteLength;
    return n;
  }

  /** What GET /sessions/{id} answers. */
  describe(): Record<string, unknown> {
    return {
      session_id: this.id,
      uid: this.uid,
      state: this.state,
      ...(this.endStatus !== null ? { status: this.endStatus } : {}),
      calls: this.calls,
      failed_calls: this.failedCalls,
      sampled_tokens: this.sampledTokens,
      in_flight: this.inFlight,
      ...(this.sampleIndex !== undefined ? { sample_index: this.sampleIndex } : {}),
      ...(this.groupSize !== undefined ? { group_size: this.groupSize } : {}),
      ...(this.metadata !== undefined ? { metadata: this.metadata } : {}),
    };
  }
}

function startsWith(a: Int32Array, prefix: Int32Array): boolean {
  for (let i = 0; i < prefix.length; i++) if (a[i] !== prefix[i]) return false;
  return true;
}
