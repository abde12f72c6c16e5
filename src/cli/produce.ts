/**
 * `trajflow produce`: publishes recorded events to a Kafka topic, keyed by uid (so every session of a GRPO
 * group lands in one partition), as a gateway would. Control events (`policy.update`, no uid) go to every
 * partition. Lines are sent byte for byte, bad ones too: the pipeline dead-letters them.
 */
import { TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import { formatOrigin } from "../schemas/origin.ts";
import {
  connectClient,
  compressionCodec,
  createKafka,
  createOrderedProducer,
  type CompressionName,
} from "../kafka/client.ts";
import type { KafkaConnection } from "../kafka/connection.ts";
import { readJsonl } from "../sources/jsonl/jsonl.ts";

export type ProduceCompression = CompressionName;

export interface ProduceOptions {
  inputs: string[];
  topic: string;
  connection: KafkaConnection;
  compression: ProduceCompression;
  /** Messages per produce request. */
  batchSize?: number;
  /**
   * Bytes (uncompressed) per produce request at most: a record batch over the broker's
   * `message.max.bytes` (1 MiB by default) is refused whole, so large events must not be batched past it.
   */
  maxBatchBytes?: number;
  /** One event's bytes at most: the broker's default `message.max.bytes` less the record overhead. */
  maxMessageBytes?: number;
  logger: Logger;
}

const utf8 = new TextDecoder();

/** The uid to key by, or null for control events and lines that are not JSON objects. */
function keyOf(raw: Uint8Array): { key: string | null; control: boolean } {
  try {
    const obj = JSON.parse(utf8.decode(raw)) as { uid?: unknown; type?: unknown };
    if (obj.type === "policy.update") return { key: null, control: true };
    return { key: typeof obj.uid === "string" ? obj.uid : null, control: false };
  } catch {
    return { key: null, control: false };
  }
}

export async function produce(options: ProduceOptions): Promise<{ messages: number; seconds: number }> {
  const started = performance.now();
  const kafka = createKafka(options.connection, options.logger);
  const admin = kafka.admin();
  const producer = createOrderedProducer(kafka, { allowAutoTopicCreation: true });
  await connectClient(producer, options.connection);
  await connectClient(admin, options.connection);
  let messages = 0;
  try {
    let partitions: number[] | null = null;
    const batchSize = options.batchSize ?? 500;
    const maxBatchBytes = options.maxBatchBytes ?? 768 * 1024;
    let batch: Array<{ key: string | null; value: Buffer; partition?: number }> = [];
    let batchBytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      await producer.send({
        topic: options.topic,
        acks: -1,
        compression: compressionCodec(options.compression),
        messages: batch,
      });
      messages += batch.length;
      batch = [];
      batchBytes = 0;
    };
    const maxMessageBytes = options.maxMessageBytes ?? 1_000_000;
    for await (const record of readJsonl({ paths: options.inputs })) {
      const raw = Buffer.from(record.raw as Uint8Array);
      if (raw.length > maxMessageBytes) {
        // The broker would refuse it (MESSAGE_TOO_LARGE) and the whole batch with it.
        throw new TrajflowError(
          "EVENT_TOO_LARGE",
          `${formatOrigin(record.origin)}: the event is ${raw.length} bytes, more than a Kafka message holds ` +
            `(${maxMessageBytes}); send its token arrays packed (docs/events.md), or raise the topic's ` +
            `max.message.bytes and the broker's message.max.bytes`,
          { details: { bytes: raw.length } },
        );
      }
      const { key, control } = keyOf(raw);
      if (control) {
        await flush();
        partitions ??= (
          await admin.fetchTopicMetadata({ topics: [options.topic] })
        ).topics[0]!.partitions.map((p) => p.partitionId);
        batch = partitions.map((partition) => ({ key: null, value: raw, partition }));
        await flush();
        continue;
      }
      if (batch.length > 0 && batchBytes + raw.length > maxBatchBytes) await flush();
      batch.push({ key, value: raw });
      batchBytes += raw.length;
      if (batch.length >= batchSize) await flush();
    }
    await flush();
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }
  return { messages, seconds: (performance.now() - started) / 1000 };
}
