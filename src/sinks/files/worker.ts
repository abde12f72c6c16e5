/**
 * Worker thread: encodes a batch of rows and commits the file (atomic-file.ts), so the ingest thread
 * never waits on Arrow building, compression or fsync.
 */
import { parentPort } from "node:worker_threads";
import { wasmMemory } from "parquet-wasm/node";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { commitFile, writeTemp, type CommitOutcome } from "../shared/atomic-file.ts";
import { rowsToTable } from "../../schemas/trajectory-arrow.ts";
import { encodeRows } from "./encoders/index.ts";
import { encodeParquetWasm } from "./encoders/parquet-wasm.ts";
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

/**
 * One throwaway encode when the worker starts (while the consumer connects): WebAssembly and the column
 * builders are compiled for speed only once they ran, so the run's first file paid for it. Measured:
 * the first 671-row file 164 ms cold, 90 ms after this (~60 ms here, off the critical path).
 */
function warmUp(): void {
  const tokens = (n: number) => Int32Array.from({ length: n }, (_, i) => (i * 7919) % 150_000);
  const row: TrajectoryRow = {
    key: "warm-up_s_0",
    uid: "warm-up",
    session_id: "s",
    index: 0,
    sample_index: null,
    group_size: null,
    prompt_ids: tokens(16_384),
    response_ids: tokens(4_096),
    response_mask: new Int8Array(4_096).fill(1),
    rollout_log_probs: new Float32Array(4_096).fill(-0.5),
    reward: 1,
    episode_finished: true,
    finish_reasons: ["stop"],
    finish_reasons_raw: ["stop"],
    weight_version_min: 1,
    weight_version_max: 1,
    num_turns: 1,
    num_trained_tokens: 4_096,
    status: "ok",
    flags: [],
    parent_index: null,
    shared_prefix_len: 0,
    sample_mask: 1,
    ended_at_ms: 0,
    last_trained_index: 4_095,
    reward_names: [],
    reward_values: [],
    reward_info: null,
    turn_end_indices: Int32Array.of(4_095),
    turn_rewards: null,
  };
  const options = { compression: "zstd", metadata: {}, rowGroupSize: 1 << 20 } as const;
  for (let i = 0; i < 3; i++) encodeParquetWasm(rowsToTable([row, row, row, row]), options);
}
warmUp();

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
