/**
 * `npm run bench:decode-workers`: the Kafka path with decoding on the consumer thread (decode_workers 0)
 * and on one worker thread (1), alternating, on three workloads: JSON token arrays (short sessions and
 * branchy sessions, where JSON parsing is the largest per-event cost) and packed arrays (long delta-form
 * sessions, cheap to parse). The evidence behind the option's default; results in BENCHMARKS.md.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gc } from "./harness.ts";
import { benchBrokers, consumeTopic, produceFile } from "./kafka-harness.ts";
import { branchySession, linearSession } from "./workloads.ts";

const brokers = benchBrokers();
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const workloads: Array<{ name: string; events: () => Array<Record<string, unknown>> }> = [
  {
    name: "short sessions, JSON arrays",
    events: () =>
      Array.from({ length: 4_500 }, (_, s) =>
        linearSession({ initialPrompt: 1_024, turns: 3, outputTokens: 128, observationTokens: 64 }, "full", {
          uid: `short-${s % 300}`,
          sessionId: `s${s}`,
          seed: s + 1,
        }),
      ).flat(),
  },
  {
    name: "branchy sessions, JSON arrays",
    events: () =>
      Array.from({ length: 1_200 }, (_, s) =>
        branchySession({ uid: `branchy-${s % 100}`, sessionId: `b${s}`, seed: s + 1 }),
      ).flat(),
  },
  {
    name: "16-turn delta sessions, packed arrays",
    events: () =>
      Array.from({ length: 2_000 }, (_, s) =>
        linearSession(
          { initialPrompt: 2_048, turns: 16, outputTokens: 256, observationTokens: 128 },
          "delta",
          {
            uid: `u${s % 100}`,
            sessionId: `s${s}`,
            seed: s + 1,
            packed: true,
          },
        ),
      ).flat(),
  },
];

const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-decode-"));
try {
  console.log(`brokers ${brokers}; ${ROUNDS} rounds, alternating`);
  console.log("| workload | decode workers | events/s (median) | tokens/s (median) | runs (events/s) |");
  console.log("| --- | --- | --- | --- | --- |");
  for (const [w, workload] of workloads.entries()) {
    const input = join(dir, `w${w}.jsonl`);
    let events = workload.events();
    const n = events.length;
    writeFileSync(input, `${events.map((e) => JSON.stringify(e)).join("\n")}\n`);
    events = [];
    gc();
    const topic = `decode-${Date.now()}-${w}`;
    await produceFile(brokers, input, topic);
    const runs = new Map<number, Array<{ seconds: number; tokens: number }>>([
      [0, []],
      [1, []],
    ]);
    for (let round = 0; round < ROUNDS; round++) {
      for (const workers of [0, 1]) {
        gc();
        const run = await consumeTopic(brokers, topic, join(dir, `w${w}-${round}-${workers}`), n, {
          group: `${topic}-${round}-${workers}`,
          source: { decode_workers: workers },
        });
        runs.get(workers)!.push({ seconds: run.seconds, tokens: run.metrics.total("tokens_emitted") });
      }
    }
    for (const [workers, list] of runs) {
      const sorted = [...list].sort((a, b) => a.seconds - b.seconds);
      const median = sorted[Math.floor(sorted.length / 2)]!;
      console.log(
        `| ${workload.name} | ${workers} | ${Math.round(n / median.seconds).toLocaleString("en-US")} | ` +
          `${(median.tokens / median.seconds / 1e6).toFixed(2)} M | ` +
          `${list.map((r) => Math.round(n / r.seconds).toLocaleString("en-US")).join(", ")} |`,
      );
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
