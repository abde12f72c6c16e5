/**
 * Output rows: one training-ready trajectory per row. docs/output.md describes every column; their Arrow
 * schema, the contract both Parquet and Arrow IPC outputs follow, is in trajectory-arrow.ts (apart, so
 * the ingest thread does not load apache-arrow).
 */

export const OUTPUT_SCHEMA_VERSION = "2";

/** Per-row flags. Each marks something a trainer may want to filter on; all are counted in metrics. */
export const RowFlags = {
  /** The client re-rendered a sampled turn into different tokens; the row forked to keep it honest. */
  DRIFT: "drift",
  /** Drift under the `realign` policy: the drifted response is in this row with mask 0. */
  DRIFT_REALIGNED: "drift_realigned",
  /** The prompt rewrote an earlier assistant turn (messages differ), so the row is a genuine branch. */
  HISTORY_EDITED: "history_edited",
  /** An earlier attempt with the same prompt and no continuation (a retry's orphan) was dropped. */
  ORPHAN_DROPPED: "orphan_dropped",
  /** The row was longer than `max_tokens` and lost its tail. */
  TRUNCATED: "truncated",
  /** A trained span has no logprobs, so `rollout_log_probs` is null. */
  MISSING_LOGPROBS: "missing_logprobs",
  /** A turn on this row finished with `abort` (e.g. preempted by a weight update). */
  ABORTED_TURN: "aborted_turn",
  /** A turn on this row finished with `length` (cut off by the token limit). */
  LENGTH_TURN: "length_turn",
  /** Events of this session were stranded behind a seq gap and dead-lettered. */
  SEQ_GAP: "seq_gap",
  /** A reward said the episode did not finish. */
  UNFINISHED: "unfinished",
  /** A request never got a response. */
  UNANSWERED_REQUEST: "unanswered_request",
  /**
   * Group mode: the session claimed a group larger than `max_group_size` and was written alone
   * (group_size 1; dead letter GROUP_TOO_LARGE): its advantage has no group to be relative to.
   */
  GROUP_TOO_LARGE: "group_too_large",
  /** Group mode: a stand-in for a missing or failed session (sample_mask 0). */
  PLACEHOLDER: "placeholder",
  /** The row's policy was older than the staleness limit. */
  STALE: "stale",
  /** The session was finalized before its end because the open-session limits were reached. */
  SESSION_CUT: "session_cut",
  /** A reward stage failed on this row after retries: its value is null (dead letter REWARD_FAILED). */
  REWARD_FAILED: "reward_failed",
  /** A required reward stage did not report before the reward timeout: its value is null. */
  REWARD_TIMEOUT: "reward_timeout",
  /** A per-turn reward, discounted along the tree, summed past float64's range: that turn's value is null. */
  REWARD_OVERFLOW: "reward_overflow",
} as const;
export type RowFlag = (typeof RowFlags)[keyof typeof RowFlags];

/** Normalised finish reasons. */
export type FinishReason = "stop" | "length" | "tool_calls" | "abort" | "unknown";

/**
 * How the session ended: from `session.end`, or `timeout` when it went idle or the input ended first;
 * `missing` for a group-mode placeholder of a session that never arrived.
 */
export type SessionStatus = "ok" | "aborted" | "failed" | "timeout" | "missing";

export interface TrajectoryRow {
  key: string;
  uid: string;
  session_id: string;
  index: number;
  sample_index: number | null;
  group_size: number | null;
  prompt_ids: Int32Array;
  response_ids: Int32Array;
  response_mask: Int8Array;
  rollout_log_probs: Float32Array | null;
  reward: number | null;
  episode_finished: boolean | null;
  finish_reasons: FinishReason[];
  finish_reasons_raw: string[];
  weight_version_min: number | null;
  weight_version_max: number | null;
  num_turns: number;
  num_trained_tokens: number;
  status: SessionStatus;
  flags: RowFlag[];
  parent_index: number | null;
  shared_prefix_len: number;
  /** 1 for a real row, 0 for a group-mode placeholder the trainer must ignore. */
  sample_mask: number;
  /** Event time (ms since the epoch) of the session's end, or of its last event when it timed out. */
  ended_at_ms: number;
  /** Index in `response_ids` of the last trained token (where a token-level trainer puts the reward). */
  last_trained_index: number | null;
  /** Reward stages that scored this row, in pipeline order; `reward` combines their values. */
  reward_names: string[];
  /** Each stage's score, aligned with `reward_names`; null when the stage failed or timed out. */
  reward_values: Array<number | null>;
  /** JSON object: per stage, its status, raw value, components and info (for auditing). */
  reward_info: string | null;
  /** Index in `response_ids` of the last token of each turn this row trains, in order. */
  turn_end_indices: Int32Array;
  /** Per-turn rewards aligned with `turn_end_indices` (NaN-free; null entries for unrewarded turns). */
  turn_rewards: Array<number | null> | null;
}

/**
 * `{uid}_{session_id}_{index}`, parseable with Python's `key.rsplit("_", 2)`. A session_id may contain
 * `_`, which would break that split, so in the key (only there) `%` becomes `%25` and `_` becomes `%5F`;
 * `urllib.parse.unquote` gives the session_id back. The uid needs no escaping: rsplit leaves it whole.
 */
export function rowKey(uid: string, sessionId: string, index: number): string {
  return `${uid}_${escapeKeyPart(sessionId)}_${index}`;
}

export function escapeKeyPart(s: string): string {
  return s.includes("%") || s.includes("_") ? s.replaceAll("%", "%25").replaceAll("_", "%5F") : s;
}

/** A row as plain JSON (token columns as arrays of numbers): the `json` value of the trajectory topic. */
export function rowToJson(row: TrajectoryRow): string {
  return JSON.stringify({
    ...row,
    prompt_ids: Array.from(row.prompt_ids),
    response_ids: Array.from(row.response_ids),
    response_mask: Array.from(row.response_mask),
    rollout_log_probs: row.rollout_log_probs === null ? null : Array.from(row.rollout_log_probs),
    turn_end_indices: Array.from(row.turn_end_indices),
  });
}
