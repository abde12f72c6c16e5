import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { pino } from "pino";
import { MemoryDeadLetters } from "../../../test/helpers/dead-letters.ts";
import { Metrics } from "../../core/metrics.ts";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";
import { rewardsConfigSchema, type RewardsConfigInput } from "./config.ts";
import { RewardTransform } from "./rewards.ts";

/** A two-turn session whose last answer is `answer`, with an env reward of `env` when given. */
function session(id: string, answer: string, env?: number) {
  const s = new SessionScript("u1", id)
    .start({ metadata: { answer: "42", nested: { answer: "x" } } })
    .call("c1", [1, 2], [10, 11], { text: "thinking" })
    .call("c2", [1, 2, 10, 11, 3], [12, 13, 14], { text: answer });
  if (env !== undefined) s.reward(env);
  return s.end();
}

async function score(config: RewardsConfigInput, ...scripts: SessionScript[]) {
  const metrics = new Metrics();
  const deadLetters = new MemoryDeadLetters();
  const transform = await RewardTransform.build(rewardsConfigSchema.parse(config), {
    metrics,
    deadLetters,
    logger: pino({ level: "silent" }),
  });
  const { sessions } = assemble(scripts.flatMap((s) => s.lines()));
  // Concurrently, as the component scores the sessions of its window.
  const out = await Promise.all(sessions.map((s) => transform.score(s)));
  await transform.close();
  return { rows: out.flatMap((s) => s.rows), deadLetters: deadLetters.letters, metrics };
}

describe("reward transform", () => {
  it("keeps each stage's value, combines them into reward, and records info for auditing", async () => {
    const { rows } = await score(
      {
        stages: [
          { name: "env", type: "env" },
          { name: "exact", type: "rule", options: { mode: "exact" } },
          { name: "num", type: "rule", options: { mode: "numeric", extract: "(-?\\d+)" } },
        ],
        combine: "weighted_sum",
        weights: { env: 0.5, exact: 2 },
      },
      session("right", "42", 0.4),
      session("wrong", "The answer is 41", 1),
    );
    assert.deepEqual(
      rows.map((r) => [r.session_id, r.reward_names, r.reward_values, r.reward]),
      [
        ["right", ["env", "exact", "num"], [0.4, 1, 1], 0.5 * 0.4 + 2 * 1 + 1],
        ["wrong", ["env", "exact", "num"], [1, 0, 0], 0.5],
      ],
    );
    const info = JSON.parse(rows[1]!.reward_info!) as Record<string, { status: string; info?: unknown }>;
    assert.equal(info.num!.status, "ok");
    assert.deepEqual(info.num!.info, { answer: "41" });
  });

  // Regression: two rewards of 1e308 summed to Infinity, written as the row's reward.
  it("nulls and flags a combined reward that overflows, keeping each stage's value", async () => {
    const huge = new URL("../../../test/fixtures/reward-stages/huge-stage.ts", import.meta.url).pathname;
    const { rows, metrics } = await score(
      {
        stages: [
          { name: "a", type: "module", path: huge },
          { name: "b", type: "module", path: huge },
        ],
      },
      session("s", "42"),
    );
    assert.deepEqual(rows[0]!.reward_values, [1e308, 1e308]);
    assert.equal(rows[0]!.reward, null);
    assert.ok(rows[0]!.flags.includes("reward_failed"));
    assert.deepEqual(JSON.parse(rows[0]!.reward_info!)._combined, {
      status: "failed",
      error: "sum of the stage values is Infinity",
    });
    assert.equal(metrics.get("reward_failures", "_combined"), 1);
  });

  it("skips a stage that does not apply, and nulls the reward when a required stage fails", async () => {
    const failing = new URL("../../../test/fixtures/reward-stages/failing-stage.ts", import.meta.url)
      .pathname;
    const { rows, deadLetters } = await score(
      {
        stages: [
          { name: "env", type: "env" }, // no reward event: skipped, not 0
          { name: "ref", type: "rule", options: { mode: "exact", reference_key: "missing" } },
          { name: "flaky", type: "module", path: failing, required: false, batch: { retries: 0 } },
          { name: "exact", type: "rule", options: { mode: "exact" } },
        ],
      },
      session("s", "42"),
    );
    assert.deepEqual(rows[0]!.reward_values, [null, null, null, 1]);
    assert.equal(rows[0]!.reward, 1, "the optional failure is left out; skipped stages too");
    assert.ok(rows[0]!.flags.includes("reward_failed"));
    assert.equal(deadLetters[0]!.code, "REWARD_FAILED");

    const required = await score(
      { stages: [{ name: "flaky", type: "module", path: failing, batch: { retries: 0 } }] },
      session("s", "42"),
    );
    assert.equal(required.rows[0]!.reward, null, "a failed required stage: null, never 0");
    assert.deepEqual(required.rows[0]!.reward_values, [null]);
  });

  it("flags reward_timeout when a required stage does not report in time", async () => {
    const hanging = new URL("../../../test/fixtures/reward-stages/hanging-stage.ts", import.meta.url)
      .pathname;
    const { rows, deadLetters } = await score(
      {
        // The session stops waiting after 50 ms; the runner gives up on the call itself after 200 ms.
        stages: [{ name: "slow", type: "module", path: hanging, batch: { timeout_ms: 200, retries: 0 } }],
        timeout_ms: 50,
      },
      session("s", "42"),
    );
    assert.equal(rows[0]!.reward, null);
    assert.ok(rows[0]!.flags.includes("reward_timeout"));
    assert.equal(deadLetters[0]!.code, "REWARD_TIMEOUT");
  });

  it("lists every config problem at once", () => {
    const r = rewardsConfigSchema.safeParse({
      stages: [
        { name: "a", type: "rule", options: { mode: "fuzzy" } },
        { name: "a", type: "env", colour: "red" },
      ],
      weights: { b: 1 },
    });
    assert.equal(r.success, false);
    const paths = r.error!.issues.map((i) => i.path.join("."));
    assert.ok(paths.includes("stages.0.options.mode"), paths.join());
    assert.ok(
      paths.some((p) => p.startsWith("stages.1")),
      paths.join(),
    );
  });

  it("applies a length penalty and reads tool-call arguments", async () => {
    const s = new SessionScript("u1", "tool")
      .start({ metadata: { answer: '{"x":1}' } })
      .call("c1", [1, 2], [10, 11, 12, 13], {
        tool_calls: [{ function: { name: "f", arguments: '{"x":1}' } }],
      })
      .end();
    const { rows } = await score(
      {
        stages: [
          {
            name: "tool",
            type: "rule",
            options: {
              mode: "exact",
              source: "tool_call",
              length_penalty: { target_tokens: 2, per_token: 0.1 },
            },
          },
        ],
      },
      s,
    );
    assert.ok(Math.abs(rows[0]!.reward! - 0.8) < 1e-12);
  });
});
