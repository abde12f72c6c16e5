/**
 * `npm run bench:peers`: trajflow against what users would otherwise run, on the same workloads, in the
 * same run, on this machine (docs in BENCHMARKS.md). For each workload the events are produced to a
 * fresh topic (zstd), then consumed by, one after the other, each in its own process:
 * - `trajflow consume` (the CLI as users run it), stopped with SIGTERM once it consumed everything;
 * - the fast Python peer (bench/peers/fast_pipeline.py: confluent-kafka + orjson + numpy + pyarrow
 *   columns built from concatenated buffers, Parquet zstd without dictionaries, a writer thread);
 * - the linear Python peer (bench/peers/linear_merger.py: confluent-kafka + json + lists, the idiomatic
 *   version).
 * Beside them, `trajflow replay` of the same events from the JSONL file (no Kafka at all). Each reports its
 * steady state (first message to last file written), its fixed overhead (process spawn to first file,
 * which includes the 1 s file age every pipeline here is given), end to end (spawn to last file), its CPU
 * seconds and its peak RSS; trajflow's runs also by thread (main, decode workers, encoders, V8's helpers),
 * the per-part accounting issue 24 asks for. Two
 * ceilings: JSON.parse + typed arrays of the same messages in one thread (decode only), and reading the
 * topic with no processing (kafkajs). Correctness side by side: the token columns of all three for linear
 * workloads; rows and trained tokens for the branchy one. The tables are printed and written into
 * BENCHMARKS.md between its bench:peers markers (the results and targets; the per-part tables are printed).
 *
 * BENCH_SCALE multiplies the workloads (default 1; BENCHMARKS.md's tables use 3). BENCH_ONLY (a regular
 * expression) runs only the workloads whose names match, and then leaves BENCHMARKS.md alone. BENCH_TRAJFLOW_ARGS
 * (optional, space-separated `trajflow consume` flags, e.g. "--decode-workers 3 --encode-workers 2")
 * adds a second trajflow row run with those flags, for hosts where the defaults leave cores idle.
 * Where librdkafka's addon is built (scripts/librdkafka.sh), every workload is also consumed with
 * `--kafka-client librdkafka` (its token columns checked against kafkajs's) and read raw through it: the
 * two clients side by side on the same topic.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import kafkajs from "kafkajs";
import { mulberry32 } from "../test/helpers/prng.ts";
import { registerKafkaCodecs } from "../src/kafka/codecs.ts";
import { fixKafkajsRequestQueue } from "../src/kafka/request-queue-fix.ts";
import { bestOf, gc, writeBenchmarksSection } from "./harness.ts";
import { rdkafkaAvailable, readTopicRawRdkafka } from "./rdkafka-raw.ts";
import {
  benchBrokers,
  consumeTopicProcess,
  FAST_PEER,
  LINEAR_PEER,
  OWNERS_HEADER,
  ownersRow,
  produceFile,
  replayProcess,
  runPeer as runPeerOn,
  type PeerRun,
  type ProcessRun,
} from "./kafka-harness.ts";
import { branchySession, linearSession } from "./workloads.ts";

const root = new URL("..", import.meta.url).pathname;
const PYTHON = join(root, ".cache/python/bin/python");
const brokers = benchBrokers();

interface Workload {
  name: string;
  linear: boolean;
  events: () => Array<Record<string, unknown>>;
  sessions: number;
}

const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const ONLY = process.env.BENCH_ONLY === undefined ? null : new RegExp(process.env.BENCH_ONLY);
const TUNED = (process.env.BENCH_TRAJFLOW_ARGS ?? "").split(" ").filter((a) => a !== "");
const RDKAFKA = rdkafkaAvailable();
const LONG = { initialPrompt: 2_048, turns: 48, outputTokens: 512, observationTokens: 128 }; // to ~32.7k

function workloads(): Workload[] {
  const many = (n: number, f: (s: number) => Array<Record<string, unknown>>) => () => {
    const out: Array<Record<string, unknown>> = [];
    for (let s = 0; s < n; s++) out.push(...f(s));
    return out;
  };
  const shortN = Math.round(1_500 * SCALE);
  const longN = Math.round(24 * SCALE);
  const branchyN = Math.round(400 * SCALE);
  const groups = Math.round(120 * SCALE);
  const random = mulberry32(5);
  const turns = Array.from({ length: shortN }, () => 2 + Math.floor(random() * 3));
  const short = (s: number, packed: boolean) =>
    linearSession(
      { initialPrompt: 1_024, turns: turns[s]!, outputTokens: 128, observationTokens: 64 },
      "full",
      { uid: `short-${s % 300}`, sessionId: `s${s}`, seed: s + 1, packed },
    );
  return [
    {
      name: "short sessions (2-4 turns, 1k prompts)",
      linear: true,
      sessions: shortN,
      events: many(shortN, (s) => short(s, false)),
    },
    {
      // The same sessions with token arrays sent packed (docs/events.md): no number parsing on either side.
      name: "short sessions, packed arrays (base64)",
      linear: true,
      sessions: shortN,
      events: many(shortN, (s) => short(s, true)),
    },
    {
      name: "long sessions (48 turns to 32k), full prompts",
      linear: true,
      sessions: longN,
      events: many(longN, (s) =>
        linearSession(LONG, "full", { uid: `long-${s}`, sessionId: "main", seed: s + 1 }),
      ),
    },
    {
      name: "long sessions (48 turns to 32k), delta form",
      linear: true,
      sessions: longN,
      events: many(longN, (s) =>
        linearSession(LONG, "delta", { uid: `long-${s}`, sessionId: "main", seed: s + 1 }),
      ),
    },
    {
      name: "branchy sessions (sub-agent, retry, branches)",
      linear: false,
      sessions: branchyN,
      events: many(branchyN, (s) =>
        branchySession({ uid: `branchy-${s % 100}`, sessionId: `b${s}`, seed: s + 1 }),
      ),
    },
    {
      name: "GRPO groups of 8 sessions per uid",
      linear: true,
      sessions: groups * 8,
      events: many(groups * 8, (s) =>
        linearSession({ initialPrompt: 512, turns: 3, outputTokens: 256, observationTokens: 64 }, "full", {
          uid: `grpo-${Math.floor(s / 8)}`,
          sessionId: `r${s % 8}`,
          seed: s + 1,
        }),
      ),
    },
  ];
}

/** Reads the topic with no processing: seconds from the first batch to the last, and the CPU seconds spent. */
async function readTopicRaw(
  topic: string,
  expected: number,
): Promise<{ seconds: number; cpuSeconds: number }> {
  registerKafkaCodecs();
  fixKafkajsRequestQueue();
  const kafka = new kafkajs.Kafka({ brokers: [brokers], logLevel: kafkajs.logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `${topic}-raw`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let n = 0;
  let first = 0;
  let cpuAtFirst = process.cpuUsage();
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    eachBatch: async ({ batch }) => {
      if (first === 0) {
        first = performance.now();
        cpuAtFirst = process.cpuUsage();
      }
      n += batch.messages.length;
      if (n >= expected) done();
    },
  });
  await finished;
  const seconds = (performance.now() - first) / 1000;
  const cpu = process.cpuUsage(cpuAtFirst);
  await consumer.disconnect();
  return { seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

/** The decode-only ceiling: JSON.parse and typed arrays of every message, one thread, nothing else. */
function decodeCeiling(values: Buffer[]): number {
  const ints = (a: unknown) => (Array.isArray(a) ? Int32Array.from(a as number[]) : null);
  const floats = (a: unknown) => (Array.isArray(a) ? Float32Array.from(a as number[]) : null);
  return bestOf(2, () => {
    let sink = 0;
    for (const v of values) {
      const e = JSON.parse(v.toString("utf8")) as Record<string, unknown>;
      sink += ints(e.prompt_ids)?.length ?? 0;
      sink += ints(e.prompt_delta_ids)?.length ?? 0;
      sink += ints(e.output_ids)?.length ?? 0;
      sink += floats(e.logprobs)?.length ?? 0;
    }
    if (sink < 0) throw new Error("unreachable");
  });
}

const runPeer = (script: string, topic: string, out: string, n: number) =>
  runPeerOn(script, brokers, topic, out, n);

function readTokenColumns(out: string): Array<Record<string, unknown>> {
  return JSON.parse(
    execFileSync(
      PYTHON,
      [
        "-c",
        "import sys,json,pyarrow.dataset as ds; t=ds.dataset(sys.argv[1], exclude_invalid_files=True).to_table(columns=['key','prompt_ids','response_ids','response_mask']); print(json.dumps(t.to_pylist()))",
        out,
      ],
      { maxBuffer: 1 << 30, encoding: "utf8" },
    ),
  ) as Array<Record<string, unknown>>;
}

const tokenKey = (r: Record<string, unknown>) =>
  JSON.stringify([
    r.key,
    [...(r.prompt_ids as Iterable<number>)],
    [...(r.response_ids as Iterable<number>)],
    [...(r.response_mask as Iterable<number>)],
  ]);

const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-peers-"));
const fmt = (n: number, digits = 2) => (n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(digits));
const table: string[] = [];
const correctness: string[] = [];
const wire: string[] = [];
const bounds: string[] = [];
const parts: string[] = [];
const owners: string[] = [];
const targets: string[] = [];

const MiB = (bytes: number) => `${Math.round(bytes / 2 ** 20)}`;

/**
 * Where one trajflow run's CPU and memory went, by thread (the run's report, src/core/thread-usage.ts):
 * the ingest thread, the decode workers, the encoders, and the rest of the process's CPU (V8's garbage
 * collector and compiler threads, libuv's pool); heaps and off-heap memory are each thread's peak.
 */
function partsRow(workload: string, name: string, run: ProcessRun, fast: PeerRun): string {
  const threads = run.report.threads;
  const sum = (prefix: string, field: "cpu_seconds" | "heap_peak_bytes" | "external_peak_bytes") =>
    threads.filter((t) => t.thread.startsWith(prefix)).reduce((a, t) => a + t[field], 0);
  const listed = threads.reduce((a, t) => a + t.cpu_seconds, 0);
  const cpu = (x: number) => x.toFixed(2);
  return (
    `| ${workload} | ${name} | ${cpu(sum("main", "cpu_seconds"))} | ${cpu(sum("decode", "cpu_seconds"))} | ` +
    `${cpu(sum("encoder", "cpu_seconds"))} | ${cpu(Math.max(0, run.cpuSeconds - listed))} | ` +
    `${cpu(run.cpuSeconds)} | ${cpu(fast.cpu_seconds)} | ` +
    `${MiB(sum("main", "heap_peak_bytes"))} | ${MiB(sum("decode", "heap_peak_bytes"))} | ` +
    `${MiB(sum("encoder", "heap_peak_bytes"))} | ${MiB(threads.reduce((a, t) => a + t.external_peak_bytes, 0))} | ` +
    `${MiB(run.peakRss)} | ${MiB(fast.peak_rss)} |`
  );
}
try {
  console.log(`brokers ${brokers}; scale ${SCALE}`);
  for (const [w, workload] of workloads().entries()) {
    if (ONLY !== null && !ONLY.test(workload.name)) continue;
    let lines = workload.events().map((e) => JSON.stringify(e));
    const input = join(dir, `w${w}.jsonl`);
    writeFileSync(input, `${lines.join("\n")}\n`);
    const n = lines.length;
    const wireBytes = lines.reduce((sum, l) => sum + Buffer.byteLength(l), 0);
    let values = lines.map((l) => Buffer.from(l));
    lines = [];
    const ceiling = decodeCeiling(values);
    values = [];
    gc();
    const topic = `peers-${Date.now()}-${w}`;
    await produceFile(brokers, input, topic);
    const ours = await consumeTopicProcess(brokers, topic, join(dir, `w${w}-trajflow`), n);
    const tuned =
      TUNED.length === 0
        ? null
        : await consumeTopicProcess(brokers, topic, join(dir, `w${w}-tuned`), n, TUNED);
    const rdkafka = !RDKAFKA
      ? null
      : await consumeTopicProcess(brokers, topic, join(dir, `w${w}-rdkafka`), n, [
          "--kafka-client",
          "librdkafka",
        ]);
    const fast = await runPeer(FAST_PEER, topic, join(dir, `w${w}-fast`), n);
    const linear = await runPeer(LINEAR_PEER, topic, join(dir, `w${w}-linear`), n);
    const raw = await readTopicRaw(topic, n);
    const rawRdkafka = RDKAFKA ? await readTopicRawRdkafka(brokers, topic, n) : null;
    const m = ours.report.metrics;
    const tokens = m.tokens_emitted as number;

    const replayed = await replayProcess(input, join(dir, `w${w}-replay`));

    const ms = (s: number | null | undefined) => (s == null ? "" : `${Math.round(s * 1000)} ms`);
    interface Measured {
      firstFileSeconds: number;
      lastFileSeconds: number;
      peakRss: number;
      cpuSeconds: number;
      p50: number | null;
      p99: number | null;
    }
    const row = (name: string, seconds: number, run?: Measured) =>
      `| ${workload.name} | ${name} | ${fmt(n / seconds)} | ${fmt(tokens / seconds / 1e6)} M | ` +
      `${run === undefined ? "" : `${run.firstFileSeconds.toFixed(2)} s`} | ` +
      `${run === undefined ? "" : `${run.lastFileSeconds.toFixed(2)} s`} | ` +
      `${run === undefined ? "" : `${Math.round(run.peakRss / 2 ** 20)} MiB`} | ` +
      `${run === undefined ? "" : run.cpuSeconds.toFixed(1)} | ` +
      `${ms(run?.p50)} | ${ms(run?.p99)} | ${(fast.seconds / seconds).toFixed(2)}x | ` +
      `${run === undefined ? "" : `${(fast.lastFileSeconds / run.lastFileSeconds).toFixed(2)}x`} | ` +
      `${(linear.seconds / seconds).toFixed(2)}x |`;
    const measuredOf = (run: ProcessRun): Measured => ({
      firstFileSeconds: run.firstFileSeconds,
      lastFileSeconds: run.lastFileSeconds,
      peakRss: run.peakRss,
      cpuSeconds: run.cpuSeconds,
      p50: run.report.session_durable_seconds?.p50 ?? null,
      p99: run.report.session_durable_seconds?.p99 ?? null,
    });
    for (const [name, run] of [
      ["trajflow consume", ours],
      [`trajflow consume ${TUNED.join(" ")}`, tuned],
      ["trajflow consume --kafka-client librdkafka", rdkafka],
      ["trajflow replay (the same events from a JSONL file)", replayed],
    ] as const)
      if (run !== null) table.push(row(name, run.seconds, measuredOf(run)));
    for (const [name, peer] of [
      ["fast Python peer (confluent-kafka + orjson + numpy)", fast],
      ["linear Python peer (confluent-kafka + lists)", linear],
    ] as const)
      table.push(
        row(name, peer.seconds, {
          firstFileSeconds: peer.firstFileSeconds,
          lastFileSeconds: peer.lastFileSeconds,
          peakRss: peer.peak_rss,
          cpuSeconds: peer.cpu_seconds,
          p50: peer.latency_p50,
          p99: peer.latency_p99,
        }),
      );
    table.push(row("ceiling: decode only (JSON.parse + typed arrays, one thread)", ceiling));
    table.push(row("ceiling: read the topic, no processing (kafkajs)", raw.seconds));
    if (rawRdkafka !== null)
      table.push(row("ceiling: read the topic, no processing (librdkafka)", rawRdkafka.seconds));
    for (const [name, run] of [
      ["consume", ours],
      ["consume, librdkafka", rdkafka],
      ["replay", replayed],
    ] as const)
      if (run !== null) parts.push(partsRow(workload.name, name, run, fast));
    owners.push(ownersRow(workload.name, "consume", ours));
    if (rdkafka !== null) owners.push(ownersRow(workload.name, "consume, librdkafka", rdkafka));
    targets.push(
      `| ${workload.name} | ${(ours.cpuSeconds / fast.cpu_seconds).toFixed(2)}x | ` +
        `${(replayed.cpuSeconds / fast.cpu_seconds).toFixed(2)}x | ` +
        `${(ours.peakRss / fast.peak_rss).toFixed(2)}x | ${(replayed.peakRss / fast.peak_rss).toFixed(2)}x | ` +
        `${(fast.lastFileSeconds / ours.lastFileSeconds).toFixed(2)}x | ` +
        `${ours.firstRecordSeconds.toFixed(2)} s | ${fast.firstRecordSeconds.toFixed(2)} s |`,
    );
    wire.push(`| ${workload.name} | ${fmt(wireBytes / workload.sessions / 1024, 1)} KiB |`);
    // What this host allows at best: every pipeline must at least read the topic and decode every event.
    // That CPU work (kafkajs's reading, the decode ceiling), split perfectly across the host's cores with
    // nothing else to do (no assembly, no encoding, no broker), still takes `floor` seconds; a ratio to
    // the fast peer above fast.seconds / floor is out of reach here, and everything else a pipeline does
    // has to fit in what is left below the target.
    const floor = Math.max(raw.cpuSeconds, ceiling, (raw.cpuSeconds + ceiling) / cpus().length);
    bounds.push(
      `| ${workload.name} | ${fast.seconds.toFixed(2)} s | ${(fast.seconds / 1.5).toFixed(2)} s | ` +
        `${raw.cpuSeconds.toFixed(2)} s | ${ceiling.toFixed(2)} s | ${floor.toFixed(2)} s | ` +
        `${(fast.seconds / floor).toFixed(2)}x | ${(fast.seconds / ours.seconds).toFixed(2)}x | ` +
        `${(ours.seconds / ceiling).toFixed(2)}x |`,
    );
    const extra = (tuned === null ? 0 : 1) + (rdkafka === null ? 0 : 2);
    console.log(table.slice(-6 - extra).join("\n"));
    console.log(parts.slice(rdkafka === null ? -2 : -3).join("\n"));
    if (rdkafka !== null && rawRdkafka !== null)
      console.log(
        `  clients: kafkajs ${ours.seconds.toFixed(2)} s, ${ours.cpuSeconds.toFixed(1)} CPU s, ` +
          `${MiB(ours.peakRss)} MiB peak RSS; librdkafka ${rdkafka.seconds.toFixed(2)} s, ` +
          `${rdkafka.cpuSeconds.toFixed(1)} CPU s, ${MiB(rdkafka.peakRss)} MiB; raw read kafkajs ` +
          `${raw.seconds.toFixed(2)} s / ${raw.cpuSeconds.toFixed(2)} CPU s, librdkafka ` +
          `${rawRdkafka.seconds.toFixed(2)} s / ${rawRdkafka.cpuSeconds.toFixed(2)} CPU s`,
      );
    console.log(
      `  trajflow: first record ${ours.firstRecordSeconds.toFixed(2)} s after the spawn; last file ` +
        `${ours.tailSeconds.toFixed(2)} s after every event was applied; decode ceiling ` +
        `${(ours.seconds / ceiling).toFixed(2)}x faster than trajflow`,
    );

    const ourRows = readTokenColumns(join(dir, `w${w}-trajflow`));
    {
      const a = new Set(ourRows.map(tokenKey));
      const replayedRows = readTokenColumns(join(dir, `w${w}-replay`));
      if (replayedRows.length !== ourRows.length || !replayedRows.every((r) => a.has(tokenKey(r))))
        throw new Error("trajflow replay wrote other token columns than trajflow consume");
    }
    for (const [out, what, run] of [
      ["tuned", TUNED.join(" "), tuned],
      ["rdkafka", "--kafka-client librdkafka", rdkafka],
    ] as const) {
      if (run === null) continue;
      const a = new Set(ourRows.map(tokenKey));
      const theirs = readTokenColumns(join(dir, `w${w}-${out}`));
      if (theirs.length !== ourRows.length || !theirs.every((r) => a.has(tokenKey(r))))
        throw new Error(`trajflow with ${what} wrote other token columns than with the defaults`);
    }
    const trained = (rows: Array<Record<string, unknown>>) =>
      rows.reduce((s, r) => s + [...(r.response_mask as Iterable<number>)].reduce((a, b) => a + b, 0), 0);
    const cells = [fast, linear].map((_, i) => {
      const theirs = readTokenColumns(join(dir, `w${w}-${i === 0 ? "fast" : "linear"}`));
      if (!workload.linear) return `${theirs.length} rows, ${trained(theirs)} trained tokens`;
      const a = new Set(ourRows.map(tokenKey));
      const same = theirs.length === ourRows.length && theirs.every((r) => a.has(tokenKey(r)));
      return same ? "identical token columns" : "DIFFERENT";
    });
    correctness.push(
      `| ${workload.name} | ${ourRows.length} rows, ${trained(ourRows)} trained tokens | ${cells.join(" | ")} |`,
    );
    console.log(correctness[correctness.length - 1]);
    for (const out of ["trajflow", "tuned", "rdkafka", "replay", "fast", "linear"])
      rmSync(join(dir, `w${w}-${out}`), { recursive: true, force: true });
  }
  // The delta form's saving with each array encoding, on one long session.
  const bytesOf = (form: "full" | "delta", packed: boolean) =>
    linearSession(LONG, form, { uid: "long-0", sessionId: "main", seed: 1, packed }).reduce(
      (sum, e) => sum + Buffer.byteLength(JSON.stringify(e)),
      0,
    );
  const savings = [false, true].map((packed) => {
    const full = bytesOf("full", packed);
    const delta = bytesOf("delta", packed);
    return (
      `- long session, ${packed ? "packed" : "JSON"} arrays: full-prompt form ${fmt(full / 1024, 1)} KiB, ` +
      `delta form ${fmt(delta / 1024, 1)} KiB (${(full / delta).toFixed(1)}x fewer bytes)`
    );
  });
  const cpu = cpus();
  const summary = [
    `Generated by \`BENCH_SCALE=${SCALE} npm run bench:peers\` on ${new Date().toISOString().slice(0, 10)}, ` +
      `${cpu.length} x ${cpu[0]?.model.trim() ?? "unknown CPU"}, Node ${process.version}, brokers ${brokers}.`,
    "",
    "| workload | pipeline | events/s | tokens/s | start → first file | start → last file | peak RSS | CPU s | session end → file p50 | p99 | vs fast peer | end to end vs fast peer | vs linear peer |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...table,
    "",
    "The issue's targets, trajflow / fast peer (CPU and memory: at most 1x, replay's CPU at most 0.5x, peak RSS at most 1.2x; end to end, start → last file: fast peer / trajflow, at least 1.2x):",
    "",
    "| workload | consume CPU | replay CPU | consume peak RSS | replay peak RSS | consume end to end | trajflow: start → first record | fast peer: start → first record |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...targets,
  ];
  // BENCHMARKS.md keeps the results and the targets (today's figures, a file a reader can take in); the
  // per-part, bounds, wire and correctness tables are printed here for whoever digs in.
  const details = [
    "Where trajflow's CPU seconds and memory (MiB) went, by thread (the run's own report): main = the ingest " +
      "thread (Kafka client, assembly, dead letters, the hand-over to the encoders); helpers = the process's " +
      "CPU minus the threads listed (V8's garbage-collector and compiler threads, libuv's pool); heaps and " +
      "off-heap memory (Buffers, typed arrays, WebAssembly) are each thread's peak, so they need not add up to " +
      "the peak RSS, which also holds Node's own code and each worker's isolate.",
    "",
    "| workload | run | main CPU | decode CPU | encoder CPU | helpers CPU | total CPU | fast peer CPU | main heap | decode heaps | encoder heaps | off-heap | peak RSS | fast peer RSS |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...parts,
    "",
    "The peak RSS of each `trajflow consume` by owner (MiB; the run report's `peak_rss_account`: the owners add " +
      "up to the peak), and what of it was the pipeline's own data:",
    "",
    OWNERS_HEADER,
    ...owners,
    "",
    `Bounds on this host (${cpu.length} cores): read = CPU seconds of the kafkajs ceiling (fetch, decompress), ` +
      "decode = the decode ceiling's seconds, floor = max(read, decode, (read + decode) / cores): the least a " +
      "pipeline that reads and decodes every event could take here with nothing else to do.",
    "",
    "| workload | fast peer | 1.5x target | read | decode | floor | best possible vs fast peer | trajflow vs fast peer | trajflow / decode ceiling |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...bounds,
    "",
    "| workload | bytes on the wire per session (JSON arrays, as produced) |",
    "| --- | --- |",
    ...wire,
    "",
    ...savings,
    "",
    "| workload | trajflow | fast peer | linear peer |",
    "| --- | --- | --- | --- |",
    ...correctness,
  ];
  const report = summary.join("\n");
  console.log(`\n${report}\n\n${details.join("\n")}`);
  if (ONLY !== null) console.log("\n(BENCH_ONLY: BENCHMARKS.md left as it is)");
  else writeBenchmarksSection("peers", report);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
