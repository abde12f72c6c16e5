/**
 * The reward stage contract (docs/rewards.md). A stage scores a batch of items and returns, in order, one
 * outcome per item. Stages are async; a runner (runner.ts) in front of each one batches, bounds, times out,
 * retries and isolates failures, so a stage itself stays simple.
 */
import type { z } from "zod";
import type { Logger } from "../../core/logger.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import type { RowTurn } from "../assemble/rows.ts";
import type { RewardRecord } from "../../schemas/session.ts";

/** One thing to score: a row (`scope: "row"`) or a whole session (`scope: "session"`). */
export interface RewardItem {
  /** `uid_session_index` for a row; `uid_session` for a session. */
  key: string;
  uid: string;
  session_id: string;
  /** The row, or every row of the session. */
  rows: readonly TrajectoryRow[];
  /** The scored row's turns (for a session: the turns of the row holding the session's last turn). */
  turns: readonly RowTurn[];
  /** The last turn's decoded text and tool calls, when the gateway sent them. */
  final_text: string | null;
  final_tool_calls: unknown[] | null;
  /** `session.start.metadata`: references for rule stages, task ids, ... */
  metadata: Record<string, unknown> | null;
  /** The session's reward events (the `env` stage reads them). */
  events: readonly RewardRecord[];
  /** Tokens of the scored row(s), for `max_batch_tokens`. */
  tokens: number;
}

export type RewardOutcome =
  | {
      kind: "score";
      score: number;
      /** Named parts of the score (e.g. format and correctness), kept in `reward_info`. */
      components?: Record<string, number>;
      info?: Record<string, unknown>;
    }
  /** The stage does not apply to this item (e.g. no reference in the metadata): no value, no failure. */
  | { kind: "skip"; reason: string }
  /** This item failed; `retryable` ones are tried again by the runner. */
  | { kind: "error"; message: string; retryable?: boolean };

export interface RewardStage {
  /** How the stage scores: a batch in, one outcome per item out, in order. Throwing fails the batch. */
  score(items: readonly RewardItem[], signal: AbortSignal): Promise<RewardOutcome[]>;
  /** Releases models, sockets and workers. */
  close?(): Promise<void>;
}

/** A user stage module (referenced from a pipeline by path) default-exports one of these. */
export type RewardStageFactory = (
  options: Record<string, unknown>,
  context: { logger: Logger },
) => RewardStage | Promise<RewardStage>;

/** What a stage type's `build` gets besides its config. */
export interface StageBuildContext {
  /** The stage's own logger (`reward.<name>`). */
  logger: Logger;
  /** Where relative paths (models, modules) are resolved from: the rewards file's directory. */
  baseDir: string;
}

/**
 * A reward stage type, as the component registry holds components: its config keys, a description, its
 * default scope and how it is built. The table of them is stages/index.ts; a new type is one file
 * exporting one of these, its line in that table, and its section in docs/rewards.md.
 */
export interface RewardStageType<C = never> {
  /** One line for docs and `trajflow validate`. */
  description: string;
  /**
   * The keys of a stage's config besides the common ones (`name`, `type`, `scope`, `required`, `batch`):
   * its `options`, and whatever else it takes (a module's `path`). The config is strict: other keys fail.
   */
  fields: Record<string, z.ZodType>;
  /** Its scope when the config names none: models score rows, rules and judges the session's answer. */
  scope: "row" | "session";
  /** Starts the stage (loads a model, imports a module); throws when it cannot. */
  build(config: C, ctx: StageBuildContext): RewardStage | Promise<RewardStage>;
}

/** An error a stage may throw to say whether retrying can help (network: yes; a bad model: no). */
export class RewardStageError extends Error {
  readonly retryable: boolean;
  constructor(message: string, retryable: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RewardStageError";
    this.retryable = retryable;
  }
}
