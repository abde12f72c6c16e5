/**
 * The gateway's sessions (gateway-session.ts: what it remembers of each) by id and by API key, the bounds
 * that keep that table's memory fixed, and how a session is rebuilt from its events after a restart (or,
 * in a fleet, when a replica takes it over).
 */
import { createHash, randomBytes } from "node:crypto";
import { decodeTokenIds } from "../schemas/tokens.ts";
import { ResponseStore, restoredResponse } from "./apis/response-store.ts";
import { historyDigests, seedDigest, withAnswer } from "./continuation/history.ts";
import { Ownership } from "../schemas/ownership.ts";
import { GatewaySession, type SessionInit } from "./gateway-session.ts";

export {
  GatewaySession,
  type FleetHold,
  type SessionInit,
  type SessionState,
  type Tip,
  type TipHistory,
} from "./gateway-session.ts";

/** Sessions held (tips or not) per session whose tips are kept: the bound on the table's size. */
const HELD_PER_TIPPED = 4;

/** The SHA-256 of an API key, hex: what the gateway keeps and writes in session.start. */
export function keyHash(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

/**
 * Sessions by id and by API key, with the bounds that keep the table's memory fixed:
 * - a session with no call for `idleMs` is forgotten (the pipeline has finalized it by then: its idle
 *   timeout is shorter); its id is remembered (a bounded set) so a late call is answered 409, never given
 *   a second seq 0;
 * - past `maxSessions` sessions with branch tips, the longest idle lose their tips (the large part): their
 *   next call is sent in the full prompt form, which is always correct. Their seq counters stay.
 */
export class SessionTable {
  /** In the order of last use (touch re-inserts): the first entries are the longest idle. */
  private readonly byId = new Map<string, GatewaySession>();
  /** Sessions holding tips, in the order of last use. */
  private readonly tipped = new Map<string, GatewaySession>();
  /** API keys by their SHA-256 (the key itself is never kept; a restart rebuilds this from the events). */
  private readonly byKeyHash = new Map<string, GatewaySession>();
  private readonly expiredIds = new Set<string>();
  private readonly maxSessions: number;
  private readonly idleMs: number;
  private readonly maxTips: number;
  private readonly storedResponses: number;
  /** Sessions forgotten for idleness. */
  forgotten = 0;
  /** Sessions whose tips were dropped for the size bound. */
  tipsDropped = 0;

  constructor(options: { maxSessions: number; idleMs: number; maxTips: number; storedResponses?: number }) {
    this.maxSessions = options.maxSessions;
    this.idleMs = options.idleMs;
    this.maxTips = options.maxTips;
    this.storedResponses = options.storedResponses ?? 0;
  }

  get size(): number {
    return this.byId.size;
  }

  /** Every session held. */
  all(): IterableIterator<GatewaySession> {
    return this.byId.values();
  }

  get(id: string): GatewaySession | undefined {
    return this.byId.get(id);
  }

  /** Whether `id` was forgotten for idleness (a call for it now comes too late). */
  expired(id: string): boolean {
    return this.expiredIds.has(id);
  }

  byApiKey(key: string): GatewaySession | undefined {
    return this.byKeyHash.get(keyHash(key));
  }

  /** Called with each session created here (a fleet's replica gives it its generation, fleet.ts). */
  onCreate: ((s: GatewaySession) => void) | null = null;

  /** Creates a session (the caller checked the id is free). */
  create(init: SessionInit): GatewaySession {
    const s = new GatewaySession(init, this.maxTips);
    this.onCreate?.(s);
    this.byId.set(s.id, s);
    this.expiredIds.delete(s.id);
    this.evict();
    return s;
  }

  /** Gives the session a fresh API key (returned once, to POST /sessions' caller). */
  issueKey(s: GatewaySession): string {
    const key = `tf-${randomBytes(24).toString("base64url")}`;
    this.adoptKeyHash(s, keyHash(key));
    return key;
  }

  /** Maps a key's hash to the session (issueKey, and restore from its session.start). */
  adoptKeyHash(s: GatewaySession, hash: string): void {
    s.apiKeyHash = hash;
    this.byKeyHash.set(hash, s);
  }

  /** Removes a session from memory (DELETE, or forgotten). */
  drop(s: GatewaySession): void {
    this.byId.delete(s.id);
    this.tipped.delete(s.id);
    if (s.apiKeyHash !== null) this.byKeyHash.delete(s.apiKeyHash);
  }

  /** Applies the bounds; never to a session with a call in flight. */
  evict(now = Date.now()): void {
    // Sessions held at all: idle ones, and past HELD_PER_TIPPED × max_sessions the longest idle (a session
    // without tips is a few hundred bytes; this bound keeps a burst of new sessions from growing memory).
    const held = this.maxSessions * HELD_PER_TIPPED;
    for (const s of this.byId.values()) {
      if (now - s.lastActive <= this.idleMs && this.byId.size <= held) break;
      if (s.inFlight > 0) continue;
      this.expire(s);
    }
    for (const s of this.tipped.values()) {
      if (this.tipped.size <= this.maxSessions) break;
      if (s.inFlight > 0) continue;
      s.dropTips();
      this.tipped.delete(s.id);
      this.tipsDropped++;
    }
  }

  /** Forgets a session; a later call for it is answered 409 (never a second seq 0). */
  private expire(s: GatewaySession): void {
    this.drop(s);
    this.forgotten++;
    this.expiredIds.add(s.id);
    if (this.expiredIds.size > this.maxSessions * HELD_PER_TIPPED)
      this.expiredIds.delete(this.expiredIds.values().next().value!);
  }

  /** Marks a session as just used (it moves to the end of the eviction order). */
  touch(s: GatewaySession): void {
    s.lastActive = Date.now();
    this.byId.delete(s.id);
    this.byId.set(s.id, s);
    this.tipped.delete(s.id);
    this.tipped.set(s.id, s);
  }

  /** Bytes the tips of every session hold. */
  tipBytes(): number {
    let n = 0;
    for (const s of this.byId.values()) n += s.tipBytes();
    return n;
  }

  /**
   * Rebuilds sessions from events written before a restart: each session's next seq, whether it started
   * or ended, and its branch tips, so its next call continues it (in the delta form where a tip is known).
   * Lines that are not events of the protocol are skipped: the gateway wrote them, the pipeline judges them.
   */
  restoreFrom(line: Uint8Array): void {
    let ev: Record<string, unknown>;
    try {
      ev = JSON.parse(Buffer.from(line.buffer, line.byteOffset, line.byteLength).toString("utf8")) as Record<
        string,
        unknown
      >;
    } catch {
      return;
    }
    const { uid, session_id: id, seq, type } = ev;
    if (type === "policy.update" && typeof ev.weight_version === "number") {
      this.restoredVersion = ev.weight_version;
      return;
    }
    if (typeof uid !== "string" || typeof id !== "string" || typeof seq !== "number") return;
    let s = this.byId.get(id);
    if (s === undefined) {
      // Not create(): the bounds apply once the whole log is read (restored()).
      s = new GatewaySession(
        {
          uid,
          sessionId: id,
          ...(typeof ev.sample_index === "number" ? { sampleIndex: ev.sample_index } : {}),
          ...(typeof ev.group_size === "number" ? { groupSize: ev.group_size } : {}),
        },
        this.maxTips,
      );
      s.lastActive = 0;
      this.byId.set(s.id, s);
    }
    // The pipeline's rule on which replica owned the session: a fenced write is not part of it.
    const gen = typeof ev.gen === "number" ? ev.gen : 0;
    if (gen !== 0 || s.ownership !== null) {
      const verdict = (s.ownership ??= new Ownership()).judge(gen, seq >= s.seq);
      if (verdict === "fenced" || verdict === "lost_claim") return;
    }
    if (seq + 1 > s.seq) s.seq = seq + 1;
    // A session seen in the events has begun: its session.start (if it had one) is among them or older
    // than the window read back, and a second one would be rejected.
    s.started = true;
    // Idle time counts from the session's last event: one idle before the restart is expired again.
    if (typeof ev.ts === "number") s.lastActive = Math.max(s.lastActive, ev.ts);
    this.byId.delete(s.id);
    this.byId.set(s.id, s);
    this.tipped.delete(s.id);
    this.tipped.set(s.id, s);
    if (type === "session.start" && typeof ev.api_key_sha256 === "string")
      this.adoptKeyHash(s, ev.api_key_sha256);
    else if (type === "session.end") {
      s.state = "ended";
      s.endStatus = typeof ev.status === "string" ? ev.status : null;
    } else if (type === "request") this.restoreRequest(s, ev);
    else if (type === "response") this.restoreResponse(s, ev);
  }

  /** The policy version of the last policy.update read back (POST /weights before the restart). */
  restoredVersion: number | undefined;

  /** Prompts of restored requests, until their responses come: call id → prompt tokens. */
  private readonly restoring = new Map<
    string,
    { prompt: Int32Array; parent: string | null; conversation?: { digest: string; count: number } }
  >();

  /** Requests of stored Responses, until their responses come: what their conversations are rebuilt from. */
  private readonly restoringResponses = new Map<string, Record<string, unknown>>();

  private restoreRequest(s: GatewaySession, ev: Record<string, unknown>): void {
    if (typeof ev.call_id !== "string") return;
    const key = `${s.id}\u0000${ev.call_id}`;
    const prompt = this.promptOf(s, ev);
    if (prompt !== null) {
      const conversation = conversationOf(s, ev);
      this.restoring.set(key, conversation === undefined ? prompt : { ...prompt, conversation });
    }
    if (ev.api === "responses" && this.storedResponses > 0) this.restoringResponses.set(key, ev);
  }

  /** A stored Response rebuilt from its request and response events, into its session's store. */
  private restoreStored(s: GatewaySession, key: string, response: Record<string, unknown>): void {
    const request = this.restoringResponses.get(key);
    if (request === undefined) return;
    this.restoringResponses.delete(key);
    const restored = restoredResponse(request, response);
    if (restored === null) return;
    s.responses ??= new ResponseStore(this.storedResponses);
    s.responses.put(restored.id, restored.stored);
  }

  private restoreResponse(s: GatewaySession, ev: Record<string, unknown>): void {
    if (typeof ev.call_id !== "string") return;
    const key = `${s.id}\u0000${ev.call_id}`;
    this.restoreStored(s, key, ev);
    const restoring = this.restoring.get(key);
    const prompt = restoring ?? this.promptOf(s, ev);
    this.restoring.delete(key);
    const output = decodeTokenIds(ev.output_ids);
    s.calls++;
    if (prompt === null || typeof output === "string") return;
    s.sampledTokens += output.length;
    const c = restoring?.conversation;
    const history =
      c === undefined
        ? undefined
        : {
            digest: withAnswer(
              c.digest,
              typeof ev.text === "string" ? ev.text : undefined,
              asArray(ev.tool_calls),
            ),
            count: c.count + 1,
            promptDigest: c.digest,
          };
    s.addTip(ev.call_id, prompt.prompt, output, prompt.parent, history);
  }

  /** The full prompt of a restored request or response, from its own ids or its parent's tip. */
  private promptOf(
    s: GatewaySession,
    ev: Record<string, unknown>,
  ): { prompt: Int32Array; parent: string | null } | null {
    if (ev.prompt_ids !== undefined) {
      const ids = decodeTokenIds(ev.prompt_ids);
      return typeof ids === "string" ? null : { prompt: ids, parent: null };
    }
    if (typeof ev.parent_call_id !== "string") return null;
    const delta = decodeTokenIds(ev.prompt_delta_ids);
    const parent = s.tipOf(ev.parent_call_id);
    if (parent === undefined || typeof delta === "string") return null;
    const prompt = new Int32Array(parent.length + delta.length);
    prompt.set(parent, 0);
    prompt.set(delta, parent.length);
    return { prompt, parent: ev.parent_call_id };
  }

  /** Ends the restore: prompts of requests whose responses never came are dropped. */
  restored(): void {
    this.restoring.clear();
    this.restoringResponses.clear();
    this.evict();
  }
}

function asArray(v: unknown): unknown[] | undefined {
  return Array.isArray(v) ? v : undefined;
}

/**
 * The conversation digest of a restored request made in prompt mode tokens (continuation/history.ts): from
 * its own messages and tools, or, in the delta form (messages_offset), its parent's conversation extended
 * by its new messages. Undefined for a request of prompt mode engine, or one whose parent is not known.
 */
function conversationOf(
  s: GatewaySession,
  ev: Record<string, unknown>,
): { digest: string; count: number } | undefined {
  if (typeof ev.prompt_mode !== "string" || !Array.isArray(ev.messages)) return undefined;
  const messages = ev.messages as unknown[];
  let start = { digest: seedDigest({ tools: ev.tools }), count: 0 };
  if (typeof ev.messages_offset === "number") {
    const parent = typeof ev.parent_call_id === "string" ? s.tip(ev.parent_call_id)?.history : undefined;
    if (parent === undefined || parent.count !== ev.messages_offset) return undefined;
    start = parent;
  }
  const digests = historyDigests(start.digest, messages);
  return { digest: digests[messages.length]!, count: start.count + messages.length };
}
