/**
 * Configuration of the reward stages of a pipeline: which stages, how each is batched, and how their values
 * combine. Validated in full before any stage starts (every problem listed at once).
 */
import { z } from "zod";
import { combineSchema } from "./combine.ts";
import { batchPolicySchema } from "./runner.ts";
import { envStageOptionsSchema } from "./stages/env.ts";
import { httpStageOptionsSchema } from "./stages/http.ts";
import { onnxStageOptionsSchema } from "./stages/onnx/options.ts";
import { ruleStageOptionsSchema } from "./stages/rule.ts";

const common = {
  name: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, "letters, digits, _ . - only")
    .describe("The stage's name: its column entry in reward_names."),
  scope: z
    .enum(["row", "session"])
    .optional()
    .describe("Score each row, or each session once (the value is broadcast to its rows). Default per type."),
  required: z
    .boolean()
    .default(true)
    .describe(
      "A row's reward is null (flagged) when a required stage has no value; optional ones are left out.",
    ),
  batch: batchPolicySchema.default(batchPolicySchema.parse({})).describe("Batching, retries and timeouts."),
};

export const stageConfigSchema = z.discriminatedUnion("type", [
  z.strictObject({ ...common, type: z.literal("env"), options: envStageOptionsSchema.default({}) }),
  z.strictObject({ ...common, type: z.literal("rule"), options: ruleStageOptionsSchema }),
  z.strictObject({ ...common, type: z.literal("onnx"), options: onnxStageOptionsSchema }),
  z.strictObject({ ...common, type: z.literal("http"), options: httpStageOptionsSchema }),
  z.strictObject({
    ...common,
    type: z.literal("module"),
    path: z.string().min(1).describe("Path of an ES module whose default export is a RewardStageFactory."),
    options: z.record(z.string(), z.unknown()).default({}).describe("Passed to the factory as they are."),
  }),
]);
export type StageConfig = z.output<typeof stageConfigSchema>;

export const rewardsConfigSchema = z
  .strictObject({
    stages: z.array(stageConfigSchema).min(1).describe("Reward stages, run concurrently on every session."),
    combine: combineSchema,
    weights: z.record(z.string(), z.number()).default({}).describe("weighted_sum: weight per stage name."),
    timeout_ms: z
      .int()
      .positive()
      .default(300_000)
      .describe(
        "A session waits this long for its stages; then missing values are null, flagged reward_timeout.",
      ),
    max_pending_sessions: z
      .int()
      .positive()
      .default(1_024)
      .describe("Sessions being scored at once; output keeps the input order, so this bounds memory too."),
  })
  .superRefine(
    (c, ctx) => {
      // Runs even when other fields are wrong, so every problem is listed at once (a weight naming no stage
      // went unreported beside a broken stage): `c` may then hold parts of the input as given.
      if (typeof c !== "object" || c === null) return;
      const stages: unknown[] = Array.isArray(c.stages) ? c.stages : [];
      const seen = new Set<string>();
      stages.forEach((s, i) => {
        const name = typeof s === "object" && s !== null ? (s as { name?: unknown }).name : undefined;
        if (typeof name !== "string") return;
        if (seen.has(name))
          ctx.addIssue({
            code: "custom",
            path: ["stages", i, "name"],
            message: `duplicate stage name ${name}`,
          });
        seen.add(name);
      });
      const weights: unknown = c.weights;
      if (typeof weights !== "object" || weights === null || Array.isArray(weights)) return;
      for (const name of Object.keys(weights)) {
        if (!seen.has(name))
          ctx.addIssue({ code: "custom", path: ["weights", name], message: `no stage named ${name}` });
      }
    },
    { when: () => true },
  );
export type RewardsConfig = z.output<typeof rewardsConfigSchema>;
export type RewardsConfigInput = z.input<typeof rewardsConfigSchema>;

/** Default scope per stage type: models score rows; env, rules and judges score the session's answer. */
export function scopeOf(stage: StageConfig): "row" | "session" {
  return stage.scope ?? (stage.type === "onnx" ? "row" : "session");
}
