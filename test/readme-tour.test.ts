/**
 * The README's quick tour, run top to bottom as written (issue 66), in a fresh directory that holds the
 * checkout's inputs (package.json, the code, the examples, the pipelines, the scripts, the installed
 * caches) as links, so every output the tour writes is new. Two things differ from a person's run: the
 * topic and consumer group get fresh names (a broker shared by many runs), and KAFKA_BROKERS names the
 * tests' broker, which the tour's own line keeps.
 */
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { brokers, freshName } from "./helpers/kafka.ts";
import { rowsIn } from "./helpers/workload.ts";

const root = new URL("..", import.meta.url).pathname;
/** What the tour reads from the checkout; anything else it needs fails the test, as it would a person. */
const INPUTS = [
  "package.json",
  "tsconfig.json",
  "node_modules",
  "bin",
  "src",
  "schemas",
  "examples",
  "pipelines",
  "scripts",
  "python",
  ".cache",
];
const scratch = mkdtempSync(join(tmpdir(), "trajflow-tour-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The shell block under "## A quick tour". */
function tour(): string {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.split("\n## ").find((s) => s.startsWith("A quick tour\n"));
  assert.ok(section !== undefined, "README.md has a quick tour");
  const block = /```sh\n([\s\S]*?)\n```/.exec(section);
  assert.ok(block !== null, "the tour is a sh block");
  return block[1]!;
}

it("runs the README's quick tour top to bottom on a fresh directory", async () => {
  const dir = join(scratch, "clone");
  mkdirSync(dir);
  for (const name of INPUTS) symlinkSync(join(root, name), join(dir, name));
  const topic = freshName("tour");
  const group = freshName("tour-group");
  const script = tour()
    .replaceAll("gateway-events", topic)
    .replaceAll("--group trajflow", `--group ${group}`);
  assert.notEqual(script, tour(), "the tour's topic and group are where this test expects them");
  const run = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
    const child = spawn("bash", ["-euo", "pipefail", "-c", script], {
      cwd: dir,
      env: { ...process.env, KAFKA_BROKERS: brokers() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, out }));
  });
  assert.equal(run.code, 0, run.out);
  // What the tour's lines say they do: the bundled sessions' 9 rows in each output (8 realigned: the
  // drifted session's re-rendered turn continues its row instead of forking one), rescored with the
  // example's stages, read back by pyarrow (from Kafka) and by the trajflow package as verl's tensors.
  const expected = { out: 9, realigned: 8, rescored: 9, "out-rewarded": 9, traj: 9 };
  for (const [out, n] of Object.entries(expected))
    assert.equal((await rowsIn(join(dir, out))).length, n, out);
  assert.ok((await rowsIn(join(dir, "rescored"))).every((r) => r.reward !== null));
  assert.match(run.out, /valid: jsonl events → assemble → rewards/);
  const lines = run.out.trim().split("\n");
  assert.equal(lines.at(-2), "9");
  assert.match(lines.at(-1)!, /^\(4, \d+\)$/);
});
