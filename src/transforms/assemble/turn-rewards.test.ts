import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";

/** c1 → c2 (continuation) and c1 → c3 (a branch with a different observation), per-call rewards. */
const branchy = () =>
  new SessionScript()
    .start()
    .call("c1", [1, 2], [10])
    .call("c2", [1, 2, 10, 3], [11])
    .call("c3", [1, 2, 10, 4], [12])
    .reward(0.5, { target: "c1" })
    .reward(1, { target: "c2" })
    .reward(0, { target: "c3" })
    .end()
    .lines();

const turns = (rows: ReturnType<typeof assemble>["rows"]) =>
  rows.map((r) => [[...r.response_ids], [...r.turn_end_indices], r.turn_rewards, r.last_trained_index]);

describe("per-turn rewards", () => {
  it("places each call's reward at the last token of the turn a row trains", () => {
    const { rows } = assemble(branchy());
    assert.deepEqual(turns(rows), [
      [[10, 3, 11], [0, 2], [0.5, 1], 2],
      // c1 is trained by the first row only; this row trains c3.
      [[10, 4, 12], [2], [0], 2],
    ]);
  });

  it("discounts along the tree's edges: a parent gets its reward plus gamma x the mean of its children's", () => {
    const { rows } = assemble(branchy(), { turn_reward_discount: 0.5 });
    assert.deepEqual(turns(rows), [
      [[10, 3, 11], [0, 2], [0.5 + 0.5 * ((1 + 0) / 2), 1], 2],
      [[10, 4, 12], [2], [0], 2],
    ]);
  });

  it("leaves turn_rewards null without per-call rewards, and null for unrewarded turns", () => {
    const none = assemble(new SessionScript().start().call("c1", [1], [5]).reward(1).end().lines());
    assert.equal(none.rows[0]!.turn_rewards, null);
    const partial = assemble(
      new SessionScript()
        .start()
        .call("c1", [1], [5])
        .call("c2", [1, 5, 6], [7])
        .reward(2, { target: "c2" })
        .end()
        .lines(),
    );
    assert.deepEqual(partial.rows[0]!.turn_rewards, [null, 2]);
  });

  it("writes a discounted turn value past float64's range as null, flagging the row", () => {
    const { rows, deadLetters } = assemble(
      new SessionScript()
        .call("c1", [1], [5])
        .call("c2", [1, 5, 6], [7])
        .reward(1.7e308, { target: "c1" })
        .reward(1.7e308, { target: "c2" })
        .end()
        .lines(),
      { turn_reward_discount: 1 },
    );
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows[0]!.turn_rewards, [null, 1.7e308]);
    assert.deepEqual(rows[0]!.flags, ["reward_overflow"]);
  });
});
