/** `trajflow consume`: a preset of a pipeline with a kafka source. */
import { createLogger } from "../../core/logger.ts";
import { ExitCode, intOption, parse, usageError } from "../args.ts";
import { execute } from "../execute.ts";
import { operationsOptions, PIPELINE_COMMAND_FLAGS } from "../operations.ts";
import { consumePlan } from "../presets.ts";
import { runReport } from "../report.ts";
import { stopOnSignals } from "../signals.ts";
import {
  ASSEMBLE_AND_FILE_FLAGS,
  checkPolicyFlags,
  CONNECTION_FLAGS,
  CONNECTION_HELP,
  connectionOptions,
  KAFKA_CLIENT_FLAG,
  KAFKA_CLIENT_HELP,
  presetOptions,
  SHAPE_FLAGS,
} from "./shared.ts";

export const CONSUME_HELP = `trajflow consume --topic <t> --group <g> --out <dir> [options]

Consumes gateway events from a Kafka topic, assembles trajectories and writes them as files named after
the offsets they cover, exactly once: offsets are committed only after files are in place, and sessions
already in files are skipped after a crash or rebalance. Rejected events go to a dead-letter topic.
Runs until SIGTERM or SIGINT. A preset: the same runtime as \`trajflow run\` of a pipeline with a kafka
source (docs/pipelines.md).

Options:
  --topic <t>               topic of gateway events (required)
  --group <g>               consumer group (required); processes sharing it split the partitions
  --out <dir>               output directory or s3://bucket/prefix (required; docs/sinks.md)
${CONNECTION_HELP}
${KAFKA_CLIENT_HELP}
  --dead-letter-topic <t>   default <topic>.dead-letter
  --dead-letter-dir <dir>   write dead letters as files there instead of to a topic
  --trajectory-topic <t>    also produce every row to this topic, keyed uid_session_index (at least
                            once: acknowledged before the row's file is written)
  --trajectory-format <f>   json (default) or arrow (an Arrow IPC stream of one row per message)
  --rewards <file.json>     reward stages scoring every session, as for replay
  --metrics-address <h:p>   serve Prometheus /metrics, /healthz and /readyz there
  --status-interval-ms <n>  log a status line every n ms (default 5000; 0: off)
  --until-idle-ms <n>       drain the topic: stop once every assigned partition is read to its high
                            watermark and no message came for n ms, writing open sessions too (once
                            caught up, finished sessions' rows land in files at once)
  --idle-advance-ms <n>     a caught-up partition quiet for n ms moves its clock with the wall clock, so
                            reward grace and timeouts elapse and its rows are written (default 1000;
                            0: pure event time; docs/assembly.md)
  --fetch-max-bytes <n>     most bytes per fetch (default 256 KiB per partition, 1 MiB in all; with
                            librdkafka also its prefetch queue, default 1 MiB)
  --session-timeout-ms <n>  consumer group session timeout (default 30000): how soon a dead member's
                            partitions move to the others
  --max-open-sessions <n>   open sessions past which the oldest are cut (default 100000)
  --max-buffered-bytes <n>  memory of open sessions (events' bytes + 3 KiB each) past which the oldest
                            are cut (default 512 MiB, or a quarter of the heap when smaller)
  --decode-workers <n>      worker threads decoding events while this thread fetches and assembles
                            (default 2 on 8+ cores, 1 on 2-7, else 0; docs/operations.md)
  --drift-policy, --idle-timeout-ms, --reward-grace-ms, --await-rewards, --max-tokens   as for replay
  --grpo                    GRPO group mode, as replay's --group (--group names the consumer group here)
  --group-size, --group-timeout-ms, --max-policy-lag, --current-policy,
  --partition-by, --encode-workers, --dead-letter-dir, --s3-force-path-style   as for replay
  --format, --engine, --compression, --rows-per-file, --tokens-per-file  as for replay
  --file-age-ms <n>         write buffered rows after n ms even if the file is small (default 10000 here,
                            so a quiet partition still lands its rows and commits its offsets)
  --max-memory <size>       size fetches, buffers and files for this much memory (MiB, or 768MiB,
                            2GiB; default: the container's cgroup limit, if any; docs/operations.md)
  --json                    print the final metrics as JSON
  -h, --help                show this help
`;

export async function runConsume(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    topic: { type: "string" },
    group: { type: "string" },
    out: { type: "string" },
    ...CONNECTION_FLAGS,
    ...KAFKA_CLIENT_FLAG,
    "dead-letter-topic": { type: "string" },
    "trajectory-topic": { type: "string" },
    "trajectory-format": { type: "string" },
    ...PIPELINE_COMMAND_FLAGS,
    "until-idle-ms": { type: "string" },
    "session-timeout-ms": { type: "string" },
    "idle-advance-ms": { type: "string" },
    "fetch-max-bytes": { type: "string" },
    ...SHAPE_FLAGS,
    ...ASSEMBLE_AND_FILE_FLAGS,
  });
  if (values.help === true) {
    process.stdout.write(CONSUME_HELP);
    return ExitCode.OK;
  }
  if (positionals.length > 0) throw usageError("consume takes no positional arguments");
  for (const required of ["topic", "group", "out"] as const) {
    if (values[required] === undefined) throw usageError(`consume needs --${required}`);
  }
  checkPolicyFlags(values);
  const logger = createLogger({ level: values["log-level"] });
  const { baseDir, deadLetters, ...options } = presetOptions(values, values.grpo === true);
  const operations = operationsOptions(values);
  const untilIdleMs = intOption("until-idle-ms", values["until-idle-ms"]);
  const plan = consumePlan(
    {
      connection: connectionOptions(values),
      topic: values.topic,
      group_id: values.group,
      session_timeout_ms: intOption("session-timeout-ms", values["session-timeout-ms"]),
      idle_advance_ms: intOption("idle-advance-ms", values["idle-advance-ms"]),
      fetch_max_bytes: intOption("fetch-max-bytes", values["fetch-max-bytes"]),
      decode_workers: intOption("decode-workers", values["decode-workers"]),
    },
    {
      ...options,
      topic:
        values["trajectory-topic"] === undefined
          ? undefined
          : {
              topic: values["trajectory-topic"],
              // Checked by the sink's schema, which lists every problem at once.
              format: values["trajectory-format"],
            },
      deadLetters:
        deadLetters ??
        (values["dead-letter-topic"] === undefined
          ? undefined
          : { type: "kafka", topic: values["dead-letter-topic"] }),
    },
  );
  const result = await execute(plan, {
    logger,
    baseDir,
    operations,
    untilIdleMs,
    stopSignal: stopOnSignals(logger),
  });
  process.stdout.write(runReport("consume", result, values.json === true));
  return ExitCode.OK;
}
