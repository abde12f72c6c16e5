/**
 * The one file that knows kafkajs. Everything else talks to Kafka through these functions, so the client
 * can be swapped (e.g. for a librdkafka binding) here alone.
 *
 * kafkajs facts the design relies on NOT being there: heartbeats happen only between handler calls (so
 * handlers stay short and call heartbeat in long batches), there is no synchronous revoke hook, and
 * resolved offsets are dropped on rebalance. trajflow commits explicitly and recovers from its files.
 */
import kafkajs, { type Consumer, type KafkaConfig, type Producer, type logLevel as LogLevel } from "kafkajs";
import type { Logger } from "../../core/logger.ts";
import { registerKafkaCodecs } from "./codecs.ts";
import type { KafkaConnection } from "./config.ts";

const { Kafka, logLevel } = kafkajs;

export type { Consumer, Producer };
export const Partitioners = kafkajs.Partitioners;

export type CompressionName = "none" | "gzip" | "snappy" | "lz4" | "zstd";

/** The client's code for a compression codec (all five are registered by registerKafkaCodecs). */
export function compressionCodec(name: CompressionName): number {
  const { CompressionTypes } = kafkajs;
  const codes = {
    none: CompressionTypes.None,
    gzip: CompressionTypes.GZIP,
    snappy: CompressionTypes.Snappy,
    lz4: CompressionTypes.LZ4,
    zstd: CompressionTypes.ZSTD,
  };
  return codes[name];
}

function logCreator(logger: Logger) {
  return () =>
    ({ level, log }: { level: LogLevel; log: { message: string; [k: string]: unknown } }) => {
      const { message, ...extra } = log;
      // kafkajs log entries never carry credentials; the connection config is not logged at all.
      delete extra.timestamp;
      delete extra.logger;
      if (level === logLevel.ERROR) logger.error(extra, message);
      else if (level === logLevel.WARN) logger.warn(extra, message);
      else logger.debug(extra, message);
    };
}

let warningFilterInstalled = false;

/**
 * kafkajs 2.2 computes a negative delay in one of its timers on Node >= 23 (harmless: Node clamps it to 1 ms)
 * and Node prints a TimeoutNegativeWarning for it: that one warning is dropped, every other one is printed.
 */
function dropKafkajsTimeoutWarning(): void {
  if (warningFilterInstalled) return;
  warningFilterInstalled = true;
  const listeners = process.listeners("warning");
  process.removeAllListeners("warning");
  process.on("warning", (warning) => {
    if (warning.name === "TimeoutNegativeWarning") return;
    if (listeners.length === 0) process.stderr.write(`${warning.name}: ${warning.message}\n`);
    for (const l of listeners) l(warning);
  });
}

export function createKafka(connection: KafkaConnection, logger: Logger): InstanceType<typeof Kafka> {
  registerKafkaCodecs();
  dropKafkajsTimeoutWarning();
  const config: KafkaConfig = {
    clientId: connection.client_id,
    brokers: connection.brokers,
    connectionTimeout: connection.connection_timeout_ms,
    logLevel: logLevel.WARN,
    logCreator: logCreator(logger.child({ component: "kafkajs" })),
    retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5_000 },
  };
  if (connection.ssl !== undefined) config.ssl = connection.ssl as KafkaConfig["ssl"];
  if (connection.sasl !== undefined) config.sasl = connection.sasl as KafkaConfig["sasl"];
  return new Kafka(config);
}

/** An error of the Kafka client (which retries it), as opposed to one of trajflow's own stages. */
export function isClientError(err: unknown): boolean {
  return err instanceof Error && err.name.startsWith("KafkaJS");
}

/** Errors that mean "no broker answered", whatever kafkajs decided about retrying them. */
const BROKER_AWAY = new Set([
  "KafkaJSConnectionError",
  "KafkaJSConnectionClosedError",
  "KafkaJSRequestTimeoutError",
  "KafkaJSBrokerNotFound",
  // Thrown at once, as non-retriable, when no broker answers the coordinator lookup: a single-broker
  // cluster that restarts crashes the consumer for good.
  "KafkaJSGroupCoordinatorNotFound",
  "KafkaJSNumberOfRetriesExceeded",
]);

/** Whether a client error (or one it was caused by) says the brokers are away, not that the setup is wrong. */
export function isBrokerAway(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (BROKER_AWAY.has(e.name) || code === "ECONNREFUSED" || code === "ECONNRESET") return true;
  }
  return false;
}

/** A redacted view of a connection, safe to log. */
export function describeConnection(connection: KafkaConnection): Record<string, unknown> {
  return {
    brokers: connection.brokers,
    client_id: connection.client_id,
    ssl: connection.ssl !== undefined,
    sasl:
      connection.sasl === undefined
        ? undefined
        : { mechanism: connection.sasl.mechanism, username: connection.sasl.username },
  };
}
