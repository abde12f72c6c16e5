import { pino, type Logger, type LoggerOptions } from "pino";
import { TrajflowError } from "./errors.ts";

export type { Logger };

export interface LoggerConfig {
  /** pino level: trace, debug, info, warn, error, fatal or silent. */
  level?: string;
  /** Pretty, coloured output for people; defaults to true when stderr is a terminal. */
  pretty?: boolean;
}

const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

/**
 * The process-wide logger. Logs go to stderr so that stdout stays free for command output (summaries,
 * `inspect` listings) that people pipe into other tools.
 */
export function createLogger(config: LoggerConfig = {}): Logger {
  const level = config.level ?? process.env.TRAJFLOW_LOG_LEVEL ?? "info";
  // A typo is a usage problem (exit 2), not pino's internal error.
  if (!LEVELS.includes(level))
    throw new TrajflowError(
      "USAGE",
      `the log level must be one of ${LEVELS.join(", ")}, got ${JSON.stringify(level)}`,
    );
  const pretty = config.pretty ?? process.stderr.isTTY === true;
  const options: LoggerOptions = { level, base: { app: "trajflow" } };
  if (pretty) {
    return pino({
      ...options,
      transport: { target: "pino-pretty", options: { destination: 2, colorize: true } },
    });
  }
  return pino(options, pino.destination(2));
}

/**
 * A warning that can happen once per item of a flood (a cut session, a dropped file): the first
 * occurrence is logged at once, later ones are counted and logged as one line per `intervalMs` with how
 * many there were, so a flood costs a few lines, not one per item.
 */
export class RateLimitedWarning {
  private readonly logger: Logger;
  private readonly message: string;
  private readonly intervalMs: number;
  private lastAt = -Infinity;
  private suppressed = 0;

  constructor(logger: Logger, message: string, intervalMs = 10_000) {
    this.logger = logger;
    this.message = message;
    this.intervalMs = intervalMs;
  }

  warn(fields: Record<string, unknown>, now = Date.now()): void {
    if (now - this.lastAt < this.intervalMs) {
      this.suppressed++;
      return;
    }
    const extra = this.suppressed > 0 ? { suppressed_since_last: this.suppressed } : {};
    this.logger.warn({ ...fields, ...extra }, this.message);
    this.lastAt = now;
    this.suppressed = 0;
  }
}
