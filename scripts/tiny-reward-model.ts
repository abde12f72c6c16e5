/**
 * Writes the tiny deterministic ONNX reward model (test/helpers/tiny-model.ts) to a
 * file: `node scripts/tiny-reward-model.ts examples/rewards/tiny-reward.onnx`. With `--check`, fails if
 * the file differs from what the generator writes (CI keeps the committed example model fresh).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { tinyRewardModel, tinyWeights } from "../test/helpers/tiny-model.ts";

const args = process.argv.slice(2);
const check = args.includes("--check");
const out = args.find((a) => !a.startsWith("--")) ?? "examples/rewards/tiny-reward.onnx";
// The example pipeline's sessions use a real tokenizer's ids: the example model hashes them into its vocabulary.
const bytes = tinyRewardModel(tinyWeights(), { hashIds: true });
if (check) {
  if (!Buffer.from(readFileSync(out)).equals(Buffer.from(bytes))) {
    process.stderr.write(`${out} is stale: run node scripts/tiny-reward-model.ts ${out}\n`);
    process.exit(1);
  }
} else {
  writeFileSync(out, bytes);
  process.stdout.write(`wrote ${out} (${bytes.length} bytes)\n`);
}
