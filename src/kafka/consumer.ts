/** Builds the Kafka source's consumer on the client library its connection names (topic-consumer.ts). */
import type { Logger } from "../core/logger.ts";
import { KafkajsConsumer } from "./kafkajs-consumer.ts";
import { RdkafkaConsumer } from "./rdkafka-consumer.ts";
import type { TopicConsumer, TopicConsumerSettings } from "./topic-consumer.ts";

/**
 * The consumer `settings.connection.client` names. librdkafka's fails here, at once, with
 * KAFKA_CLIENT_UNAVAILABLE when its native addon is not built (scripts/librdkafka.sh build).
 */
export function createTopicConsumer(settings: TopicConsumerSettings, logger: Logger): TopicConsumer {
  return settings.connection.client === "librdkafka"
    ? new RdkafkaConsumer(settings, logger)
    : new KafkajsConsumer(settings, logger);
}
