/** The trainer example in docs/trainers.md runs against real output and sees what trajflow wrote. */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { PYTHON } from "./helpers/python.ts";
import { assemble } from "./helpers/sessions.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const SCRIPT = new URL("../examples/trainer/load_batches.py", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-trainer-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

it("examples/trainer/load_batches.py builds verl-style tensors from a grouped replay", async () => {
  const out = join(scratch, "out");
  const result = await runCli(["replay", EXAMPLES, "--out", out, "--group"]);
  assert.equal(result.code, 0, result.stderr);
  const { stdout } = await promisify(execFile)(PYTHON, [SCRIPT, out]);
  const summary = JSON.parse(stdout) as Record<string, unknown>;
  const rows = assemble(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n")).rows;
  const rewardOnTrained = rows
    .filter((r) => r.num_trained_tokens > 0)
    .reduce((s, r) => s + (r.reward ?? 0), 0);
  assert.deepEqual(summary, {
    rows: rows.length,
    trained_rows: rows.length,
    placeholders: 0,
    groups: new Set(rows.map((r) => r.uid)).size,
    prompts_shape: [rows.length, Math.max(...rows.map((r) => r.prompt_ids.length))],
    responses_shape: [rows.length, Math.max(...rows.map((r) => r.response_ids.length))],
    trained_tokens: rows.reduce((s, r) => s + r.num_trained_tokens, 0),
    rm_scores_sum: Math.round(rewardOnTrained * 1e6) / 1e6,
    logprob_at_mask0: 0,
  });
});
