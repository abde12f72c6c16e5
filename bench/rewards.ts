/**
 * The onnx reward stage through its runner: items/s and tokens/s at batch sizes 1..64, and the event
 * loop's delay while it scores (inference runs on a worker thread, so the loop should stay free).
 * Two models, both the generated embedding + masked mean + linear head: the tests' tiny one (dim 32) and
 * a wider one (dim 256) whose per-token work is 8x larger; sequences are 512 tokens. How much batching
 * gains depends on how a call's fixed cost compares with its per-item work, so both are reported.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { pino } from "pino";
import { MemoryDeadLetters } from "../test/helpers/dead-letters.ts";
import { Metrics } from "../src/core/metrics.ts";
import { mulberry32 } from "../test/helpers/prng.ts";
import type { RewardItem } from "../src/transforms/reward/contract.ts";
import { batchPolicySchema, StageRunner } from "../src/transforms/reward/runner.ts";
import { onnxStageOptionsSchema } from "../src/transforms/reward/stages/onnx/options.ts";
import { onnxStage } from "../src/transforms/reward/stages/onnx/stage.ts";
import { tinyRewardModel, tinyWeights } from "../test/helpers/tiny-model.ts";
import { rewardItem } from "../test/helpers/reward-items.ts";
import { record } from "./harness.ts";

const SEQ = 512;
const ITEMS = 1_024;

function items(n: number): RewardItem[] {
  const random = mulberry32(11);
  return Array.from({ length: n }, (_, i) => {
    const ids = Int32Array.from({ length: SEQ }, () => Math.floor(random() * 4096));
    return rewardItem(`k${i}`, ids.subarray(0, 256), ids.subarray(256));
  });
}

export async function run(): Promise<void> {
  for (const dim of [32, 256]) await runModel(dim);
}

async function runModel(dim: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-rewards-"));
  const model = join(dir, "bench.onnx");
  writeFileSync(model, tinyRewardModel(tinyWeights(3, 4096, dim, 2)));
  const logger = pino({ level: "silent" });
  const stage = await onnxStage(
    // Both cores for the one session: the machine has two.
    onnxStageOptionsSchema.parse({
      model,
      providers: ["cpu"],
      buckets: [SEQ],
      max_length: SEQ,
      intra_op_threads: 2,
    }),
    logger,
  );
  const work = items(ITEMS);
  let base = 0;
  try {
    for (const size of [1, 2, 4, 8, 16, 32, 64]) {
      const runner = new StageRunner(
        "onnx",
        stage,
        batchPolicySchema.parse({ max_batch_size: size, concurrency: 1, max_wait_ms: 1 }),
        { metrics: new Metrics(), deadLetters: new MemoryDeadLetters(), logger },
      );
      await Promise.all(work.slice(0, 64).map((i) => runner.score(i))); // warm-up
      const delay = monitorEventLoopDelay({ resolution: 1 });
      delay.enable();
      const started = performance.now();
      await Promise.all(work.map((i) => runner.score(i)));
      const seconds = (performance.now() - started) / 1000;
      delay.disable();
      const perSecond = ITEMS / seconds;
      if (size === 1) base = perSecond;
      record({
        bench: "rewards",
        case: `onnx stage (CPU, dim ${dim}), batch size ${size}`,
        value: perSecond,
        unit: "items/s",
        note:
          `${((perSecond * SEQ) / 1e6).toFixed(2)} M tokens/s, ${(perSecond / base).toFixed(1)}x batch 1, ` +
          `event-loop delay p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms`,
      });
    }
  } finally {
    await stage.close?.();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await run();
