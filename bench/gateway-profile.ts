/**
 * Splits a `trajflow gateway` CPU profile (`--cpu-prof`; `BENCH_GATEWAY_CPU_PROF=<dir> npm run bench:gateway`
 * writes one per gateway run) by part: each sample goes to the part of the innermost frame on its stack that
 * names one (JSON.parse and JSON.stringify are builtins and count where they run; Node's shared HTTP and
 * socket internals count for the trajflow frame that called them, else for the side, server or upstream
 * client, whose parser callback they run in). Prints each part's share of the busy time and, given calls,
 * microseconds per call; then the hottest functions by self time.
 *
 *   node bench/gateway-profile.ts <file.cpuprofile> [calls]
 */
import { readFileSync } from "node:fs";

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

const [file, callsArg] = process.argv.slice(2);
if (file === undefined) {
  console.error("usage: node bench/gateway-profile.ts <file.cpuprofile> [calls]");
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
const calls = callsArg === undefined ? NaN : Number(callsArg);

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

/** The part a frame names, or null to keep walking up the stack. */
function partOf(frame: Node["callFrame"]): string | null {
  const { functionName: fn, url } = frame;
  if (fn === "(garbage collector)") return "garbage collection";
  if (fn === "(program)") return "V8 and native, unattributed";
  if (fn === "(idle)") return "idle";
  if (url === "" && fn === "parse") return "JSON.parse";
  if (url === "" && fn === "stringify") return "JSON.stringify";
  if (/src\/gateway\/(events|call-events|recorder)\.ts|src\/schemas\//.test(url)) return "event build";
  if (/src\/gateway\/outputs\/|src\/kafka\/|node_modules\/kafkajs/.test(url))
    return "event output (log write + fsync, Kafka produce)";
  if (/src\/gateway\/(upstreams\.ts|engines\/)/.test(url)) return "upstream client + engine adapter";
  if (/src\/gateway\/(server|http|sessions|call)\.ts/.test(url)) return "HTTP server, routing, the call";
  if (/src\/core\/(metrics|status-server)/.test(url)) return "metrics";
  if (/node_modules\/(pino|sonic-boom)/.test(url)) return "logging";
  return null;
}

function fallback(stack: Node["callFrame"][]): string {
  for (const f of stack) {
    if (f.url === "node:_http_server") return "HTTP server, routing, the call";
    if (f.url === "node:_http_client" || f.url === "node:_http_agent")
      return "upstream client + engine adapter";
  }
  return "Node internals (sockets, streams, timers)";
}

const selfUs = new Map<number, number>();
for (let i = 0; i < profile.samples.length; i++) {
  const id = profile.samples[i]!;
  selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
const parts = new Map<string, number>();
const fns = new Map<string, number>();
for (const [id, us] of selfUs) {
  const stack: Node["callFrame"][] = [];
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at))
    stack.push(byId.get(at)!.callFrame);
  let part: string | null = null;
  for (const f of stack) if ((part = partOf(f)) !== null) break;
  part ??= fallback(stack);
  parts.set(part, (parts.get(part) ?? 0) + us);
  const leaf = stack[0]!;
  const key = `${leaf.functionName || "(anonymous)"} ${leaf.url.replace(/^.*\/(src|node_modules)\//, "$1/")}:${leaf.lineNumber + 1}`;
  if (part !== "idle") fns.set(key, (fns.get(key) ?? 0) + us);
}
const busy = [...parts].filter(([p]) => p !== "idle").reduce((s, [, us]) => s + us, 0);
console.log(
  `${file}: ${(busy / 1e6).toFixed(2)} s busy, ${((parts.get("idle") ?? 0) / 1e6).toFixed(2)} s idle`,
);
console.log("\n| part | share of busy CPU | µs per call |\n|---|---|---|");
for (const [p, us] of [...parts].filter(([p]) => p !== "idle").sort((a, b) => b[1] - a[1]))
  console.log(
    `| ${p} | ${((100 * us) / busy).toFixed(1)} % | ${Number.isNaN(calls) ? "" : (us / calls).toFixed(1)} |`,
  );
console.log("\nHottest functions (self time):");
for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, 20))
  console.log(`  ${((100 * us) / busy).toFixed(1).padStart(5)} %  ${k}`);
