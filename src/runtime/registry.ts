/**
 * The registry: every component `type` a pipeline may name, per section, with its config schema, how it
 * is built and what the plan and the runtime need to know about it (a source's traits, a transform's
 * place in the chain, a sink's role). Validation reads the schemas; the runtime builds from the same
 * table, so a type that validates always runs, and a new component is a new entry here and nothing else.
 */
import { hostname } from "node:os";
import type { z } from "zod";
import type {
  BuildContext,
  DeadLetterSink,
  IngestStage,
  Resolved,
  SharedSettings,
  SinkComponent,
  SinkRole,
  Source,
  SourceTraits,
  TransformComponent,
} from "../contract/components.ts";
import { decodeWorkersFor } from "../core/memory-limit.ts";
import type { PolicyUpdateEvent } from "../schemas/events.ts";
import {
  DeadLetterFiles,
  deadLetterFilesConfigSchema,
  type DeadLetterFilesConfig,
} from "../sinks/dead-letter/files.ts";
import {
  DeadLetterTopic,
  deadLetterTopicConfigSchema,
  resolveDeadLetterTopic,
  type DeadLetterTopicConfig,
} from "../sinks/dead-letter/topic.ts";
import { fileSinkConfigSchema, fileSinkSizing, type FileSinkConfig } from "../sinks/files/config.ts";
import { childLocation } from "../sinks/shared/location.ts";
import { FileSinkComponent } from "../sinks/files/component.ts";
import { TopicSinkComponent } from "../sinks/kafka/component.ts";
import {
  resolveTrajectoryTopic,
  trajectoryTopicConfigSchema,
  type TrajectoryTopicConfig,
} from "../sinks/kafka/config.ts";
import {
  EventLogSource,
  eventLogSourceConfigSchema,
  type EventLogSourceConfig,
} from "../sources/event-log/source.ts";
import { JsonlSource, jsonlSourceConfigSchema, type JsonlSourceConfig } from "../sources/jsonl/jsonl.ts";
import {
  kafkaSourceConfigSchema,
  kafkaSourceShares,
  kafkaSourceSizing,
  type KafkaSourceConfig,
} from "../sources/kafka/config.ts";
import { KafkaSource } from "../sources/kafka/source.ts";
import { AssembleComponent } from "../transforms/assemble/component.ts";
import { assembleConfigSchema, assembleSizing, type AssembleConfig } from "../transforms/assemble/config.ts";
import { GroupComponent } from "../transforms/group/component.ts";
import { groupConfigSchema, type GroupConfig } from "../transforms/group/config.ts";
import { RewardsComponent } from "../transforms/reward/component.ts";
import { rewardsConfigSchema, type RewardsConfig } from "../transforms/reward/config.ts";
import {
  StalenessComponent,
  stalenessConfigSchema,
  type StalenessConfig,
} from "../transforms/staleness/staleness.ts";

export type Section = "sources" | "transforms" | "sinks" | "dead_letters";

/** What builders get besides their config. */
export interface RegistryContext extends BuildContext {
  /** The source's traits (defaults of other components follow them). */
  sourceTraits: SourceTraits;
}

/** What transforms and sinks are built with besides the registry context. */
export interface StageContext extends RegistryContext {
  /** The pipeline's dead-letter sink (reward stages hold offsets with their letters). */
  deadLetterSink: DeadLetterSink;
  /** Threads the ingest stage decodes on (the plan's `decodeWorkers`). */
  decodeWorkers: number;
  /** Control events (policy.update) for the transforms. */
  control(event: PolicyUpdateEvent): void;
}

interface Entry<C, T, X> {
  schema: z.ZodType;
  /** One line for `trajflow validate` and docs. */
  description: string;
  build: (config: C, ctx: X) => T | Promise<T>;
  /**
   * Completes its config from what the source shares (a topic written without a connection takes the
   * source's), or says what is missing. The plan calls it; `build` gets the completed config.
   */
  resolve?: (config: C, shared: SharedSettings) => Resolved<unknown>;
  /** What it writes to, for `validate` and the log ("topic t"); two outputs may not share one. */
  target?: (config: C) => string;
  /**
   * Its defaults under a memory limit (bytes; core/memory-limit.ts): settings that bound the data it
   * holds. The plan applies those the pipeline leaves unset.
   */
  sizeFor?: (limit: number) => Record<string, unknown>;
}

export interface SourceEntry<C = never> extends Entry<C, Source, RegistryContext> {
  traits: SourceTraits;
  /** Threads to decode on, when the config says. */
  decodeWorkers: (config: C) => number | undefined;
  /** What it shares with the other components (their defaults: a Kafka source's connection). */
  shares?: (config: C) => SharedSettings;
  /** Where dead letters go when the pipeline does not say; null: beside the durable sink's output. */
  deadLetters?: (config: C) => DeadLettersPlan;
}

/**
 * `ingest`: the first stage (raw records → sessions), exactly one; `middle`: anywhere after it; `last`:
 * only at the end of the chain (it writes whole groups).
 */
export type TransformPlace = "ingest" | "middle" | "last";

export type TransformEntry<C = never> = Entry<C, TransformComponent | IngestStage, StageContext> & {
  place: TransformPlace;
};

export interface SinkEntry<C = never> extends Entry<C, SinkComponent, StageContext> {
  role: SinkRole;
  /** Config values the type itself implies (an `arrow` sink writes Arrow files). */
  implied?: Record<string, unknown>;
  /** The durable sink: where dead letters go when neither the pipeline nor the source says. */
  deadLetters?: (config: C) => DeadLettersPlan;
}

export type DeadLetterEntry<C = never> = Entry<C, DeadLetterSink, RegistryContext>;

/** Dead letters as planned: a `dead_letters` entry's type and its parsed config. */
export interface DeadLettersPlan {
  type: string;
  config: unknown;
}

/** How long a dead letter of a live input waits in memory for others before its file is written (ms). */
const DEAD_LETTER_AGE_MS = 5_000;

const fileSink = (c: FileSinkConfig, ctx: StageContext) =>
  new FileSinkComponent(c, { metrics: ctx.metrics, logger: ctx.logger.child({ component: "files" }) });
const filesSinkEntry = (
  description: string,
  implied?: Record<string, unknown>,
): SinkEntry<FileSinkConfig> => ({
  schema: fileSinkConfigSchema,
  description,
  build: fileSink,
  role: "durable",
  implied,
  target: (c) => `${c.format} files in ${c.path}`,
  sizeFor: fileSinkSizing,
  deadLetters: (c) => ({ type: "files", config: { path: childLocation(c.path, "_dead-letter"), s3: c.s3 } }),
});

export const REGISTRY: {
  sources: Record<string, SourceEntry>;
  transforms: Record<string, TransformEntry>;
  sinks: Record<string, SinkEntry>;
  dead_letters: Record<string, DeadLetterEntry>;
} = {
  sources: {
    jsonl: {
      schema: jsonlSourceConfigSchema,
      description: "recorded gateway events from .jsonl(.gz) files",
      build: (c: JsonlSourceConfig) => new JsonlSource(c),
      traits: { live: false, pipelined: false, sharedOutputs: false, recordNoun: "events" },
      decodeWorkers: (c: JsonlSourceConfig) => c.decode_workers,
      sizeFor: decodeWorkersFor,
    } satisfies SourceEntry<JsonlSourceConfig>,
    event_log: {
      schema: eventLogSourceConfigSchema,
      description: "the gateway's local event log, followed live (what replay reads, read as it grows)",
      build: (c: EventLogSourceConfig) => new EventLogSource(c),
      traits: { live: true, pipelined: false, sharedOutputs: false, recordNoun: "events" },
      decodeWorkers: (c: EventLogSourceConfig) => c.decode_workers,
      sizeFor: decodeWorkersFor,
    } satisfies SourceEntry<EventLogSourceConfig>,
    kafka: {
      schema: kafkaSourceConfigSchema,
      description: "gateway events from a Kafka topic (a consumer group member)",
      build: (c: KafkaSourceConfig, ctx: RegistryContext) => new KafkaSource(c, ctx),
      traits: { live: true, pipelined: true, sharedOutputs: true, recordNoun: "messages" },
      decodeWorkers: (c: KafkaSourceConfig) => c.decode_workers,
      shares: kafkaSourceShares,
      sizeFor: kafkaSourceSizing,
      deadLetters: (c: KafkaSourceConfig) => ({ type: "kafka", config: { topic: `${c.topic}.dead-letter` } }),
    } satisfies SourceEntry<KafkaSourceConfig>,
  } as Record<string, SourceEntry>,
  transforms: {
    assemble: {
      schema: assembleConfigSchema,
      description: "decode, then events → sessions → rows (the token prefix trie)",
      place: "ingest",
      sizeFor: assembleSizing,
      build: (c: AssembleConfig, ctx: StageContext) =>
        new AssembleComponent(c, {
          metrics: ctx.metrics,
          logger: ctx.logger.child({ component: "assemble" }),
          decodeWorkers: ctx.decodeWorkers,
          control: ctx.control,
        }),
    } satisfies TransformEntry<AssembleConfig>,
    rewards: {
      schema: rewardsConfigSchema,
      description: "reward stages scoring each session",
      place: "middle",
      build: (c: RewardsConfig, ctx: StageContext) =>
        RewardsComponent.build(c, {
          metrics: ctx.metrics,
          logger: ctx.logger,
          deadLetters: ctx.deadLetterSink,
          baseDir: ctx.baseDir,
        }),
    } satisfies TransformEntry<RewardsConfig>,
    staleness: {
      schema: stalenessConfigSchema,
      description: "drops rows of stale policies",
      place: "middle",
      build: (c: StalenessConfig, ctx: StageContext) => new StalenessComponent(c, ctx.metrics),
    } satisfies TransformEntry<StalenessConfig>,
    group: {
      schema: groupConfigSchema,
      description: "GRPO groups: a uid's sessions written together, padded",
      place: "last",
      build: (c: GroupConfig, ctx: StageContext) => new GroupComponent(c, ctx.metrics, ctx.deadLetters),
    } satisfies TransformEntry<GroupConfig>,
  } as Record<string, TransformEntry>,
  sinks: {
    parquet: filesSinkEntry("Parquet files, committed exactly once"),
    arrow: filesSinkEntry("Arrow IPC files, committed exactly once", { format: "arrow" }),
    kafka: {
      schema: trajectoryTopicConfigSchema,
      description: "rows produced to a trajectory topic",
      role: "topic",
      resolve: resolveTrajectoryTopic,
      target: (c: TrajectoryTopicConfig) => `topic ${c.topic}`,
      // The plan resolved the connection.
      build: (c: TrajectoryTopicConfig, ctx: StageContext) =>
        new TopicSinkComponent(c, c.connection!, {
          metrics: ctx.metrics,
          logger: ctx.logger.child({ component: "topic" }),
        }),
    } satisfies SinkEntry<TrajectoryTopicConfig>,
  } as Record<string, SinkEntry>,
  dead_letters: {
    files: {
      schema: deadLetterFilesConfigSchema,
      description: "rejected events as JSON lines in a directory",
      target: (c: DeadLetterFilesConfig) => `dead letters in ${c.path}`,
      build: (c: DeadLetterFilesConfig, ctx: RegistryContext) =>
        new DeadLetterFiles(
          {
            dir: c.path,
            s3: c.s3,
            // Several writers share the directory: names carry the writer.
            ...(ctx.sourceTraits.sharedOutputs
              ? { writerTag: `${hostname()}-${process.pid}-${Date.now()}` }
              : {}),
            // A live input never ends: letters land by age, so they can be read while the process runs
            // (an embedded gateway's, a consumer's) and the offsets behind them can commit.
            ...(ctx.sourceTraits.live ? { maxAgeMs: DEAD_LETTER_AGE_MS } : {}),
          },
          ctx.metrics,
        ),
    } satisfies DeadLetterEntry<DeadLetterFilesConfig>,
    kafka: {
      schema: deadLetterTopicConfigSchema,
      description: "rejected events as messages of a topic",
      resolve: resolveDeadLetterTopic,
      target: (c: DeadLetterTopicConfig) => `dead letters to ${c.topic}`,
      // The plan resolved the connection.
      build: (c: DeadLetterTopicConfig, ctx: RegistryContext) =>
        new DeadLetterTopic(c.topic, c.connection!, {
          metrics: ctx.metrics,
          logger: ctx.logger,
        }),
    } satisfies DeadLetterEntry<DeadLetterTopicConfig>,
  } as Record<string, DeadLetterEntry>,
};
