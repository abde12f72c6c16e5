/**
 * Rescoring recorded sessions: the example events replayed with the example reward pipeline (env, a rule,
 * the tiny ONNX model, a user module) give the same token columns as a plain replay, plus reward columns
 * that pyarrow reads back with their nulls.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { referenceLogits, tinyWeights } from "./helpers/tiny-model.ts";
import { runCli } from "./helpers/cli.ts";
import { readWithPython } from "./helpers/python.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const REWARDS = new URL("../examples/rewards/rewards.json", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-rewards-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

async function rowsOf(dir: string) {
  const rows = [];
  for (const f of await listDataFiles(dir)) rows.push(...(await readRows(f)));
  return rows.sort((a, b) => (a.key < b.key ? -1 : 1));
}

it("rescoring recorded sessions adds reward columns and leaves every token column as it was", async () => {
  const plainOut = join(scratch, "plain");
  const scoredOut = join(scratch, "scored");
  assert.equal((await runCli(["replay", EXAMPLES, "--out", plainOut])).code, 0);
  const scored = await runCli(["replay", EXAMPLES, "--out", scoredOut, "--rewards", REWARDS, "--json"]);
  assert.equal(scored.code, 0, scored.stderr);
  const before = await rowsOf(plainOut);
  const after = await rowsOf(scoredOut);
  assert.equal(after.length, before.length);
  const tokens = (r: (typeof before)[number]) => ({
    key: r.key,
    prompt_ids: [...r.prompt_ids],
    response_ids: [...r.response_ids],
    response_mask: [...r.response_mask],
    rollout_log_probs: r.rollout_log_probs === null ? null : [...r.rollout_log_probs],
    turn_end_indices: [...r.turn_end_indices],
    last_trained_index: r.last_trained_index,
  });
  assert.deepEqual(after.map(tokens), before.map(tokens));

  const weights = tinyWeights();
  const weightsOf = { env: 1, correct: 1, rm: 0.1, brevity: 0.1 };
  for (const [i, row] of after.entries()) {
    assert.deepEqual(row.reward_names, ["env", "correct", "rm", "brevity"]);
    const [env, correct, rm, brevity] = row.reward_values;
    // env is the reward the plain replay already had.
    assert.equal(env, before[i]!.reward);
    const ids = [...row.prompt_ids, ...row.response_ids];
    const expectedRm =
      1 /
      (1 +
        Math.exp(
          -referenceLogits(
            weights,
            ids,
            ids.map(() => 1),
          )[1]!,
        ));
    assert.ok(Math.abs(rm! - expectedRm) < 1e-5, `${row.key}: rm ${rm} vs ${expectedRm}`);
    const trained = after
      .filter((r) => r.uid === row.uid && r.session_id === row.session_id)
      .reduce((n, r) => n + r.num_trained_tokens, 0);
    assert.equal(brevity, Math.max(0, Math.min(1, 2 - trained / 32)));
    const parts: Array<[keyof typeof weightsOf, number | null | undefined]> = [
      ["env", env],
      ["correct", correct],
      ["rm", rm],
      ["brevity", brevity],
    ];
    const expected = parts.reduce((a, [n, v]) => a + (v == null ? 0 : weightsOf[n] * v), 0);
    assert.ok(Math.abs(row.reward! - expected) < 1e-9, row.key);
  }
  // The numeric rule: gsm8k-0042 rollout 0 answered the reference, rollout 1 did not; sessions without a
  // reference are skipped (null), not scored 0.
  const byKey = Object.fromEntries(after.map((r) => [r.key, r.reward_values[1]]));
  assert.equal(byKey["gsm8k-0042_rollout-0_0"], 1);
  assert.equal(byKey["gsm8k-0042_rollout-1_0"], 0);
  assert.equal(byKey["swe-0007_main_0"], null);

  const view = await readWithPython<{ rows: Array<Record<string, unknown>>; schema: Record<string, string> }>(
    "read_output.py",
    scoredOut,
  );
  assert.equal(view.schema.reward_values, "list<element: double>");
  assert.deepEqual(
    view.rows.map((r) => (r.reward_values as Array<number | null>).map((v) => v === null)),
    after.map((r) => r.reward_values.map((v) => v === null)),
  );
});

it("fails before writing anything when a reward stage cannot start, listing it", async () => {
  const out = join(scratch, "broken");
  const config = join(scratch, "broken.json");
  writeFileSync(
    config,
    JSON.stringify({
      stages: [
        { name: "rm", type: "onnx", options: { model: "missing.onnx", providers: ["cpu"] } },
        { name: "mine", type: "module", path: "missing.ts" },
      ],
    }),
  );
  const r = await runCli(["replay", EXAMPLES, "--out", out, "--rewards", config]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /REWARD_STAGE_UNAVAILABLE/);
  assert.match(r.stderr, /rm: could not load/);
  assert.match(r.stderr, /mine: could not import/);
  assert.deepEqual(await listDataFiles(out).catch(() => []), []);
});

it("the example reward model is what the generator writes", async () => {
  const { execFileSync } = await import("node:child_process");
  const script = new URL("../scripts/tiny-reward-model.ts", import.meta.url).pathname;
  const model = new URL("../examples/rewards/tiny-reward.onnx", import.meta.url).pathname;
  execFileSync(process.execPath, [script, model, "--check"]);
});

it("lists every problem of a rewards file with its file:line, and says where its JSON breaks", async () => {
  const config = join(scratch, "invalid.json");
  writeFileSync(
    config,
    [
      "{",
      '  "stages": [',
      '    { "name": "a", "type": "rule", "options": { "mode": "numeric", "reference_key": "r" } },',
      '    { "name": "b", "type": "rule",',
      '      "options": { "mode": "no_such_mode", "reference_key": "r" } }',
      "  ],",
      '  "combine": "nonsense"',
      "}",
    ].join("\n"),
  );
  const r = await runCli(["replay", EXAMPLES, "--out", join(scratch, "invalid"), "--rewards", config]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, new RegExp(`${config}:5: transforms\\.rewards\\.stages\\.1\\.options\\.mode: `));
  assert.match(r.stderr, new RegExp(`${config}:7: transforms\\.rewards\\.combine: `));
  // Regression: problems used to say "replay options", with no file or line.
  assert.doesNotMatch(r.stderr, /replay options/);

  writeFileSync(config, '{\n  "stages": [\n    {,}\n  ]\n}\n');
  const broken = await runCli(["replay", EXAMPLES, "--out", join(scratch, "invalid"), "--rewards", config]);
  assert.equal(broken.code, 2);
  assert.match(
    broken.stderr,
    new RegExp(`--rewards: ${config}:3:6: not valid JSON: expected a quoted key, found ","`),
  );
});

// Regressions (issue 27 item 12): a weight naming no stage was listed only when nothing else was wrong; a
// stray "__proto__" key was reported at line 1; a trailing comma gave V8's message with no line.
it("lists every problem of a rewards file, each at its own line", async () => {
  const config = join(scratch, "problems.json");
  writeFileSync(
    config,
    [
      "{",
      '  "stages": [',
      '    { "type": "env", "name": "outcome", "bogus": 1 },',
      '    { "type": "nope" }',
      "  ],",
      '  "weights": { "nobody": 1 },',
      '  "__proto__": { "polluted": true }',
      "}",
    ].join("\n"),
  );
  const r = await runCli(["replay", EXAMPLES, "--out", join(scratch, "problems"), "--rewards", config]);
  assert.equal(r.code, 2);
  const problems = r.stderr
    .trim()
    .split("\n")
    .slice(1)
    .map((l) => l.trim());
  assert.deepEqual(problems, [
    `${config}:3: transforms.rewards.stages.0.bogus: unknown key`,
    `${config}:4: transforms.rewards.stages.1.type: Invalid discriminator value. Expected 'env' | 'rule' | 'onnx' | 'http' | 'module'`,
    `${config}:7: transforms.rewards.__proto__: unknown key`,
    `${config}:6: transforms.rewards.weights.nobody: no stage named nobody`,
  ]);

  writeFileSync(config, '{\n  "stages": [\n    { "type": "env", "name": "outcome" },\n  ]\n}\n');
  const comma = await runCli(["replay", EXAMPLES, "--out", join(scratch, "problems"), "--rewards", config]);
  assert.equal(comma.code, 2);
  assert.match(
    comma.stderr,
    new RegExp(`--rewards: ${config}:3:41: not valid JSON: a trailing comma before '\\]'`),
  );
});
