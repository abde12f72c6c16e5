import { strict as assert } from "node:assert";
import { it } from "node:test";
import { emptyRow, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { StalenessFilter, stalenessConfigSchema } from "./staleness.ts";

const row = (fields: Partial<TrajectoryRow>): TrajectoryRow => ({ ...emptyRow(), ...fields });

// Issue 26: a rollout resumed after a weight update has a turn version newer than its first tokens; the
// tokens it trains decide its age.
it("ages a row by the oldest policy of the tokens it trains, else by its turns", () => {
  const filter = new StalenessFilter(stalenessConfigSchema.parse({ max_lag: 2, current_version: 10 }));
  const resumed = row({ weight_version_min: 10, weight_version_max: 10, policy_version_min: 7 });
  assert.equal(filter.isStale(resumed), true);
  assert.equal(filter.isStale(row({ weight_version_min: 8, policy_version_min: 8 })), false);
  assert.equal(
    filter.isStale(row({ weight_version_min: 7 })),
    true,
    "no per-token versions: the turns decide",
  );
  assert.equal(filter.isStale(row({})), false, "no version at all: never stale");
});

it("observes the newest version of turns and tokens alike", () => {
  const filter = new StalenessFilter(stalenessConfigSchema.parse({ max_lag: 0 }));
  filter.observe([row({ weight_version_max: 4, policy_version_max: 6 }), row({ weight_version_max: 5 })]);
  assert.equal(filter.current, 6);
});
