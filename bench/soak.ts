/**
 * `npm run bench:soak`: memory over a long run, the way an operator setting a pod's limit needs to know
 * it (issue 39). Two phases, each `trajflow consume` as users run it, its RSS sampled every second:
 * - catch-up: a backlog of SOAK_EVENTS (default 10,000,000) events of a mixed workload (short sessions
 *   with whole prompts, short ones in the delta form with packed arrays, long sessions of 48 turns in the
 *   delta form, GRPO groups of 8 per uid) produced first, then read as fast as the consumer can;
 * - live: a topic produced at a steady SOAK_RATE events/s (default 2,000) for SOAK_LIVE_S seconds
 *   (default 600) while the consumer follows it.
 * Memory should plateau: what the run holds is bounded by its settings, not by how much it reads. The
 * samples go to bench/soak-samples.csv, a plot to bench/soak.svg, and the summary into BENCHMARKS.md
 * between its bench:soak markers. SOAK_ARGS adds `trajflow consume` flags (e.g. "--max-memory 512");
 * SOAK_CLIENTS (comma-separated `--kafka-client` values, default the default client) runs the catch-up
 * once per client on the same topic. SOAK_BACKLOG=<topic>:<events> reads a backlog an earlier run
 * produced (the broker keeps it a day) instead of producing one.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { createKafka, createOrderedProducer, compressionCodec } from "../src/kafka/client.ts";
import { benchBrokers, consumeTopicProcess, produceGenerated } from "./kafka-harness.ts";
import { writeBenchmarksSection } from "./harness.ts";
import { linearSession } from "./workloads.ts";

const root = new URL("..", import.meta.url).pathname;
const brokers = benchBrokers();
const EVENTS = Number(process.env.SOAK_EVENTS ?? 10_000_000);
const LIVE_S = Number(process.env.SOAK_LIVE_S ?? 600);
const RATE = Number(process.env.SOAK_RATE ?? 2_000);
const ARGS = (process.env.SOAK_ARGS ?? "").split(" ").filter((a) => a !== "");
const CLIENTS = (process.env.SOAK_CLIENTS ?? "").split(",").filter((c) => c !== "");
const MiB = 2 ** 20;

/** The mixed workload, session after session: each call returns the next session's events (JSON lines). */
function mixedSessions(): () => string[] {
  let s = 0;
  return () => {
    const n = s++;
    const kind = n % 10;
    const json = (events: Array<Record<string, unknown>>) => events.map((e) => JSON.stringify(e));
    if (kind < 4) {
      const shape = { initialPrompt: 256, turns: 2 + (n % 3), outputTokens: 64, observationTokens: 32 };
      return json(linearSession(shape, "full", { uid: `short-${n % 997}`, sessionId: `s${n}`, seed: n + 1 }));
    }
    if (kind < 6) {
      const shape = { initialPrompt: 512, turns: 4, outputTokens: 128, observationTokens: 64 };
      const opts = { uid: `packed-${n % 991}`, sessionId: `p${n}`, seed: n + 1, packed: true };
      return json(linearSession(shape, "delta", opts));
    }
    if (kind === 6) {
      const shape = { initialPrompt: 1_024, turns: 48, outputTokens: 128, observationTokens: 64 };
      return json(linearSession(shape, "delta", { uid: `long-${n}`, sessionId: "main", seed: n + 1 }));
    }
    // GRPO: 8 rollouts of one prompt (one uid), each a short session in the delta form.
    const group = Math.floor(n / 10);
    const out: string[] = [];
    for (let k = 0; k < 8; k++) {
      const shape = { initialPrompt: 384, turns: 3, outputTokens: 96, observationTokens: 32 };
      const opts = { uid: `grpo-${group}-${kind}`, sessionId: `r${k}`, seed: n * 8 + k + 1 };
      out.push(...json(linearSession(shape, "delta", opts)));
    }
    return out;
  };
}

/** Creates `topic` with the broker's default partitions (the consumer subscribes before anything is sent). */
async function createTopic(topic: string): Promise<void> {
  const connection = {
    brokers: [brokers],
    client_id: "soak",
    connection_timeout_ms: 10_000,
    client: "kafkajs" as const,
  };
  const admin = createKafka(connection, pino({ level: "silent" })).admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic }], waitForLeaders: true });
  await admin.disconnect();
}

interface Sample {
  t: number;
  events: number;
  rssMiB: number;
}

interface Phase {
  name: string;
  samples: Sample[];
  events: number;
  seconds: number;
  peakRssMiB: number;
  cpuSeconds: number;
  account: Array<{ owner: string; bytes: number }>;
}

function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) / 1024;
}

/**
 * Runs `trajflow consume` (its defaults and `args`) on `topic` from its beginning, sampling its RSS and
 * progress every second, until `done(events read)`; then SIGTERM and its report.
 */
async function consumeSampled(
  name: string,
  topic: string,
  args: string[],
  done: (events: number) => boolean,
): Promise<Phase> {
  const out = mkdtempSync(join(tmpdir(), "soak-out-"));
  const started = Date.now();
  const samples: Sample[] = [];
  const run = await consumeTopicProcess(brokers, topic, out, Infinity, args, undefined, {
    until: done,
    defaults: true,
    everySecond: (events, pid) =>
      samples.push({ t: (Date.now() - started) / 1000, events, rssMiB: rssOf(pid) }),
  });
  rmSync(out, { recursive: true, force: true });
  return {
    name,
    samples,
    events: run.report.events,
    seconds: samples.at(-1)?.t ?? 0,
    peakRssMiB: run.peakRss / MiB,
    cpuSeconds: run.cpuSeconds,
    account: run.report.peak_rss_account.owners,
  };
}

/** Produces to `topic` at `rate` events/s for `seconds` (batches every 100 ms); the number produced. */
async function produceSteadily(topic: string, rate: number, seconds: number): Promise<number> {
  const connection = {
    brokers: [brokers],
    client_id: "soak",
    connection_timeout_ms: 10_000,
    client: "kafkajs" as const,
  };
  const kafka = createKafka(connection, pino({ level: "silent" }));
  const producer = createOrderedProducer(kafka, { allowAutoTopicCreation: true });
  await producer.connect();
  const next = mixedSessions();
  const pending: string[] = [];
  let sent = 0;
  const started = Date.now();
  while (Date.now() - started < seconds * 1000) {
    const due = Math.floor(((Date.now() - started) / 1000) * rate);
    while (pending.length < due - sent) pending.push(...next());
    const batch = pending.splice(0, Math.max(0, due - sent));
    if (batch.length > 0) {
      await producer.send({
        topic,
        acks: -1,
        compression: compressionCodec("zstd"),
        messages: batch.map((value) => ({ key: (JSON.parse(value) as { uid: string }).uid, value })),
      });
      sent += batch.length;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await producer.disconnect();
  return sent;
}

const quantileAt = (samples: Sample[], fraction: number) =>
  samples[Math.min(samples.length - 1, Math.floor(fraction * (samples.length - 1)))]!;

/** RSS growth per million events over the second half of a catch-up (least squares); ~0 on a plateau. */
function slopePerMillion(samples: Sample[]): number {
  const half = samples.slice(Math.floor(samples.length / 2));
  const n = half.length;
  const mx = half.reduce((a, s) => a + s.events, 0) / n;
  const my = half.reduce((a, s) => a + s.rssMiB, 0) / n;
  let num = 0;
  let den = 0;
  for (const s of half) {
    num += (s.events - mx) * (s.rssMiB - my);
    den += (s.events - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 1e6;
}

function summary(p: Phase): string {
  const at = (f: number) => Math.round(quantileAt(p.samples, f).rssMiB);
  const firstHalf = p.samples.slice(0, Math.floor(p.samples.length / 2));
  const secondHalf = p.samples.slice(Math.floor(p.samples.length / 2));
  const max = (s: Sample[]) => Math.round(Math.max(...s.map((x) => x.rssMiB)));
  return (
    `| ${p.name} | ${p.events.toLocaleString("en-US")} | ${p.seconds.toFixed(0)} | ` +
    `${Math.round(p.events / p.seconds).toLocaleString("en-US")} | ${p.cpuSeconds.toFixed(0)} | ` +
    `${[0.1, 0.25, 0.5, 0.75, 1].map(at).join("/")} | ${max(firstHalf)}/${max(secondHalf)} | ` +
    `${slopePerMillion(p.samples).toFixed(1)} | ${Math.round(p.peakRssMiB)} |`
  );
}

/** A plot of RSS against time, one line per phase (plain SVG: no plotting library to install). */
function plot(phases: Phase[]): string {
  const w = 720;
  const h = 300;
  const pad = 40;
  const maxT = Math.max(...phases.flatMap((p) => p.samples.map((s) => s.t)));
  const maxR = Math.max(...phases.flatMap((p) => p.samples.map((s) => s.rssMiB))) * 1.1;
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
  const x = (t: number) => pad + (t / maxT) * (w - 2 * pad);
  const y = (r: number) => h - pad - (r / maxR) * (h - 2 * pad);
  const lines = phases.map((p, i) => {
    const points = p.samples.map((s) => `${x(s.t).toFixed(1)},${y(s.rssMiB).toFixed(1)}`).join(" ");
    const color = colors[i % colors.length];
    return (
      `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${points}"/>` +
      `<text x="${w - pad - 260}" y="${pad + 14 * i}" fill="${color}" font-size="11">${p.name}</text>`
    );
  });
  const ticks = [0, 0.25, 0.5, 0.75, 1].map(
    (f) =>
      `<text x="2" y="${y(f * maxR) + 4}" font-size="10">${Math.round(f * maxR)}</text>` +
      `<line x1="${pad}" x2="${w - pad}" y1="${y(f * maxR)}" y2="${y(f * maxR)}" stroke="#ddd"/>`,
  );
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif">` +
    `<rect width="100%" height="100%" fill="white"/>${ticks.join("")}${lines.join("")}` +
    `<text x="${w / 2 - 80}" y="${h - 8}" font-size="11">seconds (0 to ${Math.round(maxT)}); RSS in MiB</text>` +
    `</svg>\n`
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "soak-"));
  const phases: Phase[] = [];
  try {
    const reuse = process.env.SOAK_BACKLOG?.split(":");
    const backlog = reuse?.[0] ?? `soak-backlog-${Date.now()}`;
    const total =
      reuse === undefined
        ? await produceGenerated(brokers, backlog, mixedSessions(), EVENTS, dir)
        : Number(reuse[1]);
    process.stderr.write(`backlog: ${backlog}:${total}\n`);
    for (const client of CLIENTS.length === 0 ? [null] : CLIENTS) {
      const name = `catch-up${client === null ? "" : ` (${client})`}`;
      const args = [...ARGS, ...(client === null ? [] : ["--kafka-client", client])];
      phases.push(await consumeSampled(name, backlog, args, (events) => events >= total));
      process.stderr.write(`${summary(phases.at(-1)!)}\n`);
    }
    if (LIVE_S > 0) {
      const live = `soak-live-${Date.now()}`;
      await createTopic(live);
      let produced = -1;
      const producing = produceSteadily(live, RATE, LIVE_S).then((n) => (produced = n));
      const name = `live (${RATE.toLocaleString("en-US")}/s, ${LIVE_S} s)`;
      phases.push(await consumeSampled(name, live, ARGS, (events) => produced >= 0 && events >= produced));
      await producing;
      process.stderr.write(`${summary(phases.at(-1)!)}\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const csv = ["phase,seconds,events_read,rss_mib"];
  for (const p of phases)
    for (const s of p.samples)
      csv.push(`${p.name.replace(/,/g, ";")},${s.t.toFixed(1)},${s.events},${s.rssMiB.toFixed(0)}`);
  writeFileSync(join(root, "bench/soak-samples.csv"), `${csv.join("\n")}\n`);
  writeFileSync(join(root, "bench/soak.svg"), plot(phases));
  const owners = (p: Phase) => p.account.map((o) => `${o.owner} ${Math.round(o.bytes / MiB)}`).join(", ");
  const report = [
    `\`npm run bench:soak\` (${new Date().toISOString().slice(0, 10)}; ${cpus().length} cores, ` +
      `${Math.round(totalmem() / 2 ** 30)} GiB; flags: ${ARGS.length === 0 ? "defaults" : ARGS.join(" ")}). ` +
      "RSS sampled every second (bench/soak-samples.csv, plotted in bench/soak.svg).",
    "",
    "| phase | events | s | events/s | CPU s | RSS MiB at 10/25/50/75/100% | max RSS, 1st/2nd half | slope, 2nd half, MiB per M events | peak RSS |",
    "|---|---|---|---|---|---|---|---|---|",
    ...phases.map(summary),
    "",
    ...phases.map((p) => `- ${p.name}: the peak RSS by owner (MiB): ${owners(p)}.`),
  ].join("\n");
  process.stdout.write(`${report}\n`);
  writeBenchmarksSection("soak", report);
}

await main();
