/**
 * `npm run bench:kafka`: the same workload through Kafka and through replay, side by side, and consumer lag
 * while a producer writes at full speed. Needs a broker: KAFKA_BROKERS, or the one scripts/kafka.sh starts.
 *
 * - replay: a JSONL file → Parquet files (the reference path).
 * - topic → files: the events already in a topic; timed from the first message consumed (the group join
 *   is not ingest work) to the last file renamed into place and its offsets committed.
 * - lag: a fresh topic, the consumer running, then `trajflow produce` writing the events as fast as it can;
 *   the lag (high watermarks minus consumed offsets) is sampled every 500 ms.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import kafkajs from "kafkajs";
import { pino } from "pino";
import { replay } from "../src/cli/presets.ts";
import { fastestOf, gc, record, tokensOfLines } from "./harness.ts";
import { benchBrokers, consumeTopic, produceFile } from "./kafka-harness.ts";
import { linearSession } from "./workloads.ts";

const silent = pino({ level: "silent" });
const BIN = new URL("../bin/trajflow.js", import.meta.url).pathname;
const brokers = benchBrokers();
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 2_000);

const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-kafka-"));
try {
  const shape = { initialPrompt: 2048, turns: 16, outputTokens: 256, observationTokens: 128 };
  const lines: string[] = [];
  for (let s = 0; s < SESSIONS; s++) {
    for (const e of linearSession(shape, "delta", {
      uid: `u${s % 100}`,
      sessionId: `s${s}`,
      seed: s + 1,
      t0: s * 1_000,
      packed: true,
    })) {
      lines.push(JSON.stringify(e));
    }
  }
  const tokens = tokensOfLines(lines);
  const events = lines.length;
  const input = join(dir, "events.jsonl");
  writeFileSync(input, `${lines.join("\n")}\n`);
  lines.length = 0; // both paths read the file: keep the bench's own copy out of their heap
  gc();
  console.log(
    `workload: ${SESSIONS} sessions, ${events} events, ${(tokens / 1e6).toFixed(1)} M token values`,
  );

  // Best of two runs of each path: this 2-core machine is noisy (see BENCHMARKS.md).
  const replayOnce = (run: number) =>
    replay({
      inputs: [input],
      out: join(dir, `replay-${run}`),
      assemble: { reward_grace_ms: 0 },
      logger: silent,
    });
  /** Records a throughput case: the workload's tokens and events over `seconds`. */
  const rate = (name: string, seconds: number, note = "") =>
    record({
      bench: "kafka",
      case: name,
      value: tokens / seconds / 1e6,
      unit: "M tokens/s",
      note: `${(events / seconds).toFixed(0)} events/s${note}`,
    });
  const r = await fastestOf(2, replayOnce);
  rate("replay: JSONL file → Parquet files", r.seconds, `, ${r.metrics.total("rows_written")} rows`);

  const kafkaOnce = async (run: number) => {
    const topic = `bench-${Date.now()}-${run}`;
    await produceFile(brokers, input, topic);
    return consumeTopic(brokers, topic, join(dir, `kafka-${run}`), events);
  };
  const k = await fastestOf(2, kafkaOnce);
  rate(
    "topic (zstd batches) → Parquet files, committed",
    k.seconds,
    `, ${k.metrics.total("rows_written")} rows; the stop's last files took ` +
      `${k.drainSeconds.toFixed(2)} s of ${k.seconds.toFixed(2)} s`,
  );
  // The fixed tail (the last file age's rows encoded after the last message) weighs on a short run only;
  // this is the rate the topic was consumed at while files landed behind it.
  rate("topic → consumer, first to last message consumed", k.seconds - k.drainSeconds);
  record({
    bench: "kafka",
    case: "Kafka time / replay time",
    value: k.seconds / r.seconds,
    unit: "x",
    note: "target ≤ 1.5x",
  });

  const live = `bench-live-${Date.now()}`;
  // Create the topic first, so the consumer can join before the producer starts.
  const admin = new kafkajs.Kafka({ brokers: [brokers], logLevel: kafkajs.logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: live, numPartitions: 4 }] });
  await admin.disconnect();
  let produceSeconds = 0;
  const l = await consumeTopic(brokers, live, join(dir, "live"), events, {
    whileRunning: async () => {
      const started = performance.now();
      await new Promise<void>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [BIN, "produce", input, "--topic", live, "--compression", "zstd"],
          {
            env: { ...process.env, KAFKA_BROKERS: brokers, TRAJFLOW_LOG_LEVEL: "warn" },
            stdio: "ignore",
          },
        );
        child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`produce exited ${code}`))));
      });
      produceSeconds = (performance.now() - started) / 1000;
    },
  });
  const maxLag = Math.max(0, ...l.lag.map(([, v]) => v));
  rate(
    "live: produce and consume at once (end to end)",
    l.seconds,
    `; producer took ${produceSeconds.toFixed(1)} s; max lag ${maxLag} messages behind the commits`,
  );
  console.log(
    `lag over time (s, messages behind): ${l.lag.map(([t, v]) => `${t.toFixed(1)}:${v}`).join(" ")}`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
