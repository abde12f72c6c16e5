/**
 * `npm run bench`: runs every benchmark and prints one line per figure. With --json <file>, also writes
 * the results as JSON. Record the figures in BENCHMARKS.md with the command and the machine.
 */
import { writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { run as assemble } from "./assemble.ts";
import { run as decode } from "./decode.ts";
import { results } from "./harness.ts";
import { run as rewards } from "./rewards.ts";
import { run as rollouts } from "./rollouts.ts";
import { run as routing } from "./routing.ts";
import { run as s3 } from "./s3.ts";
import { run as sink } from "./sink.ts";

const machine = `${cpus().length} x ${cpus()[0]?.model ?? "unknown CPU"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
console.log(`trajflow benchmarks on ${machine}\n`);
decode();
assemble();
await sink();
await rewards();
await routing();
await s3();
const rolloutFigures = await rollouts();
const at = process.argv.indexOf("--json");
if (at >= 0 && process.argv[at + 1] !== undefined) {
  writeFileSync(
    process.argv[at + 1]!,
    `${JSON.stringify({ machine, results, rollouts: rolloutFigures }, null, 2)}\n`,
  );
}
