/**
 * A row's routed experts: for every position of its sequence (prompt ++ response), the experts chosen
 * when that token went through the model, taken from the first call on the row that processed it (a
 * prompt's prefill, or the decode of a sampled token). Positions no call covered keep all bits set (-1
 * in signed dtypes) and are counted (all but the row's last position: see rowRouting), never filled in.
 *
 * Routing of a position depends only on the tokens up to it, so any call whose prompt or output holds the
 * row's prefix computed the same routing: the row's own turns are enough, and drift and branches stay
 * aligned because each turn contributes only the positions this path shares with it.
 */
import { routingStride, type RoutedExperts, type RoutingLayout } from "../../schemas/routed-experts.ts";
import type { CallState } from "./call-state.ts";

/** A turn as routing needs it: where its output starts on the row and how much of it the row holds. */
export interface RoutedTurn {
  call: CallState;
  /** Position of the call's first output token in the row's sequence: its prompt's length. */
  start: number;
  /** Output tokens of this call on the row's path (a drifted continuation may hold only a prefix). */
  span: number;
}

export interface RowRouting {
  layout: RoutingLayout;
  /** [length, layers, top_k] ids, little-endian. */
  bytes: Uint8Array;
  /** Positions no call covered, the row's last one aside. */
  missing: number;
}

/** The routing of a row of `length` positions, or null when none of its turns carried any. */
export function rowRouting(turns: readonly RoutedTurn[], length: number): RowRouting | null {
  let layout: RoutingLayout | null = null;
  // An index loop: a for...of here made an iterator result per turn of every row (~2 MB of the ingest
  // thread's garbage on the shared harness's short workload), and most rows carry no routing.
  for (let i = 0; i < turns.length && layout === null; i++) {
    const call = turns[i]!.call;
    layout = call.promptRouting ?? call.outputRouting;
  }
  if (layout === null) return null;
  const stride = routingStride(layout);
  const bytes = new Uint8Array(length * stride).fill(0xff);
  const covered = new Uint8Array(length);
  let filled = 0;
  /** Source rows [0, n) → positions [at, at + n), where not covered yet and within the row. */
  const place = (src: RoutedExperts, at: number, n: number) => {
    const end = Math.min(at + n, length);
    let p = Math.max(at, 0);
    while (p < end) {
      if (covered[p] === 1) {
        p++;
        continue;
      }
      let q = p + 1;
      while (q < end && covered[q] === 0) q++;
      // One copy per uncovered run, not per token.
      bytes.set(src.data.subarray((p - at) * stride, (q - at) * stride), p * stride);
      covered.fill(1, p, q);
      filled += q - p;
      p = q;
    }
  };
  for (const { call, start, span } of turns) {
    const prompt = call.promptRouting;
    if (prompt !== null) place(prompt, start - prompt.tokens, prompt.tokens);
    const output = call.outputRouting;
    if (output !== null) place(output, start, Math.min(output.tokens, span));
  }
  // The row's last position never counts: no trained logprob depends on it (attention is causal), and
  // when it is the final sampled token no engine computes it (it was never an input).
  const lastUncovered = length > 0 && covered[length - 1] === 0 ? 1 : 0;
  return { layout, bytes, missing: length - filled - lastUncovered };
}
