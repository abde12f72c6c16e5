/**
 * The shared test vector (test/vectors/gateway-events.json): trajflow's gateway writes exactly the events it
 * holds, byte for byte. python/tests/test_emit_vectors.py holds trajflow.emit to the same bytes, so the two
 * emitters cannot disagree on seq numbers, the delta form, branch tips, packing or missing logprobs.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { gatewaySteps, readVector } from "./helpers/vectors.ts";
import { assemble } from "./helpers/sessions.ts";

const vector = readVector();

describe("the gateway event vector", () => {
  for (const session of vector.sessions) {
    it(`the gateway writes the vector's events: ${session.uid}/${session.session_id}`, () => {
      const steps = gatewaySteps(session);
      session.steps.forEach((step, i) => {
        const expected =
          step.op === "call"
            ? { events: step.events, missing_logprobs: step.missing_logprobs, delta: step.delta }
            : { events: step.events };
        assert.deepEqual(steps[i], expected, `step ${i} (${step.op} ${step.call_id ?? ""})`);
      });
    });
  }

  it("the vector's events are valid protocol: they assemble with no dead letter", () => {
    const lines = vector.sessions.flatMap((s) => s.steps.flatMap((step) => step.events!));
    const { rows, deadLetters } = assemble(lines);
    assert.deepEqual(deadLetters, []);
    // r0's lines: c1-c2-c6 (c6's full prompt extends c2's), c3-c4-c5.0, and c5.1, the other choice. Each
    // sampled turn is trained once (mask 1) on the first line that holds it. r1 has one call; vec-0002 none.
    assert.deepEqual(
      rows.map((r) => [r.key, [...r.prompt_ids], [...r.response_ids], [...r.response_mask], r.status]),
      [
        ["vec-0001_r0_0", [1, 2, 3], [10, 11, 4, 5, 12, 13, 8, 20], [1, 1, 0, 0, 1, 1, 0, 1], "ok"],
        ["vec-0001_r0_1", [1, 2, 3], [10, 11, 6, 14, 15, 16, 7, 17], [0, 0, 0, 1, 1, 1, 0, 1], "ok"],
        ["vec-0001_r0_2", [1, 2, 3], [10, 11, 6, 14, 15, 16, 7, 18, 19], [0, 0, 0, 0, 0, 0, 0, 1, 1], "ok"],
        ["vec-0001_r1_0", [1, 2, 3], [30, 31], [1, 1], "aborted"],
      ],
    );
  });
});
