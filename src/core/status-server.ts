/**
 * The operations endpoint: Prometheus `/metrics`, `/healthz` (the process answers) and `/readyz` (the
 * pipeline runs: started, not failed, not stopping). Counters come from the one Metrics registry; gauges
 * (open sessions, consumer lag) from providers the running pipeline registers.
 */
import type * as Http from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { TrajflowError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import { METRICS } from "./metric-names.ts";
import type { Metrics } from "./metrics.ts";

// node:http through require, not an ES import: Node builds an ES module's view of a built-in by reading
// every export, and node:http's lazy WebSocket getters then load undici (~30 ms of every start, also of
// runs that never open this endpoint; a require reads only createServer).
const { createServer } = createRequire(import.meta.url)("node:http") as typeof Http;
type Server = Http.Server;

const spec = (name: string) => (METRICS as Record<string, { label?: string; help: string }>)[name];

export type Gauge = () => Array<{ labels?: Record<string, string>; value: number }> | number;

const escape = (v: string) => v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
const labelText = (labels: Record<string, string>) => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escape(v)}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
};

/** The Prometheus text exposition of the counters, histograms and gauges. */
export function prometheusText(metrics: Metrics, gauges: Map<string, Gauge>): string {
  const lines: string[] = [];
  for (const [name, series] of Object.entries(metrics.snapshot())) {
    const metric = `trajflow_${name}_total`;
    lines.push(`# HELP ${metric} ${spec(name)?.help ?? name}`, `# TYPE ${metric} counter`);
    if (typeof series === "number") lines.push(`${metric} ${series}`);
    else {
      const label = spec(name)?.label ?? "label";
      for (const [value, n] of Object.entries(series))
        lines.push(`${metric}${labelText({ [label]: value })} ${n}`);
    }
  }
  for (const [name, h] of metrics.histogramEntries()) {
    const metric = `trajflow_${name}`;
    lines.push(`# HELP ${metric} ${spec(name)?.help ?? name}`, `# TYPE ${metric} histogram`);
    let cumulative = 0;
    for (let i = 0; i <= h.bounds.length; i++) {
      cumulative += h.counts[i]!;
      const le = i < h.bounds.length ? String(h.bounds[i]) : "+Inf";
      lines.push(`${metric}_bucket{le="${le}"} ${cumulative}`);
    }
    lines.push(`${metric}_sum ${h.sum}`, `${metric}_count ${h.count}`);
  }
  for (const [name, gauge] of gauges) {
    const metric = `trajflow_${name}`;
    lines.push(`# HELP ${metric} ${spec(name)?.help ?? name}`, `# TYPE ${metric} gauge`);
    const value = gauge();
    if (typeof value === "number") lines.push(`${metric} ${value}`);
    else for (const v of value) lines.push(`${metric}${labelText(v.labels ?? {})} ${v.value}`);
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

export class StatusServer {
  readonly gauges = new Map<string, Gauge>();
  ready = false;
  private server: Server | null = null;
  private readonly metrics: Metrics;
  private readonly logger: Logger;

  constructor(metrics: Metrics, logger: Logger) {
    this.metrics = metrics;
    this.logger = logger;
  }

  /** Listens on `host:port` (parseListenAddress; port 0: any free port); resolves with the bound address. */
  async listen(address: string): Promise<string> {
    const { host, port } = parseListenAddress(address);
    this.server = createServer((req, res) => {
      const path = (req.url ?? "/").split("?")[0];
      if (path === "/metrics") {
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
        res.end(prometheusText(this.metrics, this.gauges));
      } else if (path === "/healthz") {
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("ok\n");
      } else if (path === "/readyz") {
        res.writeHead(this.ready ? 200 : 503, { "content-type": "text/plain" });
        res.end(this.ready ? "ready\n" : "not ready\n");
      } else {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("not found: /metrics, /healthz, /readyz\n");
      }
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const bound = this.server.address() as AddressInfo;
    const where = `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${bound.port}`;
    this.logger.info({ address: where }, "Serving /metrics, /healthz and /readyz.");
    return where;
  }

  async close(): Promise<void> {
    if (this.server === null) return;
    await new Promise<void>((r) => this.server!.close(() => r()));
    this.server = null;
  }
}

/**
 * Logs a status line every `intervalMs`: rates since the last line and totals. `extra` adds fields the
 * running pipeline knows (open sessions, lag).
 */
export function startStatusLine(
  metrics: Metrics,
  logger: Logger,
  intervalMs: number,
  extra: () => Record<string, unknown> = () => ({}),
): () => void {
  let last = { at: performance.now(), events: 0, tokens: 0 };
  const events = () => metrics.total("events_read") + metrics.total("kafka_messages");
  const timer = setInterval(() => {
    const now = performance.now();
    const e = events();
    const t = metrics.total("tokens_received");
    const seconds = (now - last.at) / 1000;
    logger.info(
      {
        events_per_s: Math.round((e - last.events) / seconds),
        tokens_per_s: Math.round((t - last.tokens) / seconds),
        rows_written: metrics.total("rows_written"),
        files_written: metrics.get("files_committed", "written"),
        dead_letters: metrics.total("dead_letters"),
        ...extra(),
      },
      "status",
    );
    last = { at: now, events: e, tokens: t };
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * `port`, `:port`, `host:port` or `[ipv6]:port`. Without a host the endpoint listens on the loopback
 * interface only: exposing metrics to the network is a choice (`0.0.0.0:9464`), never a default.
 */
export function parseListenAddress(address: string): { host: string; port: number } {
  const m = /^(?:(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):)?(\d{1,5})$/.exec(address.trim());
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || !(port >= 0 && port <= 65_535)) {
    throw new TrajflowError(
      "CONFIG_INVALID",
      `--metrics-address ${JSON.stringify(address)}: expected port, :port, host:port or [ipv6]:port (port 0-65535)`,
    );
  }
  const host = m[1] ?? (m[2] === undefined || m[2] === "" ? "127.0.0.1" : m[2]);
  return { host, port };
}
