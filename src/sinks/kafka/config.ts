import { z } from "zod";
import type { Resolved, SharedSettings } from "../../contract/components.ts";
import { kafkaConnectionSchema, withConnection } from "../../kafka/connection.ts";

/** Configuration of the `kafka` trajectory sink: finished rows produced to a topic for trainers. */
export const trajectoryTopicConfigSchema = z.strictObject({
  topic: z.string().min(1).describe("Topic the rows are produced to, one message per row."),
  format: z
    .enum(["json", "arrow"])
    .default("json")
    .describe(
      "Message value: `json` (a row object, token columns as number arrays) or `arrow` (an Arrow IPC " +
        "stream holding one record batch of one row, the same schema as the files).",
    ),
  compression: z
    .enum(["none", "gzip", "snappy", "lz4", "zstd"])
    .default("zstd")
    .describe("Compression of the produced batches."),
  connection: kafkaConnectionSchema
    .optional()
    .describe("Brokers of the topic; default: the kafka source's connection (required with other sources)."),
  max_batch_rows: z
    .int()
    .positive()
    .default(1_000)
    .describe("Rows sent in one produce request at most; the pipeline waits for the acknowledgement."),
});
export type TrajectoryTopicConfig = z.output<typeof trajectoryTopicConfigSchema>;
export type TrajectoryTopicConfigInput = z.input<typeof trajectoryTopicConfigSchema>;

/** The config with its connection: its own, else the source's (a kafka source shares it). */
export const resolveTrajectoryTopic = (
  config: TrajectoryTopicConfig,
  shared: SharedSettings,
): Resolved<TrajectoryTopicConfig> =>
  withConnection(config, shared, "a kafka sink needs a connection when the source has none");
