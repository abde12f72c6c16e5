/**
 * `--help` and docs/cli.md agree (issue 66): every flag a command's help names is in its section of
 * docs/cli.md, and every flag that section names is in the command's help; the top-level help names every
 * command's forms the docs give.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { it } from "node:test";
import { runCli } from "./helpers/cli.ts";

const DOC = readFileSync(new URL("../docs/cli.md", import.meta.url), "utf8");
const FLAG = /--[a-z][a-z0-9-]*/g;

/** The docs/cli.md section of a command (run and validate share one). */
function section(command: string): string {
  const heading = command === "validate" ? "run" : command;
  const part = DOC.split("\n## ").find((s) => s.startsWith(`\`trajflow ${heading} `));
  assert.ok(part !== undefined, `docs/cli.md has a section for ${command}`);
  return part;
}

const flags = (text: string) => new Set([...text.matchAll(FLAG)].map((m) => m[0]));

for (const command of ["run", "validate", "replay", "inspect", "produce", "consume", "gateway"]) {
  it(`${command} --help and docs/cli.md name the same flags`, async () => {
    const help = await runCli([command, "--help"]);
    assert.equal(help.code, 0, help.stderr);
    const inHelp = flags(help.stdout);
    inHelp.delete("--help"); // "Every command has --help", said once at the top
    const inDoc = flags(section(command));
    inDoc.delete("--help");
    assert.deepEqual(
      [...inHelp].filter((f) => !inDoc.has(f)).sort(),
      [],
      `in ${command}'s help, not its docs`,
    );
    if (command !== "run" && command !== "validate") {
      // run and validate share a section; each takes the other's flags but for run's own (checked above).
      assert.deepEqual(
        [...inDoc].filter((f) => !inHelp.has(f)).sort(),
        [],
        `in ${command}'s docs, not its help`,
      );
    }
  });
}
