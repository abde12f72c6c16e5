import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { pino } from "pino";
import { MemoryDeadLetters } from "../../../test/helpers/dead-letters.ts";
import { Metrics } from "../../core/metrics.ts";
import { rewardItem } from "../../../test/helpers/reward-items.ts";
import type { RewardItem, RewardOutcome, RewardStage } from "./contract.ts";
import { RewardStageError } from "./contract.ts";
import { batchPolicySchema, StageRunner } from "./runner.ts";

const item = (key: string, tokens = 10) => rewardItem(key, [], [], { final_text: key, tokens });

function runner(stage: RewardStage, policy: Record<string, unknown> = {}) {
  const metrics = new Metrics();
  const deadLetters = new MemoryDeadLetters();
  const r = new StageRunner(
    "s",
    stage,
    batchPolicySchema.parse({ backoff_ms: 1, max_wait_ms: 5, ...policy }),
    { metrics, deadLetters, logger: pino({ level: "silent" }) },
  );
  return { r, metrics, deadLetters };
}

/** Waits for `condition` across turns of the event loop (bounded: a test that never sees it fails). */
async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; !condition(); i++) {
    if (i > 10_000) throw new Error("the condition never held");
    await new Promise((r) => setImmediate(r));
  }
}

const scoreByLength = (items: readonly RewardItem[]): RewardOutcome[] =>
  items.map((i) => ({ kind: "score", score: i.key.length }));

describe("reward stage runner", () => {
  it("batches up to max_batch_size and max_batch_tokens, in order", async () => {
    const batches: string[][] = [];
    const { r } = runner(
      { score: async (items) => (batches.push(items.map((i) => i.key)), scoreByLength(items)) },
      { max_batch_size: 3, max_batch_tokens: 25, concurrency: 1 },
    );
    const keys = ["a", "bb", "ccc", "dddd", "eeeee"];
    const outcomes = await Promise.all(keys.map((k) => r.score(item(k))));
    assert.deepEqual(
      outcomes.map((o) => (o.kind === "score" ? o.score : null)),
      [1, 2, 3, 4, 5],
    );
    // 10 tokens each: at most two fit in 25 tokens.
    assert.deepEqual(batches, [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]);
  });

  it("retries transient failures with backoff and then succeeds", async () => {
    let calls = 0;
    const { r, metrics } = runner({
      score: async (items) => {
        if (++calls < 3) throw new RewardStageError("503 from the server", true);
        return scoreByLength(items);
      },
    });
    const o = await r.score(item("abc"));
    assert.deepEqual(o, { kind: "score", score: 3 });
    assert.equal(metrics.total("reward_retries"), 2);
  });

  it("isolates a poison item by splitting the batch, dead-letters it, and scores the rest", async () => {
    const { r, deadLetters, metrics } = runner(
      {
        score: async (items) => {
          if (items.some((i) => i.key === "poison"))
            throw new RewardStageError("token id past the vocabulary", false);
          return scoreByLength(items);
        },
      },
      { max_batch_size: 8, concurrency: 1 },
    );
    const keys = ["a", "bb", "poison", "dddd", "e", "ff", "g", "hh"];
    const outcomes = await Promise.all(keys.map((k) => r.score(item(k))));
    assert.deepEqual(
      outcomes.map((o) => o.kind),
      ["score", "score", "error", "score", "score", "score", "score", "score"],
    );
    // A failed score is an error outcome, never a 0.
    assert.equal(outcomes[2]!.kind === "error" && "score" in outcomes[2]!, false);
    assert.equal(deadLetters.letters.length, 1);
    assert.equal(deadLetters.letters[0]!.code, "REWARD_FAILED");
    assert.deepEqual(deadLetters.letters[0]!.origin, { kind: "trajectory", key: "poison" });
    assert.match(deadLetters.letters[0]!.message, /token id past the vocabulary/);
    assert.ok(metrics.total("reward_batch_splits") >= 3);
  });

  it("times out a hung call, retries it, and dead-letters it when it never answers", async () => {
    const { r, deadLetters } = runner({ score: () => new Promise(() => {}) }, { timeout_ms: 20, retries: 1 });
    const o = await r.score(item("slow"));
    assert.equal(o.kind, "error");
    assert.match(deadLetters.letters[0]!.message, /timed out after 20 ms/);
  });

  it("rejects a stage that returns the wrong number of outcomes or a non-finite score", async () => {
    const short = runner({ score: async () => [] });
    assert.equal((await short.r.score(item("a"))).kind, "error");
    assert.match(short.deadLetters.letters[0]!.message, /one outcome per item/);
    const nan = runner({ score: async () => [{ kind: "score", score: Number.NaN }] });
    assert.equal((await nan.r.score(item("a"))).kind, "error");
  });

  it("retries items the stage failed as retryable, alone", async () => {
    let calls = 0;
    const { r } = runner(
      {
        score: async (items) =>
          items.map((i) =>
            i.key === "flaky" && calls++ === 0
              ? { kind: "error", message: "busy", retryable: true }
              : { kind: "score", score: 1 },
          ),
      },
      { max_batch_size: 2 },
    );
    const outcomes = await Promise.all([r.score(item("flaky")), r.score(item("fine"))]);
    assert.deepEqual(
      outcomes.map((o) => o.kind),
      ["score", "score"],
    );
  });

  it("bounds the queue: submitting beyond max_queue waits for room", async () => {
    // Each stage call waits for its own gate, released by the test one at a time.
    const gates: Array<() => void> = [];
    const calls: string[][] = [];
    const { r } = runner(
      {
        score: async (items) => {
          calls.push(items.map((i) => i.key));
          await new Promise<void>((res) => gates.push(res));
          return scoreByLength(items);
        },
      },
      { max_queue: 2, max_batch_size: 1, concurrency: 1 },
    );
    const outcomes = ["a", "b", "c", "d"].map((k) => r.score(item(k)));
    await until(() => gates.length === 1);
    // a is in flight, b and c fill the queue, d waits outside it for room.
    assert.deepEqual([calls, r.queued], [[["a"]], 2]);
    gates.shift()!();
    await until(() => gates.length === 1 && calls.length === 2);
    // b left the queue for the stage: d took its place, behind c.
    assert.deepEqual([calls[1], r.queued], [["b"], 2]);
    gates.shift()!();
    await until(() => calls.length === 3);
    assert.deepEqual([calls[2], r.queued], [["c"], 1]);
    gates.shift()!();
    await until(() => calls.length === 4);
    assert.deepEqual([calls[3], r.queued], [["d"], 0]);
    gates.shift()!();
    assert.deepEqual(
      (await Promise.all(outcomes)).map((o) => o.kind),
      ["score", "score", "score", "score"],
    );
    await r.close();
  });
});
