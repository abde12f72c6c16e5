/**
 * The reward stage types a rewards file may name, as the component registry (src/runtime/registry.ts)
 * holds components: validation builds each stage's config schema from its entry, and the transform builds
 * the stage from the same entry, so a type that validates always builds. A new type is one file exporting
 * a `RewardStageType`, its line here, and its section in docs/rewards.md (a test checks the docs).
 */
import type { RewardStageType } from "../contract.ts";
import { envStageType } from "./env.ts";
import { httpStageType } from "./http/stage.ts";
import { moduleStageType } from "./module.ts";
import { onnxStageType } from "./onnx/stage.ts";
import { ruleStageType } from "./rule.ts";

/** In the order `validate` lists them when a `type` is none of these. */
export const REWARD_STAGE_TYPES: Record<string, RewardStageType> = {
  env: envStageType,
  rule: ruleStageType,
  onnx: onnxStageType,
  http: httpStageType,
  module: moduleStageType,
};
