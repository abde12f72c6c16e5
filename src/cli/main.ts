#!/usr/bin/env node
/**
 * The trajflow command line. Exit codes: 0 success, 1 the run failed, 2 usage or configuration error.
 */
import { isTrajflowError } from "../core/errors.ts";
import { createLogger } from "../core/logger.ts";
import type { RewardsConfigInput } from "../transforms/reward/config.ts";
import { ExitCode, intOption, jsonFileOption, parse, usageError } from "./args.ts";
import { writeFileSync } from "node:fs";
import { isTokenizerName, renderHtml, tokenDecoder, type TokenizerName } from "./inspect-html.ts";
import { inspect, selectRows } from "./inspect.ts";
import { runReport } from "./report.ts";
import { execute } from "./execute.ts";
import { consumePlan, replayPlan } from "./presets.ts";
import { runPipelineCommand } from "./pipeline.ts";
import { produce, type ProduceCompression } from "./produce.ts";
import { operationsOptions, PIPELINE_COMMAND_FLAGS } from "./operations.ts";
import { progressBar } from "./progress.ts";
import { stopOnSignals } from "./signals.ts";

const HELP = `trajflow: LLM agent gateway events → training-ready RL trajectories (Parquet)

Usage:
  trajflow run <pipeline.yaml> [--set path=value]... [--until-idle-ms <n>] [--json]
  trajflow validate <pipeline.yaml> [--set path=value]...
  trajflow replay <events.jsonl[.gz]...> --out <dir> [options]
  trajflow inspect <file|dir> [--uid <uid>] [--session <id>] [--limit <n>] [--tokens]
  trajflow produce <events.jsonl[.gz]...> --topic <t> [--brokers <list>] [--compression <c>]
  trajflow consume --topic <t> --group <g> --out <dir> [--brokers <list>] [options]
  trajflow <command> --help

Exit codes: 0 success, 1 the run failed, 2 usage or configuration error.
`;

const REPLAY_HELP = `trajflow replay <events.jsonl[.gz]...> --out <dir> [options]

Replays recorded gateway events (protocol v1, one JSON object per line; gzip is detected), assembles
each session's trajectories and writes them as Parquet (or Arrow IPC) files under <dir>. Rejected
events are written to <dir>/dead-letter/ with an error code (docs/errors.md). Prints a summary.
A preset: the same runtime as \`trajflow run\` of a pipeline with a jsonl source (docs/pipelines.md).

Assembly:
  --out <dir>               output directory (required)
  --drift-policy <p>        fork (default) or realign: what to do when a prompt re-renders a sampled turn
  --idle-timeout-ms <n>     finalize a session after this much event time without events (default 600000)
  --reward-grace-ms <n>     accept rewards this long after session.end (default 30000)
  --max-tokens <n>          truncate rows longer than n tokens (flagged "truncated")
  --max-open-sessions <n>   open sessions past which the oldest are cut (default 100000)
  --max-buffered-bytes <n>  bytes of open sessions' events past which the oldest are cut (default 512 MiB)
Files:
  --format <f>              parquet (default) or arrow (Arrow IPC files)
  --engine <e>              parquet-wasm (default) or parquetjs-lite
  --compression <c>         zstd (default for parquet-wasm), snappy (default for parquetjs-lite), gzip, lz4, none
  --rows-per-file <n>       cut a file after n rows (default 10000)
  --tokens-per-file <n>     cut a file once it holds n tokens (default 4000000)
  --file-age-ms <n>         write buffered rows after n ms of wall-clock time even if the file is small
                            (off by default, so replays stay deterministic)
  --partition-by <p>        none (default), date (date=YYYY-MM-DD) or policy (policy=<version>)
  --encode-workers <n>      worker threads encoding files (default 1)
  --decode-workers <n>      worker threads decoding events (default 0: decoded inline)
  --dead-letter-dir <dir>   where rejected events go (default <out>/dead-letter)
Trainer-shaped batches:
  --group                   GRPO group mode: write a uid's n sessions together, padded with placeholders
  --group-size <n>          n for sessions whose session.start has no group_size (implies --group)
  --group-timeout-ms <n>    event time a group waits before it is padded (default 600000; implies --group)
  --max-policy-lag <n>      rows older than current policy - n are stale: dropped, or placeholders in groups
  --current-policy <v>      the current policy version (default: the newest seen in the stream)
Rewards:
  --rewards <file.json>     reward stages scoring every session (docs/rewards.md); relative model and
                            module paths are resolved from the file's directory
Operations:
  --metrics-address <h:p>   serve Prometheus /metrics, /healthz and /readyz there (docs/operations.md)
  --status-interval-ms <n>  log a status line every n ms (default 5000; 0: off); a progress bar with ETA
                            is drawn on stderr when it is a terminal
Output:
  --json                    print the summary as JSON instead of text
  --log-level <level>       trace, debug, info (default), warn, error, silent
  -h, --help                show this help
`;

const INSPECT_HELP = `trajflow inspect <file|dir> [options]

Prints trajectory rows from a Parquet file, or every Parquet file under a directory: key, status,
reward, finish reasons, flags, token counts and the runs of the loss mask.

Options:
  --uid <uid>          only rows of this uid
  --session <id>       only rows of this session_id
  --limit <n>          at most n rows
  --tokens             also print the token ids and the mask
  --html <out.html>    write a page instead: each session's tree of rows, tokens coloured by mask,
                       logprobs on hover, rewards, flags and finish reasons
  --tokenizer <name>   with --html, show text: cl100k_base, o200k_base, p50k_base or r50k_base
                       (gpt-tokenizer's encodings; other tokenizers' ids are shown as ids)
  -h, --help           show this help
`;

/** Command-line flags shared by replay and consume (read by assembleOptions and fileOptions). */
const ASSEMBLE_AND_FILE_FLAGS = {
  "drift-policy": { type: "string" },
  "idle-timeout-ms": { type: "string" },
  "reward-grace-ms": { type: "string" },
  "max-tokens": { type: "string" },
  "max-open-sessions": { type: "string" },
  "max-buffered-bytes": { type: "string" },
  format: { type: "string" },
  engine: { type: "string" },
  compression: { type: "string" },
  "rows-per-file": { type: "string" },
  "tokens-per-file": { type: "string" },
  "file-age-ms": { type: "string" },
} as const;

/** Flags of the transforms and file layout shared by replay and consume. */
const SHAPE_FLAGS = {
  "partition-by": { type: "string" },
  "encode-workers": { type: "string" },
  "decode-workers": { type: "string" },
  "dead-letter-dir": { type: "string" },
  grpo: { type: "boolean" },
  "group-size": { type: "string" },
  "group-timeout-ms": { type: "string" },
  "max-policy-lag": { type: "string" },
  "current-policy": { type: "string" },
  rewards: { type: "string" },
} as const;

type Values = Record<string, string | boolean | string[] | undefined>;

const str = (values: Values, name: string) => values[name] as string | undefined;

/** Assembly options shared by replay and consume. */
function assembleOptions(values: Values) {
  return {
    drift_policy: str(values, "drift-policy") as "fork" | "realign" | undefined,
    idle_timeout_ms: intOption("idle-timeout-ms", str(values, "idle-timeout-ms")),
    reward_grace_ms: intOption("reward-grace-ms", str(values, "reward-grace-ms")),
    max_tokens: intOption("max-tokens", str(values, "max-tokens")),
    max_open_sessions: intOption("max-open-sessions", str(values, "max-open-sessions")),
    max_buffered_bytes: intOption("max-buffered-bytes", str(values, "max-buffered-bytes")),
  };
}

/** File options shared by replay and consume. */
function fileOptions(values: Values) {
  return {
    format: str(values, "format") as "parquet" | undefined,
    engine: str(values, "engine") as "parquet-wasm" | undefined,
    compression: str(values, "compression") as "zstd" | undefined,
    max_rows_per_file: intOption("rows-per-file", str(values, "rows-per-file")),
    max_tokens_per_file: intOption("tokens-per-file", str(values, "tokens-per-file")),
    max_file_age_ms: intOption("file-age-ms", str(values, "file-age-ms")),
  };
}

function checkPolicyFlags(values: Values): void {
  if (values["current-policy"] !== undefined && values["max-policy-lag"] === undefined) {
    throw usageError("--current-policy needs --max-policy-lag");
  }
}

async function runReplay(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    out: { type: "string" },
    ...ASSEMBLE_AND_FILE_FLAGS,
    ...SHAPE_FLAGS,
    group: { type: "boolean" },
    ...PIPELINE_COMMAND_FLAGS,
  });
  if (values.help === true) {
    process.stdout.write(REPLAY_HELP);
    return ExitCode.OK;
  }
  if (positionals.length === 0) throw usageError("replay needs at least one events file");
  if (values.out === undefined) throw usageError("replay needs --out <dir>");
  checkPolicyFlags(values);
  const logger = createLogger({ level: values["log-level"] });
  const rewards = jsonFileOption("rewards", values.rewards);
  const plan = replayPlan(positionals, intOption("decode-workers", values["decode-workers"]), {
    assemble: assembleOptions(values),
    files: {
      ...fileOptions(values),
      path: values.out,
      partition_by: values["partition-by"],
      encode_workers: intOption("encode-workers", values["encode-workers"]),
    },
    rewards: rewards?.value as RewardsConfigInput | undefined,
    group:
      values.group === true ||
      values.grpo === true ||
      values["group-size"] !== undefined ||
      values["group-timeout-ms"] !== undefined
        ? {
            group_size: intOption("group-size", values["group-size"]),
            timeout_ms: intOption("group-timeout-ms", values["group-timeout-ms"]),
          }
        : undefined,
    staleness:
      values["max-policy-lag"] !== undefined
        ? {
            max_lag: intOption("max-policy-lag", values["max-policy-lag"])!,
            current_version: intOption("current-policy", values["current-policy"]),
          }
        : undefined,
    deadLetters:
      values["dead-letter-dir"] === undefined
        ? undefined
        : { type: "files", path: values["dead-letter-dir"] },
  });
  const bar = progressBar(positionals);
  const result = await execute(plan, {
    logger,
    baseDir: rewards?.dir ?? process.cwd(),
    operations: operationsOptions(values),
    onBatch: (runtime) => {
      const progress = runtime.source.progress;
      if (progress !== undefined) bar?.(progress, runtime.metrics);
    },
  });
  // Clear the progress bar's line before the summary.
  if (process.stderr.isTTY === true) process.stderr.write("\r\x1b[K");
  process.stdout.write(runReport("replay", result, values.json === true));
  return ExitCode.OK;
}

const PRODUCE_HELP = `trajflow produce <events.jsonl[.gz]...> --topic <t> [options]

Publishes recorded gateway events to a Kafka topic, keyed by uid, byte for byte (as a gateway would).
policy.update control events go to every partition.

Options:
  --topic <t>          topic to publish to (required)
  --brokers <list>     comma-separated bootstrap brokers (default $KAFKA_BROKERS or 127.0.0.1:9092)
  --compression <c>    none (default), gzip, snappy, lz4 or zstd
  -h, --help           show this help
`;

const CONSUME_HELP = `trajflow consume --topic <t> --group <g> --out <dir> [options]

Consumes gateway events from a Kafka topic, assembles trajectories and writes them as files named after
the offsets they cover, exactly once: offsets are committed only after files are in place, and sessions
already in files are skipped after a crash or rebalance. Rejected events go to a dead-letter topic.
Runs until SIGTERM or SIGINT. A preset: the same runtime as \`trajflow run\` of a pipeline with a kafka
source (docs/pipelines.md).

Options:
  --topic <t>               topic of gateway events (required)
  --group <g>               consumer group (required); processes sharing it split the partitions
  --out <dir>               output directory (required)
  --brokers <list>          comma-separated bootstrap brokers (default $KAFKA_BROKERS or 127.0.0.1:9092)
  --dead-letter-topic <t>   default <topic>.dead-letter
  --dead-letter-dir <dir>   write dead letters as files there instead of to a topic
  --trajectory-topic <t>    also produce every row to this topic, keyed uid_session_index (at least
                            once: acknowledged before the row's file is written)
  --trajectory-format <f>   json (default) or arrow (an Arrow IPC stream of one row per message)
  --rewards <file.json>     reward stages scoring every session, as for replay
  --metrics-address <h:p>   serve Prometheus /metrics, /healthz and /readyz there
  --status-interval-ms <n>  log a status line every n ms (default 5000; 0: off)
  --until-idle-ms <n>       stop after n ms without messages, writing open sessions too (drain a topic)
  --session-timeout-ms <n>  consumer group session timeout (default 30000): how soon a dead member's
                            partitions move to the others
  --max-open-sessions <n>   open sessions past which the oldest are cut (default 100000)
  --max-buffered-bytes <n>  bytes of open sessions' events past which the oldest are cut (default 512 MiB)
  --decode-workers <n>      worker threads decoding events while this thread fetches and assembles
                            (default 0: no gain on 2 cores; see docs/operations.md)
  --drift-policy, --idle-timeout-ms, --reward-grace-ms, --max-tokens    as for replay
  --grpo                    GRPO group mode, as replay's --group (--group names the consumer group here)
  --group-size, --group-timeout-ms, --max-policy-lag, --current-policy,
  --partition-by, --encode-workers, --dead-letter-dir                    as for replay
  --format, --engine, --compression, --rows-per-file, --tokens-per-file  as for replay
  --file-age-ms <n>         write buffered rows after n ms even if the file is small (default 10000 here,
                            so a quiet partition still lands its rows and commits its offsets)
  --json                    print the final metrics as JSON
  -h, --help                show this help
`;

function brokers(value: string | undefined): string[] {
  return (value ?? process.env.KAFKA_BROKERS ?? "127.0.0.1:9092")
    .split(",")
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}

async function runProduce(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    topic: { type: "string" },
    brokers: { type: "string" },
    compression: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help === true) {
    process.stdout.write(PRODUCE_HELP);
    return ExitCode.OK;
  }
  if (positionals.length === 0) throw usageError("produce needs at least one events file");
  if (values.topic === undefined) throw usageError("produce needs --topic <t>");
  const compression = (values.compression ?? "none") as ProduceCompression;
  if (!["none", "gzip", "snappy", "lz4", "zstd"].includes(compression)) {
    throw usageError(
      `--compression must be none, gzip, snappy, lz4 or zstd, got ${JSON.stringify(values.compression)}`,
    );
  }
  const logger = createLogger({});
  const result = await produce({
    inputs: positionals,
    topic: values.topic,
    connection: {
      brokers: brokers(values.brokers),
      client_id: "trajflow-produce",
      connection_timeout_ms: 10_000,
    },
    compression,
    logger,
  });
  process.stdout.write(
    `trajflow produce: ${result.messages} messages to ${values.topic} in ${result.seconds.toFixed(2)} s\n`,
  );
  return ExitCode.OK;
}

async function runConsume(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    topic: { type: "string" },
    group: { type: "string" },
    out: { type: "string" },
    brokers: { type: "string" },
    "dead-letter-topic": { type: "string" },
    "trajectory-topic": { type: "string" },
    "trajectory-format": { type: "string" },
    ...PIPELINE_COMMAND_FLAGS,
    "until-idle-ms": { type: "string" },
    "session-timeout-ms": { type: "string" },
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
  const consumeRewards = jsonFileOption("rewards", values.rewards);
  const plan = consumePlan(
    {
      connection: { brokers: brokers(values.brokers) },
      topic: values.topic,
      group_id: values.group,
      session_timeout_ms: intOption("session-timeout-ms", values["session-timeout-ms"]),
      decode_workers: intOption("decode-workers", values["decode-workers"]),
    },
    {
      assemble: assembleOptions(values),
      files: {
        ...fileOptions(values),
        path: values.out,
        partition_by: values["partition-by"],
        encode_workers: intOption("encode-workers", values["encode-workers"]),
      },
      rewards: consumeRewards?.value as RewardsConfigInput | undefined,
      group:
        values.grpo === true || values["group-size"] !== undefined || values["group-timeout-ms"] !== undefined
          ? {
              group_size: intOption("group-size", values["group-size"]),
              timeout_ms: intOption("group-timeout-ms", values["group-timeout-ms"]),
            }
          : undefined,
      staleness:
        values["max-policy-lag"] !== undefined
          ? {
              max_lag: intOption("max-policy-lag", values["max-policy-lag"])!,
              current_version: intOption("current-policy", values["current-policy"]),
            }
          : undefined,
      topic:
        values["trajectory-topic"] === undefined
          ? undefined
          : {
              topic: values["trajectory-topic"],
              // Checked by the sink's schema, which lists every problem at once.
              format: values["trajectory-format"],
            },
      deadLetters:
        values["dead-letter-dir"] !== undefined
          ? { type: "files", path: values["dead-letter-dir"] }
          : values["dead-letter-topic"] !== undefined
            ? { type: "kafka", topic: values["dead-letter-topic"] }
            : undefined,
    },
  );
  const result = await execute(plan, {
    logger,
    baseDir: consumeRewards?.dir ?? process.cwd(),
    operations: operationsOptions(values),
    untilIdleMs: intOption("until-idle-ms", values["until-idle-ms"]),
    stopSignal: stopOnSignals(logger),
  });
  process.stdout.write(runReport("consume", result, values.json === true));
  return ExitCode.OK;
}

async function runInspect(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    uid: { type: "string" },
    session: { type: "string" },
    limit: { type: "string" },
    tokens: { type: "boolean" },
    html: { type: "string" },
    tokenizer: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help === true) {
    process.stdout.write(INSPECT_HELP);
    return ExitCode.OK;
  }
  if (positionals.length !== 1) throw usageError("inspect needs exactly one file or directory");
  const filter = {
    uid: values.uid,
    session: values.session,
    limit: intOption("limit", values.limit),
    tokens: values.tokens,
  };
  if (values.tokenizer !== undefined && !isTokenizerName(values.tokenizer)) {
    throw usageError(
      `--tokenizer must be cl100k_base, o200k_base, p50k_base or r50k_base, got ${values.tokenizer}`,
    );
  }
  if (values.html !== undefined) {
    const rows = await selectRows(positionals[0]!, filter);
    const decode =
      values.tokenizer === undefined ? null : await tokenDecoder(values.tokenizer as TokenizerName);
    writeFileSync(values.html, renderHtml(rows, decode));
    process.stderr.write(`${rows.length} row(s) in ${values.html}\n`);
    return ExitCode.OK;
  }
  if (values.tokenizer !== undefined) throw usageError("--tokenizer is for --html");
  const shown = await inspect(positionals[0]!, filter, (line) => process.stdout.write(`${line}\n`));
  process.stderr.write(`${shown} row(s)\n`);
  return ExitCode.OK;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "replay":
        return await runReplay(rest);
      case "inspect":
        return await runInspect(rest);
      case "produce":
        return await runProduce(rest);
      case "consume":
        return await runConsume(rest);
      case "validate":
      case "run":
        return await runPipelineCommand(command, rest);
      case undefined:
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(HELP);
        return command === undefined ? ExitCode.USAGE : ExitCode.OK;
      default:
        throw usageError(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (err) {
    if (isTrajflowError(err) && (err.code === "USAGE" || err.code === "CONFIG_INVALID")) {
      process.stderr.write(
        `trajflow: ${err.message}\n${err.code === "USAGE" ? "Run `trajflow --help` for usage.\n" : ""}`,
      );
      return ExitCode.USAGE;
    }
    if (isTrajflowError(err)) {
      process.stderr.write(`trajflow: [${err.code}] ${err.message}\n`);
      return ExitCode.FAILURE;
    }
    process.stderr.write(`trajflow: unexpected error: ${(err as Error).stack ?? String(err)}\n`);
    return ExitCode.FAILURE;
  }
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2));
}
