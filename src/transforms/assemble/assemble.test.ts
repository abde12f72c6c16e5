import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { MemoryDeadLetters } from "../../../test/helpers/dead-letters.ts";
import { Metrics } from "../../core/metrics.ts";
import { assemble, plain, row, SessionScript, lp } from "../../../test/helpers/sessions.ts";
import { Assembler, REJECTED_AHEAD_CAP } from "./assembler.ts";
import { assembleConfigSchema } from "./config.ts";
import { TokenTrie } from "./trie.ts";
import { packRoutedExperts } from "../../schemas/routed-experts.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";

const P = [1, 2, 3];
const O1 = [10, 11];
const T1 = [4, 5];
const O2 = [12, 13];

describe("assemble: linear sessions", () => {
  it("makes one row of a clean multi-turn tool loop", () => {
    const s = new SessionScript()
      .start({ sample_index: 2, group_size: 4 })
      .call("c1", P, O1, { finish_reason: "tool_calls", weight_version: 7 })
      .call("c2", [...P, ...O1, ...T1], O2, { weight_version: 8 })
      .reward(1.5)
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows.map(plain), [
      row({
        sample_index: 2,
        group_size: 4,
        prompt_ids: P,
        response_ids: [...O1, ...T1, ...O2],
        response_mask: [1, 1, 0, 0, 1, 1],
        reward: 1.5,
        finish_reasons: ["tool_calls", "stop"],
        finish_reasons_raw: ["tool_calls", "stop"],
        weight_version_min: 7,
        weight_version_max: 8,
        num_turns: 2,
        token_policy_versions: [7, 7, -1, -1, 8, 8],
        policy_version_min: 7,
        policy_version_max: 8,
      }),
    ]);
  });

  // Regression: a finish_reason of "constructor" crashed the run (an object lookup reached
  // Object.prototype) and "__proto__" was written as "[object Object]".
  it("takes finish reasons named like Object.prototype's members as unknown, keeping the raw text", () => {
    const raws = ["constructor", " __proto__ ", "toString", "hasOwnProperty"];
    let s = new SessionScript();
    let prompt = P;
    raws.forEach((raw, i) => {
      s = s.call(`c${i}`, prompt, [20 + i], { finish_reason: raw });
      prompt = [...prompt, 20 + i, 30 + i];
    });
    const { rows, deadLetters } = assemble(s.end().lines());
    assert.deepEqual(deadLetters, []);
    assert.equal(rows.length, 1);
    assert.deepEqual(rows[0]!.finish_reasons, ["unknown", "unknown", "unknown", "unknown"]);
    assert.deepEqual(rows[0]!.finish_reasons_raw, raws);
  });

  it("gives the same row for the delta form as for full prompts", () => {
    const full = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .call("c3", [...P, ...O1, ...T1, ...O2, 6], [14])
      .end();
    const delta = new SessionScript()
      .call("c1", P, O1)
      .requestDelta("c2", "c1", T1)
      .response("c2", O2)
      .requestDelta("c3", "c2", [6])
      .response("c3", [14])
      .end();
    const a = assemble(full.lines());
    const b = assemble(delta.lines());
    assert.equal(a.rows.length, 1);
    assert.deepEqual(b.rows.map(plain), a.rows.map(plain));
    assert.deepEqual(plain(b.rows[0]!).response_mask, [1, 1, 0, 0, 1, 1, 0, 1]);
  });

  it("accepts a response carrying its own prompt, without a request event", () => {
    const s = new SessionScript().response("c1", O1, { prompt_ids: P }).end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(rows.map(plain), [row({ prompt_ids: P, response_ids: O1, response_mask: [1, 1] })]);
  });

  it("starts a new row when the context is compacted (no shared prefix)", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .call("c3", [50, 51], [60, 61])
      .call("c4", [50, 51, 60, 61, 52], [62])
      .end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, ...T1, ...O2],
        response_mask: [1, 1, 0, 0, 1, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
      }),
      row({
        index: 1,
        prompt_ids: [50, 51],
        response_ids: [60, 61, 52, 62],
        response_mask: [1, 1, 0, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
      }),
    ]);
  });

  it("keeps two interleaved sub-agents as two rows, never four", () => {
    const A = [1, 2];
    const B = [7, 8];
    const s = new SessionScript()
      .call("a1", A, [20])
      .call("b1", B, [30])
      .call("a2", [...A, 20, 3], [21])
      .call("b2", [...B, 30, 9], [31])
      .call("a3", [...A, 20, 3, 21, 3], [22])
      .end();
    const { rows } = assemble(s.lines());
    const two = ["stop", "stop"];
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: A,
        response_ids: [20, 3, 21, 3, 22],
        response_mask: [1, 0, 1, 0, 1],
        num_turns: 3,
        finish_reasons: [...two, "stop"],
        finish_reasons_raw: [...two, "stop"],
      }),
      row({
        index: 1,
        prompt_ids: B,
        response_ids: [30, 9, 31],
        response_mask: [1, 0, 1],
        num_turns: 2,
        finish_reasons: two,
        finish_reasons_raw: two,
      }),
    ]);
  });
});

// Issue 26 item 6, translated from slime's branching tests: a call that sampled nothing vanished from its
// row, and the tool result before it with it, so an over-long sample could not be seen as cut.
describe("assemble: turns that sampled nothing", () => {
  it("keeps a 0-token length turn and the tool result it was sent", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { finish_reason: "tool_calls" })
      .call("c2", [...P, ...O1, ...T1], [], { finish_reason: "length" })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, ...T1],
        response_mask: [1, 1, 0, 0],
        finish_reasons: ["tool_calls", "length"],
        finish_reasons_raw: ["tool_calls", "length"],
        num_turns: 2,
        flags: ["length_turn"],
      }),
    ]);
  });

  it("keeps an empty abort between the turn before it and its resume", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { finish_reason: "tool_calls", weight_version: 1 })
      .call("c2", [...P, ...O1, ...T1], [], { finish_reason: "abort", weight_version: 1 })
      .call("c3", [...P, ...O1, ...T1], O2, { weight_version: 2 })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, ...T1, ...O2],
        response_mask: [1, 1, 0, 0, 1, 1],
        finish_reasons: ["tool_calls", "abort", "stop"],
        finish_reasons_raw: ["tool_calls", "abort", "stop"],
        weight_version_min: 1,
        weight_version_max: 2,
        num_turns: 3,
        flags: ["aborted_turn"],
        token_policy_versions: [1, 1, -1, -1, 2, 2],
        policy_version_min: 1,
        policy_version_max: 2,
      }),
    ]);
  });

  it("lists a turn that sampled nothing once, after the turn whose output its prompt ended inside", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11, 12])
      .call("c2", [...P, 10], [], { finish_reason: "length" })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(
      rows.map((r) => [plain(r).response_ids, r.finish_reasons, r.num_turns, r.flags]),
      [[[10, 11, 12], ["stop", "length"], 2, ["length_turn"]]],
    );
  });

  it("makes a row of a session whose only call sampled nothing", () => {
    const s = new SessionScript().call("c1", P, [], { finish_reason: "length" }).end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [],
        response_mask: [],
        rollout_log_probs: [],
        token_policy_versions: [],
        finish_reasons: ["length"],
        finish_reasons_raw: ["length"],
        flags: ["length_turn"],
      }),
    ]);
  });
});

describe("assemble: branches", () => {
  it("trains a shared turn once and records the shared prefix", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { finish_reason: "tool_calls" })
      .call("c2", [...P, ...O1, 4, 5], [12])
      .call("c3", [...P, ...O1, 4, 6], [13])
      .end();
    const { rows } = assemble(s.lines());
    const finish = {
      finish_reasons: ["tool_calls", "stop"],
      finish_reasons_raw: ["tool_calls", "stop"],
      num_turns: 2,
    };
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: [10, 11, 4, 5, 12], response_mask: [1, 1, 0, 0, 1], ...finish }),
      row({
        index: 1,
        prompt_ids: P,
        response_ids: [10, 11, 4, 6, 13],
        response_mask: [0, 0, 0, 0, 1],
        parent_index: 0,
        shared_prefix_len: 6,
        ...finish,
      }),
    ]);
  });

  it("keeps best-of-N samples of one prompt as siblings, each trained", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11, 12], {}, { choice_index: 0 })
      .call("c2", P, [10, 11, 13], {}, { choice_index: 1 })
      .call("c3", [...P, 10, 11, 13, 4], [14])
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.total("orphans_dropped"), 0);
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: [10, 11, 12], response_mask: [1, 1, 1] }),
      row({
        index: 1,
        prompt_ids: P,
        response_ids: [10, 11, 13, 4, 14],
        response_mask: [1, 1, 1, 0, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
        parent_index: 0,
        shared_prefix_len: 3,
      }),
    ]);
  });
});

describe("assemble: calls recorded with train: false", () => {
  it("writes no row for a side call nobody continued, and counts it", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { finish_reason: "tool_calls" })
      .call("title", [7, 8], [20, 21], {}, { train: false })
      .call("c2", [...P, ...O1, ...T1], O2)
      .end();
    const { rows, metrics, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.equal(metrics.total("calls_untrained"), 1);
    assert.equal(metrics.total("untrained_rows_skipped"), 1);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, ...T1, ...O2],
        response_mask: [1, 1, 0, 0, 1, 1],
        num_turns: 2,
        finish_reasons: ["tool_calls", "stop"],
        finish_reasons_raw: ["tool_calls", "stop"],
      }),
    ]);
  });

  // Regression: a chain of untrained calls (a small-model sub-agent's tool loop) wrote a row that trained
  // nothing: only the last call's end was suppressed, the earlier one stayed a leaf.
  it("writes no row for a chain of untrained calls, one continuing another", () => {
    const s = new SessionScript()
      .call("u1", [7, 8], [20, 21], {}, { train: false })
      .call("u2", [7, 8, 20, 21, 9], [22], {}, { train: false })
      .call("c1", P, O1)
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.total("calls_untrained"), 2);
    assert.equal(metrics.total("untrained_rows_skipped"), 1);
    assert.deepEqual(rows.map(plain), [row({ prompt_ids: P, response_ids: O1, response_mask: [1, 1] })]);
  });

  it("keeps a continued untrained turn as context (mask 0), flagged untrained_turn", () => {
    const s = new SessionScript()
      .call("c1", P, O1, {}, { train: false })
      .call("c2", [...P, ...O1, ...T1], O2)
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.total("untrained_rows_skipped"), 0);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, ...T1, ...O2],
        response_mask: [0, 0, 0, 0, 1, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
        flags: ["untrained_turn"],
      }),
    ]);
  });
});

describe("assemble: retries", () => {
  it("drops an earlier attempt nobody continued from", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11], { finish_reason: "abort" })
      .call("c1-retry", P, [10, 12])
      .call("c2", [...P, 10, 12, 4], [13])
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.get("orphans_dropped"), 1);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [10, 12, 4, 13],
        response_mask: [1, 1, 0, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
        flags: ["orphan_dropped"],
      }),
    ]);
  });

  it("keeps the attempt that was continued even when the retry came later", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11])
      .call("c1-retry", P, [10, 12])
      .call("c2", [...P, 10, 11, 4], [13])
      .end();
    const { rows } = assemble(s.lines());
    assert.equal(rows.length, 1);
    assert.deepEqual(plain(rows[0]!).response_ids, [10, 11, 4, 13]);
    assert.deepEqual(rows[0]!.flags, ["orphan_dropped"]);
  });

  it("keeps the latest attempt when none was continued", () => {
    const s = new SessionScript().call("c1", P, [10]).call("c2", P, [11]).end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: [11], response_mask: [1], flags: ["orphan_dropped"] }),
    ]);
  });
});

describe("assemble: retokenization drift", () => {
  // c2's prompt re-renders c1's output [10, 11, 12] as [10, 99]: the model never sampled 99.
  const drifted = () =>
    new SessionScript()
      .call("c1", P, [10, 11, 12])
      .call("c2", [...P, 10, 99, 4], [13])
      .end();

  it("forks by default: each sampled token trained once, no logprob on an unsampled token", () => {
    const { rows, metrics } = assemble(drifted().lines());
    assert.equal(metrics.get("drift_detected", "fork"), 1);
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: [10, 11, 12], response_mask: [1, 1, 1] }),
      row({
        index: 1,
        prompt_ids: P,
        response_ids: [10, 99, 4, 13],
        response_mask: [0, 0, 0, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
        flags: ["drift"],
        parent_index: 0,
        shared_prefix_len: 4,
      }),
    ]);
  });

  it("realigns into one row with the drifted response demoted to mask 0", () => {
    const { rows, metrics } = assemble(drifted().lines(), { drift_policy: "realign" });
    assert.equal(metrics.get("drift_detected", "realign"), 1);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [10, 99, 4, 13],
        response_mask: [0, 0, 0, 1],
        num_turns: 2,
        finish_reasons: ["stop", "stop"],
        finish_reasons_raw: ["stop", "stop"],
        flags: ["drift_realigned"],
      }),
    ]);
  });

  it("counts a divergence right where the output should start as drift (thinking dropped)", () => {
    const s = new SessionScript()
      .call("c1", P, [90, 10, 91])
      .call("c2", [...P, 10, 4], [13])
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.get("drift_detected", "fork"), 1);
    assert.deepEqual(
      rows.map((r) => r.flags),
      [[], ["drift"]],
    );
  });

  const sys = { role: "system", content: "be brief" };
  const user = { role: "user", content: "add 2 and 2" };

  it("uses messages to tell drift from an edited history", () => {
    const base = () =>
      new SessionScript().call(
        "c1",
        P,
        [10, 11, 12],
        { text: "<think>x</think>four", tool_calls: [] },
        { messages: [sys, user] },
      );
    // Same history, thinking dropped and tokens re-rendered: drift.
    const drift = base()
      .call(
        "c2",
        [...P, 10, 99, 4],
        [13],
        {},
        { messages: [sys, user, { role: "assistant", content: "four" }, user] },
      )
      .end();
    const a = assemble(drift.lines());
    assert.equal(a.metrics.total("drift_detected"), 1);
    assert.equal(a.metrics.total("history_edited"), 0);
    assert.deepEqual(a.rows[1]!.flags, ["drift"]);
    // The agent rewrote the assistant turn: a genuine branch, not drift.
    const edited = base()
      .call(
        "c2",
        [...P, 10, 99, 4],
        [13],
        {},
        { messages: [sys, user, { role: "assistant", content: "five" }, user] },
      )
      .end();
    const b = assemble(edited.lines());
    assert.equal(b.metrics.total("drift_detected"), 0);
    assert.equal(b.metrics.total("history_edited"), 1);
    assert.deepEqual(b.rows[1]!.flags, ["history_edited"]);
  });

  it("follows a continued call's delta-form messages (messages_offset) when a later full render drifts", () => {
    // c2 continued c1 in prompt mode tokens: only its new message, after c1's two and c1's answer. c3 is a
    // whole render of the same conversation (the gateway restarted, say) whose tokens re-render c2's turn
    // differently: its messages extend c2's conversation, so it is drift, not an edited history.
    const s = new SessionScript()
      .call("c1", P, [10, 11], { text: "four" }, { messages: [sys, user] })
      .requestDelta("c2", "c1", [4], { messages: [user], messages_offset: 3, prompt_mode: "continued" })
      .response("c2", [12, 13], { text: "eight" })
      .call(
        "c3",
        [...P, 10, 11, 4, 12, 99, 4],
        [14],
        {},
        {
          messages: [
            sys,
            user,
            { role: "assistant", content: "four" },
            user,
            { role: "assistant", content: "eight" },
            user,
          ],
          prompt_mode: "rendered",
        },
      )
      .end();
    const a = assemble(s.lines());
    assert.equal(a.metrics.total("drift_detected"), 1);
    assert.equal(a.metrics.total("history_edited"), 0);
  });

  it("detects drift before the output when messages say the prompt continues a call (BPE merge)", () => {
    // The prompt's last template token 3 merged with the output's first token into 77.
    const s = new SessionScript()
      .call("c1", P, [10, 11], { text: "hi" }, { messages: [user] })
      .call(
        "c2",
        [1, 2, 77, 11, 4],
        [13],
        {},
        { messages: [user, { role: "assistant", content: "hi" }, user] },
      )
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.total("drift_detected"), 1);
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: [10, 11], response_mask: [1, 1] }),
      row({
        index: 1,
        prompt_ids: [1, 2, 77, 11, 4],
        response_ids: [13],
        response_mask: [1],
        num_turns: 1,
        flags: ["drift"],
        parent_index: 0,
        shared_prefix_len: 2,
      }),
    ]);
  });
});

describe("assemble: ordering and duplicates", () => {
  const script = () =>
    new SessionScript()
      .start()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .reward(1, { key: "k1" })
      .reward(1, { key: "k1" })
      .end();

  it("applies events in seq order whatever order they arrive in", () => {
    const lines = script().lines();
    assert.equal(lines.length, 8);
    const shuffled = [5, 3, 0, 7, 6, 2, 1, 4].map((i) => lines[i]!);
    const a = assemble(lines);
    const b = assemble(shuffled);
    assert.deepEqual(b.deadLetters, []);
    assert.deepEqual(b.rows.map(plain), a.rows.map(plain));
    assert.equal(a.rows[0]!.reward, 1, "a reward with a repeated key is applied once");
    assert.equal(a.metrics.get("duplicate_rewards_ignored"), 1);
  });

  it("ignores an exact duplicate and dead-letters a conflicting one", () => {
    const lines = script().lines();
    const conflicting = JSON.stringify({ ...JSON.parse(lines[1]!), output_ids: [10, 12] });
    const { rows, deadLetters, metrics } = assemble([
      ...lines.slice(0, 3),
      lines[1]!,
      conflicting,
      ...lines.slice(3),
    ]);
    assert.equal(metrics.get("duplicate_events_ignored"), 1);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq, d.origin]),
      [["DUPLICATE_CONFLICT", 1, { kind: "file", file: "test.jsonl", line: 5 }]],
    );
    assert.equal(deadLetters[0]!.raw, conflicting);
    assert.deepEqual(plain(rows[0]!).response_ids, [...O1, ...T1, ...O2]);
  });

  it("dead-letters events stranded behind a seq gap and flags the session", () => {
    const lines = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, 4], [12])
      .end()
      .lines();
    const { rows, deadLetters } = assemble([lines[0]!, lines[1]!, lines[3]!, lines[4]!]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [
        ["SEQ_GAP", 3],
        ["SEQ_GAP", 4],
      ],
    );
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: O1, response_mask: [1, 1], status: "timeout", flags: ["seq_gap"] }),
    ]);
  });

  it("produces identical rows for identical input", () => {
    const lines = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, 4, 5], [12])
      .call("c3", [...P, ...O1, 4, 6], [13])
      .call("c4", [...P, 10, 99], [14])
      .end()
      .lines();
    assert.deepEqual(assemble(lines).rows.map(plain), assemble(lines).rows.map(plain));
  });
});

describe("assemble: session lifecycle", () => {
  // Regression: one event with a clock a day ahead timed out every other open session (partial rows,
  // unflagged), and their later events became LATE_EVENT.
  it("does not let one session's clock far ahead time out the others", () => {
    const DAY = 86_400_000;
    const a = new SessionScript("u", "a", 1_000).call("c1", [1, 2], [3]);
    const b = new SessionScript("u", "b", 1_005).call("c1", [1, 2], [4]);
    const broken = new SessionScript("u", "clock", 1_000 + DAY).call("c1", [7], [8]).end();
    const a2 = a.call("c2", [1, 2, 3, 9], [5]).end();
    const b2 = b.call("c2", [1, 2, 4, 9], [6]).end();
    // Interleaved: both sessions are open when the broken clock's events arrive.
    const first = [...a.lines().slice(0, 2), ...b.lines().slice(0, 2)];
    const lines = [...first, ...broken.lines(), ...a2.lines().slice(2), ...b2.lines().slice(2)];
    const { rows, deadLetters } = assemble(lines, { reward_grace_ms: 0 });
    assert.deepEqual(deadLetters, []);
    const byId = Object.fromEntries(rows.map((r) => [r.session_id, r]));
    assert.equal(byId.a!.status, "ok");
    assert.equal(byId.b!.status, "ok");
    assert.equal(byId.a!.num_turns, 2);
    assert.equal(byId.b!.num_turns, 2);
  });

  it("records when the session ended, in event time", () => {
    const ended = new SessionScript("u1", "a", 5_000).call("c1", P, O1).end();
    const open = new SessionScript("u1", "b", 9_000).call("c1", P, O1);
    const { rows } = assemble([...ended.lines(), ...open.lines()]);
    assert.deepEqual(
      rows.map((r) => [r.session_id, r.status, r.ended_at_ms]),
      [
        ["a", "ok", 5_020],
        ["b", "timeout", 9_010],
      ],
    );
  });

  // Regression: this test once passed on the end-of-input flush alone (it checked the order, not when).
  it("closes an idle session by event time, before the end of input", () => {
    const idle = new SessionScript("u1", "idle", 0).call("c1", P, O1);
    // Two sessions' clocks: one alone counts only max_clock_skew_ms past the others'.
    const busy = new SessionScript("u1", "busy", 700_000).call("c1", P, O1);
    const other = new SessionScript("u2", "other", 700_005).call("c1", P, O1);
    const { sessions, finalizedAt } = assemble([...idle.lines(), ...busy.lines(), ...other.lines()], {
      idle_timeout_ms: 600_000,
      reward_grace_ms: 0,
    });
    assert.deepEqual(
      sessions.map((s, i) => [s.sessionId, s.rows[0]!.status, finalizedAt[i]]),
      [
        ["idle", "timeout", 4],
        ["busy", "timeout", -1],
        ["other", "timeout", -1],
      ],
    );
  });

  it("applies a reward within the grace period and dead-letters one after it", () => {
    const s = new SessionScript().call("c1", P, O1).end();
    s.ts += 5_000;
    s.reward(0.5, { key: "in-grace" });
    const other = new SessionScript("u2", "s9", 100_000).start();
    const lateReward = JSON.stringify({
      v: 1,
      type: "reward",
      uid: "u1",
      session_id: "s1",
      seq: 4,
      ts: 200_000,
      value: 1,
    });
    const { rows, deadLetters } = assemble([...s.lines(), ...other.lines(), lateReward], {
      reward_grace_ms: 10_000,
    });
    assert.equal(rows[0]!.reward, 0.5);
    assert.deepEqual(
      deadLetters.map((d) => d.code),
      ["LATE_EVENT"],
    );
  });

  it("dead-letters a non-reward event after session.end", () => {
    const s = new SessionScript().call("c1", P, O1).end().call("c2", P, [12]);
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.map((d) => d.code),
      ["EVENT_AFTER_END", "EVENT_AFTER_END"],
    );
    assert.equal(rows.length, 1);
  });

  it("marks aborted sessions and never maps abort to stop", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { finish_reason: "completed" })
      .call("c2", [...P, ...O1, 4], [12], { finish_reason: "abort" })
      .end("aborted");
    const { rows } = assemble(s.lines());
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [...O1, 4, 12],
        response_mask: [1, 1, 0, 1],
        num_turns: 2,
        finish_reasons: ["unknown", "abort"],
        finish_reasons_raw: ["completed", "abort"],
        status: "aborted",
        flags: ["aborted_turn"],
      }),
    ]);
  });

  it("marks an unfinished episode from its reward", () => {
    const s = new SessionScript().call("c1", P, O1).reward(0, { finished: false }).end();
    const { rows } = assemble(s.lines());
    assert.equal(rows[0]!.episode_finished, false);
    assert.deepEqual(rows[0]!.flags, ["unfinished"]);
    assert.equal(rows[0]!.reward, 0);
  });

  it("flags an unanswered request and keeps the answered turns", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .request("c2", [...P, ...O1, 4])
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(metrics.get("requests_unanswered"), 1);
    assert.deepEqual(rows[0]!.flags, ["unanswered_request"]);
  });
});

describe("assemble: cutting sessions", () => {
  it("finalizes a cut session early, flags it, and dead-letters its later events", async () => {
    const { decodeEvent } = await import("./decode/decode.ts");
    const metrics = new Metrics();
    const deadLetters = new MemoryDeadLetters();
    const a = new Assembler({ config: assembleConfigSchema.parse({}), deadLetters, metrics });
    const lines = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, 4], [12])
      .lines();
    const push = (raw: string) => {
      const d = decodeEvent({ raw, origin: { kind: "file", file: "t", line: 1 } });
      if (d.kind !== "event") throw new Error("bad test event");
      return a.push(d.value);
    };
    push(lines[0]!);
    push(lines[1]!);
    const cut = a.cut("u1", "s1")!;
    assert.deepEqual(cut.rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: O1,
        response_mask: [1, 1],
        status: "timeout",
        flags: ["session_cut"],
      }),
    ]);
    assert.equal(metrics.get("sessions_cut"), 1);
    assert.equal(a.cut("u1", "s1"), null);
    push(lines[2]!);
    assert.deepEqual(
      deadLetters.letters.map((l) => l.code),
      ["LATE_EVENT"],
    );
  });
});

describe("assemble: logprobs and truncation", () => {
  it("dead-letters a response whose logprob count differs and leaves the session unchanged", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, 4], [12, 13], { logprobs: [-0.5] })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.details]),
      [["LOGPROBS_LENGTH_MISMATCH", { logprobs: 1, output_ids: 2 }]],
    );
    assert.deepEqual(rows.map(plain), [
      row({ prompt_ids: P, response_ids: O1, response_mask: [1, 1], flags: ["unanswered_request"] }),
    ]);
  });

  it("dead-letters non-finite logprobs (JSON 1e999 is Infinity)", () => {
    const s = new SessionScript().call("c1", P, O1);
    const line = s.lines()[1]!.replace(/"logprobs":\[[^\]]*\]/, '"logprobs":[-0.5,1e999]');
    const { deadLetters } = assemble([s.lines()[0]!, line]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.details]),
      [["LOGPROBS_NOT_FINITE", { position: 1 }]],
    );
  });

  it("nulls rollout_log_probs when a trained span has none, never 0.0", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, 4], [12], { logprobs: undefined })
      .end();
    const { rows, metrics } = assemble(s.lines());
    assert.equal(rows[0]!.rollout_log_probs, null);
    assert.deepEqual(rows[0]!.flags, ["missing_logprobs"]);
    assert.equal(metrics.get("rows_missing_logprobs"), 1);
  });

  it("nulls rollout_log_probs when one trained token has no logprob (null on the wire), never 0.0", () => {
    const s = new SessionScript().call("c1", P, O1).end();
    const line = s.lines()[1]!.replace(/"logprobs":\[[^\]]*\]/, '"logprobs":[-0.5,null]');
    const { rows, deadLetters, metrics } = assemble([s.lines()[0]!, line, s.lines()[2]!]);
    assert.deepEqual(deadLetters, []);
    assert.deepEqual([...rows[0]!.response_ids], O1);
    assert.deepEqual([...rows[0]!.response_mask], [1, 1]);
    assert.equal(rows[0]!.rollout_log_probs, null);
    assert.deepEqual(rows[0]!.flags, ["missing_logprobs"]);
    assert.equal(metrics.get("rows_missing_logprobs"), 1);
  });

  it("keeps logprobs when only an untrained (shared) span lacks them", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { logprobs: undefined })
      .call("c2", [...P, ...O1, 4, 5], [12])
      .call("c3", [...P, ...O1, 4, 6], [13])
      .end();
    const { rows } = assemble(s.lines());
    assert.equal(rows[0]!.rollout_log_probs, null);
    assert.deepEqual([...rows[1]!.rollout_log_probs!], [0, 0, 0, 0, lp(13)]);
  });

  it("truncates rows longer than max_tokens with a flag", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .end();
    const { rows, metrics } = assemble(s.lines(), { max_tokens: 6 });
    assert.equal(metrics.get("rows_truncated"), 1);
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: P,
        response_ids: [10, 11, 4],
        response_mask: [1, 1, 0],
        flags: ["truncated"],
      }),
    ]);
  });
});

// Issue 26: with partial rollouts one response holds tokens of several policies (AReaL's per-token
// versions); each token keeps the version that sampled it, through branches and across arena chunks.
describe("assemble: per-token policy versions", () => {
  it("keeps the versions of a response resumed across a weight update", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11, 12], { weight_version: 4, output_versions: [3, 3, 4] })
      .call("c2", [...P, 10, 11, 12, ...T1], O2, { weight_version: 4 })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(
      rows.map((r) => [plain(r).token_policy_versions, r.policy_version_min, r.policy_version_max]),
      [[[3, 3, 4, -1, -1, 4, 4], 3, 4]],
    );
    assert.deepEqual([rows[0]!.weight_version_min, rows[0]!.weight_version_max], [4, 4]);
  });

  it("shows who sampled a shared turn on every branch, the trained range only where it is trained", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { weight_version: 1, output_versions: [1, 2] })
      .call("c2", [...P, ...O1, 4], [20], { weight_version: 3 })
      .call("c3", [...P, ...O1, 5], [21], { weight_version: 5 })
      .end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(
      rows.map((r) => [
        plain(r).response_mask,
        plain(r).token_policy_versions,
        r.policy_version_min,
        r.policy_version_max,
      ]),
      [
        [[1, 1, 0, 1], [1, 2, -1, 3], 1, 3],
        [[0, 0, 0, 1], [1, 2, -1, 5], 5, 5],
      ],
    );
  });

  it("never invents a version: unknown ones leave the columns null", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { weight_version: 2 })
      .call("c2", [...P, ...O1, ...T1], O2)
      .end();
    const [r] = assemble(s.lines()).rows;
    assert.deepEqual(
      [r!.token_policy_versions, r!.policy_version_min, r!.policy_version_max],
      [null, null, null],
    );
  });

  it("dead-letters output_versions that do not match the output ids", () => {
    const s = new SessionScript().call("c1", P, O1, { output_versions: [1] }).end();
    const { deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.filter((d) => d.component === "decode").map((d) => [d.code, d.details]),
      [["OUTPUT_VERSIONS_LENGTH_MISMATCH", { output_versions: 1, output_ids: 2 }]],
    );
  });
});

/**
 * Routed experts in these tests: one layer, top-2, int16, and each token's pair is [token, source], the
 * source naming the call phase that computed it, so the expected rows show where every position came from.
 */
const routes = (tokens: number[], source: number) =>
  packRoutedExperts(
    tokens.flatMap((t) => [t, source]),
    "int16",
    [tokens.length, 1, 2],
  );
/**
 * SessionScript.call's arguments for a call whose prefill reports its whole prompt (source `p`) and whose
 * decode reports every output token (source `o`).
 */
const routed = (id: string, prompt: number[], output: number[], p: number, o: number) =>
  [
    id,
    prompt,
    output,
    { routed_experts: routes(output, o) },
    { prompt_routed_experts: routes(prompt, p) },
  ] as const;
/** A row's routed experts as [token, source] pairs; null (-1, -1) where no event covered the position. */
function routingPairs(r: TrajectoryRow): Array<[number, number] | null> {
  assert.equal(r.routed_experts_dtype, "int16");
  assert.deepEqual([r.routed_experts_layers, r.routed_experts_top_k], [1, 2]);
  const bytes = r.routed_experts!;
  const ids = new Int16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
  const out: Array<[number, number] | null> = [];
  for (let i = 0; i < ids.length; i += 2) out.push(ids[i] === -1 ? null : [ids[i]!, ids[i + 1]!]);
  assert.equal(out.length, r.prompt_ids.length + r.response_ids.length, "one entry per position");
  // The last position never counts as missing: nothing trained depends on it.
  assert.equal(r.routed_experts_missing, out.slice(0, -1).filter((p) => p === null).length);
  return out;
}

describe("assemble: routed experts", () => {
  it("takes each position from the call that processed it first: prefill, decode, then the next prefill", () => {
    const s = new SessionScript()
      // c1's decode reports O1's first token only: its last was never an input to c1.
      .call("c1", P, O1, { routed_experts: routes([10], 2) }, { prompt_routed_experts: routes(P, 1) })
      .call("c2", [...P, ...O1, ...T1], O2, {
        routed_experts: routes(O2, 4),
        prompt_routed_experts: routes([...P, ...O1, ...T1], 3),
      })
      .end();
    const { rows, deadLetters, metrics } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(routingPairs(rows[0]!), [
      [1, 1],
      [2, 1],
      [3, 1],
      [10, 2],
      [11, 3], // c1's last token went through the model in c2's prefill
      [4, 3],
      [5, 3],
      [12, 4],
      [13, 4],
    ]);
    assert.equal(metrics.get("routed_experts_missing"), 0);
  });

  it("takes a delta-form prompt's routing for its last positions, and counts what nobody covered", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { routed_experts: routes([10], 2) })
      // The engine reused its cache for the earlier tokens and reports the tool output only.
      .requestDelta("c2", "c1", T1, { prompt_routed_experts: routes(T1, 3) })
      .response("c2", O2, { routed_experts: routes([12], 4) })
      .end();
    const { rows, deadLetters, metrics } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(routingPairs(rows[0]!), [
      null,
      null,
      null,
      [10, 2],
      null,
      [4, 3],
      [5, 3],
      [12, 4],
      null,
    ]);
    // The last token (13) was never an input: left at -1, and not missing.
    assert.equal(rows[0]!.routed_experts_missing, 4);
    assert.equal(metrics.get("routed_experts_missing"), 4);
  });

  it("keeps each branch's own routing, the shared prefix from the call both share", () => {
    const s = new SessionScript()
      .call(...routed("c1", P, O1, 1, 2))
      .call(...routed("c2", [...P, ...O1, 4], [20], 3, 4))
      .call(...routed("c3", [...P, ...O1, 5], [21], 5, 6))
      .end();
    const { rows } = assemble(s.lines());
    const shared: Array<[number, number]> = [
      [1, 1],
      [2, 1],
      [3, 1],
      [10, 2],
      [11, 2],
    ];
    assert.deepEqual(rows.map(routingPairs), [
      [...shared, [4, 3], [20, 4]],
      [...shared, [5, 5], [21, 6]],
    ]);
  });

  it("uses the retry that stands, not the orphan it replaced", () => {
    const s = new SessionScript()
      .call(...routed("c1", P, O1, 1, 2))
      .call(...routed("c1b", P, [30], 3, 4))
      .end();
    const { rows } = assemble(s.lines());
    assert.equal(rows.length, 1);
    assert.deepEqual(routingPairs(rows[0]!), [
      [1, 3],
      [2, 3],
      [3, 3],
      [30, 4],
    ]);
  });

  it("keeps drift aligned: a re-rendered turn takes only the positions it shares with the output", () => {
    const s = new SessionScript()
      .call("c1", P, [10, 11, 12], { routed_experts: routes([10, 11, 12], 2) })
      .call("c2", [...P, 10, 99, 4], [13], { routed_experts: routes([13], 4) })
      .end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(plain(rows[1]!).response_ids, [10, 99, 4, 13]);
    // 99 and 4 are c2's context: c1's routing for 11 and 12 must not land on them.
    assert.deepEqual(routingPairs(rows[1]!), [null, null, null, [10, 2], null, null, [13, 4]]);
  });

  it("cuts routing with the row at max_tokens, and leaves rows without routing null", () => {
    const s = new SessionScript().call(...routed("c1", P, O1, 1, 2)).end();
    const plainSession = new SessionScript("u1", "s2").call("c1", P, O1).end();
    const { rows } = assemble([...s.lines(), ...plainSession.lines()], { max_tokens: 4 });
    assert.deepEqual(routingPairs(rows[0]!), [
      [1, 1],
      [2, 1],
      [3, 1],
      [10, 2],
    ]);
    assert.deepEqual(
      [rows[1]!.routed_experts, rows[1]!.routed_experts_dtype, rows[1]!.routed_experts_missing],
      [null, "", 0],
    );
  });

  it("dead-letters routing that disagrees with its call or session, leaving the session unchanged", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { routed_experts: routes(O1, 2) })
      // Three tokens of routing for two output ids.
      .call("c2", [...P, ...O1, 4], [20], { routed_experts: routes([1, 2, 3], 4) })
      // Another model's layout in the same session.
      .call("c3", [...P, ...O1, 4], [21], {
        routed_experts: packRoutedExperts([1, 2, 3], "int16", [1, 1, 3]),
      })
      // A delta-form prompt of 6 tokens with routing for 7.
      .requestDelta("c4", "c1", [4], { prompt_routed_experts: routes([1, 2, 3, 4, 5, 6, 7], 5) })
      .response("c4", [22])
      // An expert id above the declared expert count.
      .call("c5", P, [23], { routed_experts: packRoutedExperts([9, 0], "int16", [1, 1, 2], 8) })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [
        ["ROUTED_EXPERTS_LENGTH_MISMATCH", 3],
        ["ROUTED_EXPERTS_LAYOUT_MISMATCH", 5],
        ["ROUTED_EXPERTS_LENGTH_MISMATCH", 7],
        ["ROUTED_EXPERTS_OUT_OF_RANGE", 9],
      ],
    );
    assert.equal(rows.length, 1, "only c1 stands");
    assert.match(deadLetters[3]!.message, /expert id 9 at token 0, layer 0, slot 0 is outside -1\.\.7/);
  });
});

describe("assemble: sampling settings", () => {
  const greedy = { temperature: 0, engine: "vllm-0.11.0" };
  const hot = { temperature: 1.2, top_p: 0.9, top_k: -1, logprobs_mode: "processed" };
  const full = (s: Record<string, unknown>) => ({
    temperature: null,
    top_p: null,
    top_k: null,
    min_p: null,
    repetition_penalty: null,
    logprobs_mode: null,
    engine: null,
    ...s,
  });

  it("keeps each trained turn's settings, the request's over the response's, null where none was sent", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { sampling: hot }, { sampling: greedy })
      .call("c2", [...P, ...O1, ...T1], O2, { sampling: hot })
      .call("c3", [...P, ...O1, ...T1, ...O2, 6], [14])
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(deadLetters, []);
    assert.deepEqual(rows[0]!.sampling, [full(greedy), full(hot), null]);
    assert.deepEqual(rows[0]!.flags, ["mixed_sampling"]);
  });

  it("flags mixed settings among trained turns only", () => {
    const s = new SessionScript()
      .call("c1", P, O1, { sampling: greedy })
      .call("c2", [...P, ...O1, 4], [20], { sampling: greedy })
      // The second branch trains only c3: c1's other settings are context there.
      .call("c3", [...P, ...O1, 5], [21], { sampling: hot })
      .end();
    const { rows } = assemble(s.lines());
    assert.deepEqual(
      rows.map((r) => [r.sampling.map((x) => x?.temperature), r.flags]),
      [
        [[0, 0], []],
        [[1.2], []],
      ],
    );
  });

  it("dead-letters settings out of range", () => {
    const s = new SessionScript().call("c1", P, O1, {}, { sampling: { temperature: -0.5 } }).end();
    const { deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      // The request is invalid as a whole, so its response has no request: both are kept as dead letters.
      [
        ["INVALID_EVENT", 0],
        ["UNKNOWN_CALL", 1],
      ],
    );
    assert.match(deadLetters[0]!.message, /sampling\.temperature/);
  });
});

describe("assemble: long sessions", () => {
  it("keeps rows exact when spans cross arena chunks", () => {
    const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
    const prompt = range(100, 3000);
    const out1 = range(5000, 2500);
    const obs = range(9000, 700);
    const out2 = range(12000, 1800);
    const s = new SessionScript()
      .call("c1", prompt, out1)
      .call("c2", [...prompt, ...out1, ...obs], out2)
      .call("c3", [...prompt, ...out1, ...obs.slice(0, 300), 1], [2])
      .end();
    const { rows } = assemble(s.lines());
    const mask = (n: number, v: number) => Array<number>(n).fill(v);
    const two = { num_turns: 2, finish_reasons: ["stop", "stop"], finish_reasons_raw: ["stop", "stop"] };
    assert.deepEqual(rows.map(plain), [
      row({
        prompt_ids: prompt,
        response_ids: [...out1, ...obs, ...out2],
        response_mask: [...mask(2500, 1), ...mask(700, 0), ...mask(1800, 1)],
        ...two,
      }),
      row({
        index: 1,
        prompt_ids: prompt,
        response_ids: [...out1, ...obs.slice(0, 300), 1, 2],
        response_mask: [...mask(2801, 0), 1],
        parent_index: 0,
        shared_prefix_len: 5800,
        ...two,
      }),
    ]);
  });
});

describe("assemble: bad references", () => {
  it("dead-letters unknown calls, parents, targets and duplicate call ids", () => {
    const s = new SessionScript()
      .call("c1", P, O1)
      .response("ghost", [12])
      .requestDelta("c2", "nope", [4])
      .response("c2", [13])
      .request("c1", P)
      .reward(1, { target: "c9" })
      .reward(2, { target: "c1" })
      .end();
    const { rows, deadLetters } = assemble(s.lines());
    assert.deepEqual(
      deadLetters.map((d) => d.code),
      ["UNKNOWN_CALL", "UNKNOWN_PARENT", "DUPLICATE_CALL", "UNKNOWN_REWARD_TARGET"],
    );
    assert.match(deadLetters[1]!.message, /parent_call_id nope/);
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.reward, null, "a per-call reward is not the session reward");
  });

  it("escapes _ in session ids so the key splits with rsplit('_', 2)", () => {
    const s = new SessionScript("task_7", "run_3%", 0).call("c1", P, O1).end();
    const { rows } = assemble(s.lines());
    assert.equal(rows[0]!.key, "task_7_run%5F3%25_0");
  });
});

describe("assemble: what a session holds", () => {
  const context = () => {
    const metrics = new Metrics();
    const deadLetters = new MemoryDeadLetters();
    const assembler = new Assembler({ config: assembleConfigSchema.parse({}), deadLetters, metrics });
    return { metrics, assembler };
  };
  const envelope = (sessionId: string, seq: number, ts = 1_000) => ({
    uid: "u",
    session_id: sessionId,
    seq,
    ts,
    digest: seq, // within a session, one per seq (an envelope again with its seq is a redelivery)
  });

  // Regression (issue 27 item 10): each rejected event with its own session id opened a session, so
  // 100,000 garbage lines held 1.5 GB and a 192 MB heap ran out.
  it("opens no session for rejected events, and forgets the oldest past its bound", () => {
    const { metrics, assembler } = context();
    const released: number[] = [];
    for (let i = 0; i < REJECTED_AHEAD_CAP + 10; i++) {
      assembler.pushRejected(envelope(`g${i}`, 0), { release: () => released.push(i) });
    }
    assert.equal(assembler.openSessions, 0);
    assert.equal(metrics.get("rejected_seqs_forgotten"), 10);
    assert.deepEqual(released, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.deepEqual(assembler.flush(), []);
    assert.equal(released.length, REJECTED_AHEAD_CAP + 10, "the end of input releases every hold");
  });

  it("lets a session opened after its rejected first event go on without waiting for that seq", () => {
    const lines = new SessionScript().start().call("c1", P, O1).end().lines();
    const broken = lines[0]!.replace('"session.start"', '"session.start","metadata":7');
    const { rows, deadLetters } = assemble([broken, ...lines.slice(1)]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [["INVALID_EVENT", 0]],
    );
    assert.deepEqual(rows.map(plain), [row({ prompt_ids: P, response_ids: O1, response_mask: [1, 1] })]);
  });

  it("hands a rejected event's hold to the session that opens, and releases later ones at once", () => {
    const { assembler } = context();
    const released: string[] = [];
    const hold = (name: string) => ({ release: () => released.push(name) });
    assembler.pushRejected(envelope("s", 0), hold("first"));
    assembler.pushRejected(envelope("s", 1), hold("second"));
    assert.deepEqual(released, ["second"]);
    const taken = assembler.takeRejectedHold("u", "s");
    taken!.release();
    assert.deepEqual(released, ["second", "first"]);
    assert.equal(assembler.takeRejectedHold("u", "s"), null);
  });

  // Regression (issue 27 item 9): every session allocated an 8 KB arena chunk and nine tables up front;
  // 50,000 idle sessions took 1.1 GB.
  it("starts a session's token arena at the size of its first span", () => {
    const tiny = new TokenTrie();
    assert.equal(tiny.arenaBytes, 0);
    tiny.addChild(tiny.root, Int32Array.from([1, 2, 3]), null, null);
    assert.equal(tiny.arenaBytes, 64 * 8);
    const mid = new TokenTrie();
    mid.addChild(mid.root, new Int32Array(700).fill(7), null, null);
    // Small chunks are a power of two, so the ones a session hands back fit the next sessions'.
    assert.equal(mid.arenaBytes, 1024 * 8);
    const { first, last } = mid.addChild(mid.root, new Int32Array(400).fill(8), null, null);
    assert.deepEqual([first === last, first.len, mid.arenaBytes], [false, 324, (1024 + 1_280) * 8]);
  });

  // Allocating two or three chunks per session was 82 ms of the ingest thread on the shared harness's
  // short workload (issue 46): a finalized session's chunks go to the next sessions.
  it("reuses a released trie's chunks for the next tries, which read only their own tokens", () => {
    const done = new TokenTrie();
    const old = done.addChild(done.root, new Int32Array(100).fill(5), null, null).first;
    const buffer = old.tokens.buffer;
    done.release();
    assert.throws(() => done.addChild(done.root, Int32Array.from([1]), null, null), /released/);
    const next = new TokenTrie();
    const ids = Int32Array.from({ length: 90 }, (_, i) => i);
    const node = next.addChild(
      next.root,
      ids,
      Float32Array.from(ids, (i) => -i),
      { continued: false, end: null },
    ).first;
    assert.equal(node.tokens.buffer, buffer);
    assert.deepEqual([...node.tokens.subarray(node.start, node.start + node.len)], [...ids]);
    assert.deepEqual([...node.logprobs.subarray(0, 3)], [-0, -1, -2]);
    assert.equal(next.walk(ids).matched, 90);
  });
});

describe("assemble: gateway replicas taking sessions over (owner generations)", () => {
  const G = 65_537;
  /** c1 by the first owner (no gen), c2 and the end by the replica that took the session over (gen G). */
  const owned = () => {
    const lines = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .end()
      .lines();
    return lines.map((l, i) => (i < 2 ? l : JSON.stringify({ ...JSON.parse(l), gen: G })));
  };
  /** The first owner's own c2 at the same seqs, written after it lost the session (paused, then resumed). */
  const stale = () =>
    new SessionScript()
      .call("c1", P, O1)
      .call("c2x", [...P, ...O1, ...T1], [99])
      .lines()
      .slice(2);

  it("dead-letters an old owner's writes after a claim as FENCED_WRITE, never as a conflict", () => {
    const lines = owned();
    const { rows, deadLetters, metrics } = assemble([...lines.slice(0, 4), ...stale(), lines[4]!]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq, (d.details as { reason: string }).reason]),
      [
        ["FENCED_WRITE", 2, "stale_owner"],
        ["FENCED_WRITE", 3, "stale_owner"],
      ],
    );
    assert.equal(metrics.get("fenced_events", "stale_owner"), 2);
    assert.deepEqual(rows.map(plain), assemble(lines).rows.map(plain));
    assert.deepEqual(plain(rows[0]!).response_ids, [...O1, ...T1, ...O2]);
  });

  it("fences a claim that lost its race to an older owner's write, and every event of its generation", () => {
    const lines = owned();
    const [staleRequest, staleResponse] = stale();
    const { rows, deadLetters, metrics } = assemble([
      ...lines.slice(0, 2),
      staleRequest!,
      ...lines.slice(2, 4),
      staleResponse!,
      lines[4]!,
    ]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq, (d.details as { reason: string }).reason]),
      [
        ["FENCED_WRITE", 2, "lost_claim"],
        ["FENCED_WRITE", 3, "lost_claim"],
        ["FENCED_WRITE", 4, "lost_claim"],
      ],
    );
    assert.equal(metrics.get("fenced_events", "lost_claim"), 3);
    // The old owner's c2x stands; the session never ended (its end was the lost generation's).
    assert.deepEqual(plain(rows[0]!).response_ids, [...O1, ...T1, 99]);
  });

  it("fences an old owner's writes that come after its new owner ended the session, not LATE_EVENT", () => {
    const lines = new SessionScript()
      .call("c1", P, O1)
      .call("c2", [...P, ...O1, ...T1], O2)
      .reward(1)
      .end()
      .lines()
      .map((l, i) => (i < 2 ? l : JSON.stringify({ ...JSON.parse(l), gen: G })));
    const { rows, deadLetters } = assemble([...lines, ...stale()]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [
        ["FENCED_WRITE", 2],
        ["FENCED_WRITE", 3],
      ],
    );
    assert.deepEqual(plain(rows[0]!).response_ids, [...O1, ...T1, ...O2]);
  });

  it("fences an old owner's writes that wait for an earlier seq when the claim arrives", () => {
    const lines = owned();
    const late = JSON.stringify({ ...JSON.parse(stale()[1]!), seq: 5 });
    const { deadLetters, rows } = assemble([...lines.slice(0, 2), late, ...lines.slice(2)]);
    assert.deepEqual(
      deadLetters.map((d) => [d.code, d.seq]),
      [["FENCED_WRITE", 5]],
    );
    assert.deepEqual(rows.map(plain), assemble(lines).rows.map(plain));
  });
});
