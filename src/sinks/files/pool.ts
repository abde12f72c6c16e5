/**
 * A small pool of encoder worker threads. A file's rows go over packed by column (row-columns.ts): each
 * typed-array column in one buffer that moves to the worker, the rest as one array per column.
 */
import { Worker } from "node:worker_threads";
import { ErrorCodes, TrajflowError, type ErrorCode } from "../../core/errors.ts";
import { addUsage, registerThread, type ThreadUsage } from "../../core/thread-usage.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { columnBuffers, toColumns } from "./row-columns.ts";
import type { EncodeOptions } from "./encoders/types.ts";
import type { EncodeJob, EncodeReply, EncoderWorkerData } from "./worker.ts";

type Done = Extract<EncodeReply, { ok: true }>;

interface Slot {
  worker: Worker;
  busy: boolean;
  /** This slot's worker's latest figures, and those of the workers it replaced. */
  usage: ThreadUsage | null;
  retired: ThreadUsage | null;
}

interface Pending {
  resolve: (r: Done) => void;
  reject: (e: Error) => void;
}

const isErrorCode = (code: string | undefined): code is ErrorCode =>
  code !== undefined && Object.hasOwn(ErrorCodes, code);

/**
 * A worker whose WebAssembly memory grew past this is replaced after its job: WASM memory is returned to
 * the allocator after every file but never to the system, so one huge file would pin it for good.
 */
const RECYCLE_WASM_BYTES = 1 << 30;

export class EncoderPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Array<{ job: EncodeJob; pending: Pending }> = [];
  private readonly inFlight = new Map<number, Pending>();
  private nextId = 0;
  private closed = false;

  private readonly recycleBytes: number;
  private readonly workerData: EncoderWorkerData;

  /** `workerData`: the encoder each worker warms up as it starts, and the store files go to. */
  constructor(size: number, workerData: EncoderWorkerData, recycleBytes = RECYCLE_WASM_BYTES) {
    this.recycleBytes = recycleBytes;
    this.workerData = workerData;
    for (let i = 0; i < size; i++) {
      const slot = this.spawn();
      this.slots.push(slot);
      registerThread(`encoder ${i + 1}`, () => addUsage(slot.retired, slot.usage));
    }
  }

  /** Workers replaced because their WASM memory grew too large. */
  recycled = 0;

  private spawn(): Slot {
    const worker = new Worker(new URL("./worker.ts", import.meta.url), { workerData: this.workerData });
    const slot: Slot = { worker, busy: false, usage: null, retired: null };
    this.listen(slot);
    return slot;
  }

  private listen(slot: Slot): void {
    slot.worker.on("message", (reply: EncodeReply) => {
      slot.usage = reply.usage;
      this.settle(slot, reply);
    });
    slot.worker.on("error", (err) => this.fail(err));
  }

  /**
   * Encodes and commits one file, `name` within the store (or, `stageOnly`, leaves it staged for the
   * caller to publish). The rows are handed over: do not use them afterwards.
   */
  run(name: string, rows: TrajectoryRow[], options: EncodeOptions, stageOnly = false): Promise<Done> {
    if (this.closed) return Promise.reject(new Error("the encoder pool is closed"));
    return new Promise((resolve, reject) => {
      this.queue.push({
        job: { id: this.nextId++, name, rows: toColumns(rows), options, stageOnly },
        pending: { resolve, reject },
      });
      this.dispatch();
    });
  }

  private dispatch(): void {
    for (const slot of this.slots) {
      if (slot.busy) continue;
      const next = this.queue.shift();
      if (next === undefined) return;
      slot.busy = true;
      this.inFlight.set(next.job.id, next.pending);
      slot.worker.postMessage(next.job, columnBuffers(next.job.rows));
    }
  }

  private settle(slot: Slot, reply: EncodeReply): void {
    slot.busy = false;
    if (reply.ok && reply.wasmBytes > this.recycleBytes && !this.closed) {
      // The slot lives on with a new worker, so its registered figures carry the old worker's.
      void slot.worker.terminate();
      slot.worker = new Worker(new URL("./worker.ts", import.meta.url), { workerData: this.workerData });
      slot.retired = addUsage(slot.retired, slot.usage);
      slot.usage = null;
      this.listen(slot);
      this.recycled++;
    }
    const pending = this.inFlight.get(reply.id);
    this.inFlight.delete(reply.id);
    if (pending !== undefined) {
      if (reply.ok) pending.resolve(reply);
      else {
        // Coded errors keep their code (a file conflict, S3's); anything else (ENOSPC, EACCES, ...) is
        // a failed write.
        const code = isErrorCode(reply.error.code) ? reply.error.code : "SINK_WRITE_FAILED";
        pending.reject(
          new TrajflowError(code, reply.error.message, { details: { cause_code: reply.error.code } }),
        );
      }
    }
    this.dispatch();
  }

  private fail(err: Error): void {
    const error = new TrajflowError("SINK_WRITE_FAILED", `an encoder worker crashed: ${err.message}`, {
      cause: err,
    });
    for (const p of this.inFlight.values()) p.reject(error);
    this.inFlight.clear();
    for (const q of this.queue.splice(0)) q.pending.reject(error);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }
}
