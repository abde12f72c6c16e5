import { getHeapStatistics } from "node:v8";
import { z } from "zod";
import { dataBudget } from "../../core/memory-limit.ts";

/**
 * What an open session is counted as holding beyond its events' bytes: its state, trie nodes, tables and
 * first arena chunk (measured: 3.2 KB for a three-event session; bench/memory.ts, docs/operations.md).
 */
export const SESSION_OVERHEAD_BYTES = 3 * 1024;

/**
 * `max_buffered_bytes` by default: 512 MiB, or a quarter of V8's heap limit when that is smaller, so the
 * default bounds memory in a process started with a small `--max-old-space-size` too. A quarter: the
 * limit counts the young generation too (`--max-old-space-size=192` alone gives 384 MiB on a large host,
 * 204 MiB with `--max-semi-space-size=4`), and events are counted by their bytes, not their heap.
 */
export const DEFAULT_MAX_BUFFERED_BYTES = Math.min(
  512 * 2 ** 20,
  Math.floor(getHeapStatistics().heap_size_limit / 4),
);

/** Configuration of the `assemble` transform. Unknown keys are rejected so a typo fails loudly. */
export const assembleConfigSchema = z
  .strictObject({
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
      .describe(
        "How long (event time) an ended session still missing an awaited reward (await_rewards) waits for " +
          "it; a reward after that is a LATE_EVENT dead letter. A session holding its awaited rewards does " +
          "not wait.",
      ),
    await_rewards: z
      .array(z.string().min(1))
      .optional()
      .describe(
        "What makes an ended session complete, so it is final at once: every entry must be matched by a " +
          "reward event whose `stage` or `key` equals it. Absent (default): any one session-level reward " +
          "(target session; per-call rewards score turns, not the outcome). []: nothing, " +
          "final at session.end (rewards then come from reward stages, or not at all).",
      ),
    max_clock_skew_ms: z
      .int()
      .positive()
      .optional()
      .describe(
        "How far one session's clock may move the watermark past every other session's: an event with a " +
          "clock far ahead (a broken host) must not time out or finalize the others. Must be below " +
          "reward_grace_ms, so one bad clock can shorten another session's grace by at most this much and " +
          "never end it. Default: a third of reward_grace_ms, at most 10 s (10 s when the grace is 0).",
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
      .default(DEFAULT_MAX_BUFFERED_BYTES)
      .describe(
        "Memory held by open sessions, all lanes together, counted as their events' bytes plus 3 KiB per " +
          "session (its state); past it the oldest open sessions are cut (flag session_cut). Default: 512 " +
          "MiB, or a quarter of V8's heap limit (--max-old-space-size plus the young generation) when " +
          "that is smaller.",
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
  })
  .superRefine((c, ctx) => {
    if (
      c.max_clock_skew_ms !== undefined &&
      c.reward_grace_ms > 0 &&
      c.max_clock_skew_ms >= c.reward_grace_ms
    )
      ctx.addIssue({
        code: "custom",
        path: ["max_clock_skew_ms"],
        message:
          `max_clock_skew_ms (${c.max_clock_skew_ms}) must be below reward_grace_ms (${c.reward_grace_ms}): ` +
          `otherwise one session with a clock ahead can end another's grace before its reward arrives`,
      });
  });

/** The clock skew in force: as configured, else a third of the reward grace, at most 10 s. */
export function clockSkewMs(c: Pick<AssembleConfig, "max_clock_skew_ms" | "reward_grace_ms">): number {
  if (c.max_clock_skew_ms !== undefined) return c.max_clock_skew_ms;
  return c.reward_grace_ms > 0 ? Math.max(1, Math.min(10_000, Math.floor(c.reward_grace_ms / 3))) : 10_000;
}

export type AssembleConfig = z.output<typeof assembleConfigSchema>;
export type AssembleConfigInput = z.input<typeof assembleConfigSchema>;

/**
 * Defaults under a memory limit (core/memory-limit.ts): open sessions' events may hold a quarter of the
 * data budget (in catch-up sessions end as fast as they are read; a live topic of long sessions holds
 * them for minutes, and past the bound the oldest are written early, flagged).
 */
export function assembleSizing(limit: number): Partial<AssembleConfigInput> {
  return { max_buffered_bytes: Math.min(DEFAULT_MAX_BUFFERED_BYTES, Math.floor(dataBudget(limit) / 4)) };
}
