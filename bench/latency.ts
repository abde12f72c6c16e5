/**
 * `npm run bench:latency`: how soon a finished session reaches the trainer when trajflow runs live
 * between a gateway and a trainer (issue 21). A real `trajflow consume` process (no drain flag) on a fresh
 * topic; events carry wall-clock timestamps, as a gateway sends them.
 *
 * - busy: sessions end at a steady rate on 4 partitions; session end → committed file, p50 / p99.
 * - quiet: one session now and then, the topic quiet in between; the same figure.
 * - sync loop: 5 waves of GRPO groups, each read by the Python `TrajectoryReader(follow=True)` before the
 *   next is sent (test/readers/sync_loop.py); wave's last event → batch in the trainer's hands.
 * - start-up: process start → first record, and → the consumer's first file.
 *
 * Targets: p99 ≤ file age + 1 s (busy and quiet); no wave slower than file age + 2 s. Needs a broker
 * (KAFKA_BROKERS, or the one scripts/kafka.sh starts) and, for the loop, the Python environment `npm test`
 * prepares (.cache/python). BENCH_FILE_AGE_MS sets the file age (default 2000), BENCH_BUSY_SECONDS the busy
 * phase (default 20).
 */
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import kafkajs from "kafkajs";
import { readRows } from "../src/sinks/files/read.ts";
import { registerKafkaCodecs } from "../src/kafka/codecs.ts";
import { fixKafkajsRequestQueue } from "../src/kafka/request-queue-fix.ts";
import { benchBrokers } from "./kafka-harness.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const FILE_AGE_MS = Number(process.env.BENCH_FILE_AGE_MS ?? 2_000);
const BUSY_SECONDS = Number(process.env.BENCH_BUSY_SECONDS ?? 20);
const PYTHON = join(ROOT, ".cache/python/bin/python");

const broker = benchBrokers();
registerKafkaCodecs();
fixKafkajsRequestQueue();
const kafka = new kafkajs.Kafka({ brokers: [broker], logLevel: kafkajs.logLevel.NOTHING });
const scratch = mkdtempSync(join(tmpdir(), "trajflow-bench-latency-"));
const name = (prefix: string) => `${prefix}-${process.pid}-${Date.now()}`;

/** A gateway session's events, all stamped now; its reward comes before its end. */
function sessionEvents(uid: string, sessionId: string, extra: Record<string, unknown> = {}) {
  let seq = 0;
  const ts = Date.now();
  const ev = (e: Record<string, unknown>) => ({ v: 1, uid, session_id: sessionId, seq: seq++, ts, ...e });
  return [
    ev({ type: "session.start", ...extra }),
    ev({ type: "request", call_id: "c1", prompt_ids: Array.from({ length: 256 }, (_, i) => 100 + i) }),
    ev({
      type: "response",
      call_id: "c1",
      output_ids: Array.from({ length: 128 }, (_, i) => 1000 + i),
      logprobs: Array.from({ length: 128 }, () => -0.5),
      finish_reason: "stop",
    }),
    ev({ type: "reward", value: 1 }),
    ev({ type: "session.end", status: "ok" }),
  ];
}

/** A running `trajflow consume` with a watcher noting when each row's file appeared. */
function startConsume(topic: string, out: string, extra: string[] = []) {
  const spawnedAt = Date.now();
  const child = spawn(
    process.execPath,
    [
      "--max-semi-space-size=4",
      join(ROOT, "bin/trajflow.js"),
      ...["consume", "--topic", topic, "--group", `${topic}-g`, "--out", out],
      ...["--file-age-ms", String(FILE_AGE_MS), "--dead-letter-dir", join(out, "_dl"), "--json"],
      ...extra,
    ],
    {
      env: { ...process.env, KAFKA_BROKERS: broker, TRAJFLOW_LOG_LEVEL: "warn" },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  let stdout = "";
  child.stdout.on("data", (d) => (stdout += d));
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  const seen = new Map<string, number>();
  const files = new Set<string>();
  let firstFileAt: number | null = null;
  let scanning = false;
  const timer = setInterval(() => {
    if (scanning) return;
    scanning = true;
    void (async () => {
      let names: string[] = [];
      try {
        names = readdirSync(out).filter((n) => n.endsWith(".parquet") && !n.startsWith("."));
      } catch {
        // not created yet
      }
      const now = Date.now();
      for (const n of names) {
        if (files.has(n)) continue;
        files.add(n);
        firstFileAt ??= now;
        for (const row of await readRows(join(out, n))) seen.set(`${row.uid}/${row.session_id}`, now);
      }
    })().finally(() => (scanning = false));
  }, 20);
  return {
    spawnedAt,
    seen,
    firstFileAt: () => firstFileAt,
    async stop() {
      clearInterval(timer);
      child.kill("SIGTERM");
      await exited;
      return JSON.parse(stdout) as {
        timeline: { process_started_at_ms: number; first_record_at_ms: number | null };
      };
    },
  };
}

async function waitFor(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};

/** Sessions produced one produce request each; returns when each session's end was sent. */
async function latencyScenario(kind: "busy" | "quiet") {
  const topic = name(`latency-${kind}`);
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4 }], waitForLeaders: true });
  await admin.disconnect();
  const out = join(scratch, topic);
  const consume = startConsume(topic, out);
  const producer = kafka.producer();
  await producer.connect();
  const ended = new Map<string, number>();
  let n = 0;
  const send = async () => {
    const uid = `task-${n % 97}`;
    const sid = `s${n++}`;
    const events = sessionEvents(uid, sid);
    ended.set(`${uid}/${sid}`, Date.now());
    await producer.send({ topic, messages: events.map((e) => ({ key: uid, value: JSON.stringify(e) })) });
  };
  if (kind === "busy") {
    // About 50 sessions a second, spread over the partitions, for BUSY_SECONDS.
    const until = Date.now() + BUSY_SECONDS * 1000;
    while (Date.now() < until) {
      await send();
      await new Promise((r) => setTimeout(r, 20));
    }
  } else {
    for (let i = 0; i < 8; i++) {
      await send();
      await new Promise((r) => setTimeout(r, 3_000));
    }
  }
  await producer.disconnect();
  const all = await waitFor(() => consume.seen.size >= ended.size, 60_000);
  const report = await consume.stop();
  const latencies = [...ended].map(([k, at]) => (consume.seen.get(k) ?? NaN) - at);
  return {
    kind,
    sessions: ended.size,
    written: consume.seen.size,
    complete: all,
    p50: quantile(latencies, 0.5) / 1000,
    p99: quantile(latencies, 0.99) / 1000,
    max: Math.max(...latencies) / 1000,
    firstRecord:
      report.timeline.first_record_at_ms === null
        ? NaN
        : (report.timeline.first_record_at_ms - report.timeline.process_started_at_ms) / 1000,
  };
}

async function syncLoop(): Promise<{ waves: number[]; exact: boolean } | null> {
  if (!existsSync(PYTHON)) return null;
  const topic = name("latency-loop");
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4 }], waitForLeaders: true });
  await admin.disconnect();
  const out = join(scratch, topic);
  const consume = startConsume(topic, out, ["--grpo", "--group-size", "4"]);
  const script = join(ROOT, "test/readers/sync_loop.py");
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(
      PYTHON,
      [script, broker, topic, out, join(scratch, `${topic}.cursor`), "5", "4", "4"],
      (err, so, se) => (err === null ? resolve(so) : reject(new Error(`${err.message}\n${se}`))),
    ),
  );
  await consume.stop();
  const { waves } = JSON.parse(stdout) as {
    waves: Array<{ seconds: number; keys: string[]; expected: string[] }>;
  };
  return {
    waves: waves.map((w) => w.seconds),
    exact: waves.every((w) => JSON.stringify(w.keys) === JSON.stringify(w.expected)),
  };
}

const results = [];
for (const kind of ["busy", "quiet"] as const) results.push(await latencyScenario(kind));
const loop = await syncLoop();
rmSync(scratch, { recursive: true, force: true });

const age = FILE_AGE_MS / 1000;
console.log(`trajflow latency (file age ${age} s, broker ${broker})\n`);
console.log("| topic | sessions | written | p50 s | p99 s | max s | target p99 | met | first record s |");
console.log("|---|---|---|---|---|---|---|---|---|");
for (const r of results)
  console.log(
    `| ${r.kind} | ${r.sessions} | ${r.written} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(2)} | ≤ ${(age + 1).toFixed(1)} | ${r.complete && r.p99 <= age + 1 ? "yes" : "no"} | ${r.firstRecord.toFixed(2)} |`,
  );
if (loop === null) console.log("\nsync loop: skipped (no .cache/python; run npm test once)");
else {
  const worst = Math.max(...loop.waves);
  console.log(
    `\nsync loop (5 waves × 4 groups × 4): per wave ${loop.waves.map((s) => s.toFixed(2)).join(" / ")} s; ` +
      `worst ${worst.toFixed(2)} s against ≤ ${(age + 2).toFixed(1)} s: ${worst <= age + 2 && loop.exact ? "met" : "not met"}; ` +
      `every wave exact: ${loop.exact}`,
  );
}
console.log(`\n${JSON.stringify({ fileAgeMs: FILE_AGE_MS, results, loop })}`);
