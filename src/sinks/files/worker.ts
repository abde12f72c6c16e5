/**
 * Worker thread: encodes a batch of rows and commits the file (atomic-file.ts), so the ingest thread
 * never waits on Arrow building, compression or fsync.
 */
import { parentPort } from "node:worker_threads";
import { wasmMemory } from "parquet-wasm/node";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { commitFile, writeTemp, type CommitOutcome } from "../shared/atomic-file.ts";
import { encodeRows } from "./encoders/index.ts";
import type { EncodeOptions } from "./encoders/types.ts";

export interface EncodeJob {
  id: number;
  path: string;
  rows: TrajectoryRow[];
  options: EncodeOptions;
  /** Leave the file under its temporary name (the caller publishes it after a fence). */
  stageOnly: boolean;
}

export type EncodeReply =
  | {
      id: number;
      ok: true;
      /** Absent when staged only. */
      outcome: CommitOutcome | null;
      /** The durable temporary, when staged only. */
      temp: string | null;
      bytes: number;
      encodeMs: number;
      writeMs: number;
      /** Bytes of WebAssembly memory this worker holds (it never shrinks; the pool recycles big ones). */
      wasmBytes: number;
    }
  | { id: number; ok: false; error: { message: string; code?: string; stack?: string } };

parentPort!.on("message", async (job: EncodeJob) => {
  try {
    const t0 = performance.now();
    const bytes = await encodeRows(job.rows, job.options);
    const t1 = performance.now();
    const temp = job.stageOnly ? await writeTemp(job.path, bytes) : null;
    const outcome = job.stageOnly ? null : await commitFile(job.path, bytes);
    const reply: EncodeReply = {
      id: job.id,
      ok: true,
      outcome,
      temp,
      bytes: bytes.length,
      encodeMs: t1 - t0,
      writeMs: performance.now() - t1,
      wasmBytes: wasmMemory().buffer.byteLength,
    };
    parentPort!.postMessage(reply);
  } catch (err) {
    const e = err as Error & { code?: string };
    const reply: EncodeReply = {
      id: job.id,
      ok: false,
      error: { message: e.message, code: e.code, stack: e.stack },
    };
    parentPort!.postMessage(reply);
  }
});
