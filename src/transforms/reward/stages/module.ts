/**
 * `module`: a stage you write, an ES module (TypeScript runs as is) whose default export is a
 * `RewardStageFactory`, referenced by path; its `options` are passed to the factory as they are.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { TrajflowError } from "../../../core/errors.ts";
import type { RewardStage, RewardStageFactory, RewardStageType, StageBuildContext } from "../contract.ts";

const moduleStageFields = {
  path: z.string().min(1).describe("Path of an ES module whose default export is a RewardStageFactory."),
  options: z.record(z.string(), z.unknown()).default({}).describe("Passed to the factory as they are."),
};
type ModuleStageConfig = { path: string; options: Record<string, unknown> };

async function moduleStage(config: ModuleStageConfig, ctx: StageBuildContext): Promise<RewardStage> {
  const url = pathToFileURL(resolve(ctx.baseDir, config.path)).href;
  let factory: unknown;
  try {
    factory = ((await import(url)) as { default?: unknown }).default;
  } catch (err) {
    throw new TrajflowError(
      "REWARD_STAGE_UNAVAILABLE",
      `could not import ${config.path}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  if (typeof factory !== "function") {
    throw new TrajflowError(
      "REWARD_STAGE_UNAVAILABLE",
      `${config.path} must default-export a function (options, context) => RewardStage`,
    );
  }
  const stage = await (factory as RewardStageFactory)(config.options, { logger: ctx.logger });
  if (typeof stage?.score !== "function") {
    throw new TrajflowError(
      "REWARD_STAGE_UNAVAILABLE",
      `${config.path}'s factory returned no score() function`,
    );
  }
  return stage;
}

export const moduleStageType = {
  description:
    "your own stage: an ES module default-exporting a factory (options, { logger }) => RewardStage",
  fields: moduleStageFields,
  scope: "session",
  build: moduleStage,
} satisfies RewardStageType<ModuleStageConfig>;
