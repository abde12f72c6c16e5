/**
 * Replays keep pure event time: the output of these recorded inputs is byte for byte the output trajflow
 * wrote before the live clock (issue 21) existed. test/golden/ holds the inputs and those files, written
 * by the commit before that change; a difference here is a change of replay output, which must be
 * deliberate (docs/sinks.md: a rerun into an existing directory then needs a fresh one).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/cli.ts";

const GOLDEN = new URL("./golden/", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-golden-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const cases: Array<[name: string, flags: string[]]> = [
  ["linear", []],
  ["branchy", []],
  ["group", ["--group"]],
];

describe("replay output against golden files", () => {
  for (const [name, flags] of cases) {
    it(`writes ${name}.jsonl.gz's files byte for byte as before`, async () => {
      const out = join(scratch, name);
      const result = await runCli(["replay", join(GOLDEN, `${name}.jsonl.gz`), "--out", out, ...flags]);
      assert.equal(result.code, 0, result.stderr);
      const expected = readdirSync(join(GOLDEN, name)).sort();
      assert.deepEqual(readdirSync(out).sort(), expected);
      for (const file of expected)
        assert.ok(
          readFileSync(join(out, file)).equals(readFileSync(join(GOLDEN, name, file))),
          `${name}/${file} differs from the golden file`,
        );
    });
  }
});
