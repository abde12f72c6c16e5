/**
 * Worker thread: encodes a batch of rows (handed over column-wise, encoded as columns) and commits the file to its store (a directory or S3), so the
 * ingest thread never waits on Arrow building, compression, fsync or uploads. The encoder's chunks go to
 * the store as they are made.
 */
import { parentPort, workerData } from "node:worker_threads";
import { ThreadMeter, type ThreadUsage } from "../../core/thread-usage.ts";
import { emptyRow, type TrajectoryRow } from "../../schemas/trajectory.ts";
import type { S3Options } from "../shared/s3-options.ts";
import { unpackColumns, type ColumnBatch } from "./row-columns.ts";
import { openStore } from "../shared/open-store.ts";
import type { CommitOutcome, Staged, Store } from "../shared/store.ts";
import { encodeColumnsInChunks, encodeRows, wasmMemoryBytes } from "./encoders/index.ts";
import type { EncodeOptions } from "./encoders/types.ts";

/** What the pool tells a worker when it starts. */
export interface EncoderWorkerData {
  /** The encoder the sink will use, warmed up before the first job. */
  warmUp: Pick<EncodeOptions, "format" | "engine" | "compression">;
  /** Where files go: a directory or `s3://bucket/prefix`, and the S3 client's options. */
  location: string;
  s3: S3Options;
}

export interface EncodeJob {
  id: number;
  /** The file's name within the store (`date=.../part-00000.parquet`). */
  name: string;
  /** The file's rows, column-wise (pool.ts). */
  rows: ColumnBatch;
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
      /** The staged file, when staged only: the caller publishes or discards it. */
      staged: Staged | null;
      bytes: number;
      encodeMs: number;
      writeMs: number;
      /** Bytes of parquet-wasm memory this worker holds (it never shrinks; the pool recycles big ones). */
      wasmBytes: number;
      /** This worker's CPU and memory so far (the run report's per-thread figures). */
      usage: ThreadUsage;
    }
  | { id: number; ok: false; error: { message: string; code?: string; stack?: string }; usage: ThreadUsage };

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

const data = workerData as EncoderWorkerData;
// Opened while the worker warms up: an S3 store loads the AWS SDK (~200 ms), which the first file would
// otherwise wait for.
const store: Promise<Store> = openStore(data.location, data.s3);
// A failure to open surfaces with the first job, as the warm-up's does.
store.catch(() => undefined);

/** Chunks as they pass, with the time spent making them (the encoder's share of the job). */
function timed(chunks: Iterable<Uint8Array>): { chunks: Iterable<Uint8Array>; ms: () => number } {
  let ms = 0;
  return {
    chunks: {
      [Symbol.iterator]() {
        const it = chunks[Symbol.iterator]();
        return {
          next() {
            const t = performance.now();
            const r = it.next();
            ms += performance.now() - t;
            return r;
          },
        };
      },
    },
    ms: () => ms,
  };
}

const meter = new ThreadMeter();

parentPort!.on("message", async (job: EncodeJob) => {
  try {
    await warm;
    const target = await store;
    const t0 = performance.now();
    const chunks = timed(await encodeColumnsInChunks(unpackColumns(job.rows), job.options));
    // Engines other than trajflow's encode the whole file before the first chunk.
    const whole = performance.now() - t0;
    let outcome: CommitOutcome | null = null;
    let staged: Staged | null = null;
    let bytes: number;
    if (job.stageOnly) {
      staged = await target.stage(job.name, chunks.chunks);
      bytes = staged.bytes;
    } else {
      ({ outcome, bytes } = await target.write(job.name, chunks.chunks));
    }
    const encodeMs = whole + chunks.ms();
    const reply: EncodeReply = {
      id: job.id,
      ok: true,
      outcome,
      staged,
      bytes,
      encodeMs,
      writeMs: performance.now() - t0 - encodeMs,
      wasmBytes: wasmMemoryBytes(),
      usage: meter.sample(),
    };
    parentPort!.postMessage(reply);
  } catch (err) {
    const e = err as Error & { code?: string };
    const reply: EncodeReply = {
      id: job.id,
      ok: false,
      error: { message: e.message, code: e.code, stack: e.stack },
      usage: meter.sample(),
    };
    parentPort!.postMessage(reply);
  }
});
