/**
 * The `group` transform: GRPO computes advantages over the n rollouts of one uid, so a trainer needs
 * whole groups. Finished sessions wait here until their uid has n of them, then the group's rows leave as
 * one batch (one file). A group still incomplete after `timeout_ms` of event time is padded with
 * placeholder rows (sample_mask 0, all masks 0) so every group has exactly n sessions.
 *
 * Sessions that ended `failed`, or whose policy is stale, become placeholders too. A session whose reward
 * says `finished: false` keeps its reward (the baseline stays honest) but trains nothing: its masks and
 * logprobs are zeroed.
 */
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, type DeadLetterOutput } from "../../core/records.ts";
import {
  emptyRow,
  RowFlags,
  rowKey,
  type SessionStatus,
  type TrajectoryRow,
} from "../../schemas/trajectory.ts";
import type { SessionOutput } from "../assemble/assembler.ts";
import type { GroupConfig } from "./config.ts";

interface OpenGroup {
  uid: string;
  size: number;
  sessions: SessionOutput[];
  /** Event time when the first session of the group was finalized. */
  openedAt: number;
}

/** A group leaving the batcher: its rows (placeholders included) and the sessions it holds. */
export interface GroupBatch {
  rows: TrajectoryRow[];
  sessions: SessionOutput[];
}

export interface GroupContext {
  metrics: Metrics;
  /** Where a session claiming a group larger than max_group_size is reported. */
  deadLetters?: DeadLetterOutput;
}

function placeholder(
  uid: string,
  sessionId: string,
  sampleIndex: number | null,
  size: number,
  status: SessionStatus,
  endedAt: number,
  extraFlags: string[] = [],
): TrajectoryRow {
  return {
    ...emptyRow(),
    key: rowKey(uid, sessionId, 0),
    uid,
    session_id: sessionId,
    sample_index: sampleIndex,
    group_size: size,
    status,
    flags: [RowFlags.PLACEHOLDER, ...extraFlags].sort() as TrajectoryRow["flags"],
    ended_at_ms: endedAt,
  };
}

/** Keeps the reward, trains nothing. */
function zeroTraining(row: TrajectoryRow): TrajectoryRow {
  return {
    ...row,
    response_mask: new Int8Array(row.response_mask.length),
    rollout_log_probs: row.rollout_log_probs === null ? null : new Float32Array(row.rollout_log_probs.length),
    num_trained_tokens: 0,
    last_trained_index: null,
    turn_end_indices: new Int32Array(0),
    turn_rewards: row.turn_rewards === null ? null : [],
    // Aligned with the trained turns, of which there are none now.
    sampling: [],
    flags: row.flags.filter((f) => f !== RowFlags.MIXED_SAMPLING),
    policy_version_min: null,
    policy_version_max: null,
  };
}

export class GroupBatcher {
  private readonly config: GroupConfig;
  private readonly ctx: GroupContext;
  private readonly open = new Map<string, OpenGroup>();

  constructor(config: GroupConfig, ctx: GroupContext) {
    this.config = config;
    this.ctx = ctx;
  }

  get openGroups(): number {
    return this.open.size;
  }

  /** Adds a finished session; returns the groups that are now complete or timed out, one batch each. */
  push(session: SessionOutput, eventTime: number): GroupBatch[] {
    let size = session.groupSize ?? this.config.group_size;
    const out: GroupBatch[] = [];
    if (size !== undefined && size > this.config.max_group_size) {
      // One session must not make the group wait for, or pad with, an absurd number of placeholders.
      this.ctx.metrics.inc("groups_too_large");
      this.ctx.deadLetters?.write(
        makeDeadLetter(
          "GROUP_TOO_LARGE",
          `session ${session.sessionId} of uid ${session.uid} says its group has ${size} sessions, more than ` +
            `max_group_size ${this.config.max_group_size}; it is written alone`,
          "group",
          {
            raw: JSON.stringify({ uid: session.uid, session_id: session.sessionId, group_size: size }),
            origin: { kind: "trajectory", key: `${session.uid}_${session.sessionId}` },
          },
          { uid: session.uid, session_id: session.sessionId, details: { group_size: size } },
        ),
      );
      size = undefined;
      for (const r of session.rows) r.flags = [...r.flags, RowFlags.GROUP_TOO_LARGE].sort();
    }
    if (size === undefined) {
      // Nobody said how big the group is: nothing to wait for.
      if (session.groupSize === null || session.groupSize <= this.config.max_group_size)
        this.ctx.metrics.inc("groups_size_unknown");
      out.push(
        this.build({ uid: session.uid, size: 1, sessions: [session], openedAt: eventTime }, eventTime),
      );
      return [...out, ...this.tick(eventTime)];
    }
    let group = this.open.get(session.uid);
    if (group === undefined) {
      group = { uid: session.uid, size, sessions: [], openedAt: eventTime };
      this.open.set(session.uid, group);
    }
    group.sessions.push(session);
    if (group.sessions.length >= group.size) {
      this.open.delete(session.uid);
      out.push(this.build(group, eventTime));
    }
    return [...out, ...this.tick(eventTime)];
  }

  /** Groups whose wait is over, padded with placeholders. */
  tick(eventTime: number): GroupBatch[] {
    const out: GroupBatch[] = [];
    for (const [uid, group] of this.open) {
      if (eventTime - group.openedAt < this.config.timeout_ms) continue;
      this.open.delete(uid);
      this.ctx.metrics.inc("groups_timed_out");
      out.push(this.build(group, eventTime));
    }
    return out;
  }

  /** End of input: every open group, padded. */
  flush(eventTime: number): GroupBatch[] {
    const out: GroupBatch[] = [];
    for (const group of this.open.values()) {
      this.ctx.metrics.inc("groups_incomplete_at_end");
      out.push(this.build(group, eventTime));
    }
    this.open.clear();
    return out;
  }

  private build(group: OpenGroup, eventTime: number): GroupBatch {
    const { metrics } = this.ctx;
    const sessions = [...group.sessions].sort(
      (a, b) =>
        (a.sampleIndex ?? Number.MAX_SAFE_INTEGER) - (b.sampleIndex ?? Number.MAX_SAFE_INTEGER) ||
        (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0),
    );
    const rows: TrajectoryRow[] = [];
    for (const s of sessions) {
      // Marked by the staleness transform upstream, which counted it.
      const stale = s.stale === true;
      if (s.status === "failed" || stale || s.rows.length === 0) {
        metrics.inc("placeholders", stale ? "stale" : s.status === "failed" ? "failed" : "empty");
        rows.push(
          placeholder(
            group.uid,
            s.sessionId,
            s.sampleIndex,
            group.size,
            s.status,
            s.endedAt,
            stale ? [RowFlags.STALE] : [],
          ),
        );
        continue;
      }
      for (const row of s.rows) {
        const r = { ...row, group_size: group.size };
        rows.push(row.episode_finished === false ? zeroTraining(r) : r);
      }
    }
    const missing = group.size - sessions.length;
    if (missing > 0) {
      const taken = new Set(sessions.map((s) => s.sampleIndex));
      const free: number[] = [];
      for (let i = 0; free.length < missing && i < group.size + sessions.length; i++)
        if (!taken.has(i)) free.push(i);
      // A real session may be named like a placeholder ("missing-1"): keys must stay unique.
      const names = new Set(sessions.map((s) => s.sessionId));
      for (let k = 0; k < missing; k++) {
        const idx = free[k] ?? null;
        let name = `missing-${idx ?? k}`;
        for (let n = 2; names.has(name); n++) name = `missing-${idx ?? k}~${n}`;
        names.add(name);
        rows.push(placeholder(group.uid, name, idx, group.size, "missing", eventTime));
      }
      metrics.inc("placeholders", "missing", missing);
    }
    metrics.inc("groups_emitted");
    return { rows, sessions: group.sessions };
  }
}
