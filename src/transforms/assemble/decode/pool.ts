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
import type { RawRecord } from "../../../core/records.ts";
import { registerThread, type ThreadUsage } from "../../../core/thread-usage.ts";
import { decodeEvent, finishDecode, rejectedResult, type DecodeResult } from "./decode.ts";
import type { DecodeJob, DecodeReply } from "./worker.ts";

interface Pending {
  records: RawRecord[];
  resolve: (results: DecodeResult[]) => void;
  reject: (e: Error) => void;
}

export class DecodePool {
  private readonly workers: Worker[] = [];
  private readonly inFlight = new Map<number, Pending>();
  private nextId = 0;
  private failure: Error | null = null;

  constructor(size: number) {
    for (let i = 0; i < size; i++) {
      const worker = new Worker(new URL("./worker.ts", import.meta.url));
      let usage: ThreadUsage | null = null;
      registerThread(`decode ${i + 1}`, () => usage);
      worker.on("message", (reply: DecodeReply) => {
        usage = reply.usage;
        this.settle(reply);
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

  /** Decodes `records` (in order, one result each). Chunks queue up per worker and decode back to back. */
  decode(records: RawRecord[]): Promise<DecodeResult[]> {
    if (this.failure !== null) return Promise.reject(this.failure);
    if (this.workers.length === 0 || records.length === 0) {
      return Promise.resolve(records.map(decodeEvent));
    }
    let total = 0;
    for (const r of records) total += typeof r.raw === "string" ? Buffer.byteLength(r.raw) : r.raw.length;
    // One buffer of its own (never a pooled slice), so it can be transferred.
    const bytes = new Uint8Array(total);
    const ends = new Uint32Array(records.length);
    const view = Buffer.from(bytes.buffer);
    let at = 0;
    for (let i = 0; i < records.length; i++) {
      const raw = records[i]!.raw;
      if (typeof raw === "string") at += view.write(raw, at);
      else {
        bytes.set(raw, at);
        at += raw.length;
      }
      ends[i] = at;
    }
    const id = this.nextId++;
    const job: DecodeJob = { id, bytes, ends };
    const worker = this.workers[id % this.workers.length]!;
    return new Promise((resolve, reject) => {
      this.inFlight.set(id, { records, resolve, reject });
      if (this.inFlight.size === 1) for (const w of this.workers) w.ref();
      worker.postMessage(job, [bytes.buffer, ends.buffer]);
    });
  }

  private settle(reply: DecodeReply): void {
    const pending = this.inFlight.get(reply.id);
    if (pending === undefined) return;
    this.inFlight.delete(reply.id);
    if (this.inFlight.size === 0) for (const w of this.workers) w.unref();
    const results: DecodeResult[] = new Array(reply.items.length);
    for (let i = 0; i < reply.items.length; i++) {
      const item = reply.items[i]!;
      const record = pending.records[i]!;
      if ("rejection" in item) results[i] = rejectedResult(item.rejection, record);
      else if ("event" in item) results[i] = { kind: "event", value: { ...item, record } };
      else if ("control" in item) results[i] = { kind: "control", control: item.control, record };
      // The zod schemas, which workers do not load; an event too deep to send is decoded again.
      else results[i] = item.schema === null ? decodeEvent(record) : finishDecode(item.schema, record);
    }
    pending.resolve(results);
  }

  private fail(err: Error): void {
    this.failure = new TrajflowError("SOURCE_READ_FAILED", `a decode worker crashed: ${err.message}`, {
      cause: err,
    });
    for (const p of this.inFlight.values()) p.reject(this.failure);
    this.inFlight.clear();
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}
