/**
 * `npm run bench:kafka`: the same workload through Kafka and through replay, side by side. Needs a broker:
 * KAFKA_BROKERS, or the one scripts/kafka.sh starts. Reports events/s and tokens/s from topic to renamed
 * Parquet files, with the replay path measured in the same run.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { consume } from "../src/cli/consume.ts";
import { produce } from "../src/cli/produce.ts";
import { replay } from "../src/cli/replay.ts";
import { record, tokensOfLines } from "./harness.ts";
import { linearSession } from "./workloads.ts";

const silent = pino({ level: "silent" });
const brokers =
  process.env.KAFKA_BROKERS ??
  execFileSync("bash", [new URL("../scripts/kafka.sh", import.meta.url).pathname, "start"], {
    encoding: "utf8",
  }).trim();
const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-kafka-"));
try {
  const shape = { initialPrompt: 2048, turns: 16, outputTokens: 256, observationTokens: 128 };
  const lines: string[] = [];
  for (let s = 0; s < 400; s++) {
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
  const input = join(dir, "events.jsonl");
  writeFileSync(input, `${lines.join("\n")}\n`);
  const topic = `bench-${Date.now()}`;
  await produce({
    inputs: [input],
    topic,
    connection: { brokers: [brokers], client_id: "bench", connection_timeout_ms: 10_000 },
    compression: "zstd",
    logger: silent,
  });

  const idle = 1_500;
  const k = await consume({
    source: { connection: { brokers: [brokers] }, topic, group_id: `${topic}-g`, session_timeout_ms: 6_000 },
    out: join(dir, "kafka"),
    assemble: { reward_grace_ms: 0 },
    untilIdleMs: idle,
    logger: silent,
  });
  // The run ends `idle` ms after the last message: that wait is not work.
  const kafkaSeconds = k.seconds - idle / 1000;
  const r = await replay({
    inputs: [input],
    out: join(dir, "replay"),
    assemble: { reward_grace_ms: 0 },
    logger: silent,
  });
  record({
    bench: "kafka",
    case: "topic (zstd batches) → Parquet files",
    value: tokens / kafkaSeconds / 1e6,
    unit: "M tokens/s",
    note: `${(lines.length / kafkaSeconds).toFixed(0)} events/s, ${k.metrics.total("rows_written")} rows, includes group join`,
  });
  record({
    bench: "kafka",
    case: "same events, replay from a JSONL file",
    value: tokens / r.seconds / 1e6,
    unit: "M tokens/s",
    note: `${(lines.length / r.seconds).toFixed(0)} events/s, ${r.metrics.total("rows_written")} rows`,
  });
  record({
    bench: "kafka",
    case: "Kafka time / replay time",
    value: kafkaSeconds / r.seconds,
    unit: "x",
    note: "target: Kafka within 1.5x of replay",
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
