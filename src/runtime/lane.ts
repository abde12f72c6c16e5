/**
 * One lane's part of a running pipeline: its part of the ingest stage, of every transform and sink, and
 * the order units move in. A unit leaving the last transform is handed to the `topic` sinks first, and
 * only once they acknowledged it to the `durable` sink, so what the durable sink holds (what recovery
 * trusts) is everywhere.
 */
import type { Lane, LaneIngest, LaneSink, LaneTransform, Unit } from "../contract/components.ts";
import { unitRows } from "../contract/components.ts";

/** Rows waiting for the trajectory topics before they are produced in one go. */
const OUTBOX_ROWS = 1_000;

export class LaneRunner {
  readonly lane: Lane;
  readonly ingest: LaneIngest;
  private readonly transforms: LaneTransform[];
  /** Sinks acknowledged before the durable sink (trajectory topics). */
  private readonly before: LaneSink[];
  private readonly durable: LaneSink;
  private readonly sinkCount: number;
  private outbox: Unit[] = [];
  private outboxRows = 0;
  /** Batches handed over and not yet applied: the lane is not quiet while any is. */
  batchesInFlight = 0;
  /** Wall-clock time (ms) the last batch was applied, and the lane's event time then. */
  quietSince = Date.now();
  clockAtInput = 0;

  constructor(parts: {
    lane: Lane;
    ingest: LaneIngest;
    transforms: LaneTransform[];
    before: LaneSink[];
    durable: LaneSink;
  }) {
    this.lane = parts.lane;
    this.ingest = parts.ingest;
    this.transforms = parts.transforms;
    this.before = parts.before;
    this.durable = parts.durable;
    this.sinkCount = parts.before.length + 1;
  }

  get sinks(): LaneSink[] {
    return [...this.before, this.durable];
  }

  /** Moves units through the transforms from `from` on, then to the sinks. */
  async forward(units: Unit[], from = 0): Promise<void> {
    let batch = units;
    const eventTime = this.ingest.eventTime;
    for (let i = from; i < this.transforms.length && batch.length > 0; i++) {
      const t = this.transforms[i]!;
      const next: Unit[] = [];
      for (const unit of batch) {
        const r = t.push(unit, eventTime);
        const out = r instanceof Promise ? await r : r;
        for (const o of out) next.push(o);
      }
      batch = next;
    }
    if (batch.length > 0) await this.deliver(batch);
  }

  private async deliver(units: Unit[]): Promise<void> {
    // Each sink releases its own reference once the unit is durable there.
    if (this.sinkCount > 1) for (const u of units) for (const ack of u.acks) ack.retain(this.sinkCount - 1);
    if (this.before.length === 0) return this.durable.write(units);
    for (const u of units) {
      this.outbox.push(u);
      this.outboxRows += unitRows(u).length;
    }
    if (this.outboxRows >= OUTBOX_ROWS) await this.flushOutbox();
  }

  private async flushOutbox(): Promise<void> {
    if (this.outbox.length === 0) return;
    const units = this.outbox;
    this.outbox = [];
    this.outboxRows = 0;
    await Promise.all(this.before.map((s) => s.write(units)));
    await this.durable.write(units);
  }

  /**
   * End of a batch of records: time-driven releases (group timeouts), units held for throughput
   * (scored sessions), and the outbox. With `final` (end of input, or a draining stop), every open
   * session is finished and everything held goes on, and the files are cut.
   */
  async endOfBatch(final: boolean): Promise<void> {
    if (final) await this.forward(this.ingest.flush());
    const eventTime = this.ingest.eventTime;
    for (let i = 0; i < this.transforms.length; i++) {
      const tick = this.transforms[i]!.tick?.(eventTime) ?? [];
      if (tick.length > 0) await this.forward(tick, i + 1);
    }
    for (let i = 0; i < this.transforms.length; i++) {
      const r = this.transforms[i]!.flush(final, eventTime);
      const out = r instanceof Promise ? await r : r;
      if (out.length > 0) await this.forward(out, i + 1);
    }
    await this.flushOutbox();
    if (final) await this.durable.cut();
  }

  /** A batch of input was applied: the lane's wall clock restarts from its event time now. */
  applied(): void {
    this.quietSince = Date.now();
    this.clockAtInput = this.ingest.eventTime;
  }

  /**
   * The lane is caught up and quiet: its clock follows the wall clock from its last input on, and what
   * that time ends (reward grace, idle sessions, group timeouts) goes on to the sinks; with `cutFiles`,
   * buffered rows are written now instead of at the file age.
   */
  async followWallClock(now: number, cutFiles: boolean): Promise<void> {
    const units = this.ingest.advanceClock(this.clockAtInput + (now - this.quietSince));
    if (units.length > 0) await this.forward(units);
    await this.endOfBatch(false);
    // Nothing more is coming now: rows waiting for a fuller file would only wait (a trainer may be
    // waiting for them, which is why the input is quiet).
    if (cutFiles) await this.durable.cut();
  }

  /**
   * A draining run (--until-idle-ms) caught up with its input: what the lane holds goes on and its buffered
   * rows become files now rather than at the file age; open sessions stay open (the stop writes them).
   */
  async cutFiles(): Promise<void> {
    await this.endOfBatch(false);
    await this.durable.cut();
  }

  /** The lane was revoked: nothing it holds may land. */
  abandon(): void {
    this.outbox = [];
    this.outboxRows = 0;
    for (const s of this.sinks) s.abandon();
  }

  /** Waits until everything handed to the sinks is durable. */
  async drain(): Promise<void> {
    for (const s of this.sinks) await s.drain();
  }
}
