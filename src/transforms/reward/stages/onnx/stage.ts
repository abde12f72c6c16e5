/**
 * `onnx`: a local reward model run with onnxruntime-node on worker threads. Each item's tokens (the row's
 * prompt + response, or for a session the row holding its last turn) are truncated, padded to a length
 * bucket, and scored; a batch goes to the least busy worker.
 */
import { resolve } from "node:path";
import { Worker } from "node:worker_threads";
import { TrajflowError } from "../../../../core/errors.ts";
import type { Logger } from "../../../../core/logger.ts";
import {
  RewardStageError,
  type RewardItem,
  type RewardOutcome,
  type RewardStage,
  type RewardStageType,
} from "../../contract.ts";
import { onnxStageOptionsSchema, type OnnxStageOptions } from "./options.ts";
import type { OnnxJob, OnnxReply } from "./worker.ts";

interface Slot {
  worker: Worker;
  busy: number;
}

/** The tokens a reward model reads for an item. */
export function sequenceOf(item: RewardItem): Int32Array {
  const row = item.rows[item.rows.length - 1]!;
  const out = new Int32Array(row.prompt_ids.length + row.response_ids.length);
  out.set(row.prompt_ids, 0);
  out.set(row.response_ids, row.prompt_ids.length);
  return out;
}

export async function onnxStage(
  options: OnnxStageOptions,
  logger: Logger,
): Promise<RewardStage & { provider: string }> {
  const slots: Slot[] = [];
  const pending = new Map<number, { resolve: (s: Float64Array) => void; reject: (e: Error) => void }>();
  let nextId = 0;
  let provider = "";
  const start = () =>
    new Promise<Slot>((resolve, reject) => {
      const worker = new Worker(new URL("./worker.ts", import.meta.url), { workerData: options });
      const slot: Slot = { worker, busy: 0 };
      worker.once("message", (reply: OnnxReply) => {
        if (reply.kind !== "ready") {
          void worker.terminate();
          reject(
            new TrajflowError(
              "REWARD_STAGE_UNAVAILABLE",
              `could not load ${options.model}: ${reply.kind === "failed" ? reply.message : reply.kind}`,
            ),
          );
          return;
        }
        if (reply.warning !== null)
          logger.warn({ model: options.model }, `onnx reward stage: ${reply.warning}`);
        provider = reply.provider;
        worker.on("message", (r: OnnxReply) => {
          if (r.kind !== "scores" && r.kind !== "error") return;
          const p = pending.get(r.id);
          pending.delete(r.id);
          slot.busy--;
          if (r.kind === "scores") p?.resolve(r.scores);
          // A model error is deterministic for its inputs (e.g. an id past the vocabulary): not retryable,
          // so the runner goes straight to isolating the item.
          else p?.reject(new RewardStageError(r.message, false));
        });
        resolve(slot);
      });
      worker.once("error", reject);
    });
  for (let i = 0; i < options.workers; i++) slots.push(await start());
  logger.info({ model: options.model, provider, workers: options.workers }, "onnx reward stage ready.");

  return {
    provider,
    score: async (items: readonly RewardItem[]): Promise<RewardOutcome[]> => {
      const slot = slots.reduce((a, b) => (b.busy < a.busy ? b : a));
      const id = nextId++;
      const sequences = items.map(sequenceOf);
      const scores = await new Promise<Float64Array>((resolve, reject) => {
        pending.set(id, { resolve, reject });
        slot.busy++;
        slot.worker.postMessage(
          { id, sequences } satisfies OnnxJob,
          sequences.map((s) => s.buffer as ArrayBuffer),
        );
      });
      return Array.from(scores, (score) => ({ kind: "score" as const, score, info: { provider } }));
    },
    close: async () => {
      await Promise.all(slots.map((s) => s.worker.terminate()));
    },
  };
}

export const onnxStageType = {
  description:
    "a local reward model run with onnxruntime-node on worker threads (CPU, or CUDA where present)",
  fields: { options: onnxStageOptionsSchema },
  scope: "row",
  build: (c: { options: OnnxStageOptions }, ctx) =>
    onnxStage({ ...c.options, model: resolve(ctx.baseDir, c.options.model) }, ctx.logger),
} satisfies RewardStageType<{ options: OnnxStageOptions }>;
