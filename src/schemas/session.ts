/**
 * A finished session as it leaves assembly: its rows, and what later stages (rewards, grouping) need to
 * know about it. A data contract between components, like the trajectory row itself.
 */
import type { SessionStatus, TrajectoryRow } from "./trajectory.ts";

export interface RowTurn {
  callId: string;
  /** Index in the row's response of the turn's last token; -1 when it lies in the prompt. */
  end: number;
  /** The row trains this turn (owns it, not demoted): a per-turn reward is placed at `end`. */
  trained: boolean;
  text: string | null;
  toolCalls: unknown[] | null;
}

export interface RewardRecord {
  value: number;
  target: string;
  stage: string;
  finished: boolean | undefined;
  info: Record<string, unknown> | undefined;
}

/** A finalized session's rows, with what later stages (grouping) need to know about the session. */
export interface SessionOutput {
  uid: string;
  sessionId: string;
  rows: TrajectoryRow[];
  status: SessionStatus;
  sampleIndex: number | null;
  groupSize: number | null;
  /** Event time of the session's end (or last event). */
  endedAt: number;
  /** `session.start.metadata` (task references for rule stages), or null. */
  metadata: Record<string, unknown> | null;
  /** Each row's turns (aligned with `rows`): final text and tool calls for reward stages. */
  turns: RowTurn[][];
  /** The session's reward events (session- and call-level), for the `env` reward stage. */
  rewards: readonly RewardRecord[];
  /** Why a session gave no row (no model call, none answered, ...); null when it has rows. */
  withoutRows?: string | null;
  /**
   * Set by the staleness transform: the session was sampled by a stale policy and its stale rows were
   * dropped (a GRPO group then holds a placeholder flagged `stale` in its place).
   */
  stale?: boolean;
}

/**
 * The key of a session within a run: its uid and session_id, length-prefixed so that no two different
 * pairs share a key (with a separator character, uid "a\u0000x" + session "y" and uid "a" + session
 * "x\u0000y" were one session).
 */
export function sessionKey(uid: string, sessionId: string): string {
  // The last key is given again for the same pair: a session's events mostly come in runs, and each key
  // built is three strings joined, then flattened when a map hashes it (~26 MB of the ingest thread's
  // garbage on the shared harness's short workload, one key per event).
  if (uid === lastUid && sessionId === lastSessionId) return lastKey;
  lastUid = uid;
  lastSessionId = sessionId;
  lastKey = `${uid.length}:${uid}${sessionId}`;
  return lastKey;
}

let lastUid = "";
let lastSessionId = "";
let lastKey = "0:";
