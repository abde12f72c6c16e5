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

  // Regression: the shipped extract regex blocked the main thread 15 s on a 60k-digit response. What bounds
  // the work is that both extractions see only the response's last max_answer_chars characters; a regex
  // capturing everything it is given shows exactly what that is (no clock: a slow host proves nothing).
  it("extracts from a 60,000-digit response's last max_answer_chars characters only", async () => {
    const huge = `${"9".repeat(60_000)}x`;
    const judge = async (options: Record<string, unknown>, answer: string) => {
      const stage = ruleStage(
        ruleStageOptionsSchema.parse({
          mode: "exact",
          case_sensitive: true,
          reference_key: "answer",
          ...options,
        }),
      );
      const [outcome] = await stage.score(
        [rewardItem("k", [1], [2], { metadata: { answer }, final_text: huge })],
        new AbortController().signal,
      );
      assert.equal(outcome!.kind, "score");
      return (outcome as { score: number }).score;
    };
    const everything = { extract: "^([\\s\\S]*)$" };
    assert.equal(await judge(everything, huge.slice(-4_096)), 1);
    assert.equal(await judge(everything, huge), 0);
    assert.equal(await judge({ ...everything, max_answer_chars: 10 }, "999999999x"), 1);
    assert.equal(await judge({ last_number: true }, "9".repeat(4_095)), 1);
    assert.equal(await judge({ last_number: true, extract: "(\\d{3})$" }, "999"), 1);
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
