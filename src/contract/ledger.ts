/**
 * The offset ledger of one lane (a Kafka partition, or a replayed input): which input position may be
 * acknowledged upstream. A session spans many offsets, so the committed offset can only advance to the
 * first offset of the oldest session whose rows are not durable yet (Kafka Streams' session windows face
 * the same problem); a dead letter holds its own offset until its sink made it durable.
 *
 * Every hold is an `Ack` that travels with the data. Fan-out retains it once per sink that must make the
 * data durable; the offset is released when the last reference is released. An ack dropped on the floor
 * (a lane revoked in a rebalance) simply never releases: the lane's ledger is discarded with it and the
 * next owner starts over from the committed offset.
 */
export class Ledger {
  /** Hold id → the lowest offset it holds back. */
  private readonly held = new Map<number, number>();
  private nextId = 0;
  /** The next offset to consume: everything below it was seen. */
  next: number;
  /** The offset last committed upstream (Kafka's convention: the next offset to read). */
  committed: number;

  constructor(start: number) {
    this.next = start;
    this.committed = start;
  }

  /** Holds `offset` back until the returned ack's last reference is released. */
  hold(offset: number): Ack {
    const id = this.nextId++;
    this.held.set(id, offset);
    return new Ack(this, id, offset);
  }

  /** Called by `Ack`: the hold is over. */
  releaseHold(id: number): void {
    this.held.delete(id);
  }

  /** Holds not yet released. */
  get holds(): number {
    return this.held.size;
  }

  /** The offset to commit: the lowest held one, or the next to consume when nothing is held. */
  committable(): number {
    let low = this.next;
    for (const offset of this.held.values()) if (offset < low) low = offset;
    return low;
  }
}

/** One hold on a ledger, reference counted: released when every holder released it. */
export class Ack {
  private readonly ledger: Ledger;
  private readonly id: number;
  private refs = 1;
  /** The offset held back (the first offset of a session, or a dead letter's own). */
  readonly offset: number;

  constructor(ledger: Ledger, id: number, offset: number) {
    this.ledger = ledger;
    this.id = id;
    this.offset = offset;
  }

  /** Adds `n` holders (one per sink the data fans out to). */
  retain(n = 1): void {
    if (this.refs <= 0) throw new Error("retain() on a released ack");
    this.refs += n;
  }

  /** One holder is done; the offset is free once all are. Extra releases are ignored. */
  release(): void {
    if (this.refs <= 0) return;
    if (--this.refs === 0) this.ledger.releaseHold(this.id);
  }

  get released(): boolean {
    return this.refs <= 0;
  }
}
