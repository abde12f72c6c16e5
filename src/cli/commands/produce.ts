/** `trajflow produce`: recorded events to a topic, as a gateway would send them. */
import { createLogger } from "../../core/logger.ts";
import { ExitCode, parse, usageError } from "../args.ts";
import { produce, type ProduceCompression } from "../produce.ts";
import { ConfigProblems } from "../../core/config.ts";
import { kafkaConnectionSchema, type KafkaConnection } from "../../kafka/connection.ts";
import { CONNECTION_FLAGS, CONNECTION_HELP, connectionOptions } from "./shared.ts";

/** The connection the flags gave, checked as a pipeline's would be (every problem listed). */
function parseConnection(input: unknown): KafkaConnection {
  const problems = new ConfigProblems();
  const connection = problems.check("connection", kafkaConnectionSchema.safeParse(input));
  problems.throwIfAny();
  return connection!;
}

export const PRODUCE_HELP = `trajflow produce <events.jsonl[.gz]...> --topic <t> [options]

Publishes recorded gateway events to a Kafka topic, keyed by uid, byte for byte (as a gateway would).
policy.update control events go to every partition.

Options:
  --topic <t>               topic to publish to (required)
${CONNECTION_HELP}
  --compression <c>         none (default), gzip, snappy, lz4 or zstd
  -h, --help                show this help
`;

export async function runProduce(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    topic: { type: "string" },
    ...CONNECTION_FLAGS,
    compression: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help === true) {
    process.stdout.write(PRODUCE_HELP);
    return ExitCode.OK;
  }
  if (positionals.length === 0) throw usageError("produce needs at least one events file");
  if (values.topic === undefined) throw usageError("produce needs --topic <t>");
  const compression = (values.compression ?? "none") as ProduceCompression;
  if (!["none", "gzip", "snappy", "lz4", "zstd"].includes(compression)) {
    throw usageError(
      `--compression must be none, gzip, snappy, lz4 or zstd, got ${JSON.stringify(values.compression)}`,
    );
  }
  const logger = createLogger({});
  const result = await produce({
    inputs: positionals,
    topic: values.topic,
    connection: parseConnection({ ...connectionOptions(values), client_id: "trajflow-produce" }),
    compression,
    logger,
  });
  process.stdout.write(
    `trajflow produce: ${result.messages} messages to ${values.topic} in ${result.seconds.toFixed(2)} s\n`,
  );
  return ExitCode.OK;
}
