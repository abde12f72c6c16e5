/**
 * The reward transform: every finished session goes to each configured stage (per row or per session,
 * through the stage's runner), and its rows come back with `reward_names`, `reward_values`, `reward_info`
 * and the combined `reward`. Sessions leave in the order they came (deterministic output) while up to
 * `max_pending_sessions` are scored at once, so batches fill across sessions.
 */
import { TrajflowError } from "../../core/errors.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, type DeadLetterOutput } from "../../core/records.ts";
import { RowFlags, type RowFlag, type TrajectoryRow } from "../../schemas/trajectory.ts";
import type { SessionOutput } from "../assemble/assembler.ts";
import { combine, type StageValue } from "./combine.ts";
import { scopeOf, type RewardsConfig, type StageConfig } from "./config.ts";
import type { RewardItem, RewardOutcome, RewardStage } from "./contract.ts";
import { StageRunner } from "./runner.ts";
import { REWARD_STAGE_TYPES } from "./stages/index.ts";

export interface RewardContext {
  metrics: Metrics;
  logger: Logger;
  deadLetters: DeadLetterOutput;
  /** Where relative module paths are resolved from (the pipeline file's directory). */
  baseDir?: string;
}

async function buildStage(config: StageConfig, ctx: RewardContext): Promise<RewardStage> {
  // Validation built the config from the same entry, so the type is registered.
  return REWARD_STAGE_TYPES[config.type]!.build(config as never, {
    logger: ctx.logger.child({ component: `reward.${config.name}` }),
    baseDir: ctx.baseDir ?? process.cwd(),
  });
}

export function itemsOf(session: SessionOutput, scope: "row" | "session"): RewardItem[] {
  const base = {
    uid: session.uid,
    session_id: session.sessionId,
    metadata: session.metadata,
    events: session.rewards,
  };
  const lastTurn = (turns: SessionOutput["turns"][number] | undefined) => turns?.[turns.length - 1];
  if (scope === "row") {
    return session.rows.map((row, i) => {
      const turns = session.turns[i] ?? [];
      return {
        ...base,
        key: row.key,
        rows: [row],
        turns,
        final_text: lastTurn(turns)?.text ?? null,
        final_tool_calls: lastTurn(turns)?.toolCalls ?? null,
        tokens: row.prompt_ids.length + row.response_ids.length,
      };
    });
  }
  if (session.rows.length === 0) return [];
  // The session's answer is its last row's last turn (rows follow the tree, the newest branch last).
  const turns = session.turns[session.turns.length - 1] ?? [];
  return [
    {
      ...base,
      key: `${session.uid}_${session.sessionId}`,
      rows: session.rows,
      turns,
      final_text: lastTurn(turns)?.text ?? null,
      final_tool_calls: lastTurn(turns)?.toolCalls ?? null,
      tokens: session.rows.reduce((n, r) => n + r.prompt_ids.length + r.response_ids.length, 0),
    },
  ];
}

export class RewardTransform {
  private readonly config: RewardsConfig;
  private readonly ctx: RewardContext;
  private readonly runners: Array<{ config: StageConfig; runner: StageRunner }>;

  private constructor(config: RewardsConfig, ctx: RewardContext, runners: RewardTransform["runners"]) {
    this.config = config;
    this.ctx = ctx;
    this.runners = runners;
  }

  /** Starts every stage (loads models, imports modules); fails with every stage that could not start. */
  static async build(config: RewardsConfig, ctx: RewardContext): Promise<RewardTransform> {
    const built = await Promise.allSettled(config.stages.map((s) => buildStage(s, ctx)));
    const failures = built.flatMap((b, i) =>
      b.status === "rejected" ? [`${config.stages[i]!.name}: ${(b.reason as Error).message}`] : [],
    );
    if (failures.length > 0) {
      await Promise.all(built.map((b) => (b.status === "fulfilled" ? b.value.close?.() : undefined)));
      throw new TrajflowError(
        "REWARD_STAGE_UNAVAILABLE",
        `reward stages could not start:\n  ${failures.join("\n  ")}`,
      );
    }
    const runners = config.stages.map((stage, i) => ({
      config: stage,
      runner: new StageRunner(
        stage.name,
        (built[i] as PromiseFulfilledResult<RewardStage>).value,
        stage.batch,
        ctx,
      ),
    }));
    return new RewardTransform(config, ctx, runners);
  }

  async close(): Promise<void> {
    await Promise.all(this.runners.map((r) => r.runner.close()));
  }

  /** Scores one session with every stage and fills its rows' reward columns. */
  async score(session: SessionOutput): Promise<SessionOutput> {
    const { metrics } = this.ctx;
    const started = performance.now();
    const perStage = await this.outcomes(session);
    metrics.inc("reward_sessions");
    metrics.inc("reward_session_ms", "", performance.now() - started);
    session.rows.forEach((row, i) =>
      this.fillRow(
        row,
        perStage.map((outcomes) => outcomes[i]!),
      ),
    );
    return session;
  }

  /**
   * Per stage, one outcome per row (a session-scope outcome is broadcast to the rows); "timeout" where
   * the stage had not answered within the session's `timeout_ms`.
   */
  private async outcomes(session: SessionOutput): Promise<Array<Array<RewardOutcome | "timeout">>> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((r) => {
      timer = setTimeout(() => r("timeout"), this.config.timeout_ms);
    });
    const perStage = await Promise.all(
      this.runners.map(async ({ config, runner }) => {
        const scope = scopeOf(config);
        const items = itemsOf(session, scope);
        const outcomes = await Promise.all(items.map((item) => Promise.race([runner.score(item), timedOut])));
        return session.rows.map((_, i) => outcomes[scope === "row" ? i : 0] ?? ("timeout" as const));
      }),
    );
    clearTimeout(timer);
    return perStage;
  }

  /** Fills a row's reward columns from its outcome of each stage, in stage order. */
  private fillRow(row: TrajectoryRow, outcomes: Array<RewardOutcome | "timeout">): void {
    const { metrics } = this.ctx;
    const info: Record<string, unknown> = {};
    const flags = new Set<RowFlag>(row.flags);
    const values = this.runners.map(({ config }, s) =>
      this.stageValue(row, config, outcomes[s]!, info, flags),
    );
    row.reward_names = values.map((v) => v.name);
    row.reward_values = values.map((v) => v.value);
    const combined = combine(values, this.config.combine, this.config.weights);
    if (combined !== null && !Number.isFinite(combined)) {
      // Finite stage values can still overflow (two rewards of 1e308 sum to Infinity): never write it.
      row.reward = null;
      flags.add(RowFlags.REWARD_FAILED);
      info._combined = {
        status: "failed",
        error: `${this.config.combine} of the stage values is ${combined}`,
      };
      metrics.inc("reward_failures", "_combined");
    } else row.reward = combined;
    row.reward_info = JSON.stringify(info);
    row.flags = [...flags].sort();
  }

  /**
   * One stage's outcome on a row: its value, with its `reward_info` entry and the row's flags; a required
   * stage's timeout is dead-lettered.
   */
  private stageValue(
    row: TrajectoryRow,
    config: StageConfig,
    outcome: RewardOutcome | "timeout",
    info: Record<string, unknown>,
    flags: Set<RowFlag>,
  ): StageValue {
    const value = { name: config.name, value: null, required: config.required, skipped: false };
    if (outcome === "timeout") {
      info[config.name] = { status: "timeout" };
      if (config.required) {
        flags.add(RowFlags.REWARD_TIMEOUT);
        this.ctx.metrics.inc("reward_timeouts", config.name);
        this.ctx.deadLetters.write(
          makeDeadLetter(
            "REWARD_TIMEOUT",
            `reward stage ${config.name} did not score ${row.key} within ${this.config.timeout_ms} ms`,
            `reward.${config.name}`,
            {
              raw: JSON.stringify({ key: row.key, stage: config.name }),
              origin: { kind: "trajectory", key: row.key },
            },
            { uid: row.uid, session_id: row.session_id, details: { stage: config.name } },
          ),
        );
      }
      return value;
    }
    if (outcome.kind === "score") {
      info[config.name] = {
        status: "ok",
        value: outcome.score,
        components: outcome.components,
        info: outcome.info,
      };
      return { ...value, value: outcome.score };
    }
    if (outcome.kind === "skip") {
      info[config.name] = { status: "skipped", reason: outcome.reason };
      return { ...value, skipped: true };
    }
    info[config.name] = { status: "failed", error: outcome.message };
    flags.add(RowFlags.REWARD_FAILED);
    return value;
  }
}
