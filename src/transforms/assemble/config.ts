import { z } from "zod";

/** Configuration of the `assemble` transform. Unknown keys are rejected so a typo fails loudly. */
export const assembleConfigSchema = z.strictObject({
  drift_policy: z
    .enum(["fork", "realign"])
    .default("fork")
    .describe(
      "What to do when a prompt re-renders an earlier sampled turn into different tokens. `fork` (default) " +
        "keeps the sampled tokens trained in their own row and starts a new row for the continuation. " +
        "`realign` keeps one row: the drifted response is demoted to mask 0.",
    ),
  idle_timeout_ms: z
    .int()
    .positive()
    .default(600_000)
    .describe("A session with no event for this long (in event time) is finalized with status `timeout`."),
  reward_grace_ms: z
    .int()
    .nonnegative()
    .default(30_000)
    .describe("Rewards arriving up to this long (event time) after `session.end` still apply."),
  max_clock_skew_ms: z
    .int()
    .positive()
    .default(60_000)
    .describe(
      "How far one session's clock may move the watermark past every other session's: an event with a " +
        "clock far ahead (a broken host) must not time out all open sessions. Keep it well below " +
        "idle_timeout_ms; gateway hosts' clocks agree to within seconds.",
    ),
  max_tokens: z
    .int()
    .positive()
    .optional()
    .describe("Rows longer than this (prompt + response) are truncated and flagged `truncated`."),
  turn_reward_discount: z
    .number()
    .min(0)
    .max(1)
    .optional()
    .describe(
      "Per-call rewards (a reward event targeting a call_id) become per-turn rewards (turn_rewards). With a " +
        "discount gamma, a turn's value is its own reward plus gamma times the mean of its child turns' " +
        "values, along the tree's edges (never along insertion order, which would leak rewards across " +
        "branches). Absent: each turn gets only its own reward.",
    ),
  max_open_sessions: z
    .int()
    .positive()
    .default(100_000)
    .describe(
      "Open sessions per process, all lanes together; past it the oldest open sessions are cut " +
        "(finalized early, flag session_cut, counted in sessions_cut).",
    ),
  max_buffered_bytes: z
    .int()
    .positive()
    .default(512 * 2 ** 20)
    .describe(
      "Bytes of input events held by open sessions, all lanes together; past it the oldest open sessions " +
        "are cut (flag session_cut).",
    ),
  remember_finalized: z
    .int()
    .nonnegative()
    .default(0)
    .describe(
      "0 (default): every session finalized in this run is remembered (a 64-bit fingerprint, at most 16 " +
        "bytes each), so a late or redelivered event of any of them is dead-lettered (LATE_EVENT), never " +
        "written as a second row. n > 0: only the last n (exact ids), for hosts that cannot spare the " +
        "memory; an event of an older session then starts a new one.",
    ),
});

export type AssembleConfig = z.output<typeof assembleConfigSchema>;
export type AssembleConfigInput = z.input<typeof assembleConfigSchema>;
