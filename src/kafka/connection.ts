import { z } from "zod";
import type { Resolved, SharedSettings } from "../contract/components.ts";

/** The Kafka client libraries a consumer can run on. */
export const KAFKA_CLIENTS = ["kafkajs", "librdkafka"] as const;
export type KafkaClientName = (typeof KAFKA_CLIENTS)[number];

/** Connection settings shared by the Kafka source and the Kafka sinks. Secrets are never logged. */
export const kafkaConnectionSchema = z.strictObject({
  brokers: z.array(z.string().min(1)).min(1).describe("Bootstrap brokers, host:port."),
  client_id: z.string().min(1).default("trajflow").describe("Client id reported to the brokers."),
  ssl: z
    .union([z.boolean(), z.record(z.string(), z.unknown())])
    .optional()
    .describe(
      "true, or Node tls.connect options (ca, cert, key, servername, ...) passed to the client; ca_file, " +
        "cert_file and key_file (paths relative to the working directory) are read into ca, cert and key.",
    ),
  sasl: z
    .strictObject({
      mechanism: z.enum(["plain", "scram-sha-256", "scram-sha-512"]),
      username: z.string(),
      password: z.string(),
    })
    .optional()
    .describe(
      "SASL authentication. Write the password as ${VAR} in a pipeline file (or pass it in " +
        "$KAFKA_SASL_PASSWORD to the CLI); it is never logged or written anywhere.",
    ),
  connection_timeout_ms: z.int().positive().default(10_000).describe("Timeout for connecting to a broker."),
  client: z
    .enum(KAFKA_CLIENTS)
    .default("kafkajs")
    .describe(
      "The client library of the kafka source's consumer: kafkajs (pure JavaScript, the default) or " +
        "librdkafka (@confluentinc/kafka-javascript, a native addon built by scripts/librdkafka.sh; " +
        'docs/kafka.md, "Client"). Producers (sinks, dead letters, produce) use kafkajs either way. ' +
        "All members of a consumer group must use the same client.",
    ),
});
export type KafkaConnection = z.output<typeof kafkaConnectionSchema>;

/** The name a Kafka source shares its connection under: topics written without a connection take it. */
const SHARED_CONNECTION = "kafka.connection";

/** What a Kafka source shares with the pipeline's other components. */
export function shareConnection(connection: KafkaConnection): SharedSettings {
  return { [SHARED_CONNECTION]: connection };
}

/**
 * A topic's config with its connection: its own, else the one a Kafka source shares; `missing` is the
 * problem when neither is there.
 */
export function withConnection<C extends { connection?: KafkaConnection }>(
  config: C,
  shared: SharedSettings,
  missing: string,
): Resolved<C> {
  const connection = config.connection ?? (shared[SHARED_CONNECTION] as KafkaConnection | undefined);
  return connection === undefined
    ? { path: ["connection"], problem: missing }
    : { config: { ...config, connection } };
}
