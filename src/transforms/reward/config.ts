/**
 * Configuration of the reward stages of a pipeline: which stages, how each is batched, and how their values
 * combine. Validated in full before any stage starts (every problem listed at once).
 */
import { z } from "zod";
import { combineSchema } from "./combine.ts";
import { batchPolicySchema } from "./runner.ts";
import { REWARD_STAGE_TYPES } from "./stages/index.ts";

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

/** One strict object per registered stage type: the common keys, its `type`, and the type's own keys. */
const stageSchemas = Object.entries(REWARD_STAGE_TYPES).map(([type, t]) =>
  z.strictObject({ ...common, type: z.literal(type), ...t.fields }),
);
export const stageConfigSchema = z.discriminatedUnion(
  "type",
  stageSchemas as [(typeof stageSchemas)[number], ...typeof stageSchemas],
);
/** A stage's config: the common keys typed; the type's own keys are its entry's to read (it built them). */
export type StageConfig = z.output<z.ZodObject<typeof common>> & { type: string };
/** A stage as written: the common keys, its `type`, and that type's own keys (`options`, a module's `path`). */
export type StageConfigInput = z.input<z.ZodObject<typeof common>> & { type: string; [key: string]: unknown };

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
export type RewardsConfigInput = Omit<z.input<typeof rewardsConfigSchema>, "stages"> & {
  stages: StageConfigInput[];
};

/** The stage's scope: its own, or its type's default (models score rows; rules and judges the session). */
export function scopeOf(stage: StageConfig): "row" | "session" {
  return stage.scope ?? REWARD_STAGE_TYPES[stage.type]!.scope;
}
