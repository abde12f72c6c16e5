/**
 * Copies of token and logprob spans between typed arrays without a view of the source: row building took a
 * subarray per span it copied (~15 a row, 17 MB of the ingest thread's garbage on the shared harness's short
 * workload). Spans up to SPAN_LOOP_MAX elements are copied by a loop; longer ones through a view and set(),
 * which copies with memmove and whose view costs little next to the span.
 */

/** Spans at most this long are copied element by element. */
export const SPAN_LOOP_MAX = 256;

/** Copies `n` ids of `src` from `from` into `dst` at `at`. */
export function copyIds(dst: Int32Array, at: number, src: Int32Array, from: number, n: number): void {
  if (n > SPAN_LOOP_MAX) dst.set(src.subarray(from, from + n), at);
  else for (let i = 0; i < n; i++) dst[at + i] = src[from + i]!;
}

/** Copies `n` logprobs of `src` from `from` into `dst` at `at`; whether any of them is NaN (missing). */
export function copyLogprobs(
  dst: Float32Array,
  at: number,
  src: Float32Array,
  from: number,
  n: number,
): boolean {
  let nan = false;
  if (n > SPAN_LOOP_MAX) {
    dst.set(src.subarray(from, from + n), at);
    for (let i = at; i < at + n; i++) if (dst[i] !== dst[i]) return true;
    return false;
  }
  for (let i = 0; i < n; i++) {
    const v = src[from + i]!;
    if (v !== v) nan = true;
    dst[at + i] = v;
  }
  return nan;
}
