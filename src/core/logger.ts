import { pino, type Logger, type LoggerOptions } from "pino";

export type { Logger };

export interface LoggerConfig {
  /** pino level: trace, debug, info, warn, error, fatal or silent. */
  level?: string;
  /** Pretty, coloured output for people; defaults to true when stderr is a terminal. */
  pretty?: boolean;
}

/**
 * The process-wide logger. Logs go to stderr so that stdout stays free for command output (summaries,
 * `inspect` listings) that people pipe into other tools.
 */
export function createLogger(config: LoggerConfig = {}): Logger {
  const level = config.level ?? process.env.TRAJFLOW_LOG_LEVEL ?? "info";
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
