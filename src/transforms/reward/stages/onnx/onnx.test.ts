import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { pino } from "pino";
import { isTrajflowError } from "../../../../core/errors.ts";
import { rewardItem } from "../../../../../test/helpers/reward-items.ts";
import { cudaProviderMissing } from "./cuda.ts";
import { onnxStageOptionsSchema } from "./options.ts";
import { onnxStage } from "./stage.ts";
import { referenceLogits, tinyRewardModel, tinyWeights } from "../../../../../test/helpers/tiny-model.ts";

const dir = mkdtempSync(join(tmpdir(), "trajflow-onnx-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const weights = tinyWeights();
const model = join(dir, "tiny.onnx");
writeFileSync(model, tinyRewardModel(weights));

const item = (prompt: number[], response: number[]) => rewardItem("k", prompt, response);

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const warnings: string[] = [];
const logger = pino({ level: "warn" }, { write: (line: string) => void warnings.push(line) });

describe("onnx reward stage", () => {
  it("matches a plain TypeScript reference of the model to 1e-5, across batch padding and truncation", async () => {
    const stage = await onnxStage(
      onnxStageOptionsSchema.parse({ model, providers: ["cpu"], buckets: [4, 16], max_length: 12 }),
      logger,
    );
    const seqs = [
      [
        [1, 2, 3],
        [4, 5],
      ],
      [
        [900, 17],
        [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1023],
      ], // 14 tokens: the left two are dropped
      [[7], []],
    ] as const;
    const outcomes = await stage.score(
      seqs.map(([p, r]) => item([...p], [...r])),
      new AbortController().signal,
    );
    seqs.forEach(([p, r], i) => {
      const all = [...p, ...r].slice(-12);
      const expected = referenceLogits(
        weights,
        all,
        all.map(() => 1),
      )[0]!;
      const o = outcomes[i]!;
      assert.equal(o.kind, "score");
      assert.ok(
        o.kind === "score" && Math.abs(o.score - expected) < 1e-5,
        `${JSON.stringify(o)} vs ${expected}`,
      );
    });
    await stage.close?.();
  });

  it("maps logits with sigmoid and softmax of a chosen class", async () => {
    const ids = [5, 6, 7, 8];
    const [l0, l1] = referenceLogits(weights, ids, [1, 1, 1, 1]);
    for (const [score, expected] of [
      [{ kind: "sigmoid", class: 1 }, sigmoid(l1!)],
      [{ kind: "softmax", class: 0 }, Math.exp(l0!) / (Math.exp(l0!) + Math.exp(l1!))],
    ] as const) {
      const stage = await onnxStage(
        onnxStageOptionsSchema.parse({ model, providers: ["cpu"], score }),
        logger,
      );
      const [o] = await stage.score([item(ids.slice(0, 2), ids.slice(2))], new AbortController().signal);
      assert.ok(o !== undefined && o.kind === "score" && Math.abs(o.score - expected) < 1e-5);
      await stage.close?.();
    }
  });

  it("fails a batch holding a token id past the vocabulary, as a non-retryable error", async () => {
    const stage = await onnxStage(onnxStageOptionsSchema.parse({ model, providers: ["cpu"] }), logger);
    await assert.rejects(
      stage.score([item([1], [2]), item([5000], [1])], new AbortController().signal),
      (err: Error & { retryable?: boolean }) => err.retryable === false,
    );
    await stage.close?.();
  });

  it("falls back to CPU with a warning when CUDA is missing, or fails when CUDA is required", async () => {
    // Whether this host has a working CUDA provider decides which behaviour is checked: both are.
    const cudaOnly = await onnxStage(
      onnxStageOptionsSchema.parse({ model, providers: ["cuda"] }),
      logger,
    ).then(
      (stage) => stage,
      () => null,
    );
    await cudaOnly?.close?.();
    warnings.length = 0;
    const stage = await onnxStage(onnxStageOptionsSchema.parse({ model }), logger); // cuda, then cpu
    await stage.close?.();
    const required = onnxStage(onnxStageOptionsSchema.parse({ model, require_cuda: true }), logger);
    if (cudaOnly === null) {
      assert.equal(stage.provider, "cpu");
      assert.match(warnings.join(""), /unavailable, using cpu/);
      // Where the provider's libraries are absent (this project's install skips them), the warning and
      // the error name the missing file and where the instructions are.
      const missing = cudaProviderMissing();
      if (missing !== null) assert.ok(warnings.join("").includes(missing), warnings.join(""));
      await assert.rejects(
        required,
        (err: unknown) =>
          isTrajflowError(err) &&
          err.code === "REWARD_STAGE_UNAVAILABLE" &&
          (missing === null || err.message.includes("CUDA provider is not installed")),
      );
    } else {
      assert.equal(stage.provider, "cuda");
      assert.doesNotMatch(warnings.join(""), /unavailable/);
      await (await required).close?.();
    }
  });

  it("fails to start with REWARD_STAGE_UNAVAILABLE when the model file is missing", async () => {
    await assert.rejects(
      onnxStage(
        onnxStageOptionsSchema.parse({ model: join(dir, "missing.onnx"), providers: ["cpu"] }),
        logger,
      ),
      (err: unknown) => isTrajflowError(err) && err.code === "REWARD_STAGE_UNAVAILABLE",
    );
  });
});
