/**
 * `env`: the environment's own reward, sent by the gateway as `reward` events targeting the session. The
 * score is their sum; a session without one is skipped (not scored 0). Per-call rewards are placed on
 * turns by assembly (turn_rewards), not here.
 */
import { z } from "zod";
import type { RewardItem, RewardOutcome, RewardStage, RewardStageType } from "../contract.ts";

export const envStageOptionsSchema = z.strictObject({});

export function envStage(): RewardStage {
  return {
    score: async (items: readonly RewardItem[]): Promise<RewardOutcome[]> =>
      items.map((item) => {
        const session = item.events.filter((e) => e.target === "session");
        if (session.length === 0) return { kind: "skip", reason: "no session reward event" };
        // A Map: stage names are the gateway's strings ("constructor" and "__proto__" included).
        const byStage = new Map<string, number>();
        for (const e of session) byStage.set(e.stage, (byStage.get(e.stage) ?? 0) + e.value);
        const components = Object.fromEntries(byStage);
        return { kind: "score", score: session.reduce((a, e) => a + e.value, 0), components };
      }),
  };
}

export const envStageType = {
  description: "the environment's own reward: the sum of the session's reward events",
  fields: { options: envStageOptionsSchema.default({}) },
  scope: "session",
  build: () => envStage(),
} satisfies RewardStageType<unknown>;
