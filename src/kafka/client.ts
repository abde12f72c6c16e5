/**
 * The Kafka layer's client: with its codecs (codecs.ts) and a fix to its request queue
 * (request-queue-fix.ts), the only code that imports kafkajs (test/layout.test.ts holds it so). The source
 * and the sinks talk to Kafka through these functions, so the client can be swapped (e.g. for a
 * librdkafka binding) here alone.
 *
 * kafkajs facts the design relies on NOT being there: heartbeats happen only between handler calls (so
 * handlers stay short and call heartbeat in long batches), there is no synchronous revoke hook, and
 * resolved offsets are dropped on rebalance. trajflow commits explicitly and recovers from its files.
 */
import kafkajs, {
  type Consumer,
  type EachBatchPayload,
  type KafkaConfig,
  type Producer,
  type logLevel as LogLevel,
} from "kafkajs";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { connect as netConnect, isIP } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import { registerKafkaCodecs } from "./codecs.ts";
import { applyLeanFetchRecords } from "./fetch-records.ts";
import { fixKafkajsRequestQueue } from "./request-queue-fix.ts";
import { fixKafkajsSeekOffsets } from "./seek-offsets-fix.ts";
import type { KafkaConnection } from "./connection.ts";

const { Kafka, logLevel } = kafkajs;

export type { Consumer, EachBatchPayload, Producer };

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

/**
 * kafkajs warns at every start of an idempotent producer whose retries are bounded. trajflow's producers
 * (dead letters, trajectory rows) retry a failed send themselves and promise at least once, not exactly
 * once (docs/kafka.md), so the line says nothing to the operator: it goes to debug.
 */
const IDEMPOTENT_RETRIES_WARNING = "Limiting retries for the idempotent producer";

/** Messages of the error codes Kafka's protocol marks retriable (kafkajs's own table). */
let retriableMessages: Set<string> | null = null;

function isRetriableMessage(message: string): boolean {
  if (retriableMessages === null) {
    const require = createRequire(import.meta.url);
    const { errorCodes } = require("kafkajs/src/protocol/error.js") as {
      errorCodes: Array<{ message: string; retriable: boolean }>;
    };
    retriableMessages = new Set(errorCodes.filter((e) => e.retriable).map((e) => e.message));
  }
  return retriableMessages.has(message);
}

/**
 * The level a kafkajs log entry deserves in trajflow's log. kafkajs logs every error response at ERROR,
 * also the retriable ones it then retries (a fresh topic's "This server does not host this
 * topic-partition", a starting broker's "The coordinator is loading"), and its consumer's restart after
 * them: normal operation, which log-based alerting must not page for. Those become warnings; what kafkajs
 * gives up on reaches trajflow's code as an error and is reported there, coded.
 */
export function kafkajsLogLevel(level: LogLevel, message: string, extra: Record<string, unknown>): LogLevel {
  if (level === logLevel.WARN && message.startsWith(IDEMPOTENT_RETRIES_WARNING)) return logLevel.DEBUG;
  if (level !== logLevel.ERROR) return level;
  const error = typeof extra.error === "string" ? extra.error : null;
  if (error !== null && isRetriableMessage(error)) return logLevel.WARN;
  const crash = /^Crash: KafkaJSProtocolError: (.*)$/.exec(message);
  if (crash !== null && isRetriableMessage(crash[1]!)) return logLevel.WARN;
  if (/^Restarting the consumer in \d+ms$/.test(message)) return logLevel.WARN;
  return level;
}

function logCreator(logger: Logger) {
  return () =>
    ({ level, log }: { level: LogLevel; log: { message: string; [k: string]: unknown } }) => {
      const { message, ...extra } = log;
      // kafkajs log entries never carry credentials; the connection config is not logged at all.
      delete extra.timestamp;
      delete extra.logger;
      const mapped = kafkajsLogLevel(level, message, extra);
      if (mapped === logLevel.ERROR) logger.error(extra, message);
      else if (mapped === logLevel.WARN) logger.warn(extra, message);
      else logger.debug(extra, message);
    };
}

/**
 * A client for `connection`. `retry` replaces the default retries (10, up to 5 s apart: about half a
 * minute before a request gives up) where a caller must know sooner that no broker answers.
 */
export function createKafka(
  connection: KafkaConnection,
  logger: Logger,
  retry: { retries: number; maxRetryTime: number } = { retries: 10, maxRetryTime: 5_000 },
): InstanceType<typeof Kafka> {
  registerKafkaCodecs();
  fixKafkajsRequestQueue();
  fixKafkajsSeekOffsets();
  applyLeanFetchRecords();
  const config: KafkaConfig = {
    clientId: connection.client_id,
    brokers: connection.brokers,
    connectionTimeout: connection.connection_timeout_ms,
    logLevel: logLevel.WARN,
    logCreator: logCreator(logger.child({ component: "kafkajs" })),
    retry: { initialRetryTime: 200, ...retry },
  };
  if (connection.ssl !== undefined) config.ssl = tlsOptions(connection.ssl);
  if (connection.sasl !== undefined) config.sasl = connection.sasl as KafkaConfig["sasl"];
  return new Kafka(config);
}

/**
 * The producer every trajflow writer uses: idempotent with one request in flight, so a retried batch
 * neither duplicates nor reorders messages, and the Java-compatible murmur2 partitioner, so the same key
 * (a uid) always lands in the same partition as other Kafka clients put it.
 */
export function createOrderedProducer(
  kafka: InstanceType<typeof Kafka>,
  options: { allowAutoTopicCreation?: boolean } = {},
): Producer {
  return kafka.producer({
    ...options,
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: kafkajs.Partitioners.DefaultPartitioner,
  });
}

/** The partitioner createOrderedProducer uses, to tell where a key's messages land without sending any. */
export function keyPartitioner(): ReturnType<typeof kafkajs.Partitioners.DefaultPartitioner> {
  return kafkajs.Partitioners.DefaultPartitioner();
}

const FILE_KEYS = { ca_file: "ca", cert_file: "cert", key_file: "key" } as const;

/**
 * `ssl` as the client takes it: `true`, or Node tls options where `ca_file`, `cert_file` and `key_file`
 * (paths, relative to the working directory) stand for `ca`, `cert` and `key` read from those files.
 */
export function tlsOptions(ssl: NonNullable<KafkaConnection["ssl"]>): KafkaConfig["ssl"] {
  if (typeof ssl === "boolean") return ssl;
  const out: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [key, value] of Object.entries(ssl)) {
    const option = FILE_KEYS[key as keyof typeof FILE_KEYS];
    if (option === undefined) {
      out[key] = value;
      continue;
    }
    try {
      out[option] = readFileSync(String(value));
    } catch (err) {
      problems.push(`connection.ssl.${key}: cannot read ${String(value)}: ${(err as Error).message}`);
    }
  }
  if (problems.length > 0) throw new TrajflowError("CONFIG_INVALID", problems.join("; "));
  return out as KafkaConfig["ssl"];
}

/** TLS failures of the client's connection (the broker's certificate, as Node's tls reports it). */
const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/;

/**
 * A client error that no retry fixes, with its own code: credentials the broker refused
 * (KAFKA_AUTH_FAILED) or a broker certificate that does not verify (KAFKA_TLS_FAILED). The message
 * names the user and mechanism, never the password. Anything else comes back as it was.
 */
export function setupError(err: unknown, connection: KafkaConnection): unknown {
  for (let e = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (e.name === "KafkaJSSASLAuthenticationError") {
      const sasl = connection.sasl;
      const who = sasl === undefined ? "" : ` user ${JSON.stringify(sasl.username)} (SASL ${sasl.mechanism})`;
      return new TrajflowError(
        "KAFKA_AUTH_FAILED",
        `the broker refused the credentials of${who || " this client"}: check connection.sasl ` +
          `(the broker said: ${e.message.replace(/^SASL [A-Z0-9 -]+ authentication failed: /, "")})`,
      );
    }
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && TLS_CODES.test(code)) {
      return new TrajflowError(
        "KAFKA_TLS_FAILED",
        `TLS with ${connection.brokers.join(",")} failed: ${e.message} (${code}); check connection.ssl ` +
          "(ca_file must hold the CA that signed the broker's certificate)",
      );
    }
  }
  return err;
}

/**
 * One TLS handshake with the first broker before the client connects: the client retries a failed
 * handshake as if the broker were away (30 s with the retry settings above) although no retry can fix a
 * certificate that does not verify, or a listener that does not speak TLS. Any other failure (a broker
 * down) is left to the client. A client without TLS asks the same of the plaintext side (listenerSpeaks):
 * a TLS listener answers with an alert, which the client would retry for 30 s as a closed connection.
 */
async function probeTls(connection: KafkaConnection): Promise<void> {
  const [host, port] = splitHostPort(connection.brokers[0]!);
  const options = tlsOptions(connection.ssl!);
  await new Promise<void>((resolve, reject) => {
    const socket = tlsConnect({
      host,
      port,
      servername: isIP(host) === 0 ? host : undefined,
      ...(typeof options === "object" ? options : {}),
    });
    let connected = false;
    socket.once("connect", () => (connected = true));
    const done = (err?: Error) => {
      socket.destroy();
      const code = (err as { code?: unknown } | undefined)?.code;
      if (err !== undefined && typeof code === "string" && TLS_CODES.test(code)) reject(err);
      // Connected, then closed in the middle of the handshake: a plaintext listener reading the handshake
      // as an oversized request, if it answers a plaintext request (a broker restarting closes too).
      else if (err !== undefined && connected && code === "ECONNRESET")
        void listenerSpeaks(connection).then((speaks) =>
          speaks === "kafka" ? reject(mismatch(connection, true)) : resolve(),
        );
      else resolve();
    };
    socket.setTimeout(connection.connection_timeout_ms, () => done());
    socket.once("secureConnect", () => done());
    socket.once("error", done);
  });
}

/** ApiVersions v0, correlation id 1, client id "trajflow-probe": the request every Kafka listener answers. */
const API_VERSIONS_PROBE = (() => {
  const clientId = Buffer.from("trajflow-probe");
  const body = Buffer.alloc(10 + clientId.length);
  body.writeInt16BE(18, 0); // api key: ApiVersions
  body.writeInt16BE(0, 2); // api version
  body.writeInt32BE(1, 4); // correlation id
  body.writeInt16BE(clientId.length, 8);
  clientId.copy(body, 10);
  const size = Buffer.alloc(4);
  size.writeInt32BE(body.length);
  return Buffer.concat([size, body]);
})();

/**
 * What the first broker's listener answers a plaintext ApiVersions request with: a Kafka response
 * (`kafka`), a TLS record (`tls`: a TLS listener answers bytes that are not a handshake with an alert), or
 * nothing conclusive (`none`: refused, closed, timed out; a broker restarting does that).
 */
function listenerSpeaks(connection: KafkaConnection): Promise<"kafka" | "tls" | "none"> {
  const [host, port] = splitHostPort(connection.brokers[0]!);
  return new Promise((resolve) => {
    const socket = netConnect({ host, port });
    let received = Buffer.alloc(0);
    const done = (verdict: "kafka" | "tls" | "none") => {
      socket.destroy();
      resolve(verdict);
    };
    socket.once("connect", () => socket.write(API_VERSIONS_PROBE));
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      // A TLS record: content type 20-23, then major version 3.
      if (received[0]! >= 0x14 && received[0]! <= 0x17 && received[1] === 0x03) return done("tls");
      // A Kafka response: its size, then the request's correlation id.
      if (received.length >= 8) done(received.readInt32BE(4) === 1 ? "kafka" : "none");
    });
    socket.once("end", () => done("none"));
    socket.once("error", () => done("none"));
    socket.setTimeout(connection.connection_timeout_ms, () => done("none"));
  });
}

/** The listener and the client disagree about TLS. */
function mismatch(connection: KafkaConnection, clientTls: boolean): TrajflowError {
  const broker = connection.brokers[0]!;
  return new TrajflowError(
    "KAFKA_TLS_MISMATCH",
    clientTls
      ? `${broker} closed the connection during the TLS handshake and answers plaintext Kafka requests: ` +
          `this listener does not speak TLS (PLAINTEXT or SASL_PLAINTEXT); drop --ssl (connection.ssl), or ` +
          `use the broker's TLS port`
      : `${broker} answered a plaintext Kafka request with a TLS alert: this listener expects TLS (SSL or ` +
          `SASL_SSL); add --ssl, or --ssl-ca <file> for a private CA (connection.ssl)`,
  );
}

function splitHostPort(broker: string): [string, number] {
  const at = broker.lastIndexOf(":");
  const host = broker.slice(0, at).replace(/^\[|\]$/g, "");
  return [host, Number(broker.slice(at + 1))];
}

/**
 * Connects a client, turning refused credentials, failed TLS and a listener that disagrees about TLS into
 * their own codes (setupError, the probes).
 */
export async function connectClient(
  client: { connect(): Promise<void> },
  connection: KafkaConnection,
): Promise<void> {
  try {
    if (connection.ssl !== undefined && connection.ssl !== false) await probeTls(connection);
    else if ((await listenerSpeaks(connection)) === "tls") throw mismatch(connection, false);
    await client.connect();
  } catch (err) {
    throw setupError(err, connection);
  }
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

/** Disconnects a client, giving up after `ms`: kafkajs has been seen to wait forever after a broker restart. */
export async function disconnectWithin(
  client: { disconnect(): Promise<void> },
  ms: number,
): Promise<boolean> {
  return Promise.race([
    client.disconnect().then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), ms).unref()),
  ]).catch(() => false);
}

/** The partitions of `topic` a group member's assignment (as DescribeGroup returns it) gives it. */
export function assignedPartitions(memberAssignment: Buffer, topic: string): number[] {
  return kafkajs.AssignerProtocol.MemberAssignment.decode(memberAssignment)?.assignment[topic] ?? [];
}
