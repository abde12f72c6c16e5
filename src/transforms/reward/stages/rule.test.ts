import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { rewardItem } from "../../../../test/helpers/reward-items.ts";
import { lastNumber, ruleStage, ruleStageOptionsSchema } from "./rule.ts";

describe("rule reward stage", () => {
  it("finds the last number by scanning back", () => {
    assert.equal(lastNumber("so 3 apples, then -12.5 left."), "-12.5");
    assert.equal(lastNumber("total: 1,234"), "1,234");
    assert.equal(lastNumber("no digits here"), null);
    assert.equal(lastNumber("42"), "42");
  });

  // Regression: the shipped extract regex blocked the main thread 15 s on a 60k-digit response.
  it("scores a 60,000-digit response quickly, with last_number or with an extract regex", async () => {
    const huge = `${"9".repeat(60_000)}x`;
    for (const options of [
      { mode: "numeric", reference_key: "answer", last_number: true },
      { mode: "numeric", reference_key: "answer", extract: "(-?\\d+(?:\\.\\d+)?)\\D*$" },
    ]) {
      const stage = ruleStage(ruleStageOptionsSchema.parse(options));
      const started = performance.now();
      const [outcome] = await stage.score(
        [rewardItem("k", [1], [2], { metadata: { answer: "4" }, final_text: huge })],
        new AbortController().signal,
      );
      const ms = performance.now() - started;
      assert.equal(outcome!.kind, "score");
      assert.ok(ms < 2_000, `${JSON.stringify(options)} took ${ms.toFixed(0)} ms`);
    }
  });

  it("looks up only the metadata's own keys", async () => {
    const stage = ruleStage(ruleStageOptionsSchema.parse({ mode: "exact", reference_key: "constructor" }));
    const [outcome] = await stage.score(
      [rewardItem("k", [1], [2], { metadata: {}, final_text: "x" })],
      new AbortController().signal,
    );
    assert.equal(outcome!.kind, "skip");
  });
});
