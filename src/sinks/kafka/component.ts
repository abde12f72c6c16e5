/**
 * The `kafka` trajectory sink as a pipeline component: rows produced to a topic, acknowledged by all
 * in-sync replicas before the same units go on to the files (files are what recovery trusts, so a
 * session in a file is always on the topic). Delivery to the topic is at least once; docs/kafka.md says
 * why not exactly once and how a consumer removes the copies.
 */
import type { LaneSink, SinkComponent, Unit } from "../../contract/components.ts";
import { unitRows } from "../../contract/components.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import {
  connectClient,
  createKafka,
  createOrderedProducer,
  disconnectWithin,
  type Producer,
} from "../../kafka/client.ts";
import type { KafkaConnection } from "../../kafka/connection.ts";
import type { TrajectoryTopicConfig } from "./config.ts";
import { TrajectoryTopicSink } from "./topic.ts";

export class TopicSinkComponent implements SinkComponent {
  readonly role = "topic";
  readonly location: string;
  private readonly producer: Producer;
  private readonly sink: TrajectoryTopicSink;
  private readonly metrics: Metrics;
  private readonly connection: KafkaConnection;

  constructor(
    config: TrajectoryTopicConfig,
    connection: KafkaConnection,
    ctx: { metrics: Metrics; logger: Logger },
  ) {
    this.metrics = ctx.metrics;
    this.location = `topic ${config.topic}`;
    this.connection = connection;
    this.producer = createOrderedProducer(createKafka(connection, ctx.logger));
    this.sink = new TrajectoryTopicSink(config, this.producer);
  }

  async open(): Promise<void> {
    await connectClient(this.producer, this.connection);
  }

  openLane(): Promise<LaneSink> {
    return Promise.resolve({
      write: async (units: Unit[]) => {
        const rows = units.flatMap(unitRows);
        if (rows.length > 0) await this.sink.write(rows);
        this.metrics.inc("topic_rows_produced", "", rows.length);
        for (const unit of units) for (const ack of unit.acks) ack.release();
      },
      cut: async () => {},
      drain: async () => {},
      abandon: () => {},
    });
  }

  async close(): Promise<void> {
    await disconnectWithin(this.producer, 10_000);
  }
}
