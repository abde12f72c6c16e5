/**
 * The librdkafka side of bench:peers: whether its addon is built here (scripts/librdkafka.sh), and the
 * read-only ceiling of a topic through it (fetch and decompress on librdkafka's threads, messages taken in
 * batches of 1,000 as the source takes them), beside the kafkajs one.
 */
import { loadRdkafka, rdkafkaAvailable } from "../src/kafka/rdkafka-binding.ts";

export { rdkafkaAvailable };

/** Reads the topic with no processing: seconds from the first batch to the last, and the CPU seconds spent. */
export async function readTopicRawRdkafka(
  brokers: string,
  topic: string,
  expected: number,
): Promise<{ seconds: number; cpuSeconds: number }> {
  const { KafkaConsumer } = loadRdkafka();
  const consumer = new KafkaConsumer({
    "bootstrap.servers": brokers,
    "group.id": `${topic}-raw-rdkafka`,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": false,
    "fetch.max.bytes": 10_485_760,
    "queued.max.messages.kbytes": 10_240,
    "fetch.queue.backoff.ms": 10,
  });
  await new Promise<void>((resolve, reject) =>
    consumer.connect({ timeout: 10_000, topic }, (err) => (err ? reject(err) : resolve())),
  );
  consumer.subscribe([topic]);
  consumer.setDefaultConsumeTimeout(100);
  consumer.setDefaultIsTimeoutOnlyForFirstMessage(true);
  let n = 0;
  let first = 0;
  let cpuAtFirst = process.cpuUsage();
  while (n < expected) {
    const messages = await new Promise<Array<{ value: Buffer | null }>>((resolve) =>
      consumer.consume(1_000, (err, m) => resolve(err ? [] : m)),
    );
    if (messages.length > 0 && first === 0) {
      first = performance.now();
      cpuAtFirst = process.cpuUsage();
    }
    n += messages.length;
  }
  const seconds = (performance.now() - first) / 1000;
  const cpu = process.cpuUsage(cpuAtFirst);
  await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  return { seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}
