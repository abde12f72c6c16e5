/**
 * A user reward stage, as a pipeline references it by path (`"type": "module", "path": "brevity.ts"`):
 * the default export is a factory taking the stage's `options` and returning a RewardStage. This one
 * rewards short answers: 1 at or under `target_tokens` trained tokens, falling linearly to 0 at twice that.
 * TypeScript runs as is on Node 24; a plain .js/.mjs module works the same way.
 */
import type { RewardItem, RewardOutcome, RewardStage } from "../../src/transforms/reward/contract.ts";

export default function brevity(options: Record<string, unknown>): RewardStage {
  const target = typeof options.target_tokens === "number" ? options.target_tokens : 64;
  return {
    score: async (items: readonly RewardItem[]): Promise<RewardOutcome[]> =>
      items.map((item) => {
        const trained = item.rows.reduce((n, r) => n + r.num_trained_tokens, 0);
        if (trained === 0) return { kind: "skip", reason: "nothing trained" };
        const score = Math.max(0, Math.min(1, 2 - trained / target));
        return { kind: "score", score, info: { trained } };
      }),
  };
}
