/**
 * `env`: the environment's own reward, sent by the gateway as `reward` events targeting the session. The
 * score is their sum; a session without one is skipped (not scored 0). Per-call rewards are placed on
 * turns by assembly (turn_rewards), not here.
 */
import { z } from "zod";
import type { RewardItem, RewardOutcome, RewardStage } from "../contract.ts";

export const envStageOptionsSchema = z.strictObject({});

export function envStage(): RewardStage {
  return {
    score: async (items: readonly RewardItem[]): Promise<RewardOutcome[]> =>
      items.map((item) => {
        const session = item.events.filter((e) => e.target === "session");
        if (session.length === 0) return { kind: "skip", reason: "no session reward event" };
        const components: Record<string, number> = {};
        for (const e of session) components[e.stage] = (components[e.stage] ?? 0) + e.value;
        return { kind: "score", score: session.reduce((a, e) => a + e.value, 0), components };
      }),
  };
}
