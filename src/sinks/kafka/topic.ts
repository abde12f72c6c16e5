/**
 * The trajectory topic: finished rows produced to a Kafka topic, one message per row keyed by
 * `uid_session_index`, for trainers that consume from Kafka instead of reading files.
 *
 * Delivery is at least once: the Kafka pipeline waits for this topic's acknowledgement before it writes
 * the same rows to files, and files are what recovery trusts. A crash between the two re-produces the
 * session's rows with the same keys (a compacted topic, or a consumer keeping the last value per key,
 * removes the copy); a session can never reach the files without reaching the topic.
 */
import { rowToJson, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { compressionCodec, type Producer } from "../../kafka/client.ts";
import type { TrajectoryTopicConfig } from "./config.ts";

async function arrowEncoding() {
  const [{ tableToIPC }, { rowsToTable }] = await Promise.all([
    import("apache-arrow"),
    import("../../schemas/trajectory-arrow.ts"),
  ]);
  return { tableToIPC, rowsToTable };
}

export class TrajectoryTopicSink {
  private readonly config: TrajectoryTopicConfig;
  private readonly producer: Producer;

  constructor(config: TrajectoryTopicConfig, producer: Producer) {
    this.config = config;
    this.producer = producer;
  }

  /** Produces the rows and resolves once every one is acknowledged by all in-sync replicas. */
  async write(rows: readonly TrajectoryRow[]): Promise<void> {
    const { topic, format, compression, max_batch_rows } = this.config;
    // apache-arrow is loaded only by a pipeline that produces Arrow (the ingest thread needs it for nothing else).
    const arrow = format === "arrow" ? await arrowEncoding() : null;
    for (let i = 0; i < rows.length; i += max_batch_rows) {
      const messages = rows.slice(i, i + max_batch_rows).map((row) => ({
        key: row.key,
        value:
          arrow === null ? rowToJson(row) : Buffer.from(arrow.tableToIPC(arrow.rowsToTable([row]), "stream")),
        headers: { "trajflow.format": format },
      }));
      await this.producer.send({ topic, acks: -1, compression: compressionCodec(compression), messages });
    }
  }
}
