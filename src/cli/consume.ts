/**
 * `trajflow consume`: the production path. Gateway events from a Kafka topic → assembled trajectories in
 * files, exactly once, with rejected events on a dead-letter topic. Runs until SIGTERM/SIGINT (then stops
 * consuming, writes and commits what is settled, and exits), or, with `untilIdleMs`, until the topic has
 * been quiet that long (then it also writes the sessions still open: for draining a recorded topic).
 */
import { ConfigProblems } from "../core/config.ts";
import { isTrajflowError, TrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import { fileSinkConfigSchema, type FileSinkConfigInput } from "../sinks/files/config.ts";
import { trajectoryTopicConfigSchema, type TrajectoryTopicConfigInput } from "../sinks/kafka/config.ts";
import { rewardsConfigSchema, type RewardsConfigInput } from "../transforms/reward/config.ts";
import { kafkaSourceConfigSchema, type KafkaSourceConfigInput } from "../sources/kafka/config.ts";
import { KafkaPipeline } from "../sources/kafka/consumer.ts";
import { startOperations, type OperationsOptions } from "./operations.ts";
import { assembleConfigSchema, type AssembleConfigInput } from "../transforms/assemble/config.ts";

/** Default `max_file_age_ms` of the Kafka path. */
export const KAFKA_DEFAULT_FILE_AGE_MS = 10_000;

const stripUndefined = <T extends object>(o: T): Partial<T> =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;

export interface ConsumeOptions {
  source: KafkaSourceConfigInput;
  out: string;
  deadLetterTopic?: string;
  /** Also produce rows to a trajectory topic. */
  trajectoryTopic?: TrajectoryTopicConfigInput;
  /** Reward stages scoring each session before it is written. */
  rewards?: RewardsConfigInput;
  /** Directory relative paths in `rewards` are resolved from. */
  rewardsBaseDir?: string;
  assemble?: AssembleConfigInput;
  sink?: Omit<FileSinkConfigInput, "path">;
  /** Stop once no message arrived for this long (ms), writing open sessions too. */
  untilIdleMs?: number;
  logger: Logger;
  /** Metrics endpoint and status line (docs/operations.md). */
  operations?: OperationsOptions;
  /** Resolves when the run should stop (a signal); absent: only untilIdleMs ends it. */
  stopSignal?: Promise<void>;
}

export async function consume(options: ConsumeOptions): Promise<{ metrics: Metrics; seconds: number }> {
  const problems = new ConfigProblems();
  const source = problems.check("source", kafkaSourceConfigSchema.safeParse(options.source));
  const assemble = problems.check("assemble", assembleConfigSchema.safeParse(options.assemble ?? {}));
  const sink = problems.check(
    "sink",
    fileSinkConfigSchema.safeParse({
      // A quiet partition must still land its rows (and commit its offsets) without waiting for a full
      // file, so consume cuts by age unless told otherwise.
      max_file_age_ms: KAFKA_DEFAULT_FILE_AGE_MS,
      ...stripUndefined(options.sink ?? {}),
      path: options.out,
    }),
  );
  const trajectoryTopic = problems.optional(
    "trajectory_topic",
    trajectoryTopicConfigSchema,
    options.trajectoryTopic,
  );
  const rewards = problems.optional("rewards", rewardsConfigSchema, options.rewards);
  if (sink !== undefined && sink.partition_by !== "none")
    problems.add("sink.partition_by: not supported with Kafka yet");
  problems.throwIfAny();
  const started = performance.now();
  const metrics = new Metrics();
  const pipeline = new KafkaPipeline({
    source: source!,
    assemble: assemble!,
    sink: sink!,
    deadLetterTopic: options.deadLetterTopic ?? `${source!.topic}.dead-letter`,
    trajectoryTopic: trajectoryTopic ?? undefined,
    rewards: rewards ?? undefined,
    rewardsBaseDir: options.rewardsBaseDir,
    metrics,
    logger: options.logger,
  });
  const ops = await startOperations(options.operations, metrics, options.logger, () => ({
    open_sessions: pipeline.openSessions,
    lag: [...pipeline.lag().values()].reduce((a, b) => a + b, 0),
  }));
  ops.gauges.set("open_sessions", () => pipeline.openSessions);
  ops.gauges.set("consumer_lag", () =>
    [...pipeline.lag()].map(([partition, value]) => ({ labels: { partition: String(partition) }, value })),
  );
  ops.gauges.set("offsets_held", () =>
    Object.entries(pipeline.positions()).map(([partition, p]) => ({ labels: { partition }, value: p.held })),
  );
  try {
    await pipeline.start();
    ops.ready(true);
    await runUntilDone(pipeline, metrics, options, () => ops.ready(false));
  } finally {
    ops.ready(false);
    await ops.close();
  }
  return { metrics, seconds: (performance.now() - started) / 1000 };
}

async function runUntilDone(
  pipeline: KafkaPipeline,
  metrics: Metrics,
  options: ConsumeOptions,
  onStopping: () => void,
): Promise<void> {
  let lastCount = -1;
  let quietSince = Date.now();
  const stopped = options.stopSignal?.then(() => "signal" as const);
  for (;;) {
    if (pipeline.error !== null) {
      await pipeline.stop(false).catch(() => {});
      // trajflow's own errors (a file that cannot be written) keep their code; the client's become
      // SOURCE_READ_FAILED.
      if (isTrajflowError(pipeline.error)) throw pipeline.error;
      throw new TrajflowError("SOURCE_READ_FAILED", `the Kafka pipeline failed: ${pipeline.error.message}`, {
        cause: pipeline.error,
      });
    }
    const tick = new Promise<"tick">((r) => setTimeout(() => r("tick"), 100));
    const why = await (stopped === undefined ? tick : Promise.race([tick, stopped]));
    if (why === "signal") {
      onStopping();
      await pipeline.stop(false);
      break;
    }
    const count = metrics.total("kafka_messages");
    if (count !== lastCount) {
      lastCount = count;
      quietSince = Date.now();
    } else if (options.untilIdleMs !== undefined && Date.now() - quietSince >= options.untilIdleMs) {
      await pipeline.stop(true);
      break;
    }
  }
}
