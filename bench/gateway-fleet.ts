/**
 * The gateway as a fleet (issue 45), in front of the instant upstream (its cost is nil, so the figures are
 * the gateways' and the proxy's): replicas (`trajflow gateway --replica-id`, ack all) on one Kafka topic
 * behind HAProxy (scripts/haproxy.sh, Debian's 2.6), all on this host, in one run:
 * - throughput with 1, 2 and 3 replicas through the proxy (64 concurrent 8-turn sessions, like
 *   bench:gateway's throughput phase), with one gateway without --replica-id straight to Kafka beside it;
 * - latency, one call at a time: one gateway alone, one replica (its answers wait to be seen back on the
 *   topic: the fence check), and the same replica through the proxy (the proxy's own cost);
 * - a takeover: sessions of 8 and 32 turns made on replica A, then their next call on replica B (B reads the
 *   session back from its partition and claims it), against B's call after that.
 *
 * Run alone: `node bench/gateway-fleet.ts [--json file]`, or by `npm run bench:gateway` (after its other
 * phases). Needs a Kafka broker (KAFKA_BROKERS, or the one scripts/kafka.sh starts). Environment:
 * BENCH_FLEET_SECONDS (each throughput phase, default 10), BENCH_FLEET_CALLS (latency calls, default 1000),
 * BENCH_FLEET_TAKEOVERS (sessions per length, default 30).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { ClientResult, ClientSpec } from "./gateway-client.ts";
import { freePort } from "../test/helpers/gateway.ts";

const run = promisify(execFile);
const ROOT = new URL("..", import.meta.url).pathname;
const SECONDS = Number(process.env.BENCH_FLEET_SECONDS ?? 10);
const CALLS = Number(process.env.BENCH_FLEET_CALLS ?? 1_000);
const TAKEOVERS = Number(process.env.BENCH_FLEET_TAKEOVERS ?? 30);
const CLK_TCK = 100;

export interface FleetResult {
  throughput: Array<{
    name: string;
    replicas: number;
    callsPerSecond: number;
    p50: number;
    p99: number;
    errors: number;
    /** Cores each part used over the phase. */
    cpu: { gateways: number; proxy: number; broker: number; upstream: number; client: number };
  }>;
  latency: Array<{ name: string; p50: number; p90: number; p99: number }>;
  notes: string[];
  takeover: Array<{
    turns: number;
    how: string;
    firstP50: number;
    firstP90: number;
    nextP50: number;
    nextP90: number;
    takeP50: number;
  }>;
}

function cpuSeconds(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

interface Gateway {
  child: ChildProcess;
  base: string;
  stderr: () => string;
  /** The cgroup (v1 cpu controller) capping its CPU, when it has one. */
  cgroup?: string;
}

const CPU_CGROUPS = "/sys/fs/cgroup/cpu";

/**
 * Caps a gateway's CPU at `cores` (a cgroup of the v1 cpu controller, root only): the replicas then stand
 * for replicas on machines of their own, a slice each, on a host whose two cores everything else shares
 * too. False when cgroups cannot be written here.
 */
function capCpu(g: Gateway, cores: number): boolean {
  const dir = join(CPU_CGROUPS, `trajflow-bench-${g.child.pid}`);
  try {
    mkdirSync(dir);
    writeFileSync(join(dir, "cpu.cfs_period_us"), "100000");
    writeFileSync(join(dir, "cpu.cfs_quota_us"), String(Math.round(cores * 100_000)));
    writeFileSync(join(dir, "cgroup.procs"), String(g.child.pid));
    g.cgroup = dir;
    return true;
  } catch {
    return false;
  }
}

async function startGateway(
  upstream: string,
  brokers: string,
  topic: string,
  replica?: string,
): Promise<Gateway> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      "--max-semi-space-size=4",
      join(ROOT, "bin/trajflow.js"),
      "gateway",
      "--upstream",
      upstream,
      "--engine",
      "vllm",
      "--listen",
      `127.0.0.1:${port}`,
      "--topic",
      topic,
      "--brokers",
      brokers,
      ...(replica !== undefined ? ["--replica-id", replica] : []),
    ],
    { env: { ...process.env, TRAJFLOW_LOG_LEVEL: "warn" }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`a gateway exited:\n${err.slice(-3000)}`);
    if ((await fetch(`${base}/readyz`).catch(() => null))?.ok === true) break;
    if (Date.now() > deadline) throw new Error(`a gateway was not ready in 60 s:\n${err.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, base, stderr: () => err };
}

async function stop(g: Gateway): Promise<void> {
  if (g.child.exitCode === null && g.child.signalCode === null) {
    const exited = new Promise((r) => g.child.once("exit", r));
    g.child.kill("SIGTERM");
    await exited;
  }
  if (g.cgroup !== undefined) rmdirSync(g.cgroup);
}

/** HAProxy in front of `gateways` (scripts/haproxy.sh); returns its URL, its pid and how to stop it. */
async function startProxy(
  gateways: Gateway[],
  dir: string,
): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const port = await freePort();
  const env = { ...process.env, TRAJFLOW_HAPROXY_DIR: dir };
  const script = join(ROOT, "scripts/haproxy.sh");
  const { stdout } = await run(
    "bash",
    [script, "start", String(port), ...gateways.map((g) => g.base.slice(7))],
    { env },
  );
  // Servers start up in HAProxy's view (its checks only take one down): the load can begin.
  const url = stdout.trim().split("\n").pop()!;
  return {
    url,
    pid: Number(readFileSync(join(dir, "haproxy.pid"), "utf8")),
    stop: async () => void (await run("bash", [script, "stop"], { env })),
  };
}

async function client(spec: ClientSpec): Promise<ClientResult> {
  const { stdout } = await run(
    process.execPath,
    [join(ROOT, "bench/gateway-client.ts"), JSON.stringify(spec)],
    {
      maxBuffer: 1 << 28,
    },
  );
  return JSON.parse(stdout) as ClientResult;
}

const spec = (url: string, prefix: string, concurrency: number): ClientSpec => ({
  url,
  model: "m",
  concurrency,
  calls: concurrency === 1 ? CALLS : 10_000_000,
  seconds: concurrency === 1 ? 120 : SECONDS,
  warmupCalls: concurrency === 1 ? 100 : 500,
  warmupSeconds: 2,
  turns: 8,
  stream: false,
  maxTokens: 16,
  sessionPrefix: `${prefix}-${Date.now()}`,
});

const callUrl = (base: string) => `${base}/sessions/{sid}/v1/chat/completions`;

/** The processes whose CPU a phase accounts for, besides the gateways: the proxy, the broker, the upstream. */
interface Parts {
  proxy: number | null;
  broker: number | null;
  upstream: number | null;
}

/** One throughput phase: 64 sessions at once through `url`; the CPU of every part over it (cores). */
async function throughput(
  name: string,
  url: string,
  gateways: Gateway[],
  parts: Parts,
): Promise<FleetResult["throughput"][number]> {
  const others = { proxy: parts.proxy, broker: parts.broker, upstream: parts.upstream };
  const cpu0 = gateways.map((g) => cpuSeconds(g.child.pid!));
  const others0 = Object.fromEntries(
    Object.entries(others).map(([k, pid]) => [k, pid === null ? 0 : cpuSeconds(pid)]),
  );
  const t0 = performance.now();
  const r = await client(spec(callUrl(url), name.replace(/\W+/g, "-"), 64));
  const wall = (performance.now() - t0) / 1000;
  const cores = (pid: number | null, before: number) =>
    pid === null ? 0 : (cpuSeconds(pid) - before) / wall;
  return {
    name,
    replicas: gateways.length,
    callsPerSecond: r.calls / r.seconds,
    p50: quantile(r.latencyMs, 0.5),
    p99: quantile(r.latencyMs, 0.99),
    errors: r.errors,
    cpu: {
      gateways: gateways.reduce((n, g, i) => n + cores(g.child.pid!, cpu0[i]!), 0),
      proxy: cores(others.proxy, others0.proxy!),
      broker: cores(others.broker, others0.broker!),
      upstream: cores(others.upstream, others0.upstream!),
      client: r.cpuSeconds / r.seconds,
    },
  };
}

async function latency(name: string, url: string): Promise<FleetResult["latency"][number]> {
  const r = await client(spec(callUrl(url), name.replace(/\W+/g, "-"), 1));
  return {
    name,
    p50: quantile(r.latencyMs, 0.5),
    p90: quantile(r.latencyMs, 0.9),
    p99: quantile(r.latencyMs, 0.99),
  };
}

/** A turn of session `sid` on `base`: its latency (ms) and the assistant's reply. */
async function turn(
  base: string,
  sid: string,
  messages: Array<{ role: string; content: string }>,
): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${base}/sessions/${sid}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages, max_tokens: 16 }),
  });
  const body = (await res.json()) as { choices?: Array<{ message: { content: string } }> };
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`${sid}: ${res.status} ${JSON.stringify(body)}`);
  messages.push(
    { role: "assistant", content: body.choices![0]!.message.content },
    { role: "user", content: "Please continue the task; here is the next observation from the environment." },
  );
  return ms;
}

/** The take histogram's median from B's /metrics (bucket upper bound, ms). */
async function takeMedian(base: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const buckets = [...text.matchAll(/trajflow_gateway_take_seconds_bucket\{le="([^"]+)"\} (\d+)/g)].map(
    (m) => ({
      le: Number(m[1]),
      n: Number(m[2]),
    }),
  );
  const total = buckets.at(-1)?.n ?? 0;
  return (buckets.find((b) => b.n >= total / 2)?.le ?? NaN) * 1000;
}

/**
 * Takeovers: TAKEOVERS sessions of `turns` turns made on replica A, A then stopped (`how`: SIGTERM, which
 * releases its sessions; SIGKILL, whose leases B waits out), and each session's next call made on B (read
 * back from the topic and claimed), then the call after it.
 */
async function takeovers(
  upstream: string,
  brokers: string,
  topic: string,
  turns: number,
  how: "SIGTERM" | "SIGKILL",
): Promise<FleetResult["takeover"][number]> {
  const a = await startGateway(upstream, brokers, topic, `take-a-${turns}`);
  const b = await startGateway(upstream, brokers, topic, `take-b-${turns}`);
  try {
    const sessions: Array<{ sid: string; messages: Array<{ role: string; content: string }> }> = [];
    for (let i = 0; i < TAKEOVERS; i++) {
      const sid = `take-${turns}-${how}-${i}-${Date.now()}`;
      const messages = [{ role: "user", content: `task ${i}: please begin` }];
      for (let t = 0; t < turns; t++) await turn(a.base, sid, messages);
      sessions.push({ sid, messages });
    }
    const exited = new Promise((r) => a.child.once("exit", r));
    a.child.kill(how);
    await exited;
    const first: number[] = [];
    const next: number[] = [];
    for (const { sid, messages } of sessions) {
      first.push(await turn(b.base, sid, messages));
      next.push(await turn(b.base, sid, messages));
    }
    return {
      turns,
      how,
      firstP50: quantile(first, 0.5),
      firstP90: quantile(first, 0.9),
      nextP50: quantile(next, 0.5),
      nextP90: quantile(next, 0.9),
      takeP50: await takeMedian(b.base),
    };
  } finally {
    await stop(a);
    await stop(b);
  }
}

/** The broker's pid, when it is the one scripts/kafka.sh started here. */
function brokerPid(): number | null {
  try {
    return Number(readFileSync(join(ROOT, ".cache/kafka/broker.pid"), "utf8"));
  } catch {
    return null;
  }
}

/** A replica's CPU cap in the capped phases (cores): a slice each, as if each had a machine of its own. */
const CAP = Number(process.env.BENCH_FLEET_CAP_CORES ?? 0.25);

/** 1, 2 and 3 replicas behind HAProxy; `cap`: each replica's CPU capped at CAP cores. */
async function scaling(
  upstream: string,
  upstreamPid: number | null,
  brokers: string,
  freshTopic: () => Promise<string>,
  scratch: string,
  cap: boolean,
  result: FleetResult,
): Promise<void> {
  for (const n of [1, 2, 3]) {
    const replicas: Gateway[] = [];
    const label = cap ? `, each capped at ${CAP} core` : "";
    try {
      const topic = await freshTopic();
      for (let i = 0; i < n; i++) {
        const g = await startGateway(upstream, brokers, topic, `r${i}`);
        replicas.push(g);
        if (cap && !capCpu(g, CAP)) {
          result.notes.push(
            "capped phases skipped: cgroups (v1 cpu controller) cannot be written here (root only)",
          );
          return;
        }
      }
      const proxy = await startProxy(replicas, join(scratch, `haproxy-${cap}-${n}`));
      const parts = { proxy: proxy.pid, broker: brokerPid(), upstream: upstreamPid };
      try {
        console.error(`fleet: ${n} replica(s) behind HAProxy${label}`);
        if (n === 1 && !cap) {
          result.latency.push(await latency("one replica, direct", replicas[0]!.base));
          result.latency.push(await latency("one replica, through HAProxy", proxy.url));
          result.throughput.push(
            await throughput("one replica, direct", replicas[0]!.base, replicas, { ...parts, proxy: null }),
          );
        }
        result.throughput.push(
          await throughput(`${n} replica(s), through HAProxy${label}`, proxy.url, replicas, parts),
        );
      } finally {
        await proxy.stop();
      }
    } finally {
      for (const r of replicas) await stop(r);
    }
  }
}

export async function fleetBench(
  upstream: string,
  upstreamPid: number | null,
  brokers: string,
  freshTopic: () => Promise<string>,
): Promise<FleetResult> {
  const scratch = mkdtempSync(join(tmpdir(), "trajflow-bench-fleet-"));
  const result: FleetResult = { throughput: [], latency: [], takeover: [], notes: [] };
  try {
    // One gateway alone, straight to Kafka: the reference.
    const alone = await startGateway(upstream, brokers, await freshTopic());
    const parts = { proxy: null, broker: brokerPid(), upstream: upstreamPid };
    try {
      console.error("fleet: one gateway without --replica-id");
      result.throughput.push(await throughput("one gateway, no fleet, direct", alone.base, [alone], parts));
      result.latency.push(await latency("one gateway, no fleet, direct", alone.base));
    } finally {
      await stop(alone);
    }
    await scaling(upstream, upstreamPid, brokers, freshTopic, scratch, false, result);
    await scaling(upstream, upstreamPid, brokers, freshTopic, scratch, true, result);
    for (const [turns, how] of [
      [8, "SIGTERM"],
      [32, "SIGTERM"],
      [8, "SIGKILL"],
    ] as const) {
      console.error(`fleet: takeovers of ${turns}-turn sessions, A stopped by ${how}`);
      result.takeover.push(await takeovers(upstream, brokers, await freshTopic(), turns, how));
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return result;
}

export function fleetTable(r: FleetResult): string {
  const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");
  const lines = [
    `The gateway as a fleet (bench/gateway-fleet.ts), ${cpus().length} cores shared by everything: Kafka, the replicas, HAProxy, the instant upstream and the load.`,
    "",
    "Throughput, 64 concurrent 8-turn sessions, ack all:",
    "",
    "| path | replicas | calls/s | p50 ms | p99 ms | CPU (cores): gateways | HAProxy | broker | upstream | load | all | gateways' CPU ms per call | errors |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...r.throughput.map(
      (t) =>
        `| ${t.name} | ${t.replicas} | ${f(t.callsPerSecond, 0)} | ${f(t.p50)} | ${f(t.p99)} | ${f(t.cpu.gateways, 2)} | ${f(t.cpu.proxy, 2)} | ${f(t.cpu.broker, 2)} | ${f(t.cpu.upstream, 2)} | ${f(t.cpu.client, 2)} | ${f(t.cpu.gateways + t.cpu.proxy + t.cpu.broker + t.cpu.upstream + t.cpu.client, 2)} | ${f((t.cpu.gateways / t.callsPerSecond) * 1000, 2)} | ${t.errors} |`,
    ),
    "",
    "Latency, one call at a time (client side, ms):",
    "",
    "| path | p50 | p90 | p99 |",
    "|---|---|---|---|",
    ...r.latency.map((l) => `| ${l.name} | ${f(l.p50, 2)} | ${f(l.p90, 2)} | ${f(l.p99, 2)} |`),
    "",
    "A takeover: sessions made on replica A, A stopped (SIGTERM: it releases its sessions; SIGKILL: B waits out its leases, 4 s + 1 s), each session's next call on replica B (read back from the topic, claimed), then B's call after that (client side, ms; take: B's gateway_take_seconds median, bucket bound):",
    "",
    "| turns before | A stopped by | first call on B p50 | p90 | next call p50 | p90 | take p50 |",
    "|---|---|---|---|---|---|---|",
    ...r.takeover.map(
      (t) =>
        `| ${t.turns} | ${t.how} | ${f(t.firstP50, 2)} | ${f(t.firstP90, 2)} | ${f(t.nextP50, 2)} | ${f(t.nextP90, 2)} | ≤ ${f(t.takeP50, 0)} |`,
    ),
    ...r.notes.map((n) => `\nNote: ${n}.`),
  ];
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { benchBrokers } = await import("./kafka-harness.ts");
  const brokers = benchBrokers();
  const upstreamChild = spawn(process.execPath, [join(ROOT, "bench/gateway-upstream.ts")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const upstream = await new Promise<string>((resolve) =>
    upstreamChild.stdout!.once("data", (d: Buffer) => resolve(d.toString().trim())),
  );
  let n = 0;
  const stamp = Date.now();
  try {
    const result = await fleetBench(
      upstream,
      upstreamChild.pid!,
      brokers,
      async () => `bench-fleet-${stamp}-${n++}`,
    );
    console.log(fleetTable(result));
    const json = process.argv.indexOf("--json");
    if (json > 0) writeFileSync(process.argv[json + 1]!, JSON.stringify(result, null, 2));
  } finally {
    upstreamChild.kill("SIGTERM");
  }
}
