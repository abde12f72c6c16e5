import { strict as assert } from "node:assert";
import { it } from "node:test";
import { copyIds, copyLogprobs, SPAN_LOOP_MAX } from "./span-copy.ts";

const ramp = (n: number) => Int32Array.from({ length: n }, (_, i) => i + 1);

it("copies id spans of any length to where they belong, touching nothing else", () => {
  for (const n of [0, 1, SPAN_LOOP_MAX, SPAN_LOOP_MAX + 1, 3 * SPAN_LOOP_MAX]) {
    const src = ramp(n + 10);
    const dst = new Int32Array(n + 8).fill(-7);
    copyIds(dst, 3, src, 5, n);
    assert.deepEqual([...dst.subarray(0, 3)], [-7, -7, -7]);
    assert.deepEqual([...dst.subarray(3, 3 + n)], [...src.subarray(5, 5 + n)]);
    assert.deepEqual([...dst.subarray(3 + n)], new Array(5).fill(-7));
  }
});

it("copies logprob spans and says whether one of the copied values is NaN, in both copy paths", () => {
  for (const n of [4, SPAN_LOOP_MAX + 4]) {
    const src = Float32Array.from({ length: n + 4 }, (_, i) => -i / 8);
    const dst = new Float32Array(n + 2);
    assert.equal(copyLogprobs(dst, 1, src, 2, n), false);
    assert.deepEqual([...dst.subarray(1, 1 + n)], [...src.subarray(2, 2 + n)]);
    // A NaN outside the copied span does not count; inside it does, at either end.
    src[1] = NaN;
    assert.equal(copyLogprobs(dst, 1, src, 2, n), false);
    src[2] = NaN;
    assert.equal(copyLogprobs(dst, 1, src, 2, n), true);
    assert.ok(Number.isNaN(dst[1]));
    src[2] = -1;
    src[n + 1] = NaN;
    assert.equal(copyLogprobs(dst, 1, src, 2, n), true);
    assert.ok(Number.isNaN(dst[n]));
  }
});
