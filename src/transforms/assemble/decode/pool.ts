/**
 * Decoding on worker threads. The ingest thread hands over chunks of raw events and gets back, in order,
 * the same results decodeEvent gives: events arrive with their typed arrays transferred, not copied;
 * rejected ones as their reasons, which the ingest thread makes dead letters carrying the real origin;
 * those the zod schemas must validate (workers do not load them) parsed, validated on the ingest thread
 * without being parsed again (but for a hostile one too deep to send). With size 0 everything is decoded
 * inline.
 */
import { Worker } from "node:worker_threads";
import { TrajflowError } from "../../../core/errors.ts";
import { recordSize, type RawRecord } from "../../../core/records.ts";
import { registerThread, type ThreadUsage } from "../../../core/thread-usage.ts";
import { decodeEvent, finishDecode, rejectedResult, type DecodeResult } from "./decode.ts";
import type { GatewayEvent } from "../../../schemas/events.ts";
import { EventUnpacker } from "./reply-codec.ts";
import type { DecodeJob, DecodeReply } from "./worker.ts";

interface Pending {
  records: RawRecord[];
  resolve: (results: DecodeResult[]) => void;
  reject: (e: Error) => void;
}

interface Queued extends Pending {
  id: number;
  dispatched: boolean;
  /** The records' bytes. */
  bytes: number;
}

/** A chunk handed to the pool: its results, and `done` once the caller has applied them (or gave up). */
export interface DecodeTicket {
  results: Promise<DecodeResult[]>;
  /** Frees the chunk's place in the window; also for a chunk never awaited. Later calls do nothing. */
  done(): void;
}

/**
 * Chunks decoded but not yet applied, at most, and their bytes. Decoding runs ahead of assembly, and a chunk
 * that arrives early waits as objects on the ingest thread's heap: unbounded, whole fetches (4 partitions
 * x ~6,000 events on the shared harness's short workload) were decoded ahead, promoted to the old
 * generation, and their buffers freed only by the next full collection. Too few, and the worker idles
 * whenever the ingest thread does something else between chunks (a fetch's decompression, a file's cut:
 * 5-40 ms, while a chunk of 256 short events decodes in ~2 ms). So up to DECODE_WINDOW chunks go ahead
 * while they hold at most DECODE_WINDOW_BYTES of events (short events: all 8; chunks of 1 MiB of long
 * prompts: 2), and DECODE_WINDOW_MIN always. 8 against 2, on the shared harness's short workload
 * (BENCHMARKS.md): end to end 0.99-1.61x the peer (median 1.27x, 16 runs) against 0.90-1.46x (median
 * 1.17x, 12 runs), peak RSS ~20 MiB higher; on the long workload, 8 chunks of long prompts ahead took peak
 * RSS ~20 MiB higher at no gain, hence the bytes.
 */
export const DECODE_WINDOW = 8;
export const DECODE_WINDOW_MIN = 2;
export const DECODE_WINDOW_BYTES = 2.5 * 1024 * 1024;

export class DecodePool {
  private readonly workers: Worker[] = [];
  private readonly inFlight = new Map<number, Pending>();
  /** Chunks waiting for a place in the window, in order. */
  private readonly queue: Queued[] = [];
  /** Chunks dispatched whose tickets are not done yet, and their bytes. */
  private outstanding = 0;
  private outstandingBytes = 0;
  private nextId = 0;
  private failure: Error | null = null;
  /** Jobs' buffers the workers handed back, for the next jobs. */
  private readonly buffers = new JobBuffers();

  constructor(size: number) {
    for (let i = 0; i < size; i++) {
      const worker = new Worker(new URL("./worker.ts", import.meta.url));
      let usage: ThreadUsage | null = null;
      registerThread(`decode ${i + 1}`, () => usage);
      // Its own: a worker numbers the shapes of the events it packs in the order it sends them.
      const unpacker = new EventUnpacker();
      worker.on("message", (reply: DecodeReply) => {
        usage = reply.usage;
        this.settle(reply, unpacker);
      });
      worker.on("error", (err) => this.fail(err));
      // An idle pool must not keep the process alive.
      worker.unref();
      this.workers.push(worker);
    }
  }

  get size(): number {
    return this.workers.length;
  }

  /** Chunks waiting for a place in the window. */
  get queued(): number {
    return this.queue.length;
  }

  /**
   * Decodes `records` (in order, one result each; `bytes`: their recordSize, when the caller counted it).
   * Chunks decode back to back, within the window (DECODE_WINDOW) ahead of the caller's `done`.
   */
  decode(records: RawRecord[], bytes = recordsSize(records)): DecodeTicket {
    if (this.failure !== null) return settled(Promise.reject(this.failure));
    if (this.workers.length === 0 || records.length === 0) {
      return settled(Promise.resolve(records.map(decodeEvent)));
    }
    let entry!: Queued;
    const results = new Promise<DecodeResult[]>((resolve, reject) => {
      entry = { id: this.nextId++, records, resolve, reject, dispatched: false, bytes };
    });
    this.queue.push(entry);
    this.pump();
    let open = true;
    return {
      results,
      done: () => {
        if (!open) return;
        open = false;
        if (entry.dispatched) {
          this.outstanding--;
          this.outstandingBytes -= entry.bytes;
        } else {
          // Given up before it was dispatched (a revoked lane's batch): nobody waits for it.
          const at = this.queue.indexOf(entry);
          if (at >= 0) this.queue.splice(at, 1);
        }
        this.pump();
      },
    };
  }

  /** Dispatches queued chunks while the window has room. */
  private pump(): void {
    while (this.queue.length > 0 && this.failure === null && this.hasRoomFor(this.queue[0]!.bytes)) {
      const next = this.queue.shift()!;
      next.dispatched = true;
      this.outstanding++;
      this.outstandingBytes += next.bytes;
      this.dispatch(next.id, next);
    }
  }

  private hasRoomFor(bytes: number): boolean {
    if (this.outstanding < DECODE_WINDOW_MIN) return true;
    return this.outstanding < DECODE_WINDOW && this.outstandingBytes + bytes <= DECODE_WINDOW_BYTES;
  }

  private dispatch(id: number, pending: Pending): void {
    const job = packRecords(id, pending.records, this.buffers);
    const worker = this.workers[id % this.workers.length]!;
    this.inFlight.set(id, pending);
    if (this.inFlight.size === 1) for (const w of this.workers) w.ref();
    const moving = [
      job.bytes.buffer,
      job.ends.buffer,
      ...(job.starts === undefined ? [] : [job.starts.buffer]),
    ];
    worker.postMessage(job, moving as ArrayBuffer[]);
  }

  private settle(reply: DecodeReply, unpacker: EventUnpacker): void {
    // Shapes first, before anything can return: the worker's next message may use them.
    unpacker.begin(reply.events);
    const pending = this.inFlight.get(reply.id);
    this.buffers.give(reply.spent);
    if (pending === undefined) return;
    this.inFlight.delete(reply.id);
    if (this.inFlight.size === 0) for (const w of this.workers) w.unref();
    const results: DecodeResult[] = new Array(reply.packed.length);
    let item = 0;
    let digest = 0;
    for (let i = 0; i < results.length; i++) {
      const record = pending.records[i]!;
      if (reply.packed[i] === 1) {
        const event = unpacker.next() as GatewayEvent;
        results[i] = { kind: "event", value: { event, digest: reply.digests[digest++]!, record } };
        continue;
      }
      const next = reply.items[item++]!;
      if ("rejection" in next) results[i] = rejectedResult(next.rejection, record);
      else if ("event" in next) {
        // The worker's object, completed in place: a copy per event was 13 MiB of the ingest thread's
        // garbage on the short workload.
        const value = next as typeof next & { record: RawRecord };
        value.record = record;
        results[i] = { kind: "event", value };
      } else if ("control" in next) results[i] = { kind: "control", control: next.control, record };
      // The zod schemas, which workers do not load; an event too deep to send is decoded again.
      else results[i] = next.schema === null ? decodeEvent(record) : finishDecode(next.schema, record);
    }
    pending.resolve(results);
  }

  private fail(err: Error): void {
    this.failure = new TrajflowError("SOURCE_READ_FAILED", `a decode worker crashed: ${err.message}`, {
      cause: err,
    });
    for (const p of this.inFlight.values()) p.reject(this.failure);
    this.inFlight.clear();
    for (const p of this.queue) p.reject(this.failure);
    this.queue.length = 0;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

function recordsSize(records: RawRecord[]): number {
  let bytes = 0;
  for (const r of records) bytes += recordSize(r);
  return bytes;
}

/** A ticket whose results need no place in the window. */
function settled(results: Promise<DecodeResult[]>): DecodeTicket {
  return { results, done: () => {} };
}

/**
 * The records' bytes in one buffer of its own (never a pooled slice, so it can be transferred), without
 * zero-filling it. Records that lie in order in one buffer, as a Kafka batch's values do in their
 * decompressed batch, are copied as one span with the framing between them (`starts` then says where each
 * begins): one copy instead of one per record. Otherwise they are packed back to back.
 */
export function packRecords(id: number, records: RawRecord[], buffers: JobBuffers): DecodeJob {
  const span = sharedSpan(records);
  if (span !== null) {
    const { buffer, starts, ends } = span;
    const first = starts[0]!;
    const bytes = buffers.take(ends[ends.length - 1]! - first);
    bytes.set(buffer.subarray(first, ends[ends.length - 1]));
    for (let i = 0; i < starts.length; i++) {
      starts[i] = starts[i]! - first;
      ends[i] = ends[i]! - first;
    }
    return { id, bytes, ends, starts };
  }
  // Read once: a record may make its bytes' view on each read (a Kafka record does).
  const raws = records.map((r) => r.raw);
  const ends = new Uint32Array(raws.length);
  let total = 0;
  for (const raw of raws) total += typeof raw === "string" ? Buffer.byteLength(raw) : raw.length;
  const bytes = buffers.take(total);
  const view = Buffer.from(bytes.buffer, 0, total);
  let at = 0;
  for (let i = 0; i < raws.length; i++) {
    const raw = raws[i]!;
    if (typeof raw === "string") at += view.write(raw, at);
    else {
      view.set(raw, at);
      at += raw.length;
    }
    ends[i] = at;
  }
  return { id, bytes, ends };
}

/**
 * Buffers for jobs, reused: each job's buffer comes back with its reply. A fresh buffer of a chunk's size
 * (256 KiB to 1 MiB) is a new mapping whose pages fault in as they are first written, and is unmapped
 * when the worker lets it go: on the short workload of the shared harness that copy cost 65 ms of the
 * ingest thread, and the allocator kept freed memory across threads.
 */
export class JobBuffers {
  private readonly spare: ArrayBuffer[] = [];

  /** A buffer of at least `bytes` (its first `bytes` viewed), not zeroed. */
  take(bytes: number): Uint8Array {
    for (let i = 0; i < this.spare.length; i++) {
      const b = this.spare[i]!;
      if (b.byteLength >= bytes) {
        this.spare.splice(i, 1);
        return new Uint8Array(b, 0, bytes);
      }
    }
    // Rounded up, so a buffer fits the chunks after it too.
    const size = Math.ceil(Math.max(bytes, 1) / JOB_BUFFER_STEP) * JOB_BUFFER_STEP;
    return new Uint8Array(Buffer.allocUnsafeSlow(size).buffer, 0, bytes);
  }

  /** A buffer handed back; kept while fewer than SPARE_JOB_BUFFERS wait (a batch's chunks in flight). */
  give(buffer: ArrayBuffer): void {
    if (this.spare.length < SPARE_JOB_BUFFERS && buffer.byteLength <= MAX_SPARE_BYTES)
      this.spare.push(buffer);
  }
}

const JOB_BUFFER_STEP = 256 * 1024;
const SPARE_JOB_BUFFERS = 8;
/** A job larger than a chunk (one record of many MiB) keeps its buffer only until it is collected. */
const MAX_SPARE_BYTES = 4 * 1024 * 1024;

/** Copying framing too is worth one copy instead of many while it stays below this share of the span. */
const MAX_FRAMING_SHARE = 0.25;

/**
 * Where the records lie, in order, in one buffer with little between them (a Kafka batch's values in
 * their decompressed batch): that buffer and each record's start and end in it; null otherwise. A record
 * that says where its bytes lie (rawBuffer, rawOffset, rawLength: a Kafka record's) is read without making
 * a view of its bytes.
 */
function sharedSpan(
  records: RawRecord[],
): { buffer: Uint8Array; starts: Uint32Array; ends: Uint32Array } | null {
  const starts = new Uint32Array(records.length);
  const ends = new Uint32Array(records.length);
  // What the records' buffer is known by: a record's rawBuffer, or the ArrayBuffer a view of bytes lies in.
  let owner: unknown = null;
  let buffer: Uint8Array | null = null;
  let end = 0;
  let total = 0;
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    let at: number;
    let length: number;
    if (r.rawBuffer !== undefined && r.rawOffset !== undefined && r.rawLength !== undefined) {
      if (owner === null) owner = buffer = r.rawBuffer;
      else if (r.rawBuffer !== owner) return null;
      at = r.rawOffset;
      length = r.rawLength;
    } else {
      const raw = r.raw;
      if (typeof raw === "string") return null;
      if (owner === null) {
        owner = raw.buffer;
        buffer = new Uint8Array(raw.buffer);
      } else if (raw.buffer !== owner) return null;
      at = raw.byteOffset;
      length = raw.length;
    }
    if (i > 0 && at < end) return null;
    starts[i] = at;
    end = ends[i] = at + length;
    total += length;
  }
  const span = end - starts[0]!;
  return span - total <= MAX_FRAMING_SHARE * span ? { buffer: buffer!, starts, ends } : null;
}
