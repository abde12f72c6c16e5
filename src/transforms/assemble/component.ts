/**
 * The ingest stage (`assemble` in a pipeline): a lane's batches decoded in chunks (decode/, on worker
 * threads when asked) and applied to the lane's Assembler, and what ties sessions to the input. Each open
 * session holds its first offset in the lane's ledger (the ack travels with its unit); sessions the
 * lane's files already hold (recovery) are skipped; and the open-session limits apply to all lanes
 * together, cutting the oldest session of any lane first.
 */
import type { Ack } from "../../contract/ledger.ts";
import type { IngestStage, Lane, LaneIngest, SessionSpan, Unit } from "../../contract/components.ts";
import type { Holdings } from "../../core/held-memory.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, recordSize, type DeadLetterOutput, type RawRecord } from "../../core/records.ts";
import type { PolicyUpdateEvent } from "../../schemas/events.ts";
import type { Origin } from "../../schemas/origin.ts";
import { sessionKey, type SessionOutput } from "../../schemas/session.ts";
import type { DecodeResult } from "./decode/decode.ts";
import { DecodePool, type DecodeTicket } from "./decode/pool.ts";
import { Assembler } from "./assembler.ts";
import { SESSION_OVERHEAD_BYTES, type AssembleConfig } from "./config.ts";

/** An open session's hold on its lane: offsets, bytes, and its place in the opening order. */
interface OpenSpan {
  uid: string;
  sessionId: string;
  first: number;
  last: number;
  bytes: number;
  order: number;
  ack: Ack;
  /**
   * Where the session's first valid event came from (its SESSION_WITHOUT_ROWS dead letter points there);
   * null for a session finalized holding nothing (each of its events already has its own dead letter).
   */
  origin: Origin | null;
}

export interface AssembleComponentContext {
  metrics: Metrics;
  logger: Logger;
  /** Threads records are decoded on; 0: the ingest thread. */
  decodeWorkers: number;
  /** Where control events (policy.update) go: the transforms. */
  control(event: PolicyUpdateEvent): void;
}

/**
 * Chunks a batch is decoded in: small enough that assembly starts soon, large enough that the hand-over
 * to a worker is a small part of the chunk's cost.
 */
const DECODE_CHUNK_RECORDS = 256;
const DECODE_CHUNK_BYTES = 1 << 20;

/** One lane's assembly. */
export class LaneAssembler implements LaneIngest {
  readonly lane: Lane;
  private readonly owner: AssembleComponent;
  private readonly assembler: Assembler;
  private readonly deadLetters: DeadLetterOutput;
  /** Sessions already in files (recovery): key → last offset applied there. */
  private readonly written: Map<string, number>;
  /** Open sessions in opening order. */
  readonly spans = new Map<string, OpenSpan>();
  /** Chunks of batches handed over and not applied yet (a revoked lane's are never iterated). */
  private readonly tickets = new Set<DecodeTicket>();

  constructor(
    owner: AssembleComponent,
    lane: Lane,
    deadLetters: DeadLetterOutput,
    written: Map<string, number>,
  ) {
    this.owner = owner;
    this.lane = lane;
    this.deadLetters = deadLetters;
    this.written = written;
    this.assembler = new Assembler({
      config: owner.config,
      deadLetters,
      metrics: owner.ctx.metrics,
      logger: owner.ctx.logger,
    });
  }

  get eventTime(): number {
    return this.assembler.eventTime;
  }

  get openSessions(): number {
    return this.assembler.openSessions;
  }

  records(records: RawRecord[], offsets: number[], live: () => boolean): AsyncIterable<Unit[]> {
    // Decoding starts now; applying once the caller iterates (after the batches handed over before).
    const chunks = this.owner.decode(records);
    for (const c of chunks) this.tickets.add(c);
    return this.apply(records, offsets, live, chunks);
  }

  private async *apply(
    records: RawRecord[],
    offsets: number[],
    live: () => boolean,
    chunks: DecodeTicket[],
  ): AsyncGenerator<Unit[]> {
    const { ledger } = this.lane;
    let at = 0;
    try {
      batch: for (let c = 0; c < chunks.length; c++) {
        const chunk = chunks[c]!;
        const decoded = await chunk.results;
        for (let i = 0; i < decoded.length; i++, at++) {
          if (!live()) break batch;
          const offset = offsets[at]!;
          const result = decoded[i]!;
          // The batch no longer holds what it applied: its events lived as long as the whole batch did,
          // long enough to be promoted to the old generation (half of what the ingest thread promoted).
          (decoded as Array<DecodeResult | null>)[i] = null;
          if (offset < ledger.next) continue; // delivered again within this generation
          const units = this.push(records[at]!, offset, result);
          ledger.next = offset + 1;
          // Only when there is something to do: a yield per record would cost every event an await.
          if (units.length > 0 || this.owner.overLimits) yield units;
        }
        chunk.done();
        this.tickets.delete(chunk);
      }
    } finally {
      // A batch left early (stopped, failed) frees its chunks' places for the next batches.
      for (const chunk of chunks) {
        chunk.done();
        this.tickets.delete(chunk);
      }
    }
    this.owner.ctx.metrics.inc("events_read", "", at);
  }

  /** Applies one decoded record at `offset`; returns the units of the sessions it finished. */
  private push(record: RawRecord, offset: number, decoded: DecodeResult): Unit[] {
    if (decoded.kind === "control") {
      this.owner.ctx.metrics.inc("control_events", decoded.control.type);
      this.owner.ctx.control(decoded.control);
      return [];
    }
    if (decoded.kind === "rejected") this.deadLetters.write(decoded.deadLetter);
    const envelope = decoded.kind === "event" ? decoded.value.event : decoded.envelope;
    if (envelope === undefined) return [];
    const key = sessionKey(envelope.uid, envelope.session_id);
    if (this.written.size > 0) {
      const writtenUpTo = this.written.get(key);
      if (writtenUpTo !== undefined) {
        if (offset <= writtenUpTo) {
          this.owner.ctx.metrics.inc("events_already_written");
          return [];
        }
        if (decoded.kind === "event") {
          this.deadLetters.write(
            makeDeadLetter(
              "LATE_EVENT",
              `${envelope.session_id} of uid ${envelope.uid} was already written before this event (offset ${offset})`,
              "assemble",
              record,
              { uid: envelope.uid, session_id: envelope.session_id, seq: envelope.seq },
            ),
          );
        }
        return [];
      }
    }
    if (this.assembler.isFinalized(envelope.uid, envelope.session_id, key)) {
      return decoded.kind === "event" ? this.units(this.assembler.push(decoded.value, key)) : [];
    }
    if (decoded.kind !== "event" && !this.spans.has(key)) {
      // A rejected event (its dead letter written) opens no session: garbage with a new session id per
      // line must not leave state behind (issue 27 item 10). Its offset stays held while the assembler
      // remembers its seq, so a restart reads it again before the session's later events.
      return this.units(this.assembler.pushRejected(decoded.envelope!, this.lane.ledger.hold(offset)));
    }
    let bytes = recordSize(record);
    const span = this.spans.get(key);
    if (span === undefined) {
      // Counted with what a session holds beyond its events, so the limits bound memory (issue 27 item 9).
      bytes += SESSION_OVERHEAD_BYTES;
      // Opened by a valid event: only those reach here without a span.
      const earlier = this.assembler.takeRejectedHold(envelope.uid, envelope.session_id) as Ack | null;
      this.spans.set(key, {
        uid: envelope.uid,
        sessionId: envelope.session_id,
        first: earlier?.offset ?? offset,
        last: offset,
        bytes,
        order: this.owner.nextOrder(),
        ack: earlier ?? this.lane.ledger.hold(offset),
        origin: record.origin,
      });
    } else {
      span.last = offset;
      span.bytes += bytes;
    }
    this.owner.bufferedBytes += bytes;
    return this.units(
      decoded.kind === "event"
        ? this.assembler.push(decoded.value, key, true)
        : this.assembler.pushRejected(decoded.envelope!),
    );
  }

  /** Moves the lane's clock to at least `time` (a quiet live lane); returns the units that finishes. */
  /** True once the session was finalized here or found written at the lane's start. */
  finalized(uid: string, sessionId: string): boolean {
    const key = sessionKey(uid, sessionId);
    return this.written.has(key) || this.assembler.isFinalized(uid, sessionId, key);
  }

  advanceClock(time: number): Unit[] {
    return this.units(this.assembler.advanceTo(time));
  }

  /** Every open session, finished as it is (end of input, or a draining stop). */
  flush(): Unit[] {
    return this.units(this.assembler.flush());
  }

  /** The oldest open session's opening order, or Infinity. */
  oldestOrder(): number {
    const first = this.spans.values().next().value;
    return first === undefined ? Infinity : first.order;
  }

  /** Cuts the oldest open session (memory limits). */
  cutOldest(): Unit[] {
    const first = this.spans.entries().next().value;
    if (first === undefined) return [];
    const [key, span] = first;
    const output = this.assembler.cut(span.uid, span.sessionId);
    if (output === null) {
      // Its events were all rejected or late: nothing to write, nothing to hold.
      this.spans.delete(key);
      this.owner.bufferedBytes -= span.bytes;
      span.ack.release();
      return [];
    }
    return this.units([output]);
  }

  /** The lane was revoked: its sessions are dropped (the next owner reads them again). */
  drop(): void {
    for (const ticket of this.tickets) ticket.done();
    this.tickets.clear();
    for (const span of this.spans.values()) this.owner.bufferedBytes -= span.bytes;
    this.spans.clear();
    this.owner.closed(this);
  }

  private withoutRows(o: SessionOutput, span: OpenSpan): void {
    this.deadLetters.write({
      code: "SESSION_WITHOUT_ROWS",
      message:
        `session ${o.sessionId} of uid ${o.uid} ended (${o.status}) with no row: ${o.withoutRows} ` +
        `(its events: ${this.lane.id}, offsets ${span.first}..${span.last}, the first at this origin)`,
      component: "assemble",
      origin: span.origin!,
      uid: o.uid,
      session_id: o.sessionId,
      details: { status: o.status, reason: o.withoutRows, first_offset: span.first, last_offset: span.last },
    });
  }

  private units(outputs: SessionOutput[]): Unit[] {
    if (outputs.length === 0) return [];
    const now = performance.now();
    return outputs.map((o) => {
      const key = sessionKey(o.uid, o.sessionId);
      let span = this.spans.get(key);
      if (span === undefined) {
        // A session finalized without holding anything (all of it rejected): it holds the next offset.
        const at = this.lane.ledger.next;
        span = {
          uid: o.uid,
          sessionId: o.sessionId,
          first: at,
          last: at,
          bytes: 0,
          order: 0,
          ack: this.lane.ledger.hold(at),
          origin: null,
        };
      } else {
        this.spans.delete(key);
        this.owner.bufferedBytes -= span.bytes;
      }
      // Valid events that became no row are accounted for where rejected ones are (all-rejected
      // sessions, with no origin here, already are: each event has its own dead letter).
      if (o.withoutRows != null && span.origin !== null) this.withoutRows(o, span);
      const tag: SessionSpan = [o.uid, o.sessionId, span.first, span.last];
      return { sessions: [o], rows: null, acks: [span.ack], spans: [tag], finishedAt: now };
    });
  }
}

/** The stage: decodes, builds lane assemblers and keeps the limits of all lanes together. */
export class AssembleComponent implements IngestStage {
  readonly config: AssembleConfig;
  readonly ctx: AssembleComponentContext;
  private readonly decoders: DecodePool;
  private readonly lanes = new Set<LaneAssembler>();
  private opened = 0;
  /** Bytes of events held by open sessions, all lanes. */
  bufferedBytes = 0;

  constructor(config: AssembleConfig, ctx: AssembleComponentContext) {
    this.config = config;
    this.ctx = ctx;
    this.decoders = new DecodePool(ctx.decodeWorkers);
  }

  /** The records in chunks, all handed to the decoders at once (they decode a window ahead of assembly). */
  decode(records: RawRecord[]): DecodeTicket[] {
    const chunks: DecodeTicket[] = [];
    let start = 0;
    let bytes = 0;
    for (let i = 0; i < records.length; i++) {
      bytes += recordSize(records[i]!);
      if (i + 1 - start >= DECODE_CHUNK_RECORDS || bytes >= DECODE_CHUNK_BYTES || i === records.length - 1) {
        const ticket = this.decoders.decode(records.slice(start, i + 1), bytes);
        // A chunk left behind by a rebalance may fail after nobody awaits it any more.
        ticket.results.catch(() => {});
        chunks.push(ticket);
        start = i + 1;
        bytes = 0;
      }
    }
    return chunks;
  }

  close(): Promise<void> {
    return this.decoders.close();
  }

  nextOrder(): number {
    return this.opened++;
  }

  openLane(lane: Lane, deadLetters: DeadLetterOutput, written: Map<string, number>): LaneAssembler {
    const l = new LaneAssembler(this, lane, deadLetters, written);
    this.lanes.add(l);
    return l;
  }

  finalized(uid: string, sessionId: string): boolean {
    for (const lane of this.lanes) if (lane.finalized(uid, sessionId)) return true;
    return false;
  }

  /** A lane dropped its sessions: it no longer counts. */
  closed(lane: LaneAssembler): void {
    this.lanes.delete(lane);
  }

  heldBytes(): Holdings {
    return { "open sessions": this.bufferedBytes };
  }

  get openSessions(): number {
    let n = 0;
    for (const l of this.lanes) n += l.openSessions;
    return n;
  }

  /** True while open sessions exceed a limit. */
  get overLimits(): boolean {
    return (
      this.bufferedBytes > this.config.max_buffered_bytes || this.openSessions > this.config.max_open_sessions
    );
  }

  /**
   * Cuts the oldest open session of all lanes: pausing instead would stall, since only new events let
   * sessions end. Returns its lane and units, or null when nothing is open.
   */
  cutOldest(): { lane: Lane; units: Unit[] } | null {
    let oldest: LaneAssembler | null = null;
    let order = Infinity;
    for (const l of this.lanes) {
      const o = l.oldestOrder();
      if (o < order) {
        order = o;
        oldest = l;
      }
    }
    return oldest === null ? null : { lane: oldest.lane, units: oldest.cutOldest() };
  }
}
