/**
 * Where the topic stands against this member's lanes, asked of the broker through the admin client: the
 * lag per partition (refreshed at every ask, read by the status server and the watchdog), which lanes
 * have caught up, and whether every assigned partition is drained.
 */
import type { Lane } from "../../contract/components.ts";
import type { TopicConsumer } from "../../kafka/topic-consumer.ts";
import type { KafkaSourceConfig } from "./config.ts";
import type { KafkaLane } from "./lane.ts";

/** What the broker is asked through (the consumer's clients). */
type Broker = Pick<TopicConsumer, "topicOffsets" | "committedOffsets">;

/** What the source holds now (its lanes are replaced at every rebalance). */
export interface LaneView {
  lanes: ReadonlyMap<number, KafkaLane>;
  /** Partitions the group assigned to this member at its last join; null before the first. */
  assignment: readonly number[] | null;
  /** Partitions restarted locally whose new lane has not started yet. */
  restartAt: ReadonlyMap<number, number>;
}

export class Watermarks {
  private readonly broker: Broker;
  private readonly config: KafkaSourceConfig;
  private readonly view: () => LaneView;
  private lagByPartition = new Map<number, number>();

  constructor(broker: Broker, config: KafkaSourceConfig, view: () => LaneView) {
    this.broker = broker;
    this.config = config;
    this.view = view;
  }

  /** Messages waiting per partition, as of the last ask. */
  lag(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [p, v] of this.lagByPartition) out.set(String(p), v);
    return out;
  }

  /** Messages waiting in all of this member's partitions, as of the last ask. */
  behind(): number {
    let behind = 0;
    for (const v of this.lagByPartition.values()) behind += v;
    return behind;
  }

  /** The high watermark of each partition, asked of the broker now; the lag gauge is refreshed with it. */
  async refresh(): Promise<Map<number, { low: number; high: number }>> {
    const offsets = await this.broker.topicOffsets();
    const { lanes, restartAt } = this.view();
    const out = new Map<number, { low: number; high: number }>();
    const lag = new Map<number, number>();
    for (const o of offsets) {
      const high = o.high;
      out.set(o.partition, { low: o.low, high });
      // A partition restarted locally has no lane until its first batch comes back: it lags from where
      // the new lane starts, so the watchdog sees a restarted partition whose messages never came again.
      const next = lanes.get(o.partition)?.ledger.next ?? restartAt.get(o.partition);
      if (next !== undefined) lag.set(o.partition, Math.max(0, high - next));
    }
    this.lagByPartition = lag;
    return out;
  }

  /**
   * The lanes that have read up to their partition's high watermark. (A transactional topic's last
   * commit marker is never delivered, so its lanes never count as caught up: gateways produce without
   * transactions.)
   */
  async caughtUp(lanes: Lane[]): Promise<Set<Lane>> {
    const marks = await this.refresh();
    const out = new Set<Lane>();
    for (const lane of lanes) {
      const k = lane as KafkaLane;
      const mark = marks.get(k.partition);
      if (k.live && mark !== undefined && k.ledger.next >= mark.high) out.add(lane);
    }
    return out;
  }

  /**
   * Whether every partition assigned to this member is read to its high watermark: by its lane, or, for
   * a partition without one, by the group's committed offset (where its next lane would start).
   */
  async drained(): Promise<boolean> {
    const { assignment } = this.view();
    if (assignment === null) return false;
    const marks = await this.refresh();
    let committed: Map<number, number> | null = null;
    for (const partition of assignment) {
      const mark = marks.get(partition);
      if (mark === undefined) return false;
      // Asked at each step: a rebalance may replace the lanes while the broker answers.
      const { lanes, restartAt } = this.view();
      const lane = lanes.get(partition);
      if (lane !== undefined) {
        if (lane.ledger.next < mark.high) return false;
        continue;
      }
      if (restartAt.has(partition)) return false;
      if (mark.low >= mark.high) continue;
      committed ??= await this.broker.committedOffsets();
      const at = committed.get(partition);
      // No committed offset: a group reading from the beginning starts at the low watermark.
      if (at === undefined ? this.config.from_beginning : at < mark.high) return false;
    }
    return true;
  }
}
