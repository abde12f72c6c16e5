/** `trajflow replay`: a preset of a pipeline with a jsonl source. */
import { existsSync } from "node:fs";
import { TrajflowError } from "../../core/errors.ts";
import { createLogger } from "../../core/logger.ts";
import { ExitCode, intOption, parse, usageError } from "../args.ts";
import { execute } from "../execute.ts";
import { operationsOptions, PIPELINE_COMMAND_FLAGS } from "../operations.ts";
import { replayPlan } from "../presets.ts";
import { progressBar } from "../progress.ts";
import { runReport } from "../report.ts";
import { ASSEMBLE_AND_FILE_FLAGS, checkPolicyFlags, presetOptions, SHAPE_FLAGS } from "./shared.ts";

export const REPLAY_HELP = `trajflow replay <events.jsonl[.gz]...> --out <dir> [options]

Replays recorded gateway events (protocol v1, one JSON object per line; gzip is detected), assembles
each session's trajectories and writes them as Parquet (or Arrow IPC) files under <dir>. Rejected
events are written to <dir>/_dead-letter/ with an error code (docs/errors.md). Prints a summary.
A preset: the same runtime as \`trajflow run\` of a pipeline with a jsonl source (docs/pipelines.md).

Assembly:
  --out <dir>               output directory or s3://bucket/prefix (required; S3 credentials from the
                            standard AWS chain, endpoint from AWS_ENDPOINT_URL_S3: docs/sinks.md)
  --drift-policy <p>        fork (default) or realign: what to do when a prompt re-renders a sampled turn
  --idle-timeout-ms <n>     finalize a session after this much event time without events (default 600000)
  --reward-grace-ms <n>     how long an ended session missing an awaited reward waits for it (default
                            30000; a session holding its awaited rewards is final at once)
  --await-rewards <list>    comma-separated reward stages or keys a session waits for after session.end
                            (default: any one reward; "": none, final at session.end)
  --max-tokens <n>          truncate rows longer than n tokens (flagged "truncated")
  --max-open-sessions <n>   open sessions past which the oldest are cut (default 100000)
  --max-buffered-bytes <n>  memory of open sessions (events' bytes + 3 KiB each) past which the oldest
                            are cut (default 512 MiB, or a quarter of the heap when smaller)
Files:
  --format <f>              parquet (default) or arrow (Arrow IPC files)
  --engine <e>              trajflow (default), parquet-wasm or parquetjs-lite
  --compression <c>         zstd (default; snappy for parquetjs-lite), snappy, gzip, lz4, none
  --rows-per-file <n>       cut a file after n rows (default 10000)
  --tokens-per-file <n>     cut a file once it holds n tokens (default 4000000)
  --file-age-ms <n>         write buffered rows after n ms of wall-clock time even if the file is small
                            (off by default, so replays stay deterministic)
  --partition-by <p>        none (default), date (date=YYYY-MM-DD) or policy (policy=<version>)
  --encode-workers <n>      worker threads encoding files (default 1)
  --decode-workers <n>      worker threads decoding events (default 0: decoded inline)
  --dead-letter-dir <dir>   where rejected events go (default <out>/_dead-letter: dataset readers skip names starting with _)
  --s3-force-path-style     path-style S3 addressing (endpoint/bucket/key); on by default with a custom endpoint
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
  --max-memory <size>       size fetches, buffers and files for this much memory (MiB, or 768MiB,
                            2GiB; default: the container's cgroup limit, if any; docs/operations.md)
  --json                    print the summary as JSON instead of text
  --log-level <level>       trace, debug, info (default), warn, error, silent
  -h, --help                show this help
`;

export async function runReplay(argv: string[]): Promise<number> {
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
  // Checked before anything opens, so a typo'd input leaves no output directory behind.
  const missing = positionals.filter((path) => !existsSync(path));
  if (missing.length > 0)
    throw new TrajflowError(
      "SOURCE_READ_FAILED",
      `cannot read ${missing.join(", ")}: no such file (nothing was written)`,
    );
  checkPolicyFlags(values);
  const logger = createLogger({ level: values["log-level"] });
  const { baseDir, ...options } = presetOptions(values, values.group === true);
  const operations = operationsOptions(values);
  const plan = replayPlan(positionals, intOption("decode-workers", values["decode-workers"]), options);
  const bar = progressBar(positionals);
  const result = await execute(plan, {
    logger,
    baseDir,
    operations,
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
