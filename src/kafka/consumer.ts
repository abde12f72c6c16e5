/** Builds the Kafka source's consumer (topic-consumer.ts). */
import type { Logger } from "../core/logger.ts";
import { KafkajsConsumer } from "./kafkajs-consumer.ts";
import type { TopicConsumer, TopicConsumerSettings } from "./topic-consumer.ts";

/** The consumer for `settings`: kafkajs's. */
export function createTopicConsumer(settings: TopicConsumerSettings, logger: Logger): TopicConsumer {
  return new KafkajsConsumer(settings, logger);
}
