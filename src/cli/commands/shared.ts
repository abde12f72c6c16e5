/**
 * Flags and option builders shared by the commands that run a pipeline preset (replay, consume): each
 * flag sets one value of the pipeline document (docs/cli.md).
 */
import { intOption, jsonFileOption, memoryOption, usageError } from "../args.ts";
import type { PresetOptions } from "../presets.ts";

/** Command-line flags shared by replay and consume (read by assembleOptions and fileOptions). */
export const ASSEMBLE_AND_FILE_FLAGS = {
  "drift-policy": { type: "string" },
  "idle-timeout-ms": { type: "string" },
  "reward-grace-ms": { type: "string" },
  "await-rewards": { type: "string" },
  "max-tokens": { type: "string" },
  "max-open-sessions": { type: "string" },
  "max-buffered-bytes": { type: "string" },
  format: { type: "string" },
  engine: { type: "string" },
  compression: { type: "string" },
  "rows-per-file": { type: "string" },
  "tokens-per-file": { type: "string" },
  "file-age-ms": { type: "string" },
} as const;

/** Flags of the transforms and file layout shared by replay and consume. */
export const SHAPE_FLAGS = {
  "partition-by": { type: "string" },
  "encode-workers": { type: "string" },
  "decode-workers": { type: "string" },
  "dead-letter-dir": { type: "string" },
  "s3-force-path-style": { type: "boolean" },
  grpo: { type: "boolean" },
  "group-size": { type: "string" },
  "group-timeout-ms": { type: "string" },
  "max-policy-lag": { type: "string" },
  "current-policy": { type: "string" },
  rewards: { type: "string" },
} as const;

export type Values = Record<string, string | boolean | string[] | undefined>;

const str = (values: Values, name: string) => values[name] as string | undefined;

/** Assembly options shared by replay and consume. */
export function assembleOptions(values: Values) {
  return {
    drift_policy: str(values, "drift-policy") as "fork" | "realign" | undefined,
    idle_timeout_ms: intOption("idle-timeout-ms", str(values, "idle-timeout-ms")),
    reward_grace_ms: intOption("reward-grace-ms", str(values, "reward-grace-ms")),
    await_rewards: listOption(str(values, "await-rewards")),
    max_tokens: intOption("max-tokens", str(values, "max-tokens")),
    max_open_sessions: intOption("max-open-sessions", str(values, "max-open-sessions")),
    max_buffered_bytes: intOption("max-buffered-bytes", str(values, "max-buffered-bytes")),
  };
}

/** A comma-separated list ("" is the empty list); undefined when the flag is absent. */
function listOption(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  return value
    .split(",")
    .map((v) => v.trim())
    .filter((v) => v.length > 0);
}

/** File options shared by replay and consume. */
export function fileOptions(values: Values) {
  return {
    format: str(values, "format") as "parquet" | undefined,
    engine: str(values, "engine") as "trajflow" | undefined,
    compression: str(values, "compression") as "zstd" | undefined,
    max_rows_per_file: intOption("rows-per-file", str(values, "rows-per-file")),
    max_tokens_per_file: intOption("tokens-per-file", str(values, "tokens-per-file")),
    max_file_age_ms: intOption("file-age-ms", str(values, "file-age-ms")),
  };
}

export function checkPolicyFlags(values: Values): void {
  if (values["current-policy"] !== undefined && values["max-policy-lag"] === undefined) {
    throw usageError("--current-policy needs --max-policy-lag");
  }
}

/**
 * The transforms and file layout the shared flags describe. `groupMode`: the command's own switch for
 * GRPO groups (replay's --group; consume's --grpo, since --group names its consumer group).
 */
export function presetOptions(values: Values, groupMode: boolean): PresetOptions & { baseDir: string } {
  const rewards = jsonFileOption("rewards", values.rewards as string | undefined);
  // Only for s3:// outputs; the endpoint and credentials come from the standard AWS variables.
  const s3 = values["s3-force-path-style"] === true ? { force_path_style: true } : undefined;
  return {
    assemble: assembleOptions(values),
    files: {
      ...fileOptions(values),
      path: values.out,
      partition_by: values["partition-by"],
      encode_workers: intOption("encode-workers", str(values, "encode-workers")),
      s3,
    },
    rewards: rewards?.value,
    rewardsWhere: rewards?.where,
    baseDir: rewards?.dir ?? process.cwd(),
    group:
      groupMode || values["group-size"] !== undefined || values["group-timeout-ms"] !== undefined
        ? {
            group_size: intOption("group-size", str(values, "group-size")),
            timeout_ms: intOption("group-timeout-ms", str(values, "group-timeout-ms")),
          }
        : undefined,
    staleness:
      values["max-policy-lag"] !== undefined
        ? {
            max_lag: intOption("max-policy-lag", str(values, "max-policy-lag"))!,
            current_version: intOption("current-policy", str(values, "current-policy")),
          }
        : undefined,
    deadLetters:
      values["dead-letter-dir"] === undefined
        ? undefined
        : { type: "files", path: values["dead-letter-dir"], s3 },
    memory: memoryOption(str(values, "max-memory")),
  };
}

/** Flags of a Kafka connection (consume, produce); the SASL password only ever comes from the environment. */
export const CONNECTION_FLAGS = {
  brokers: { type: "string" },
  ssl: { type: "boolean" },
  "ssl-ca": { type: "string" },
  "sasl-mechanism": { type: "string" },
  "sasl-username": { type: "string" },
} as const;

export const CONNECTION_HELP = `  --brokers <list>          comma-separated bootstrap brokers (default $KAFKA_BROKERS or 127.0.0.1:9092)
  --ssl                     connect with TLS (the system's CAs)
  --ssl-ca <file>           connect with TLS, trusting the CA certificate(s) in this PEM file
  --sasl-mechanism <m>      plain, scram-sha-256 or scram-sha-512; with --sasl-username, and the password
                            in $KAFKA_SASL_PASSWORD (never a flag: command lines are visible to others)
  --sasl-username <u>       SASL user`;

/** The consumer's client library (consume only: producers use kafkajs either way). */
export const KAFKA_CLIENT_FLAG = { "kafka-client": { type: "string" } } as const;

export const KAFKA_CLIENT_HELP = `  --kafka-client <c>        the consumer's client library: kafkajs (default) or librdkafka (its native
                            addon built by scripts/librdkafka.sh; docs/kafka.md, "Client")`;

/** The connection the flags describe (problems are listed by the connection's schema, all at once). */
export function connectionOptions(values: Values): {
  brokers: string[];
  ssl?: boolean | { ca_file: string };
  sasl?: { mechanism: string; username: string; password: string };
  client?: string;
} {
  const client = str(values, "kafka-client");
  const ca = str(values, "ssl-ca");
  const mechanism = str(values, "sasl-mechanism");
  const username = str(values, "sasl-username");
  if ((mechanism === undefined) !== (username === undefined))
    throw usageError("--sasl-mechanism and --sasl-username go together");
  const password = process.env.KAFKA_SASL_PASSWORD;
  if (mechanism !== undefined && (password === undefined || password === ""))
    throw usageError("SASL needs the password in $KAFKA_SASL_PASSWORD");
  return {
    brokers: brokers(str(values, "brokers")),
    ...(ca !== undefined ? { ssl: { ca_file: ca } } : values.ssl === true ? { ssl: true } : {}),
    ...(mechanism === undefined ? {} : { sasl: { mechanism, username: username!, password: password! } }),
    ...(client === undefined ? {} : { client }),
  };
}

/** --brokers, or $KAFKA_BROKERS, or the local default. */
export function brokers(value: string | undefined): string[] {
  return (value ?? process.env.KAFKA_BROKERS ?? "127.0.0.1:9092")
    .split(",")
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}
