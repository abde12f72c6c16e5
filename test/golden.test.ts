/**
 * Replays keep pure event time: the output of these recorded inputs is byte for byte the output trajflow
 * wrote before the live clock (issue 21) existed. test/golden/ holds the inputs and those files, written
 * by the commit before that change (0751b8c) from inputs in /tmp/trajflow-golden-inputs, and rewritten once
 * since, when schema version 3 added the per-token policy columns (issue 26): pyarrow read every earlier
 * column of the new files equal to the old ones, and the metadata differed only in
 * `trajflow.schema_version`; again for schema version 4 (routed experts and sampling settings, issue
 * 26), checked the same way; and once more when files gained `trajflow.low_water` (issue 23: the
 * readers' per-lane high-water marks), every column equal and that key the only new metadata. A difference here is a change of replay output, which must be deliberate
 * (docs/sinks.md: a rerun into an existing directory then needs a fresh one).
 */
import { strict as assert } from "node:assert";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/cli.ts";

const GOLDEN = new URL("./golden/", import.meta.url).pathname;
/**
 * Where the inputs were when the golden files were written: a file's metadata names its inputs' absolute
 * paths (`trajflow.inputs`), so the replay must read them from the same place to give the same bytes.
 */
const INPUTS = "/tmp/trajflow-golden-inputs";
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
      mkdirSync(INPUTS, { recursive: true });
      const input = join(INPUTS, `${name}.jsonl.gz`);
      copyFileSync(join(GOLDEN, `${name}.jsonl.gz`), input);
      const result = await runCli(["replay", input, "--out", out, ...flags]);
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
