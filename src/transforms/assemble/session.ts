/**
 * One session's state: events applied in `seq` order, calls inserted into the token trie, rewards, and
 * the end. Every rejection leaves the session unchanged and becomes a dead letter.
 */
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, type DeadLetterOutput } from "../../core/records.ts";
import type { ErrorCode } from "../../core/errors.ts";
import type {
  ChatMessage,
  RequestEvent,
  ResponseEvent,
  RewardEvent,
  SessionStartEvent,
} from "../../schemas/events.ts";
import {
  describeLayout,
  sameLayout,
  type RoutedExperts,
  type RoutingLayout,
} from "../../schemas/routed-experts.ts";
import type { RowFlag, SessionStatus } from "../../schemas/trajectory.ts";
import { RowFlags } from "../../schemas/trajectory.ts";
import { addFlag, newCall, type CallState, type PromptSource } from "./call-state.ts";
import type { DecodedEvent, RejectedEnvelope } from "./decode/decode.ts";
import type { AssembleConfig } from "./config.ts";
import { DriftTracker } from "./drift.ts";
import { canonicalMessage, messagePrefixDigests } from "../../schemas/canonical-messages.ts";
import { TokenTrie, type TrieNode, type Position, type WalkResult } from "./trie.ts";
import { OwnerFence } from "./owner-fence.ts";
import { PendingRequests } from "./pending-requests.ts";

export const COMPONENT = "assemble";

export interface AssembleContext {
  config: AssembleConfig;
  deadLetters: DeadLetterOutput;
  metrics: Metrics;
  logger?: Logger;
}

import type { RewardRecord } from "../../schemas/session.ts";

/**
 * An open session holds little until it needs more: tables that most sessions never use are created on
 * first use, so 50,000 idle sessions fit in a small heap (issue 27 item 9: they cost 20 KB each).
 */
export class SessionState {
  readonly uid: string;
  readonly sessionId: string;
  readonly trie = new TokenTrie();
  readonly calls = new Map<string, CallState>();
  /** Requests still waiting for their response. */
  readonly requests = new PendingRequests();
  readonly rewards: RewardRecord[] = [];
  readonly flags: RowFlag[] = [];
  /** The routed-experts layout of the session's calls, set by the first call that carries routing. */
  routingLayout: RoutingLayout | null = null;
  start: SessionStartEvent | null = null;
  end: { status: SessionStatus; ts: number } | null = null;
  /** Greatest event time applied or buffered. */
  lastTs = 0;
  /** Tokens received in this session's calls (prompt as sent + output), for throughput figures. */
  tokensIn = 0;

  private nextSeq = 0;
  /** Events waiting for an earlier seq. A rejected envelope only holds its seq (it is already dead-lettered). */
  private pending: Map<number, DecodedEvent | RejectedEnvelope> | null = null;
  private readonly digests: number[] = [];
  /** Which gateway replica owns the session (owner-fence.ts); made on the first event that has a gen. */
  fence: OwnerFence | null = null;
  private rewardKeys: Set<string> | null = null;
  /** Drift detection, made on the first call with a full prompt. */
  private drift: DriftTracker | null = null;
  private readonly ctx: AssembleContext;

  constructor(uid: string, sessionId: string, ctx: AssembleContext) {
    this.uid = uid;
    this.sessionId = sessionId;
    this.ctx = ctx;
  }

  get hasPending(): boolean {
    return this.pending !== null && this.pending.size > 0;
  }

  /**
   * True once the session ended, nothing waits for an earlier seq, and it holds the rewards it waits for
   * (`await_rewards`: every entry matched by a reward's stage or key; absent: any one session-level
   * reward, since per-call rewards score turns while the session runs, not its outcome).
   */
  isComplete(awaited: readonly string[] | undefined): boolean {
    if (this.end === null || this.hasPending) return false;
    if (awaited === undefined) return this.rewards.some((r) => r.target === "session");
    return awaited.every(
      (want) => this.rewardKeys?.has(want) === true || this.rewards.some((r) => r.stage === want),
    );
  }

  private reject(code: ErrorCode, message: string, d: DecodedEvent, details?: Record<string, unknown>): void {
    this.ctx.deadLetters.write(
      makeDeadLetter(code, message, COMPONENT, d.record, {
        uid: this.uid,
        session_id: this.sessionId,
        seq: d.event.seq,
        details,
      }),
    );
  }

  /**
   * Accepts an event in any order; applies it and whatever it unblocks in `seq` order. A rejected envelope
   * (an event the decoder dead-lettered) takes up its seq without changing the session.
   */
  offer(d: DecodedEvent | RejectedEnvelope): void {
    const { seq, ts } = "event" in d ? d.event : d;
    if (ts > this.lastTs) this.lastTs = ts;
    const known = seq < this.nextSeq ? this.digests[seq] : this.pending?.get(seq)?.digest;
    if ("event" in d && (d.event.gen !== undefined || this.fence !== null))
      if (!(this.fence ??= new OwnerFence(this.ctx, COMPONENT)).admit(d, known, this.pending)) return;
    if (known !== undefined) {
      if (known === d.digest) {
        this.ctx.metrics.inc("duplicate_events_ignored");
      } else if (!("event" in d)) {
        // Already dead-lettered by the decoder with its own code.
      } else {
        this.reject(
          "DUPLICATE_CONFLICT",
          `session ${this.sessionId} already has an event with seq ${seq} and different content; ` +
            `seq numbers must be unique per session (an exact redelivery is ignored)`,
          d,
        );
      }
      return;
    }
    if (seq !== this.nextSeq) {
      (this.pending ??= new Map()).set(seq, d);
      return;
    }
    this.applyInOrder(d);
    const pending = this.pending;
    if (pending === null) return;
    for (let next = pending.get(this.nextSeq); next !== undefined; next = pending.get(this.nextSeq)) {
      pending.delete(this.nextSeq);
      this.applyInOrder(next);
    }
  }

  private applyInOrder(d: DecodedEvent | RejectedEnvelope): void {
    const seq = "event" in d ? d.event.seq : d.seq;
    this.digests[seq] = d.digest;
    this.nextSeq = seq + 1;
    if ("event" in d) this.apply(d);
  }

  private apply(d: DecodedEvent): void {
    const ev = d.event;
    if (this.end !== null && ev.type !== "reward") {
      this.reject(
        "EVENT_AFTER_END",
        `session ${this.sessionId} ended at ${this.end.status} before this ${ev.type} event (seq ${ev.seq}); ` +
          `only rewards may follow session.end`,
        d,
      );
      return;
    }
    switch (ev.type) {
      case "session.start":
        if (this.start !== null) {
          this.reject(
            "INVALID_EVENT",
            `session ${this.sessionId} has a second session.start (seq ${ev.seq}); send one per session`,
            d,
          );
          return;
        }
        this.start = ev;
        return;
      case "request":
        if (this.calls.has(ev.call_id) || this.requests.has(ev.call_id)) {
          this.reject(
            "DUPLICATE_CALL",
            `call ${ev.call_id} of session ${this.sessionId} already has a request; call ids must be unique`,
            d,
          );
          return;
        }
        this.requests.set(ev.call_id, ev);
        return;
      case "response":
        this.applyResponse(d, ev);
        return;
      case "reward":
        this.applyReward(d, ev);
        return;
      case "session.end":
        this.end = { status: ev.status, ts: ev.ts };
        return;
    }
  }

  /**
   * The message-history digests of a call (schemas/canonical-messages.ts). A request in the delta form with
   * `messages_offset` carries only the messages after its parent's conversation: its digests continue the
   * parent's (the parent's messages and answer), null when that is not known.
   */
  private historyOf(
    messages: ChatMessage[] | undefined,
    offset: number | undefined,
    parent: CallState | undefined,
  ): string[] | null {
    if (messages === undefined) return null;
    const canonical = messages.map(canonicalMessage);
    if (offset === undefined) return messagePrefixDigests(canonical);
    const start = parent === undefined ? undefined : this.driftTracker().conversationOf(parent);
    return start === undefined ? null : messagePrefixDigests(canonical, start);
  }

  private applyResponse(d: DecodedEvent, ev: ResponseEvent): void {
    const start = this.promptStart(d, ev);
    if (start === null) return;
    const { request, prompt, from, walked, parent } = start;
    const routing = {
      prompt: request?.prompt_routed_experts ?? ev.prompt_routed_experts ?? null,
      output: ev.routed_experts ?? null,
    };
    if (!this.checkRouting(d, ev.call_id, routing.prompt, routing.output, from, walked.length)) return;

    const walk = this.trie.walk(walked, from);
    this.tokensIn += walked.length + ev.output_ids.length;
    const call = newCall(ev, request, prompt, routing, this.calls.size);
    if (parent !== undefined) parent.continued = true;

    const history = this.historyOf(prompt.messages, request?.messages_offset, parent);
    if (parent === undefined) this.driftTracker().classify(call, walked, walk, prompt.messages, history);

    // Only now mutate: everything that could reject this event has been checked.
    this.insert(call, walked, walk, ev);
    this.requests.delete(ev.call_id);
    this.calls.set(ev.call_id, call);
    const routed = routing.prompt ?? routing.output;
    if (this.routingLayout === null && routed !== null) {
      this.routingLayout = { dtype: routed.dtype, layers: routed.layers, top_k: routed.top_k };
    }
    if (history !== null) this.driftTracker().remember(call, history, ev);
  }

  /**
   * Where a response's call starts in the trie: its prompt (the request's, or the response's own fields),
   * the position the prompt is walked from (the root, or its parent's end) and the tokens walked. Null:
   * dead-lettered (a second response, no prompt, an unknown parent).
   */
  private promptStart(
    d: DecodedEvent,
    ev: ResponseEvent,
  ): {
    request: RequestEvent | undefined;
    prompt: PromptSource;
    from: Position;
    walked: Int32Array;
    parent: CallState | undefined;
  } | null {
    if (this.calls.has(ev.call_id)) {
      this.reject(
        "DUPLICATE_CALL",
        `call ${ev.call_id} of session ${this.sessionId} already has a response; call ids must be unique`,
        d,
      );
      return null;
    }
    const request = this.requests.get(ev.call_id);
    const hasInlinePrompt = ev.prompt_ids !== undefined || ev.parent_call_id !== undefined;
    // A request event wins over prompt fields repeated on the response.
    const prompt: PromptSource | undefined = request ?? (hasInlinePrompt ? ev : undefined);
    if (prompt === undefined) {
      this.reject(
        "UNKNOWN_CALL",
        `response of call ${ev.call_id} has no request in session ${this.sessionId} and carries no prompt; ` +
          `send the request first (lower seq) or put prompt_ids on the response`,
        d,
      );
      return null;
    }
    if (prompt.prompt_ids !== undefined) {
      return {
        request,
        prompt,
        from: { node: this.trie.root, off: 0 },
        walked: prompt.prompt_ids,
        parent: undefined,
      };
    }
    const parent = this.calls.get(prompt.parent_call_id!);
    if (parent === undefined || parent.end === null) {
      this.reject(
        "UNKNOWN_PARENT",
        `call ${ev.call_id} names parent_call_id ${prompt.parent_call_id}, which has no response in session ` +
          `${this.sessionId}; send the parent's response first or send the full prompt_ids`,
        d,
      );
      return null;
    }
    const from = { node: parent.end, off: parent.end.len };
    return { request, prompt, from, walked: prompt.prompt_delta_ids!, parent };
  }

  /** Puts a checked call into the trie: the rest of its prompt as context, then its output. */
  private insert(call: CallState, walked: Int32Array, walk: WalkResult, ev: ResponseEvent): void {
    const boundary = this.trie.boundary(walk);
    let attach = boundary;
    if (walk.matched < walked.length) {
      attach = this.trie.addChild(boundary, walked.subarray(walk.matched), null, null).last;
    }
    if (ev.output_ids.length > 0) {
      const out = this.trie.addChild(attach, ev.output_ids, ev.logprobs ?? null, call);
      call.outStart = out.first;
      this.trie.setEnd(call, out.last);
    } else {
      this.trie.setEnd(call, attach);
      this.ctx.metrics.inc("empty_outputs");
    }
  }

  private driftTracker(): DriftTracker {
    return (this.drift ??= new DriftTracker(this.ctx.metrics, this.ctx.config.drift_policy));
  }

  /**
   * A call's routed experts share the session's layout (one model), and its prompt's cover at most the
   * prompt: a delta-form prompt's length is only known here. False: dead-lettered.
   */
  private checkRouting(
    d: DecodedEvent,
    callId: string,
    prompt: RoutedExperts | null,
    output: RoutedExperts | null,
    from: Position,
    walkedLength: number,
  ): boolean {
    if (prompt === null && output === null) return true; // the common case: no routing at all
    const layout = this.routingLayout ?? prompt ?? output;
    for (const routing of [prompt, output]) {
      if (routing === null || layout === null || sameLayout(routing, layout)) continue;
      this.reject(
        "ROUTED_EXPERTS_LAYOUT_MISMATCH",
        `call ${callId} has routed experts ${describeLayout(routing)}, session ${this.sessionId} ` +
          `${describeLayout(layout)}; every call of a session is routed by one model`,
        d,
        { layout: describeLayout(routing), session_layout: describeLayout(layout) },
      );
      return false;
    }
    if (prompt === null) return true;
    const promptLength = TokenTrie.depth(from) + walkedLength;
    if (prompt.tokens <= promptLength) return true;
    this.reject(
      "ROUTED_EXPERTS_LENGTH_MISMATCH",
      `call ${callId} has prompt_routed_experts for ${prompt.tokens} tokens and a prompt of ${promptLength}; ` +
        `they cover the prompt's last positions, at most all of them`,
      d,
      { prompt_routed_experts: prompt.tokens, prompt_length: promptLength },
    );
    return false;
  }

  private applyReward(d: DecodedEvent, ev: RewardEvent): void {
    if (ev.key !== undefined && this.rewardKeys?.has(ev.key) === true) {
      this.ctx.metrics.inc("duplicate_rewards_ignored");
      return;
    }
    if (ev.target !== "session" && !this.calls.has(ev.target) && !this.requests.has(ev.target)) {
      this.reject(
        "UNKNOWN_REWARD_TARGET",
        `reward targets call ${ev.target}, which session ${this.sessionId} does not have; ` +
          `use "session" or the call_id of one of its calls`,
        d,
      );
      return;
    }
    let sum = ev.value;
    for (const r of this.rewards) if (r.target === ev.target) sum += r.value;
    if (!Number.isFinite(sum)) {
      this.reject(
        "REWARD_OVERFLOW",
        `reward ${ev.value} would make the rewards of ${ev.target === "session" ? `session ${this.sessionId}` : `call ${ev.target}`} ` +
          `sum to ${sum}; rewards must add up to a finite number`,
        d,
      );
      return;
    }
    if (ev.key !== undefined) (this.rewardKeys ??= new Set()).add(ev.key);
    this.rewards.push({
      value: ev.value,
      target: ev.target,
      stage: ev.stage,
      finished: ev.finished,
      info: ev.info,
    });
  }

  /**
   * Closes the session: events stranded behind a seq gap are dead-lettered, retry orphans dropped, and
   * realigned drift resolved. After this the trie is ready for row extraction.
   */
  close(status: SessionStatus | null): void {
    if (this.end === null && status !== null) this.end = { status, ts: this.lastTs };
    const pending = this.pending;
    if (pending !== null && pending.size > 0) {
      addFlag(this.flags, RowFlags.SEQ_GAP);
      const seqs = [...pending.keys()].sort((a, b) => a - b);
      for (const seq of seqs) {
        const stranded = pending.get(seq)!;
        if (!("event" in stranded)) continue; // dead-lettered already, by the decoder
        this.reject(
          "SEQ_GAP",
          `session ${this.sessionId} closed while event seq ${seq} waited for seq ${this.nextSeq}, which never ` +
            `arrived; the gateway must send every seq from 0 without gaps`,
          stranded,
          { missing_seq: this.nextSeq },
        );
      }
      pending.clear();
    }
    if (this.requests.size > 0) {
      addFlag(this.flags, RowFlags.UNANSWERED_REQUEST);
      this.ctx.metrics.inc("requests_unanswered", "", this.requests.size);
    }
    this.dropRetryOrphans();
    this.suppressed = this.drift?.resolve(this.calls) ?? null;
    this.countUntrained();
  }

  /**
   * Counts the calls recorded with train: false, and the rows they would have ended: a row that ends in one
   * trains nothing of its own and is not written (rows.ts, markLive: a demoted call ends no row); one that
   * was continued stays as context in the continuation's row (flag untrained_turn).
   */
  private countUntrained(): void {
    for (const call of this.calls.values()) {
      if (!call.flags.includes(RowFlags.UNTRAINED_TURN)) continue;
      this.ctx.metrics.inc("calls_untrained");
      if (call.end !== null && call.end.children.length === 0 && call.outStart !== null)
        this.ctx.metrics.inc("untrained_rows_skipped");
    }
  }

  /**
   * Calls with identical prompts hang under the same node. Among those that declare no choice_index, the
   * ones nobody continued from are retry orphans: if any attempt was continued, the others are dropped;
   * if none was, the latest attempt stands.
   */
  private dropRetryOrphans(): void {
    const groups = new Map<TrieNode, CallState[]>();
    for (const call of this.calls.values()) {
      if (call.outStart === null || call.choiceIndex !== undefined) continue;
      const at = call.outStart.parent!;
      const group = groups.get(at);
      if (group === undefined) groups.set(at, [call]);
      else group.push(call);
    }
    for (const group of groups.values()) {
      if (group.length < 2) continue;
      const continued = group.filter((c) => c.continued);
      const keep = continued.length > 0 ? continued : [group[group.length - 1]!];
      for (const call of group) {
        if (keep.includes(call)) continue;
        this.trie.detach(call.outStart!);
        this.calls.delete(call.id);
        this.ctx.metrics.inc("orphans_dropped");
      }
      for (const call of keep) addFlag(call.flags, RowFlags.ORPHAN_DROPPED);
    }
  }

  /** Leaves that produce no row (realigned drift); null: none. */
  suppressed: Set<TrieNode> | null = null;

  /** Sum of the rewards targeting each call (per-turn rewards). */
  callRewards(): Map<string, number> {
    const out = new Map<string, number>();
    for (const r of this.rewards) {
      if (r.target !== "session") out.set(r.target, (out.get(r.target) ?? 0) + r.value);
    }
    return out;
  }

  /** Sum of session-level rewards, or null when there is none. */
  sessionReward(): { reward: number | null; finished: boolean | null } {
    let reward: number | null = null;
    let finished: boolean | null = null;
    for (const r of this.rewards) {
      if (r.target !== "session") continue;
      reward = (reward ?? 0) + r.value;
      if (r.finished === false) finished = false;
      else if (r.finished === true && finished === null) finished = true;
    }
    return { reward, finished };
  }
}
