/**
 * What the Kafka source asks the brokers about its topic and group, whichever client consumes: the
 * topic's watermarks (ListOffsets), the group's committed offsets (OffsetFetch) and who owns a partition
 * (DescribeGroups), through a kafkajs admin client. The librdkafka consumer asks through it too: the
 * binding's DescribeGroups crashes the process on a group that is rebalancing (it turns the protocol name,
 * null then, into a JavaScript string), and its admin client borrows the consumer's handle, which it may
 * use after the consumer closed.
 */
import type { KafkaConnection } from "./connection.ts";
import { assignedPartitions, connectClient, disconnectWithin, type createKafka } from "./client.ts";

type Admin = ReturnType<ReturnType<typeof createKafka>["admin"]>;

export class GroupAdmin {
  private readonly admin: Admin;
  private readonly topic: string;
  private readonly groupId: string;

  constructor(admin: Admin, topic: string, groupId: string) {
    this.admin = admin;
    this.topic = topic;
    this.groupId = groupId;
  }

  connect(connection: KafkaConnection): Promise<void> {
    return connectClient(this.admin, connection);
  }

  async topicOffsets(): Promise<Array<{ partition: number; low: number; high: number }>> {
    const offsets = await this.admin.fetchTopicOffsets(this.topic);
    return offsets.map((o) => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }));
  }

  async committedOffsets(): Promise<Map<number, number>> {
    const { topic } = this;
    const topics = await this.admin.fetchOffsets({ groupId: this.groupId, topics: [topic] });
    const out = new Map<number, number>();
    for (const p of topics.find((t) => t.topic === topic)?.partitions ?? []) {
      const offset = Number(p.offset);
      if (offset >= 0) out.set(p.partition, offset);
    }
    return out;
  }

  /** Whether the group is stable and its assignment of member `memberId` holds `partition`. */
  async owns(memberId: string, partition: number): Promise<boolean> {
    const { groups } = await this.admin.describeGroups([this.groupId]);
    const group = groups.find((g) => g.groupId === this.groupId);
    const me = group?.members.find((m) => m.memberId === memberId);
    if (group?.state !== "Stable" || me === undefined) return false;
    return assignedPartitions(me.memberAssignment, this.topic).includes(partition);
  }

  disconnect(ms: number): Promise<boolean> {
    return disconnectWithin(this.admin, ms);
  }
}
