import { strict as assert } from "node:assert";
import { it } from "node:test";
import { engineHint } from "./engine-hint.ts";

it("names the engine an answer looks like, unless it is the one chosen", () => {
  assert.equal(
    engineHint("vllm", { timings: { predicted_n: 2 } }),
    "this looks like llama.cpp's answer: use --engine llamacpp",
  );
  assert.equal(engineHint("llamacpp", { timings: {} }), null);
  assert.equal(
    engineHint("vllm", { choices: [{ meta_info: {} }] }),
    "this looks like SGLang's answer: use --engine sglang",
  );
  assert.equal(engineHint("vllm", { choices: [{}] }), null);
  assert.equal(engineHint("vllm", "not json"), null);
});
