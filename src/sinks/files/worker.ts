/**
 * Worker thread: encodes a batch of rows and commits the file (atomic-file.ts), so the ingest thread
 * never waits on Arrow building, compression or fsync.
 */
import { parentPort, workerData } from "node:worker_threads";
import { emptyRow, type TrajectoryRow } from "../../schemas/trajectory.ts";
import { commitFile, writeTemp, type CommitOutcome } from "../shared/atomic-file.ts";
import { encodeRows, wasmMemoryBytes } from "./encoders/index.ts";
import type { EncodeOptions } from "./encoders/types.ts";

/** What the pool tells a worker when it starts. */
export interface EncoderWorkerData {
  /** The encoder the sink will use, warmed up before the first job. */
  warmUp: Pick<EncodeOptions, "format" | "engine" | "compression">;
}

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
      /** Bytes of parquet-wasm memory this worker holds (it never shrinks; the pool recycles big ones). */
      wasmBytes: number;
    }
  | { id: number; ok: false; error: { message: string; code?: string; stack?: string } };

/**
 * One throwaway encode when the worker starts (while the consumer connects): the encoder's code (and
 * parquet-wasm's WebAssembly) is compiled for speed only once it ran, so the run's first file paid for
 * it. Measured with parquet-wasm: the first 671-row file 164 ms cold, 90 ms after this.
 */
async function warmUp(engine: EncoderWorkerData["warmUp"]): Promise<void> {
  // parquetjs-lite is slow by the row: a warm-up would cost seconds and gain nothing measurable.
  if (engine.format === "parquet" && engine.engine === "parquetjs-lite") return;
  const tokens = (n: number) => Int32Array.from({ length: n }, (_, i) => (i * 7919) % 150_000);
  const row: TrajectoryRow = {
    ...emptyRow(),
    key: "warm-up_s_0",
    uid: "warm-up",
    session_id: "s",
    prompt_ids: tokens(16_384),
    response_ids: tokens(4_096),
    response_mask: new Int8Array(4_096).fill(1),
    rollout_log_probs: new Float32Array(4_096).fill(-0.5),
    reward: 1,
    finish_reasons: ["stop"],
    finish_reasons_raw: ["stop"],
    num_turns: 1,
    num_trained_tokens: 4_096,
    status: "ok",
    sample_mask: 1,
    last_trained_index: 4_095,
    turn_end_indices: Int32Array.of(4_095),
    sampling: [null],
  };
  const options: EncodeOptions = { ...engine, metadata: {}, rowGroupSize: 1 << 20 };
  for (let i = 0; i < 3; i++) await encodeRows([row, row, row, row], options);
}
// A failed warm-up is not an error of its own: the first real job meets the same problem and reports it.
const warm = warmUp((workerData as EncoderWorkerData).warmUp).catch(() => undefined);

parentPort!.on("message", async (job: EncodeJob) => {
  try {
    await warm;
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
      wasmBytes: wasmMemoryBytes(),
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
