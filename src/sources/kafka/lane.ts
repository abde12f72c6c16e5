/**
 * A Kafka source's lane: one assigned partition, its ledger starting at the offset its first batch
 * starts at, and what its files say about where their rows came from.
 */
import type { Lane, LaneFiles } from "../../contract/components.ts";
import { Ledger } from "../../contract/ledger.ts";

export interface KafkaLane extends Lane {
  partition: number;
  /** False once revoked or restarted: its batches stop, and its files are dropped at the fence. */
  live: boolean;
}

export function kafkaLane(
  topic: string,
  partition: number,
  firstOffset: number,
  fence: (lane: KafkaLane) => Promise<boolean>,
): KafkaLane {
  const files: LaneFiles = {
    range: `${topic}-${partition}`,
    describe: () => ({
      "trajflow.source": "kafka",
      "trajflow.kafka.topic": topic,
      "trajflow.kafka.partition": String(partition),
    }),
    // The group's other members write here too: only a temporary untouched for 10 minutes is a
    // crashed writer's.
    sharedDirectoryTempAgeMs: 10 * 60_000,
  };
  const lane: KafkaLane = {
    id: `${topic}/${partition}`,
    partition,
    ledger: new Ledger(firstOffset),
    live: true,
    files,
    fence: () => fence(lane),
  };
  return lane;
}
