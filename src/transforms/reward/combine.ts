/** How a row's `reward` is made from its stages' values. */
import { z } from "zod";

export const combineSchema = z
  .enum(["sum", "weighted_sum", "product", "min", "max"])
  .default("sum")
  .describe("How stage values combine into `reward`; weighted_sum uses `weights` (default 1 each).");
export type CombineOp = z.output<typeof combineSchema>;

export interface StageValue {
  name: string;
  value: number | null;
  required: boolean;
  skipped: boolean;
}

/**
 * The combined reward, or null when a required stage has no value (failed or timed out) or no stage has
 * one. Skipped stages (not applicable to the row) and failed optional stages are left out.
 */
export function combine(
  values: StageValue[],
  op: CombineOp,
  weights: Record<string, number> = {},
): number | null {
  const present: Array<[string, number]> = [];
  for (const v of values) {
    if (v.value === null) {
      if (v.required && !v.skipped) return null;
      continue;
    }
    present.push([v.name, v.value]);
  }
  if (present.length === 0) return null;
  switch (op) {
    case "sum":
      return present.reduce((a, [, v]) => a + v, 0);
    case "weighted_sum":
      return present.reduce((a, [n, v]) => a + (Object.hasOwn(weights, n) ? weights[n]! : 1) * v, 0);
    case "product":
      return present.reduce((a, [, v]) => a * v, 1);
    case "min":
      return Math.min(...present.map(([, v]) => v));
    case "max":
      return Math.max(...present.map(([, v]) => v));
  }
}
