/**
 * The time model (docs/assembly.md, "Time"): a session is final the moment it is complete; the reward
 * grace applies only to a session still missing an awaited reward; a quiet live lane's clock moves on with
 * wall-clock time; one clock far ahead cannot end another session's grace.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";
import { assembleConfigSchema, clockSkewMs } from "./config.ts";

const P = [1, 2, 3];
const O = [10, 11];

/** A late reward for session s1 of u1, at `seq` and `ts`. */
const rewardLine = (seq: number, ts: number, fields: Record<string, unknown> = {}) =>
  JSON.stringify({ v: 1, type: "reward", uid: "u1", session_id: "s1", seq, ts, value: 1, ...fields });

describe("assemble: a session is final when it is complete", () => {
  it("finalizes an ended session holding a reward at its session.end, without waiting for the grace", () => {
    const s = new SessionScript().call("c1", P, O).reward(0.5).end();
    const { sessions, finalizedAt, rows } = assemble(s.lines());
    assert.deepEqual(finalizedAt, [3]);
    assert.equal(sessions[0]!.status, "ok");
    assert.equal(rows[0]!.reward, 0.5);
  });

  it("finalizes at the reward that completes it when the reward follows session.end", () => {
    const s = new SessionScript().call("c1", P, O).end();
    s.ts += 5_000;
    s.reward(0.25);
    const { finalizedAt, rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(finalizedAt, [3]);
    assert.equal(rows[0]!.reward, 0.25);
    assert.deepEqual(deadLetters, []);
  });

  it("is not completed by a per-call reward: the outcome's reward after the end still applies", () => {
    const s = new SessionScript().call("c1", P, O).reward(1, { target: "c1" }).end();
    s.ts += 2_000;
    s.reward(0.5, { stage: "judge" });
    const { finalizedAt, rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(finalizedAt, [4]);
    assert.equal(rows[0]!.reward, 0.5);
    assert.deepEqual(rows[0]!.turn_rewards, [1]);
    assert.deepEqual(deadLetters, []);
  });

  it("waits the grace for a session that ended without a reward (event time)", () => {
    const s = new SessionScript("u1", "s1", 1_000).call("c1", P, O).end(); // end at 1_020
    // Two other sessions' clocks move time (one alone could be a broken clock: it counts only
    // max_clock_skew_ms past the second most advanced one).
    const a = new SessionScript("u2", "a", 31_000).start(); // 31_000
    const b = new SessionScript("u3", "b", 31_005).start(); // 31_005
    a.ts = 31_019;
    a.start(); // seq 1: a duplicate start, dead-lettered, but its clock counts
    b.ts = 32_100;
    b.start();
    const lines = [...s.lines(), ...a.lines().slice(0, 1), ...b.lines().slice(0, 1)];
    lines.push(a.lines()[1]!, b.lines()[1]!);
    const { sessions, finalizedAt } = assemble(lines, { reward_grace_ms: 30_000 });
    // Not at the 31_019 event; at the first past 1_020 + 30_000 (the clock is swept once a second).
    assert.deepEqual(
      sessions.map((x, i) => [x.sessionId, finalizedAt[i]]),
      [
        ["s1", 6],
        ["a", -1],
        ["b", -1],
      ],
    );
  });

  it("await_rewards: waits for every listed stage or key, not for any reward", () => {
    const s = new SessionScript().call("c1", P, O).reward(1, { stage: "env" }).end();
    s.reward(0.5, { stage: "judge" }); // seq 4
    s.reward(0.7, { stage: "rm", key: "rm-1" }); // seq 5
    const lines = s.lines();
    const byStage = assemble(lines, { await_rewards: ["judge"] });
    assert.deepEqual(byStage.finalizedAt, [4]);
    assert.deepEqual(
      byStage.sessions[0]!.rewards.map((r) => r.stage),
      ["env", "judge"],
    );
    const both = assemble(lines, { await_rewards: ["judge", "rm-1"] });
    assert.deepEqual(both.finalizedAt, [5]);
    assert.equal(both.rows[0]!.reward, 1 + 0.5 + 0.7);
    // The default: the env reward before the end completes it; the later two are late.
    const any = assemble(lines);
    assert.deepEqual(any.finalizedAt, [3]);
    assert.deepEqual(
      any.deadLetters.map((d) => [d.code, d.seq]),
      [
        ["LATE_EVENT", 4],
        ["LATE_EVENT", 5],
      ],
    );
  });

  it("await_rewards []: final at session.end; a reward after it is a LATE_EVENT dead letter", () => {
    const s = new SessionScript().call("c1", P, O).end();
    const { finalizedAt, rows, deadLetters } = assemble([...s.lines(), rewardLine(3, 1_040)], {
      await_rewards: [],
    });
    assert.deepEqual(finalizedAt, [2]);
    assert.equal(rows[0]!.reward, null);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [["LATE_EVENT", 3]],
    );
  });

  it("does not finalize a complete session while an earlier seq is missing", () => {
    const s = new SessionScript().call("c1", P, O).reward(1).end();
    const [start, response, reward, end] = s.lines() as [string, string, string, string];
    const { finalizedAt } = assemble([start, reward, end, response]);
    assert.deepEqual(finalizedAt, [3]);
  });
});

describe("assemble: a quiet live lane's clock (advanceTo)", () => {
  it("ends the reward grace with wall-clock time when no event comes; a reward after it is late", () => {
    const s = new SessionScript("u1", "s1", 1_000).call("c1", P, O).end(); // end at 1_020
    const steps = [...s.lines(), { advanceTo: 31_019 }, { advanceTo: 31_020 }, rewardLine(3, 31_500)];
    const { finalizedAt, rows, deadLetters } = assemble(steps, { reward_grace_ms: 30_000 });
    assert.deepEqual(finalizedAt, [4]);
    assert.equal(rows[0]!.reward, null);
    assert.deepEqual(
      deadLetters.map((d) => d.code),
      ["LATE_EVENT"],
    );
  });

  it("applies a reward inside the grace on a quiet lane", () => {
    const s = new SessionScript("u1", "s1", 1_000).call("c1", P, O).end();
    const steps = [...s.lines(), { advanceTo: 20_000 }, rewardLine(3, 20_000)];
    const { finalizedAt, rows, deadLetters } = assemble(steps, { reward_grace_ms: 30_000 });
    assert.deepEqual(finalizedAt, [4]);
    assert.equal(rows[0]!.reward, 1);
    assert.deepEqual(deadLetters, []);
  });

  it("times out an idle session, and an event with an older clock never moves the clock back", () => {
    const idle = new SessionScript("u1", "idle", 1_000).call("c1", P, O);
    const old = new SessionScript("u2", "old", 500).call("c1", P, O);
    const steps = [
      ...idle.lines(),
      { advanceTo: 601_010 },
      ...old.lines(),
      { advanceTo: 601_000 },
      { advanceTo: 602_100 },
    ];
    const { sessions, finalizedAt } = assemble(steps, { idle_timeout_ms: 600_000 });
    assert.deepEqual(
      sessions.map((x, i) => [x.sessionId, x.status, finalizedAt[i]]),
      [
        ["idle", "timeout", 2],
        // Its events, 600 s behind the clock, did not move it back (601_000 swept nothing); idle past the
        // timeout at the next advance.
        ["old", "timeout", 6],
      ],
    );
  });
});

describe("assemble: one clock far ahead", () => {
  // Regression (issue 27, item 3): one open session stamped ts 4e15 moved the watermark 60 s past every
  // other clock, beyond the 30 s grace, so another session's reward 100 ms after its end was LATE_EVENT.
  it("cannot end another session's grace: its reward 100 ms after session.end applies", () => {
    const broken = new SessionScript("u9", "broken", 4e15).call("c1", P, O);
    const b = new SessionScript("u1", "s1", 1_000).call("c1", P, O).end(); // end at 1_020
    const steps = [...broken.lines(), ...b.lines(), rewardLine(3, 1_120)];
    const { sessions, rows, deadLetters } = assemble(steps, { reward_grace_ms: 30_000 });
    assert.deepEqual(deadLetters, []);
    const s1 = rows.find((r) => r.session_id === "s1")!;
    assert.equal(s1.reward, 1);
    assert.deepEqual(
      sessions.map((x) => x.sessionId),
      ["s1", "broken"],
    );
  });

  it("refuses a max_clock_skew_ms at or above reward_grace_ms, and defaults to a third of the grace", () => {
    const bad = assembleConfigSchema.safeParse({ reward_grace_ms: 30_000, max_clock_skew_ms: 60_000 });
    assert.equal(bad.success, false);
    assert.match(bad.error!.issues[0]!.message, /max_clock_skew_ms \(60000\) must be below reward_grace_ms/);
    assert.deepEqual(bad.error!.issues[0]!.path, ["max_clock_skew_ms"]);
    assert.equal(clockSkewMs(assembleConfigSchema.parse({})), 10_000);
    assert.equal(clockSkewMs(assembleConfigSchema.parse({ reward_grace_ms: 3_000 })), 1_000);
    assert.equal(clockSkewMs(assembleConfigSchema.parse({ reward_grace_ms: 0 })), 10_000);
    assert.equal(clockSkewMs(assembleConfigSchema.parse({ reward_grace_ms: 0, max_clock_skew_ms: 5 })), 5);
  });
});
