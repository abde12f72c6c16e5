/**
 * The `rewards` transform as a component. The stages (and their batching runners) are shared by every
 * lane, so batches fill across partitions; each lane keeps its own window so its sessions leave in the
 * order they came. A reward dead letter (a stage failed or timed out on a row) holds its session's input
 * offset until the dead-letter sink made it durable: the session's ack is registered while it is scored
 * and taken by the letter before the session moves on.
 */
import type { Ack } from "../../contract/ledger.ts";
import type { DeadLetterSink, LaneTransform, TransformComponent, Unit } from "../../contract/components.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import { sessionKey } from "../../schemas/session.ts";
import type { RewardsConfig } from "./config.ts";
import { RewardTransform } from "./rewards.ts";

export interface RewardsComponentContext {
  metrics: Metrics;
  logger: Logger;
  deadLetters: DeadLetterSink;
  baseDir: string;
}

export class RewardsComponent implements TransformComponent {
  private readonly config: RewardsConfig;
  private readonly transform: RewardTransform;
  /** Sessions being scored → the ack their dead letters hold. */
  private readonly scoring = new Map<string, Ack>();

  private constructor(config: RewardsConfig, transform: RewardTransform, scoring: Map<string, Ack>) {
    this.config = config;
    this.transform = transform;
    this.scoring = scoring;
  }

  /** Starts every stage (models load, modules import) before anything is read. */
  static async build(config: RewardsConfig, ctx: RewardsComponentContext): Promise<RewardsComponent> {
    const scoring = new Map<string, Ack>();
    const transform = await RewardTransform.build(config, {
      metrics: ctx.metrics,
      logger: ctx.logger,
      baseDir: ctx.baseDir,
      deadLetters: {
        write: (letter: DeadLetter) => {
          ctx.metrics.inc("dead_letters", letter.code);
          const ack = scoring.get(sessionKey(letter.uid ?? "", letter.session_id ?? "")) ?? null;
          ack?.retain();
          ctx.deadLetters.write(letter, ack);
        },
      },
    });
    return new RewardsComponent(config, transform, scoring);
  }

  openLane(): LaneTransform {
    let window: Array<Promise<Unit>> = [];
    const score = async (unit: Unit): Promise<Unit> => {
      const keys = unit.sessions.map((s) => sessionKey(s.uid, s.sessionId));
      keys.forEach((k) => this.scoring.set(k, unit.acks[0]!));
      try {
        await Promise.all(unit.sessions.map((s) => this.transform.score(s)));
      } finally {
        for (const k of keys) this.scoring.delete(k);
      }
      return unit;
    };
    return {
      push: async (unit) => {
        window.push(score(unit));
        const ready: Unit[] = [];
        while (window.length > this.config.max_pending_sessions) ready.push(await window.shift()!);
        return ready;
      },
      // Every batch ends with its scored sessions written: a quiet topic must not hold them back.
      flush: async () => {
        const rest = window;
        window = [];
        return Promise.all(rest);
      },
    };
  }

  async close(): Promise<void> {
    await this.transform.close();
  }
}
