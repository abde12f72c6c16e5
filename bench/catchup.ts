/**
 * `npm run bench:catchup`: a consumer restarted after downtime reads a backlog as fast as it can (issue
 * 39). The short workload (20,000 sessions of 4 turns per 1x: 220,000 events, 1k-token prompts sent
 * whole as JSON arrays, zstd batches) at each backlog of CATCHUP_BACKLOGS (default "1,4"), each topic read
 * to its end, one process after the other, each in its own process:
 * - `trajflow consume` with the default settings, and once per CATCHUP_ARGS variant (";"-separated flag
 *   sets, default "--max-memory 512;--max-memory 384");
 * - the fast Python peer (bench/peers/fast_pipeline.py: confluent-kafka + orjson + numpy + pyarrow).
 * Reported: peak RSS, CPU seconds, end to end (spawn to last file), and trajflow's peak RSS by owner (the
 * run report's account: each thread's heap and off-heap memory, fixed memory, the allocator's) beside the
 * parts of the pipeline's own data at that moment. Printed, and written into BENCHMARKS.md between its
 * bench:catchup markers.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import {
  benchBrokers,
  consumeTopicProcess,
  FAST_PEER,
  OWNERS_HEADER,
  ownersRow,
  produceGenerated,
  runPeer,
} from "./kafka-harness.ts";
import { writeBenchmarksSection } from "./harness.ts";
import { linearSession } from "./workloads.ts";

const brokers = benchBrokers();
const BACKLOGS = (process.env.CATCHUP_BACKLOGS ?? "1,4").split(",").map(Number);
const VARIANTS = (process.env.CATCHUP_ARGS ?? "--max-memory 512;--max-memory 384")
  .split(";")
  .map((v) => v.split(" ").filter((a) => a !== ""))
  .filter((v) => v.length > 0);
const SESSIONS_PER_X = 20_000;
const MiB = (bytes: number) => Math.round(bytes / 2 ** 20);

/** The short workload: session after session, its events as JSON lines. */
function shortSessions(): () => string[] {
  let s = 0;
  const shape = { initialPrompt: 1_024, turns: 4, outputTokens: 128, observationTokens: 64 };
  return () => {
    const n = s++;
    const events = linearSession(shape, "full", { uid: `short-${n % 300}`, sessionId: `s${n}`, seed: n + 1 });
    return events.map((e) => JSON.stringify(e));
  };
}

const results: string[] = [];
const sizes: string[] = [];
const owners: string[] = [];

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "catchup-"));
  try {
    for (const x of BACKLOGS) {
      const topic = `catchup-${x}x-${Date.now()}`;
      const events = await produceGenerated(brokers, topic, shortSessions(), x * SESSIONS_PER_X * 11, dir);
      const backlog = `${x}x`;
      sizes.push(`${x}x = ${events.toLocaleString("en-US")} events`);
      const fast = await runPeer(FAST_PEER, brokers, topic, join(dir, "fast"), events);
      rmSync(join(dir, "fast"), { recursive: true, force: true });
      const row = (name: string, rss: number, cpu: number, endToEnd: number) =>
        `| ${backlog} | ${name} | ${MiB(rss)} | ${(rss / fast.peak_rss).toFixed(2)}x | ${cpu.toFixed(1)} | ` +
        `${endToEnd.toFixed(1)} |`;
      results.push(row("fast peer", fast.peak_rss, fast.cpu_seconds, fast.lastFileSeconds));
      for (const args of [[], ...VARIANTS]) {
        const name = `trajflow ${args.join(" ")}`.trim();
        const out = join(dir, "trajflow");
        const run = await consumeTopicProcess(brokers, topic, out, events, args);
        rmSync(out, { recursive: true, force: true });
        results.push(row(name, run.peakRss, run.cpuSeconds, run.lastFileSeconds));
        owners.push(ownersRow(backlog, name, run));
        process.stderr.write(`${results.at(-1)}\n${owners.at(-1)}\n`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const report = [
    `\`npm run bench:catchup\` (${new Date().toISOString().slice(0, 10)}; ${cpus().length} cores, ` +
      `${Math.round(totalmem() / 2 ** 30)} GiB; the broker on the same host): the short workload's backlog ` +
      `read to its end (${sizes.join(", ")}) by \`trajflow consume\` and the fast Python peer, one process ` +
      "after the other on the same topic.",
    "",
    "| backlog | pipeline | peak RSS MiB | vs fast peer | CPU s | end to end s |",
    "|---|---|---|---|---|---|",
    ...results,
    "",
    "trajflow's peak RSS by owner (MiB; the run report's `peak_rss_account`), and what of it was the " +
      "pipeline's own data (`held_memory` at the peak):",
    "",
    OWNERS_HEADER.replace("workload", "backlog"),
    ...owners,
  ].join("\n");
  process.stdout.write(`${report}\n`);
  writeBenchmarksSection("catchup", report);
}

await main();
