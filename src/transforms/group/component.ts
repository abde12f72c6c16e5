/**
 * The `group` transform as a component: one GroupBatcher per lane (a uid's sessions share a partition,
 * since events are keyed by uid). A group leaves as one unit holding every member session's acks, so its
 * input offsets are released only once the whole group is durable, and a sink writes it into one file.
 */
import type { LaneTransform, TransformComponent, Unit } from "../../contract/components.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { DeadLetterOutput } from "../../core/records.ts";
import type { SessionOutput } from "../../schemas/session.ts";
import type { GroupConfig } from "./config.ts";
import { GroupBatcher, type GroupBatch } from "./group.ts";

export class GroupComponent implements TransformComponent {
  private readonly config: GroupConfig;
  private readonly metrics: Metrics;
  private readonly deadLetters: DeadLetterOutput;

  constructor(config: GroupConfig, metrics: Metrics, deadLetters: DeadLetterOutput) {
    this.config = config;
    this.metrics = metrics;
    this.deadLetters = deadLetters;
  }

  openLane(): LaneTransform {
    const batcher = new GroupBatcher(this.config, { metrics: this.metrics, deadLetters: this.deadLetters });
    /** The unit each waiting session came in (its acks and span). */
    const units = new Map<SessionOutput, Unit>();
    const toUnits = (batches: GroupBatch[]): Unit[] =>
      batches.map((b) => {
        const members = b.sessions.map((s) => units.get(s)!);
        for (const s of b.sessions) units.delete(s);
        return {
          sessions: b.sessions,
          rows: b.rows,
          acks: members.flatMap((m) => m.acks),
          spans: members.flatMap((m) => m.spans),
          finishedAt: Math.max(...members.map((m) => m.finishedAt)),
        };
      });
    return {
      push: (unit, eventTime) => {
        // The plan puts group last, after every transform that could merge sessions.
        if (unit.sessions.length !== 1) throw new Error("group takes units of one session");
        const session = unit.sessions[0]!;
        units.set(session, unit);
        return toUnits(batcher.push(session, eventTime));
      },
      tick: (eventTime) => toUnits(batcher.tick(eventTime)),
      flush: (final, eventTime) => toUnits(final ? batcher.flush(eventTime) : batcher.tick(eventTime)),
    };
  }
}
