/**
 * The Kafka side of the benchmarks: consume a topic with trajflow's runtime in process, timed from the
 * first message consumed (the group join is not ingest work) to the last file renamed into place, read
 * from the run's own timeline; the lag behind the group's committed offsets sampled every 500 ms from the
 * broker, and the process's peak RSS. It observes only what a user can: the metrics, the report, the
 * broker.
 */
import { execFile, execFileSync, spawn } from "node:child_process";
import { closeSync, openSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import kafkajs from "kafkajs";
import { pino } from "pino";
import { produce } from "../src/cli/produce.ts";
import type { Metrics, Timeline } from "../src/core/metrics.ts";
import type { ThreadUsage } from "../src/core/thread-usage.ts";
import { consumePlan } from "../src/cli/presets.ts";
import { Runtime } from "../src/runtime/runtime.ts";
import type { FileSinkConfigInput } from "../src/sinks/files/config.ts";
import type { KafkaSourceConfigInput } from "../src/sources/kafka/config.ts";

const silent = pino({ level: "silent" });

/** KAFKA_BROKERS, or the broker of scripts/kafka.sh (started when it is not running). */
export function benchBrokers(): string {
  if (process.env.KAFKA_BROKERS !== undefined) return process.env.KAFKA_BROKERS;
  const script = new URL("../scripts/kafka.sh", import.meta.url).pathname;
  return execFileSync("bash", [script, "start"], { encoding: "utf8" }).trim().split("\n").pop()!;
}

/**
 * Produces at least `events` events to `topic`, generated session by session (`next` returns a session's
 * events as JSON lines), through JSONL files of ~400,000 events in `dir`: a backlog larger than memory.
 */
export async function produceGenerated(
  brokers: string,
  topic: string,
  next: () => string[],
  events: number,
  dir: string,
): Promise<number> {
  const file = join(dir, "chunk.jsonl");
  let produced = 0;
  while (produced < events) {
    const fd = openSync(file, "w");
    let inChunk = 0;
    while (inChunk < 400_000 && produced + inChunk < events) {
      const lines = next();
      writeSync(fd, `${lines.join("\n")}\n`);
      inChunk += lines.length;
    }
    closeSync(fd);
    await produceFile(brokers, file, topic);
    produced += inChunk;
    process.stderr.write(`\rproduced ${produced.toLocaleString("en-US")} events`);
  }
  process.stderr.write("\n");
  rmSync(file, { force: true });
  return produced;
}

/** Produces a JSONL file of events to `topic` (keyed by uid, zstd batches), as `trajflow produce` does. */
export async function produceFile(brokers: string, input: string, topic: string): Promise<void> {
  await produce({
    inputs: [input],
    topic,
    connection: { brokers: [brokers], client_id: "bench", connection_timeout_ms: 10_000, client: "kafkajs" },
    compression: "zstd",
    logger: silent,
  });
}

export interface Run {
  seconds: number;
  /** Of `seconds`, the part after the last message was applied: the stop's last files. */
  drainSeconds: number;
  metrics: Metrics;
  /** Seconds since the consumer started, and messages behind the group's committed offsets then. */
  lag: Array<[number, number]>;
  peakRss: number;
}

/**
 * Consumes `topic` until `messages` are applied, then stops the runtime as a signal would (the stop
 * writes the last files and commits), as consumeTopicProcess does to its process.
 */
export async function consumeTopic(
  brokers: string,
  topic: string,
  out: string,
  messages: number,
  options: {
    sink?: Omit<FileSinkConfigInput, "path">;
    /** Source options beyond the connection, topic and group (e.g. decode_workers). */
    source?: Partial<KafkaSourceConfigInput>;
    /** Consumer group; default `<topic>-g`. */
    group?: string;
    /** Runs once the consumer started (e.g. a producer writing the topic meanwhile). */
    whileRunning?: () => Promise<void>;
  } = {},
): Promise<Run> {
  const { sink = {}, whileRunning } = options;
  const groupId = options.group ?? `${topic}-g`;
  const plan = consumePlan(
    {
      connection: { brokers: [brokers] },
      topic,
      group_id: groupId,
      session_timeout_ms: 10_000,
      ...options.source,
    },
    {
      assemble: { reward_grace_ms: 0 },
      files: { max_file_age_ms: 1_000, ...sink, path: out },
      deadLetters: { type: "kafka", topic: `${topic}.dead-letter` },
    },
  );
  let stopNow!: () => void;
  const runtime = new Runtime(plan, {
    logger: silent,
    baseDir: process.cwd(),
    stopSignal: new Promise<void>((r) => (stopNow = r)),
  });
  const metrics = runtime.metrics;
  let started!: () => void;
  const ready = new Promise<void>((r) => (started = r));
  const running = runtime.run({ ready: (yes) => yes && started() });
  running.catch(() => {});
  await Promise.race([ready, running]);
  const admin = new kafkajs.Kafka({ brokers: [brokers], logLevel: kafkajs.logLevel.NOTHING }).admin();
  await admin.connect();
  const lag: Array<[number, number]> = [];
  let peakRss = process.memoryUsage.rss();
  const t0 = performance.now();
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
    void Promise.all([admin.fetchTopicOffsets(topic), admin.fetchOffsets({ groupId, topics: [topic] })])
      .then(([high, committed]) => {
        const at = new Map(committed[0]?.partitions.map((p) => [p.partition, Number(p.offset)]));
        let behind = 0;
        // A group without a commit yet reads -1: everything is behind.
        for (const o of high) behind += Math.max(0, Number(o.high) - Math.max(0, at.get(o.partition) ?? 0));
        lag.push([(performance.now() - t0) / 1000, behind]);
      })
      .catch(() => {});
  }, 500);
  await whileRunning?.();
  let ended = false;
  void running.finally(() => (ended = true));
  // Polled every 5 ms, so only a cheap read: a counter of the metrics.
  while (!ended && metrics.total("events_read") < messages) await new Promise((r) => setTimeout(r, 5));
  const stopAt = Date.now();
  stopNow();
  await running;
  peakRss = Math.max(peakRss, process.memoryUsage.rss());
  clearInterval(sampler);
  await admin.disconnect();
  const t = metrics.timeline;
  if (t.first_record_at_ms === null || t.last_file_at_ms === null) throw new Error("trajflow wrote no file");
  const seconds = (t.last_file_at_ms - t.first_record_at_ms) / 1000;
  return { seconds, drainSeconds: (t.last_file_at_ms - stopAt) / 1000, metrics, lag, peakRss };
}

export interface ProcessRun {
  /** First record read to last file committed (steady state). */
  seconds: number;
  /** Process spawned to first file committed (fixed overhead, including the file age). */
  firstFileSeconds: number;
  /** Process spawned to last file committed: end to end. */
  lastFileSeconds: number;
  /** Every event applied (seen on /metrics, polled every 20 ms) to the last file: the final files' writing. */
  tailSeconds: number;
  /** Process spawned to first record read (startup: module loading, group join, first fetch). */
  firstRecordSeconds: number;
  peakRss: number;
  /** CPU time of the whole process (user + system, every thread), startup included. */
  cpuSeconds: number;
  /** The run's `--json` report. */
  report: {
    metrics: Record<string, number | Record<string, number>>;
    session_durable_seconds?: { p50: number; p99: number };
    /** Records read. */
    events: number;
    /** CPU and memory by thread (src/core/thread-usage.ts). */
    threads: ThreadReport[];
    /** The peak RSS by owner (src/core/held-memory.ts). */
    peak_rss_account: { rss_bytes: number; owners: Array<{ owner: string; bytes: number }> };
    /** The data each part held (src/core/held-memory.ts). */
    held_memory: Array<{ part: string; peak_bytes: number; at_peak_rss_bytes: number }>;
  };
}

export type ThreadReport = { thread: string } & ThreadUsage;

type JsonReport = ProcessRun["report"] & {
  timeline: Timeline;
  peak_rss_bytes: number;
  cpu_seconds: { user: number; system: number };
};

/** A process's figures from its `--json` report; times are counted from `spawned` (epoch ms). */
function processRun(report: JsonReport, spawned: number, stopAt: number): ProcessRun {
  const t = report.timeline;
  if (t.first_record_at_ms === null || t.first_file_at_ms === null || t.last_file_at_ms === null)
    throw new Error("trajflow wrote no file");
  return {
    seconds: (t.last_file_at_ms - t.first_record_at_ms) / 1000,
    firstFileSeconds: (t.first_file_at_ms - spawned) / 1000,
    lastFileSeconds: (t.last_file_at_ms - spawned) / 1000,
    firstRecordSeconds: (t.first_record_at_ms - spawned) / 1000,
    tailSeconds: (t.last_file_at_ms - stopAt) / 1000,
    peakRss: report.peak_rss_bytes,
    cpuSeconds: report.cpu_seconds.user + report.cpu_seconds.system,
    report,
  };
}

/**
 * Runs `trajflow replay` of a JSONL file as its own process, as users run it, to its end; `tailSeconds`
 * is measured from the process's exit.
 */
export async function replayProcess(input: string, out: string, args: string[] = []): Promise<ProcessRun> {
  const root = new URL("..", import.meta.url).pathname;
  const spawned = Date.now();
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [
      "--max-semi-space-size=4",
      join(root, "bin/trajflow.js"),
      "replay",
      input,
      "--out",
      out,
      "--json",
      ...args,
    ],
    { maxBuffer: 1 << 24 },
  );
  return processRun(JSON.parse(stdout) as JsonReport, spawned, Date.now());
}

/**
 * Runs `trajflow consume` as its own process (the way users run it: its own heap, its own startup) until
 * `messages` are consumed, then stops it with SIGTERM (a graceful stop writes the open files and commits)
 * and reads its JSON report. Progress is read from its /metrics endpoint every 20 ms.
 */
export async function consumeTopicProcess(
  brokers: string,
  topic: string,
  out: string,
  messages: number,
  args: string[] = [],
  /** Node's own flags: by default those bin/trajflow.js starts Node with (docs/operations.md). */
  nodeFlags: string[] = ["--max-semi-space-size=4"],
  watch: {
    /** Stops once this holds of the events read, instead of at `messages`. */
    until?: (events: number) => boolean;
    /** Called about every second with the events read and the process's pid (bench:soak samples RSS). */
    everySecond?: (events: number, pid: number) => void;
    /** consume's own defaults, not the benchmarks' 1 s file age and zero reward grace. */
    defaults?: boolean;
  } = {},
): Promise<ProcessRun> {
  const root = new URL("..", import.meta.url).pathname;
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const spawned = Date.now();
  const child = spawn(
    process.execPath,
    [
      ...nodeFlags,
      join(root, "src/cli/main.ts"),
      "consume",
      ...["--brokers", brokers, "--topic", topic, "--group", `${topic}-process-${Date.now()}`, "--out", out],
      ...(watch.defaults === true ? [] : ["--file-age-ms", "1000", "--reward-grace-ms", "0"]),
      "--status-interval-ms",
      "0",
      ...["--metrics-address", `127.0.0.1:${port}`, "--log-level", "warn", "--json", ...args],
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let stdout = "";
  child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  const consumed = async (): Promise<number> => {
    try {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const line = /^trajflow_events_read_total(?:\{[^}]*\})? (\d+)/m.exec(text);
      return line === null ? 0 : Number(line[1]);
    } catch {
      return 0; // not listening yet
    }
  };
  let running = true;
  void exited.then(() => (running = false));
  const done = watch.until ?? ((events: number) => events >= messages);
  let lastSecond = Date.now();
  for (let events = await consumed(); running && !done(events); events = await consumed()) {
    await new Promise((r) => setTimeout(r, 20));
    if (watch.everySecond !== undefined && Date.now() - lastSecond >= 1_000) {
      lastSecond += 1_000;
      watch.everySecond(events, child.pid!);
    }
  }
  const stopAt = Date.now();
  child.kill("SIGTERM");
  const code = await exited;
  if (code !== 0) throw new Error(`trajflow consume exited with ${code}`);
  return processRun(JSON.parse(stdout) as JsonReport, spawned, stopAt);
}

const PYTHON = new URL("../.cache/python/bin/python", import.meta.url).pathname;
/** The Python peers (bench/peers/): confluent-kafka + orjson + numpy, and the idiomatic one with lists. */
export const FAST_PEER = new URL("peers/fast_pipeline.py", import.meta.url).pathname;
export const LINEAR_PEER = new URL("peers/linear_merger.py", import.meta.url).pathname;

export interface PeerRun {
  events: number;
  rows: number;
  seconds: number;
  first_file_at: number;
  first_record_at: number;
  last_file_at: number;
  peak_rss: number;
  cpu_seconds: number;
  latency_p50: number | null;
  latency_p99: number | null;
}

/** Runs a Python peer to the end; its fixed overhead counts from the spawn, as trajflow's does. */
export async function runPeer(script: string, brokers: string, topic: string, out: string, n: number) {
  const spawned = Date.now();
  const { stdout } = await promisify(execFile)(PYTHON, [script, brokers, topic, out, String(n)], {
    maxBuffer: 1 << 20,
  });
  const run = JSON.parse(stdout) as PeerRun;
  return {
    ...run,
    firstFileSeconds: run.first_file_at - spawned / 1000,
    firstRecordSeconds: run.first_record_at - spawned / 1000,
    lastFileSeconds: run.last_file_at - spawned / 1000,
  };
}

/** The header of the peak-RSS-by-owner table (ownersRow's columns). */
export const OWNERS_HEADER =
  "| workload | run | peak RSS | main heap | workers' heaps | main off-heap | workers' off-heap | fixed | allocator | held data at the peak |\n" +
  "|---|---|---|---|---|---|---|---|---|---|";

/**
 * A trajflow run's peak RSS by owner, in MiB (the run report's `peak_rss_account`: each thread's heap and
 * off-heap memory, fixed memory, the allocator's), with the pipeline's own data at that moment.
 */
export function ownersRow(workload: string, name: string, run: ProcessRun): string {
  const MiB = (bytes: number) => Math.round(bytes / 2 ** 20);
  const account = run.report.peak_rss_account.owners;
  const sum = (match: (owner: string) => boolean) =>
    MiB(account.filter((o) => match(o.owner)).reduce((a, o) => a + o.bytes, 0));
  const held = run.report.held_memory
    .filter((p) => p.at_peak_rss_bytes >= 2 ** 19)
    .map((p) => `${p.part} ${MiB(p.at_peak_rss_bytes)}`)
    .join(", ");
  return (
    `| ${workload} | ${name} | ${MiB(run.peakRss)} | ${sum((o) => o === "main heap")} | ` +
    `${sum((o) => o.endsWith(" heap") && o !== "main heap")} | ${sum((o) => o === "main off-heap")} | ` +
    `${sum((o) => o.endsWith(" off-heap") && o !== "main off-heap")} | ${sum((o) => o.startsWith("fixed"))} | ` +
    `${sum((o) => o.startsWith("allocator"))} | ${held || "none"} |`
  );
}
