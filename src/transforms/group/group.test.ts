import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { MemoryDeadLetters } from "../../../test/helpers/dead-letters.ts";
import { Metrics } from "../../core/metrics.ts";
import { assemble, plain, row, SessionScript } from "../../../test/helpers/sessions.ts";
import type { SessionOutput } from "../assemble/assembler.ts";
import { StalenessComponent, StalenessFilter } from "../staleness/staleness.ts";
import { groupConfigSchema } from "./config.ts";
import { GroupBatcher } from "./group.ts";

/** Finished sessions of one uid, as the assembler hands them over. */
function sessions(...scripts: SessionScript[]): SessionOutput[] {
  const { sessions: out } = assemble(scripts.flatMap((s) => s.lines()));
  return out.map(({ sessionId, rows, turns }) => {
    const first = rows[0]!;
    return {
      metadata: null,
      turns,
      rewards: [],
      uid: first.uid,
      sessionId,
      rows,
      status: first.status,
      sampleIndex: first.sample_index,
      groupSize: first.group_size,
      endedAt: first.ended_at_ms,
    };
  });
}

const rollout = (
  i: number,
  opts: { status?: string; reward?: number; finished?: boolean; version?: number } = {},
) =>
  new SessionScript("u1", `r${i}`, 1_000 * i)
    .start({ sample_index: i, group_size: 3 })
    .call("c1", [1, 2], [10 + i], { weight_version: opts.version ?? 5 })
    .reward(opts.reward ?? i, opts.finished === undefined ? {} : { finished: opts.finished })
    .end(opts.status ?? "ok");

const placeholder = (
  sessionId: string,
  sampleIndex: number | null,
  status: string,
  flags = ["placeholder"],
) =>
  row({
    session_id: sessionId,
    sample_index: sampleIndex,
    group_size: 3,
    prompt_ids: [],
    response_ids: [],
    response_mask: [],
    rollout_log_probs: [],
    token_policy_versions: [],
    finish_reasons: [],
    finish_reasons_raw: [],
    num_turns: 0,
    status,
    flags,
    sample_mask: 0,
  });

describe("group", () => {
  it("holds a uid's sessions until all n are final, then emits them together in sample order", () => {
    const metrics = new Metrics();
    const g = new GroupBatcher(groupConfigSchema.parse({}), { metrics });
    const [s0, s1, s2] = sessions(rollout(0), rollout(1), rollout(2));
    assert.deepEqual(g.push(s2!, 3_000), []);
    assert.deepEqual(g.push(s0!, 3_100), []);
    const [batch] = g.push(s1!, 3_200).map((b) => b.rows);
    assert.deepEqual(
      batch!.map((r) => [r.key, r.sample_index, r.reward, r.sample_mask]),
      [
        ["u1_r0_0", 0, 0, 1],
        ["u1_r1_0", 1, 1, 1],
        ["u1_r2_0", 2, 2, 1],
      ],
    );
    assert.equal(g.openGroups, 0);
    assert.equal(metrics.get("groups_emitted"), 1);
  });

  it("pads a timed-out group, turns failed sessions into placeholders, and zeroes unfinished ones", () => {
    const metrics = new Metrics();
    const g = new GroupBatcher(groupConfigSchema.parse({ timeout_ms: 10_000 }), { metrics });
    const [failed, unfinished] = sessions(
      rollout(0, { status: "failed" }),
      rollout(2, { finished: false, reward: 0.25 }),
    );
    assert.deepEqual(g.push(failed!, 1_000), []);
    assert.deepEqual(g.push(unfinished!, 2_000), []);
    assert.deepEqual(g.tick(10_999), []);
    const [batch] = g.tick(11_000).map((b) => b.rows);
    assert.deepEqual(batch!.map(plain), [
      placeholder("r0", 0, "failed"),
      row({
        session_id: "r2",
        sample_index: 2,
        group_size: 3,
        prompt_ids: [1, 2],
        response_ids: [12],
        response_mask: [0],
        rollout_log_probs: [0],
        num_trained_tokens: 0,
        reward: 0.25,
        episode_finished: false,
        flags: ["unfinished"],
        weight_version_min: 5,
        weight_version_max: 5,
        // Still who sampled each token; nothing is trained, so no trained range.
        token_policy_versions: [5],
      }),
      placeholder("missing-1", 1, "missing"),
    ]);
    assert.deepEqual(metrics.snapshot().placeholders, { failed: 1, missing: 1 });
    assert.equal(metrics.get("groups_timed_out"), 1);
  });

  it("makes stale sessions placeholders so the group keeps n sessions", () => {
    const metrics = new Metrics();
    // As a pipeline runs them: the staleness transform marks, the group holds a placeholder.
    const staleness = new StalenessComponent({ max_lag: 1, current_version: 8 }, metrics).openLane();
    const g = new GroupBatcher(groupConfigSchema.parse({}), { metrics });
    const out = sessions(rollout(0, { version: 8 }), rollout(1, { version: 6 }), rollout(2, { version: 7 }));
    const batches = out.flatMap((s, i) => {
      void staleness.push({ sessions: [s], rows: null, acks: [], spans: [], finishedAt: 0 }, i);
      return g.push(s, i).map((b) => b.rows);
    });
    assert.deepEqual(
      batches[0]!.map((r) => [r.session_id, r.sample_mask, r.flags]),
      [
        ["r0", 1, []],
        ["r1", 0, ["placeholder", "stale"]],
        ["r2", 1, []],
      ],
    );
    assert.equal(metrics.get("sessions_stale"), 1);
  });

  it("uses the configured group size when session.start has none, and passes sessions through when unknown", () => {
    const plainSession = () => new SessionScript("u7", "a").call("c1", [1], [2]).end();
    const [s] = sessions(plainSession());
    const unknown = new GroupBatcher(groupConfigSchema.parse({}), { metrics: new Metrics() });
    assert.equal(unknown.push(s!, 0).length, 1);
    const sized = new GroupBatcher(groupConfigSchema.parse({ group_size: 2 }), { metrics: new Metrics() });
    assert.deepEqual(sized.push(s!, 0), []);
    const [batch] = sized.flush(5).map((b) => b.rows);
    assert.deepEqual(
      batch!.map((r) => [r.session_id, r.sample_mask, r.group_size, r.status]),
      [
        ["a", 1, 2, "ok"],
        ["missing-0", 0, 2, "missing"],
      ],
    );
  });

  // Regression: one session.start with group_size 100000 made 99,999 placeholder rows (1.1 GB).
  it("writes a session claiming a group above max_group_size alone, dead-lettering the claim", () => {
    const metrics = new Metrics();
    const deadLetters = new MemoryDeadLetters();
    const g = new GroupBatcher(groupConfigSchema.parse({ max_group_size: 8 }), { metrics, deadLetters });
    const [s] = sessions(
      new SessionScript("u9", "a").start({ group_size: 100_000 }).call("c1", [1], [2]).end(),
    );
    const out = g.push(s!, 0);
    assert.deepEqual(
      out.map((b) => b.rows.map((r) => [r.session_id, r.sample_mask, r.group_size, r.flags])),
      [[["a", 1, 1, ["group_too_large"]]]],
    );
    assert.equal(g.openGroups, 0);
    assert.deepEqual(
      deadLetters.letters.map((l) => [l.code, l.uid, l.session_id, l.details]),
      [["GROUP_TOO_LARGE", "u9", "a", { group_size: 100_000 }]],
    );
    assert.equal(metrics.get("groups_too_large"), 1);
  });
});

describe("staleness", () => {
  it("compares against the newest observed version by default", () => {
    const f = new StalenessFilter({ max_lag: 2, current_version: "observed" });
    const [s] = sessions(rollout(0, { version: 10 }));
    const [old] = sessions(rollout(1, { version: 7 }));
    assert.equal(f.current, null);
    f.observe(s!.rows);
    assert.equal(f.current, 10);
    assert.equal(f.isStale(old!.rows[0]!), true);
    assert.equal(f.isStale(s!.rows[0]!), false);
  });

  // Regression (issue 27, item 7): a real session named "missing-1" and the placeholder for sample 1 gave
  // two rows keyed u1_missing-1_0.
  it("names placeholders apart from real sessions named like them", () => {
    const real = new SessionScript("u1", "missing-1", 1_000)
      .start({ sample_index: 0, group_size: 3 })
      .call("c1", [1, 2], [10])
      .reward(1)
      .end();
    const batcher = new GroupBatcher(groupConfigSchema.parse({ timeout_ms: 10 }), { metrics: new Metrics() });
    batcher.push(sessions(real)[0]!, 0);
    const [group] = batcher.flush(100);
    const keys = group!.rows.map((r) => r.key);
    assert.deepEqual(keys, ["u1_missing-1_0", "u1_missing-1~2_0", "u1_missing-2_0"]);
    assert.equal(new Set(keys).size, 3);
  });
});
