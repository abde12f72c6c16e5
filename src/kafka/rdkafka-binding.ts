/**
 * librdkafka through @confluentinc/kafka-javascript's node-rdkafka API (its KafkaConsumer, not the
 * KafkaJS-compatible layer, which implements neither `stop` nor `describeGroup` and re-batches messages in
 * a cache of its own): loading the native addon, the part of its API the consumer uses, the consumer's
 * configuration from trajflow's settings, and its errors as trajflow's codes.
 *
 * The addon is an optional dependency built by scripts/librdkafka.sh: it is loaded only when a consumer
 * asks for it, so everything else runs without it.
 */
import { createRequire } from "node:module";
import { TrajflowError } from "../core/errors.ts";
import { tlsOptions } from "./client.ts";
import type { KafkaConnection } from "./connection.ts";
import { FETCH_DEFAULTS, type TopicConsumerSettings } from "./topic-consumer.ts";

/** A librdkafka error as the binding reports it. */
export interface RdError extends Error {
  code: number;
  isFatal?: boolean;
}

/** A consumed message (the binding's object; only what trajflow reads). */
export interface RdMessage {
  value: Buffer | null;
  offset: number;
  partition: number;
  topic: string;
}

export interface RdTopicPartition {
  topic: string;
  partition: number;
  offset?: number;
}

/** The binding's KafkaConsumer, as far as trajflow uses it. */
export interface RdKafkaConsumer {
  connect(options: { timeout?: number; topic?: string }, cb: (err: RdError | null) => void): void;
  disconnect(cb: (err: RdError | null) => void): void;
  isConnected(): boolean;
  subscribe(topics: string[]): void;
  unsubscribe(): void;
  consume(count: number, cb: (err: RdError | null, messages: RdMessage[]) => void): void;
  setDefaultConsumeTimeout(ms: number): void;
  setDefaultIsTimeoutOnlyForFirstMessage(yes: boolean): void;
  assign(partitions: RdTopicPartition[]): void;
  unassign(): void;
  assignments(): RdTopicPartition[];
  assignmentLost(): boolean;
  seek(toppar: RdTopicPartition, timeoutMs: number, cb: (err: RdError | null) => void): void;
  commitCb(offsets: RdTopicPartition[], cb: (err: RdError | null) => void): void;
  on(event: "event.error", listener: (err: RdError) => void): void;
  on(event: "event.log", listener: (log: { severity: number; fac: string; message: string }) => void): void;
}

export interface RdBinding {
  KafkaConsumer: new (config: Record<string, unknown>) => RdKafkaConsumer;
  librdkafkaVersion: string;
}

/** librdkafka's error codes trajflow tells apart (the binding's LibrdKafkaError.codes). */
export const RD = {
  ASSIGN_PARTITIONS: -175,
  REVOKE_PARTITIONS: -174,
  AUTHENTICATION: -169,
  SSL: -181,
  SASL_AUTHENTICATION_FAILED: 58,
  TOPIC_AUTHORIZATION_FAILED: 29,
  GROUP_AUTHORIZATION_FAILED: 30,
} as const;

const PACKAGE = "@confluentinc/kafka-javascript";
let binding: RdBinding | null = null;

/**
 * The addon, loaded once; KAFKA_CLIENT_UNAVAILABLE (with how to build it) when it is not built here
 * (`module`: the package, or another name in a test).
 */
export function loadRdkafka(module = PACKAGE): RdBinding {
  if (binding !== null && module === PACKAGE) return binding;
  try {
    const require = createRequire(import.meta.url);
    // The package's name written out: the layout test sees which module imports it.
    const loaded = (
      module === PACKAGE ? require("@confluentinc/kafka-javascript") : require(module)
    ) as RdBinding;
    if (module === PACKAGE) binding = loaded;
    return loaded;
  } catch (err) {
    throw new TrajflowError(
      "KAFKA_CLIENT_UNAVAILABLE",
      "connection.client is librdkafka, but its native addon (@confluentinc/kafka-javascript) is not built " +
        `here (${(err as Error).message.split("\n")[0]}): run scripts/librdkafka.sh build, or use the ` +
        "kafkajs client (--kafka-client kafkajs)",
      { cause: err },
    );
  }
}

/** Whether the addon loads here (tests and benchmarks skip librdkafka's runs when it does not). */
export function rdkafkaAvailable(): boolean {
  try {
    loadRdkafka();
    return true;
  } catch {
    return false;
  }
}

const MESSAGE_MAX_BYTES = 1_000_000; // librdkafka's default message.max.bytes
/**
 * The fetch limits: fetch_max_bytes per partition and in all (FETCH_DEFAULTS, 256 KiB and 1 MiB, when it
 * is absent), and the prefetch queue librdkafka fills ahead of the consumer bounded to one fetch's worth
 * (`queued.max.messages.kbytes`, 64 MiB by default): the consumer holds at most about two fetches of
 * messages, what it fetched and the response it is reading, as kafkajs does.
 */
export function fetchConfig(fetchMaxBytes: number | undefined): Record<string, number> {
  const perPartition = fetchMaxBytes ?? FETCH_DEFAULTS.perPartition;
  const total = fetchMaxBytes ?? FETCH_DEFAULTS.total;
  return {
    "max.partition.fetch.bytes": perPartition,
    "fetch.max.bytes": total,
    // librdkafka refuses a fetch.max.bytes below message.max.bytes (a producer-side limit the consumer's own
    // small requests never reach).
    ...(total < MESSAGE_MAX_BYTES ? { "message.max.bytes": Math.max(1_000, total) } : {}),
    "queued.max.messages.kbytes": Math.max(1, Math.ceil(total / 1024)),
    // With the queue that small, the fetcher finds it full often: it looks again after 10 ms, not 1 s.
    "fetch.queue.backoff.ms": 10,
  };
}

/** The consumer's configuration: offsets are stored and committed only by trajflow. */
export function consumerConfig(
  settings: TopicConsumerSettings,
  heartbeatIntervalMs: number,
): Record<string, unknown> {
  return {
    ...connectionConfig(settings.connection),
    "group.id": settings.group_id,
    "session.timeout.ms": settings.session_timeout_ms,
    "heartbeat.interval.ms": heartbeatIntervalMs,
    // kafkajs's assignor, under librdkafka's name (a group's members must all use one client).
    "partition.assignment.strategy": "roundrobin",
    "enable.auto.commit": false,
    "enable.auto.offset.store": false,
    "auto.offset.reset": settings.from_beginning ? "earliest" : "latest",
    "allow.auto.create.topics": false,
    "enable.partition.eof": false,
    // The group's debug log: its MEMBERID line is the only place the binding tells this member's id,
    // which the fence asks the coordinator about (a handful of lines a second, logged at debug).
    debug: "cgrp",
    // As kafkajs's maxWaitTimeInMs: an idle partition's fetch answers within this.
    "fetch.wait.max.ms": Math.min(500, heartbeatIntervalMs),
    ...fetchConfig(settings.fetch_max_bytes),
  };
}

const MECHANISMS = { plain: "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512" };

/** Brokers, client id, TLS and SASL in librdkafka's terms. */
export function connectionConfig(connection: KafkaConnection): Record<string, unknown> {
  const tls = connection.ssl !== undefined && connection.ssl !== false;
  const sasl = connection.sasl;
  const out: Record<string, unknown> = {
    "bootstrap.servers": connection.brokers.join(","),
    "client.id": connection.client_id,
    "socket.connection.setup.timeout.ms": Math.max(1_000, connection.connection_timeout_ms),
    "security.protocol": `${sasl === undefined ? "" : "sasl_"}${tls ? "ssl" : "plaintext"}`,
    // A broker closing an idle connection is routine, not an error to log.
    "log.connection.close": false,
  };
  if (tls && typeof connection.ssl === "object") Object.assign(out, sslConfig(connection.ssl));
  if (sasl !== undefined) {
    out["sasl.mechanisms"] = MECHANISMS[sasl.mechanism];
    out["sasl.username"] = sasl.username;
    out["sasl.password"] = sasl.password;
  }
  return out;
}

/** Node tls options (with ca_file, cert_file, key_file read by tlsOptions) as librdkafka's ssl.* settings. */
function sslConfig(ssl: Record<string, unknown>): Record<string, unknown> {
  const options = tlsOptions(ssl) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  const unsupported: string[] = [];
  const pem = (v: unknown) => (Array.isArray(v) ? v.map(String).join("\n") : String(v));
  for (const [key, value] of Object.entries(options)) {
    if (key === "ca") out["ssl.ca.pem"] = pem(value);
    else if (key === "cert") out["ssl.certificate.pem"] = pem(value);
    else if (key === "key") out["ssl.key.pem"] = pem(value);
    else if (key === "passphrase") out["ssl.key.password"] = String(value);
    else if (key === "rejectUnauthorized") out["enable.ssl.certificate.verification"] = value !== false;
    // SNI and the name checked against the certificate are the broker's host with librdkafka.
    else if (key !== "servername") unsupported.push(key);
  }
  if (unsupported.length > 0)
    throw new TrajflowError(
      "CONFIG_INVALID",
      `connection.ssl: ${unsupported.join(", ")} not supported with the librdkafka client (it takes ca, ` +
        "ca_file, cert, cert_file, key, key_file, passphrase, rejectUnauthorized)",
    );
  return out;
}

/**
 * What a librdkafka error or log line says no retry fixes: refused credentials, a broker certificate
 * that does not verify, a fatal error or a refused topic or group; null for what librdkafka retries by
 * itself (a broker away). Error events carry only librdkafka's text (the binding drops their codes; the
 * text is lowercased, "local: authentication failure"), and while the client connects only its log
 * reaches JavaScript (errors wait in the consumer's queue): the text decides where there is no code.
 */
export function failureKind(err: { code?: number; message: string }): "auth" | "tls" | "fatal" | null {
  const code = err.code;
  const text = err.message.toLowerCase();
  if (code === RD.AUTHENTICATION || code === RD.SASL_AUTHENTICATION_FAILED) return "auth";
  if (/authentication failure|sasl authentication (error|failed)/.test(text)) return "auth";
  if (code === RD.SSL || /ssl error|certificate verify failed/.test(text)) return "tls";
  if (code === RD.TOPIC_AUTHORIZATION_FAILED || code === RD.GROUP_AUTHORIZATION_FAILED) return "fatal";
  if ((err as { isFatal?: boolean }).isFatal === true || /fatal error|authorization failed/.test(text))
    return "fatal";
  return null;
}

/**
 * A librdkafka error no retry fixes (failureKind) as trajflow's code: KAFKA_AUTH_FAILED (naming the user,
 * never the password), KAFKA_TLS_FAILED, KAFKA_CLIENT_FAILED; null for what librdkafka retries itself.
 */
export function setupFailure(
  err: { code?: number; message: string },
  connection: KafkaConnection,
): TrajflowError | null {
  const kind = failureKind(err);
  const said = err.message
    .replace(/^\[thrd:[^\]]*\]: /, "")
    .replace(/\s+/g, " ")
    .trim();
  const sasl = connection.sasl;
  if (kind === "auth") {
    const who =
      sasl === undefined ? " this client" : ` user ${JSON.stringify(sasl.username)} (SASL ${sasl.mechanism})`;
    return new TrajflowError(
      "KAFKA_AUTH_FAILED",
      `the broker refused the credentials of${who}: check connection.sasl (librdkafka said: ${said})`,
      { cause: err },
    );
  }
  if (kind === "tls")
    return new TrajflowError(
      "KAFKA_TLS_FAILED",
      `TLS with ${connection.brokers.join(",")} failed: ${said}; check connection.ssl (ca_file must hold the ` +
        "CA that signed the broker's certificate)",
      { cause: err },
    );
  return kind === "fatal" ? clientFailed(err) : null;
}

/** An error of librdkafka the consumer cannot go on after, as KAFKA_CLIENT_FAILED. */
export function clientFailed(err: unknown): TrajflowError {
  const e = err as Partial<RdError>;
  return new TrajflowError(
    "KAFKA_CLIENT_FAILED",
    `the Kafka client (librdkafka) gave up: ${e.message ?? String(err)}${
      typeof e.code === "number" ? ` (code ${e.code})` : ""
    }; check --brokers and that the cluster is up`,
    { cause: err },
  );
}
