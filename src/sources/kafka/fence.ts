/**
 * Fencing: before a lane's file lands, the group coordinator is asked whether this member still owns the
 * partition in a stable group. A member expelled while it was stalled still believes it owns its
 * partitions until its next heartbeat; the coordinator knows better. (With librdkafka, which has no
 * member id to ask with, librdkafka's own view answers: src/kafka/rdkafka-consumer.ts.)
 */
import type { Logger } from "../../core/logger.ts";
import type { TopicConsumer } from "../../kafka/topic-consumer.ts";
import type { KafkaLane } from "./lane.ts";

export interface FenceContext {
  consumer: Pick<TopicConsumer, "owns">;
  stopping: () => boolean;
  log: Logger;
}

/** True when the coordinator confirmed it while the lane stayed live; false otherwise. */
export async function ownsPartition(ctx: FenceContext, lane: KafkaLane): Promise<boolean> {
  let owns: boolean | null = null;
  // A coordinator that does not answer (a broker restarting) is asked again for a while: dropping a
  // file costs rebuilding its rows.
  for (let attempt = 0; owns === null && lane.live; attempt++) {
    try {
      owns = await ctx.consumer.owns(lane.partition);
    } catch (err) {
      if (attempt >= 6 || ctx.stopping()) owns = false;
      else {
        ctx.log.warn(
          { err, lane: lane.id, attempt },
          "Could not ask the group coordinator who owns the partition.",
        );
        await new Promise((r) => setTimeout(r, Math.min(5_000, 250 * 2 ** attempt)));
      }
    }
  }
  return owns === true && lane.live;
}
