/**
 * kafkajs 2.2's pending seeks, asked cheaply while none is pending. Applied to its prototype once per
 * process.
 *
 * A batch handler's `isStale()` asks the consumer group's SeekOffsets map whether a seek waits for the
 * partition, and every ask builds its key with `JSON.stringify([topic, partition])`, also when the map is
 * empty (no seek pending: nearly always). The Kafka source asks before applying each record (a seek or
 * rebalance must stop a batch at once): on the shared harness's short workload that was 132,000 keys,
 * ~35 ms of the ingest thread and their garbage. An empty map now answers false without a key; a map
 * holding a seek answers as before.
 */
import { kafkajsClass, patchKafkajsOnce } from "./kafkajs-internals.ts";

interface SeekOffsets {
  readonly size: number;
  has(topic: string, partition: number): boolean;
}

const SEEK_OFFSETS = "consumer/seekOffsets.js";

/** The SeekOffsets class of the kafkajs the project resolves. */
export const kafkajsSeekOffsets = () => kafkajsClass<SeekOffsets>(SEEK_OFFSETS);

export function fixKafkajsSeekOffsets(): void {
  patchKafkajsOnce<SeekOffsets>(SEEK_OFFSETS, "empty map", (proto) => {
    const has = proto.has;
    proto.has = function (this: SeekOffsets, topic: string, partition: number): boolean {
      return this.size !== 0 && has.call(this, topic, partition);
    };
  });
}
