/**
 * Staleness: rows sampled by a policy older than the current one minus a lag are not trained (off-policy
 * beyond what the trainer corrects for). The current version is the latest `policy.update` control event;
 * before any, it comes from configuration, or is the newest version observed in the stream. A row's age is
 * the oldest policy of the tokens it trains (`policy_version_min`: a resumed rollout's first tokens may be
 * older than its turn's `weight_version`), else of its turns (`weight_version_min`).
 */
import { z } from "zod";
import type { LaneTransform, TransformComponent, Unit } from "../../contract/components.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { PolicyUpdateEvent } from "../../schemas/events.ts";
import type { SessionOutput } from "../../schemas/session.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";

export const stalenessConfigSchema = z.strictObject({
  max_lag: z
    .int()
    .nonnegative()
    .describe(
      "Rows whose oldest trained token (policy_version_min, else weight_version_min) is older than " +
        "current - max_lag are stale.",
    ),
  current_version: z
    .union([z.int().nonnegative(), z.literal("observed")])
    .default("observed")
    .describe(
      'The current policy version, or "observed": the newest weight_version_max or policy_version_max ' +
        "seen so far.",
    ),
});
export type StalenessConfig = z.output<typeof stalenessConfigSchema>;
export type StalenessConfigInput = z.input<typeof stalenessConfigSchema>;

export class StalenessFilter {
  private readonly config: StalenessConfig;
  private observed = -1;
  private announced: number | null = null;

  constructor(config: StalenessConfig) {
    this.config = config;
  }

  /** The version rows are compared against, or null while nothing was observed. */
  get current(): number | null {
    if (this.announced !== null) return this.announced;
    const c = this.config.current_version;
    if (c !== "observed") return c;
    return this.observed < 0 ? null : this.observed;
  }

  /** A `policy.update` control event: from now on, rows are compared against this version. */
  announce(version: number): void {
    this.announced = version;
  }

  /** Takes note of the rows' versions (for "observed"); call before `isStale` on a session's rows. */
  observe(rows: TrajectoryRow[]): void {
    for (const r of rows) {
      for (const v of [r.weight_version_max, r.policy_version_max])
        if (v !== null && v > this.observed) this.observed = v;
    }
  }

  isStale(row: TrajectoryRow): boolean {
    const current = this.current;
    const oldest = row.policy_version_min ?? row.weight_version_min;
    return current !== null && oldest !== null && oldest < current - this.config.max_lag;
  }
}

/**
 * The `staleness` transform as a component: the policy version is one for the whole pipeline (control
 * events reach every lane), and each session's stale rows are dropped and counted. A session with any
 * stale row is marked, so a later `group` holds a placeholder in its place instead of a partial session.
 */
export class StalenessComponent implements TransformComponent {
  readonly filter: StalenessFilter;
  private readonly metrics: Metrics;

  constructor(config: StalenessConfig, metrics: Metrics) {
    this.filter = new StalenessFilter(config);
    this.metrics = metrics;
  }

  control(event: PolicyUpdateEvent): void {
    this.filter.announce(event.weight_version);
  }

  openLane(): LaneTransform {
    return {
      push: (unit: Unit) => {
        for (const session of unit.sessions) this.apply(session);
        return [unit];
      },
      flush: () => [],
    };
  }

  private apply(session: SessionOutput): void {
    const { filter } = this;
    filter.observe(session.rows);
    const fresh = session.rows.map((r) => !filter.isStale(r));
    const stale = fresh.filter((f) => !f).length;
    if (stale === 0) return;
    session.stale = true;
    this.metrics.inc("sessions_stale");
    this.metrics.inc("rows_stale_dropped", "", stale);
    // Turns stay aligned with rows (reward stages read them).
    session.rows = session.rows.filter((_, i) => fresh[i]);
    session.turns = session.turns.filter((_, i) => fresh[i]);
  }
}
