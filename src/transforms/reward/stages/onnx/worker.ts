/**
 * One onnxruntime session on a worker thread: padding, inference and score mapping happen here, so the
 * event loop that ingests events never waits on a model.
 */
import { parentPort, workerData } from "node:worker_threads";
import ort from "onnxruntime-node";
import { cudaProviderMissing } from "./cuda.ts";
import type { OnnxStageOptions } from "./options.ts";

export type OnnxJob = { id: number; sequences: Int32Array[] };
export type OnnxReply =
  | { kind: "ready"; provider: string; warning: string | null }
  | { kind: "failed"; message: string }
  | { kind: "scores"; id: number; scores: Float64Array }
  | { kind: "error"; id: number; message: string };

const options = workerData as OnnxStageOptions;
const port = parentPort!;

async function open(): Promise<{ session: ort.InferenceSession; provider: string; warning: string | null }> {
  const errors: string[] = [];
  for (const provider of options.providers) {
    const missing = provider === "cuda" ? cudaProviderMissing() : null;
    if (missing !== null) {
      errors.push(`cuda: ${missing}`);
      if (options.require_cuda) break;
      continue;
    }
    try {
      const session = await ort.InferenceSession.create(options.model, {
        executionProviders: [provider],
        intraOpNumThreads: options.intra_op_threads,
        graphOptimizationLevel: "all",
      });
      const warning =
        errors.length === 0
          ? null
          : `execution provider(s) unavailable, using ${provider}: ${errors.join("; ")}`;
      return { session, provider, warning };
    } catch (err) {
      errors.push(`${provider}: ${(err as Error).message.split("\n")[0]}`);
      if (provider === "cuda" && options.require_cuda) break;
    }
  }
  throw new Error(errors.join("; "));
}

function bucketFor(length: number): number {
  for (const b of options.buckets) if (b >= length) return Math.min(b, options.max_length);
  return options.max_length;
}

function scoreOf(logits: Float32Array, row: number, classes: number): number {
  const { kind, class: c } = options.score;
  const x = logits[row * classes + c]!;
  if (kind === "identity") return x;
  if (kind === "sigmoid") return 1 / (1 + Math.exp(-x));
  let max = -Infinity;
  for (let k = 0; k < classes; k++) max = Math.max(max, logits[row * classes + k]!);
  let sum = 0;
  for (let k = 0; k < classes; k++) sum += Math.exp(logits[row * classes + k]! - max);
  return Math.exp(x - max) / sum;
}

try {
  const { session, provider, warning } = await open();
  port.postMessage({ kind: "ready", provider, warning } satisfies OnnxReply);
  port.on("message", async ({ id, sequences }: OnnxJob) => {
    try {
      const n = sequences.length;
      let longest = 1;
      for (const s of sequences) longest = Math.max(longest, Math.min(s.length, options.max_length));
      const width = bucketFor(longest);
      // int64 tensors written through int32 views (little-endian: low word, then the sign word), which
      // avoids a BigInt per token. measured: bench/rewards.ts, see BENCHMARKS.md.
      const ids = new BigInt64Array(n * width);
      const mask = new BigInt64Array(n * width);
      const ids32 = new Int32Array(ids.buffer);
      const mask32 = new Int32Array(mask.buffer);
      const pad = options.pad_id;
      sequences.forEach((s, i) => {
        const keep = Math.min(s.length, width);
        const from = options.truncation === "left" ? s.length - keep : 0;
        const row = i * width;
        for (let t = 0; t < keep; t++) {
          const id = s[from + t]!;
          ids32[2 * (row + t)] = id;
          ids32[2 * (row + t) + 1] = id < 0 ? -1 : 0;
          mask32[2 * (row + t)] = 1;
        }
        for (let t = keep; t < width; t++) ids32[2 * (row + t)] = pad;
      });
      const out = await session.run({
        [options.input_ids]: new ort.Tensor("int64", ids, [n, width]),
        [options.attention_mask]: new ort.Tensor("int64", mask, [n, width]),
      });
      const logits = out[options.output];
      if (logits === undefined) throw new Error(`the model has no output named ${options.output}`);
      const classes = logits.dims[logits.dims.length - 1] ?? 1;
      if (options.score.class >= classes) {
        throw new Error(`score.class ${options.score.class} but the model has ${classes} classes`);
      }
      const data = logits.data as Float32Array;
      const scores = new Float64Array(n);
      for (let i = 0; i < n; i++) scores[i] = scoreOf(data, i, classes);
      port.postMessage({ kind: "scores", id, scores } satisfies OnnxReply);
    } catch (err) {
      port.postMessage({
        kind: "error",
        id,
        message: (err as Error).message.split("\n")[0]!,
      } satisfies OnnxReply);
    }
  });
} catch (err) {
  port.postMessage({ kind: "failed", message: (err as Error).message } satisfies OnnxReply);
}
