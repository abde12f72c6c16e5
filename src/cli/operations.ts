/**
 * What every running command offers operators: the /metrics, /healthz and /readyz endpoint when an address
 * is given, and a status line in the log every few seconds.
 */
import type { Logger } from "../core/logger.ts";
import { intOption } from "./args.ts";
import type { Metrics } from "../core/metrics.ts";
import { parseListenAddress, startStatusLine, StatusServer, type Gauge } from "../core/status-server.ts";

export interface OperationsOptions {
  /** `host:port` to serve /metrics, /healthz and /readyz on (port 0: any free port). Off when absent. */
  metricsAddress?: string;
  /** Interval of the status line in the log; 0 turns it off. Default 5000. */
  statusIntervalMs?: number;
}

export interface Operations {
  gauges: Map<string, Gauge>;
  ready(ready: boolean): void;
  /** The bound address of the endpoint, when serving. */
  address: string | null;
  close(): Promise<void>;
}

export async function startOperations(
  options: OperationsOptions | undefined,
  metrics: Metrics,
  logger: Logger,
  extra: () => Record<string, unknown>,
): Promise<Operations> {
  const server = new StatusServer(metrics, logger);
  const address = options?.metricsAddress === undefined ? null : await server.listen(options.metricsAddress);
  const interval = options?.statusIntervalMs ?? 5_000;
  const stopStatus = interval > 0 ? startStatusLine(metrics, logger, interval, extra) : () => {};
  return {
    gauges: server.gauges,
    ready: (ready) => (server.ready = ready),
    address,
    close: async () => {
      stopStatus();
      await server.close();
    },
  };
}

/** Operations flags shared by replay, consume and run (read by operationsOptions). */
const OPERATIONS_FLAGS = {
  "metrics-address": { type: "string" },
  "status-interval-ms": { type: "string" },
} as const;

/** Flags every command that runs a pipeline takes (replay, consume, run, validate). */
export const PIPELINE_COMMAND_FLAGS = {
  ...OPERATIONS_FLAGS,
  json: { type: "boolean" },
  "log-level": { type: "string" },
  "max-memory": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

export function operationsOptions(values: Record<string, unknown>): OperationsOptions {
  // A bad address is a usage error, found before anything runs.
  if (values["metrics-address"] !== undefined) parseListenAddress(values["metrics-address"] as string);
  return {
    metricsAddress: values["metrics-address"] as string | undefined,
    statusIntervalMs: intOption("status-interval-ms", values["status-interval-ms"] as string | undefined),
  };
}
