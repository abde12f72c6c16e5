// The worked example's own test: a user stage is plain code, tested with plain items.
import { strict as assert } from "node:assert";
import { it } from "node:test";
import type { RewardItem } from "../../src/transforms/reward/contract.ts";
import brevity from "./brevity.ts";

const item = (trained: number[]) =>
  ({ rows: trained.map((n) => ({ num_trained_tokens: n })) }) as unknown as RewardItem;

it("brevity rewards short answers: 1 up to the target, 0 at twice the target, skip when nothing is trained", async () => {
  const stage = brevity({ target_tokens: 10 });
  const outcomes = await stage.score(
    [item([4, 6]), item([15]), item([25]), item([0])],
    new AbortController().signal,
  );
  assert.deepEqual(
    outcomes.map((o) => (o.kind === "score" ? o.score : o.kind)),
    [1, 0.5, 0, "skip"],
  );
});
