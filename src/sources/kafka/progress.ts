/**
 * Which offset of a partition may be committed. A session spans many offsets, so the committed offset can
 * only advance to the first offset of the oldest session whose rows are not yet durable (Kafka Streams'
 * session windows face the same problem). Dead letters hold their offset until the dead-letter topic
 * acknowledged them.
 */
export class PartitionProgress {
  /** Token (a session, a dead letter) → the lowest offset it holds back. */
  private readonly pending = new Map<string, number>();
  /** The next offset to consume: everything below it was seen. */
  next: number;
  committed: number;

  constructor(start: number) {
    this.next = start;
    this.committed = start;
  }

  /** Holds `offset` back until `release(token)`; a token keeps the first offset it was held with. */
  hold(token: string, offset: number): void {
    if (!this.pending.has(token)) this.pending.set(token, offset);
  }

  release(token: string): void {
    this.pending.delete(token);
  }

  get held(): number {
    return this.pending.size;
  }

  /** The offset to commit: the lowest held one, or the next to consume when nothing is held. */
  committable(): number {
    let low = this.next;
    for (const offset of this.pending.values()) if (offset < low) low = offset;
    return low;
  }
}
