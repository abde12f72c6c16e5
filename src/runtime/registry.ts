/**
 * The registry: every component `type` a pipeline may name, per section, with its config schema and how
 * it is built. Validation reads the schemas; the runtime builds from the same table, so a type that
 * validates always runs.
 */
import type { z } from "zod";
import type {
  BuildContext,
  DeadLetterSink,
  SinkComponent,
  Source,
  TransformComponent,
} from "../contract/components.ts";
import type { KafkaConnection } from "../kafka/connection.ts";
import { fileSinkConfigSchema, type FileSinkConfig } from "../sinks/files/config.ts";
import { FileSinkComponent } from "../sinks/files/component.ts";
import { TopicSinkComponent } from "../sinks/kafka/component.ts";
import { trajectoryTopicConfigSchema, type TrajectoryTopicConfig } from "../sinks/kafka/config.ts";
import { JsonlSource, jsonlSourceConfigSchema, type JsonlSourceConfig } from "../sources/jsonl/jsonl.ts";
import { kafkaSourceConfigSchema, type KafkaSourceConfig } from "../sources/kafka/config.ts";
import { KafkaSource } from "../sources/kafka/source.ts";
import { assembleConfigSchema } from "../transforms/assemble/config.ts";
import { GroupComponent } from "../transforms/group/component.ts";
import { groupConfigSchema, type GroupConfig } from "../transforms/group/config.ts";
import { RewardsComponent } from "../transforms/reward/component.ts";
import { rewardsConfigSchema, type RewardsConfig } from "../transforms/reward/config.ts";
import {
  StalenessComponent,
  stalenessConfigSchema,
  type StalenessConfig,
} from "../transforms/staleness/staleness.ts";

export type Section = "sources" | "transforms" | "sinks";

/** What builders get besides their config. */
export interface RegistryContext extends BuildContext {
  /** The pipeline's dead-letter sink (reward stages hold offsets with their letters). */
  deadLetterSink: DeadLetterSink;
  /** The kafka source's connection, the default of topic sinks; null with other sources. */
  sourceConnection: KafkaConnection | null;
}

interface Entry<T> {
  schema: z.ZodType;
  /** One line for `trajflow validate` and docs. */
  description: string;
  build?: (config: never, ctx: RegistryContext) => T | Promise<T>;
}

const source = <C>(schema: z.ZodType, description: string, build: (c: C, ctx: RegistryContext) => Source) =>
  ({ schema, description, build }) as Entry<Source>;
const transform = <C>(
  schema: z.ZodType,
  description: string,
  build?: (c: C, ctx: RegistryContext) => TransformComponent | Promise<TransformComponent>,
) => ({ schema, description, build }) as Entry<TransformComponent>;
const sink = <C>(
  schema: z.ZodType,
  description: string,
  build: (c: C, ctx: RegistryContext) => SinkComponent,
) => ({ schema, description, build }) as Entry<SinkComponent>;

const fileSink = (c: FileSinkConfig, ctx: RegistryContext) =>
  new FileSinkComponent(c, { metrics: ctx.metrics, logger: ctx.logger.child({ component: "files" }) });

export const REGISTRY: {
  sources: Record<string, Entry<Source>>;
  transforms: Record<string, Entry<TransformComponent>>;
  sinks: Record<string, Entry<SinkComponent>>;
} = {
  sources: {
    jsonl: source<JsonlSourceConfig>(
      jsonlSourceConfigSchema,
      "recorded gateway events from .jsonl(.gz) files",
      (c) => new JsonlSource(c),
    ),
    kafka: source<KafkaSourceConfig>(
      kafkaSourceConfigSchema,
      "gateway events from a Kafka topic (a consumer group member)",
      (c, ctx) => new KafkaSource(c, ctx),
    ),
  },
  transforms: {
    // Assembly is the runtime's first stage (events in, sessions out); it has no unit-level builder.
    assemble: transform(assembleConfigSchema, "events → sessions → rows (the token prefix trie)"),
    rewards: transform<RewardsConfig>(rewardsConfigSchema, "reward stages scoring each session", (c, ctx) =>
      RewardsComponent.build(c, {
        metrics: ctx.metrics,
        logger: ctx.logger,
        deadLetters: ctx.deadLetterSink,
        baseDir: ctx.baseDir,
      }),
    ),
    staleness: transform<StalenessConfig>(
      stalenessConfigSchema,
      "drops rows of stale policies",
      (c, ctx) => new StalenessComponent(c, ctx.metrics),
    ),
    group: transform<GroupConfig>(
      groupConfigSchema,
      "GRPO groups: a uid's sessions written together, padded",
      (c, ctx) => new GroupComponent(c, ctx.metrics, ctx.deadLetters),
    ),
  },
  sinks: {
    parquet: sink<FileSinkConfig>(fileSinkConfigSchema, "Parquet files, committed exactly once", fileSink),
    arrow: sink<FileSinkConfig>(fileSinkConfigSchema, "Arrow IPC files, committed exactly once", fileSink),
    kafka: sink<TrajectoryTopicConfig>(
      trajectoryTopicConfigSchema,
      "rows produced to a trajectory topic",
      (c, ctx) =>
        new TopicSinkComponent(c, c.connection ?? ctx.sourceConnection!, {
          metrics: ctx.metrics,
          logger: ctx.logger.child({ component: "topic" }),
        }),
    ),
  },
};
