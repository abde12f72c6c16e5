import { strict as assert } from "node:assert";
import { it } from "node:test";
import { assemble } from "../../test/helpers/sessions.ts";
import { SessionEvents } from "./events.ts";

it("the gateway helper's events assemble into the expected row", () => {
  let t = 1_000;
  const s = new SessionEvents("task", "r0", () => (t += 10));
  const events = [
    s.start({ sample_index: 0, group_size: 1 }),
    s.call({
      callId: "c1",
      promptIds: [1, 2],
      outputIds: [3, 4],
      logprobs: [-0.5, -0.25],
      finishReason: "tool_calls",
    }),
    s.call({
      callId: "c2",
      parentCallId: "c1",
      promptDeltaIds: [5],
      outputIds: [6],
      logprobs: [-1],
      finishReason: "stop",
    }),
    s.reward(1),
    s.end("ok"),
  ];
  const { rows, deadLetters } = assemble(events.map((e) => JSON.stringify(e)));
  assert.deepEqual(deadLetters, []);
  assert.deepEqual(
    rows.map((r) => [
      r.key,
      [...r.prompt_ids],
      [...r.response_ids],
      [...r.response_mask],
      [...r.rollout_log_probs!],
      r.reward,
    ]),
    [["task_r0_0", [1, 2], [3, 4, 5, 6], [1, 1, 0, 1], [-0.5, -0.25, 0, -1], 1]],
  );
});
