/**
 * `npm run bench:peers`: trajflow against what users would otherwise run, on the same workloads, in the
 * same run, on this machine (docs in BENCHMARKS.md). For each workload the events are produced to a
 * fresh topic (zstd), then consumed by:
 * - trajflow (parquet-wasm, the default) and trajflow with the parquetjs-lite engine, in process, timed
 *   from the first message to the last file committed;
 * - the Python peer (bench/peers/linear_merger.py: confluent-kafka + a linear merger + pyarrow Parquet
 *   zstd), timed the same way by itself;
 * - raw ceilings: reading the topic with no processing (kafkajs), and writing the same rows as Arrow IPC
 *   with no assembly.
 * Correctness side by side: the token columns of both for linear workloads; rows and trained tokens for
 * the branchy one. The tables are printed and written into BENCHMARKS.md between its bench:peers markers.
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { tableToIPC } from "apache-arrow";
import kafkajs from "kafkajs";
import { mulberry32 } from "../src/core/prng.ts";
import { rowsToTable } from "../src/schemas/trajectory-arrow.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { registerKafkaCodecs } from "../src/sources/kafka/codecs.ts";
import { assemble } from "../test/helpers/sessions.ts";
import { gc } from "./harness.ts";
import { benchBrokers, consumeTopic, produceFile } from "./kafka-harness.ts";
import { branchySession, linearSession } from "./workloads.ts";

const root = new URL("..", import.meta.url).pathname;
const PYTHON = join(root, ".cache/python/bin/python");
const PEER = join(root, "bench/peers/linear_merger.py");
const brokers = benchBrokers();

interface Workload {
  name: string;
  linear: boolean;
  events: () => Array<Record<string, unknown>>;
  sessions: number;
}

const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const BEGIN = "<!-- bench:peers begin -->";
const END = "<!-- bench:peers end -->";
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
  return [
    {
      name: "short sessions (2-4 turns, 1k prompts)",
      linear: true,
      sessions: shortN,
      events: many(shortN, (s) =>
        linearSession(
          { initialPrompt: 1_024, turns: turns[s]!, outputTokens: 128, observationTokens: 64 },
          "full",
          {
            uid: `short-${s % 300}`,
            sessionId: `s${s}`,
            seed: s + 1,
          },
        ),
      ),
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

async function readTopicRaw(topic: string, expected: number): Promise<number> {
  registerKafkaCodecs();
  const kafka = new kafkajs.Kafka({ brokers: [brokers], logLevel: kafkajs.logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `${topic}-raw`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let n = 0;
  let first = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    eachBatch: async ({ batch }) => {
      if (first === 0) first = performance.now();
      n += batch.messages.length;
      if (n >= expected) done();
    },
  });
  await finished;
  const seconds = (performance.now() - first) / 1000;
  await consumer.disconnect();
  return seconds;
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
try {
  console.log(`brokers ${brokers}; scale ${SCALE}`);
  for (const [w, workload] of workloads().entries()) {
    let lines = workload.events().map((e) => JSON.stringify(e));
    const input = join(dir, `w${w}.jsonl`);
    writeFileSync(input, `${lines.join("\n")}\n`);
    const n = lines.length;
    const wireBytes = lines.reduce((sum, l) => sum + Buffer.byteLength(l), 0);
    // The Arrow IPC ceiling first, then everything the bench holds is dropped, so trajflow (in this
    // process) does not pay for the bench's heap in garbage collection.
    let expected = assemble(lines).rows;
    lines = [];
    const tokens = expected.reduce((sum, r) => sum + r.prompt_ids.length + r.response_ids.length, 0);
    const ipcStarted = performance.now();
    writeFileSync(join(dir, `w${w}.arrow`), tableToIPC(rowsToTable(expected), "file"));
    const ipcSeconds = (performance.now() - ipcStarted) / 1000;
    expected = [];
    gc();
    const topic = `peers-${Date.now()}-${w}`;
    await produceFile(brokers, input, topic);
    gc();
    const wasm = await consumeTopic(brokers, topic, join(dir, `w${w}-wasm`), n);
    gc();
    const pjs = await consumeTopic(brokers, topic, join(dir, `w${w}-pjs`), n, {
      sink: { engine: "parquetjs-lite" },
      group: `${topic}-parquetjs`,
    });
    const { stdout } = await promisify(execFile)(
      PYTHON,
      [PEER, brokers, topic, join(dir, `w${w}-py`), String(n)],
      {
        maxBuffer: 1 << 20,
      },
    );
    const py = JSON.parse(stdout) as {
      events: number;
      rows: number;
      seconds: number;
      peak_rss: number;
      latency_p50: number | null;
      latency_p99: number | null;
    };
    const raw = await readTopicRaw(topic, n);

    const ms = (s: number | null) => (s === null ? "" : `${Math.round(s * 1000)} ms`);
    const latencyOf = (run: typeof wasm) =>
      [
        run.metrics.quantile("session_durable_seconds", 0.5),
        run.metrics.quantile("session_durable_seconds", 0.99),
      ] as const;
    const row = (
      name: string,
      seconds: number,
      peak: number | null,
      [p50, p99]: readonly [number | null, number | null] = [null, null],
    ) =>
      `| ${workload.name} | ${name} | ${fmt(n / seconds)} | ${fmt(tokens / seconds / 1e6)} M | ` +
      `${peak === null ? "" : `${Math.round(peak / 2 ** 20)} MiB`} | ${ms(p50)} | ${ms(p99)} | ` +
      `${(py.seconds / seconds).toFixed(2)}x |`;
    table.push(row("trajflow (parquet-wasm)", wasm.seconds, wasm.peakRss, latencyOf(wasm)));
    table.push(row("trajflow (parquetjs-lite)", pjs.seconds, pjs.peakRss, latencyOf(pjs)));
    table.push(
      row("Python peer (confluent-kafka + pyarrow)", py.seconds, py.peak_rss, [
        py.latency_p50,
        py.latency_p99,
      ]),
    );
    table.push(row("ceiling: read the topic, no processing", raw, null));
    table.push(row("ceiling: Arrow IPC write of the rows, no assembly", ipcSeconds, null));
    wire.push(`| ${workload.name} | ${fmt(wireBytes / workload.sessions / 1024, 1)} KiB |`);
    console.log(table.slice(-5).join("\n"));
    console.log(
      `  wire: ${fmt(wireBytes / workload.sessions / 1024, 1)} KiB per session; trajflow's last files and ` +
        `commit after the last message: ${wasm.drainSeconds.toFixed(2)} s of ${wasm.seconds.toFixed(2)} s`,
    );

    const ours = [];
    for (const f of await listDataFiles(join(dir, `w${w}-wasm`))) ours.push(...(await readRows(f)));
    const theirs = JSON.parse(
      execFileSync(
        PYTHON,
        [
          "-c",
          "import sys,json,pyarrow.dataset as ds; t=ds.dataset(sys.argv[1]).to_table(columns=['key','prompt_ids','response_ids','response_mask']); print(json.dumps(t.to_pylist()))",
          join(dir, `w${w}-py`),
        ],
        { maxBuffer: 1 << 30, encoding: "utf8" },
      ),
    ) as Array<Record<string, unknown>>;
    const trained = (rows: Array<Record<string, unknown>>) =>
      rows.reduce((s, r) => s + [...(r.response_mask as Iterable<number>)].reduce((a, b) => a + b, 0), 0);
    if (workload.linear) {
      const a = new Set(ours.map((r) => tokenKey(r as unknown as Record<string, unknown>)));
      const same = theirs.every((r) => a.has(tokenKey(r))) && theirs.length === ours.length;
      correctness.push(
        `| ${workload.name} | ${ours.length} | ${theirs.length} | ${same ? "identical token columns" : "DIFFERENT"} |`,
      );
    } else {
      correctness.push(
        `| ${workload.name} | ${ours.length} rows, ${trained(ours as unknown as Array<Record<string, unknown>>)} trained tokens | ` +
          `${theirs.length} rows, ${trained(theirs)} trained tokens | see BENCHMARKS.md |`,
      );
    }
    console.log(correctness[correctness.length - 1]);
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
  const report = [
    `Generated by \`BENCH_SCALE=${SCALE} npm run bench:peers\` on ${new Date().toISOString().slice(0, 10)}, ` +
      `${cpu.length} x ${cpu[0]?.model.trim() ?? "unknown CPU"}, Node ${process.version}, brokers ${brokers}.`,
    "",
    "| workload | pipeline | events/s | tokens/s | peak RSS | session end → file p50 | p99 | vs Python |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...table,
    "",
    "| workload | bytes on the wire per session (JSON arrays, as produced) |",
    "| --- | --- |",
    ...wire,
    "",
    ...savings,
    "",
    "| workload | trajflow | Python peer | token columns |",
    "| --- | --- | --- | --- |",
    ...correctness,
  ].join("\n");
  console.log(`\n${report}`);
  // The tables go into BENCHMARKS.md between the markers; the prose around them is written by hand.
  const file = join(root, "BENCHMARKS.md");
  const text = readFileSync(file, "utf8");
  const begin = text.indexOf(BEGIN);
  const finish = text.indexOf(END);
  if (begin < 0 || finish < begin)
    console.log(`\n(BENCHMARKS.md has no ${BEGIN} ... ${END} section to update)`);
  else {
    writeFileSync(file, `${text.slice(0, begin + BEGIN.length)}\n\n${report}\n\n${text.slice(finish)}`);
    console.log("\nBENCHMARKS.md updated (run `npx prettier --write BENCHMARKS.md` to align the tables).");
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
