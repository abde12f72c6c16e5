/**
 * Exactly once through crashes: a consumer killed with SIGKILL while events flow, at each named point of
 * its commit path in turn (before a file is encoded, its temporary durable, linked, committed, the
 * offsets committed: src/core/kill-points.ts), the n-th time it gets there (n from a seed), then
 * restarted (same group), ends with every row exactly once and none missing, equal to a replay of the
 * same events.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { mulberry32 } from "./helpers/prng.ts";
import { killConsumeAt, runCli } from "./helpers/cli.ts";
import { brokers, freshName } from "./helpers/kafka.ts";
import { rowsIn, twoPartWorkload } from "./helpers/workload.ts";

const KILLS = 10;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-kafka-crash-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
let broker = "";
before(() => {
  broker = brokers();
});

it(`writes every row exactly once through ${KILLS} SIGKILLs while events flow`, async () => {
  const topic = freshName("crash");
  const group = freshName("crash-group");
  const out = join(scratch, "out");
  const { first: input1, second: input2, expected } = twoPartWorkload(scratch);
  assert.equal(expected.length, 160);

  const env = { KAFKA_BROKERS: broker };
  assert.equal((await runCli(["produce", input1, "--topic", topic], env)).code, 0);
  const args = [
    "consume",
    "--topic",
    topic,
    "--group",
    group,
    "--out",
    out,
    "--rows-per-file",
    "3",
    "--reward-grace-ms",
    "0",
    "--session-timeout-ms",
    "3000",
  ];
  const random = mulberry32(424242);
  let produced = false;
  // Each run is killed at a named point of its commit path (killConsumeAt), or drains first: counted.
  let killed = 0;
  for (let run = 0; run < KILLS; run++) {
    const killing = killConsumeAt(args, { KAFKA_BROKERS: broker }, run, random, 4).then((ended) => {
      if (ended === "killed") killed++;
    });
    if (run === 3 && !produced) {
      // The second half arrives while consumers are being killed and restarted.
      assert.equal((await runCli(["produce", input2, "--topic", topic], env)).code, 0);
      produced = true;
    }
    await killing;
  }
  assert.ok(killed >= KILLS / 2, `only ${killed} runs were killed at their point`);
  const final = await runCli([...args, "--until-idle-ms", "3000", "--json"], env);
  assert.equal(final.code, 0, final.stderr);
  // The killed runs did real work that was kept: the last run wrote only what remained.
  const finalRows =
    (JSON.parse(final.stdout) as { metrics: { rows_written?: number } }).metrics.rows_written ?? 0;
  assert.ok(finalRows < 120, `the final run wrote ${finalRows} of 160 rows`);

  const rows = await rowsIn(out);
  const keys = rows.map((r) => r.key);
  assert.equal(new Set(keys).size, keys.length, "a row was written twice");
  assert.deepEqual(rows, expected);
});
