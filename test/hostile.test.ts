/**
 * Hostile input, round two (issue 27): each case is a line that once cost the valid ones beside it, or
 * changed data. Every case runs the real CLI on a file holding valid sessions around the hostile line:
 * exit 0, every valid session written, the hostile line a coded dead letter carrying its exact bytes.
 */
import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { SessionScript } from "./helpers/sessions.ts";
import { rowsIn } from "./helpers/workload.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-hostile-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const valid = (uid: string, sessionId: string) =>
  new SessionScript(uid, sessionId).call("c1", [1, 2], [3, 4]).reward(1).end().lines();

/** Replays `lines` (strings, or exact bytes); returns the rows and dead letters. */
async function replay(name: string, lines: Array<string | Buffer>, flags: string[] = []) {
  const input = join(scratch, `${name}.jsonl`);
  writeFileSync(input, Buffer.concat(lines.map((l) => Buffer.concat([Buffer.from(l), Buffer.from("\n")]))));
  const out = join(scratch, name);
  const result = await runCli(["replay", input, "--out", out, ...flags]);
  assert.equal(result.code, 0, result.stderr);
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
  const letterFile = join(out, "_dead-letter", "dead-letters-00000.jsonl");
  const letters = existsSync(letterFile)
    ? readFileSync(letterFile, "utf8")
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, unknown>)
    : [];
  return { rows: await rowsIn(out), letters };
}

describe("hostile lines", () => {
  // Regression (item 1): JSON.stringify of a 100,000-deep output_ids in the decoder's message overflowed
  // the stack: `replay` exited 1 with nothing written (a decode worker crashed with --decode-workers 1).
  for (const workers of ["0", "1"]) {
    it(`rejects output_ids nested 100,000 deep, keeping the valid sessions (decode workers: ${workers})`, async () => {
      const deep = `{"v":1,"type":"response","uid":"u","session_id":"deep","seq":0,"ts":1,"call_id":"c1","prompt_ids":[1],"finish_reason":"stop","output_ids":${"[".repeat(100_000)}${"]".repeat(100_000)}}`;
      const { rows, letters } = await replay(
        `deep-${workers}`,
        [...valid("u1", "a"), deep, ...valid("u2", "b")],
        ["--decode-workers", workers],
      );
      assert.deepEqual(
        rows.map((r) => r.key),
        ["u1_a_0", "u2_b_0"],
      );
      const deepLetters = letters.filter((l) => l.session_id === "deep" || l.raw === deep);
      assert.deepEqual(
        deepLetters.map((l) => l.code),
        ["INVALID_TOKENS", "SESSION_WITHOUT_ROWS"].slice(0, deepLetters.length),
      );
      assert.equal(deepLetters[0]!.raw, deep);
    });
  }

  // Regression (item 2): the session key was uid + "\0" + session_id, so these two sessions were one.
  it("keeps sessions apart whose ids differ only in where a NUL falls", async () => {
    const { rows, letters } = await replay("nul", [...valid("a\u0000x", "y"), ...valid("a", "x\u0000y")]);
    assert.deepEqual(letters, []);
    assert.deepEqual(
      rows.map((r) => [r.uid, r.session_id, r.reward]),
      [
        ["a\u0000x", "y", 1],
        ["a", "x\u0000y", 1],
      ],
    );
  });

  // Regression (item 4): the dead letter of "EF BB BF not json" held "not json".
  it("keeps a leading byte order mark in the dead letter's raw bytes", async () => {
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from("not json")]);
    const { rows, letters } = await replay("bom", [...valid("u1", "a"), bom]);
    assert.equal(rows.length, 1);
    assert.deepEqual(
      letters.map((l) => [l.code, l.raw]),
      [["MALFORMED_JSON", "\ufeffnot json"]],
    );
  });

  // Regression (item 5): stage "constructor" wrote `function Object() { [native code] }0.5` into
  // reward_info, and "__proto__" was dropped.
  it("keeps reward stages named like Object.prototype's members as plain components", async () => {
    const s = new SessionScript("u1", "a").call("c1", [1, 2], [3, 4]);
    s.reward(0.5, { stage: "constructor" }).reward(0.25, { stage: "__proto__" }).end();
    const rewards = join(scratch, "env.json");
    writeFileSync(rewards, JSON.stringify({ stages: [{ name: "env", type: "env" }] }));
    const { rows, letters } = await replay("proto", s.lines(), ["--rewards", rewards]);
    assert.deepEqual(letters, []);
    assert.equal(rows[0]!.reward, 0.75);
    const info = JSON.parse(rows[0]!.reward_info as string) as {
      env: { components: Record<string, unknown> };
    };
    assert.equal(JSON.stringify(info.env.components), '{"constructor":0.5,"__proto__":0.25}');
  });

  // Regression (item 6): two rewards of 1.7e308 gave reward = inf with no flag and no dead letter.
  it("rejects a reward whose sum would overflow, as REWARD_OVERFLOW, keeping the finite sum", async () => {
    const s = new SessionScript("u1", "a").call("c1", [1, 2], [3, 4]);
    s.reward(1.7e308).reward(1.7e308).reward(2, { target: "c1" }).reward(1.7e308, { target: "c1" });
    s.reward(1.7e308, { target: "c1" }).end();
    const { rows, letters } = await replay("overflow", s.lines());
    assert.deepEqual(
      letters.map((l) => [l.code, l.seq]),
      [
        ["REWARD_OVERFLOW", 3],
        ["REWARD_OVERFLOW", 6],
      ],
    );
    assert.equal(rows[0]!.reward, 1.7e308);
    assert.deepEqual(rows[0]!.turn_rewards, [2 + 1.7e308]);
  });
});

describe("failures reach the user as coded lines", () => {
  // Issue 27: "no stack trace ever reaches the user" is a property: test/helpers/cli.ts fails every CLI run
  // of the suite that prints one. This is the path nothing awaits: a plug-in stage throwing from a timer.
  it("reports an error thrown outside every handler with a code, exit 1", async () => {
    const stage = join(scratch, "throws-later.mjs");
    writeFileSync(
      stage,
      "export default () => ({ score: async (items) => { setTimeout(() => { throw new RangeError('stage bug'); }, 0); " +
        "await new Promise(() => {}); } });\n",
    );
    const rewards = join(scratch, "throws-later.json");
    writeFileSync(rewards, JSON.stringify({ stages: [{ name: "later", type: "module", path: stage }] }));
    const input = join(scratch, "throws-later.jsonl");
    writeFileSync(input, valid("u1", "a").join("\n") + "\n");
    const r = await runCli(["replay", input, "--out", join(scratch, "throws-later"), "--rewards", rewards]);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /^trajflow: \[INTERNAL_ERROR\] RangeError: stage bug\. This is a bug in trajflow/m,
    );
  });
});
