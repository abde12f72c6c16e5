/**
 * `trajflow replay` and `trajflow consume` are presets: they build a pipeline document from their flags,
 * as a pipeline file would hold it, and hand it to the same plan and runtime as `trajflow run`. Flags
 * a user did not give are left out, so each component's defaults apply.
 */
import { TrajflowError } from "../core/errors.ts";
import type { MemoryLimit } from "../core/memory-limit.ts";
import { takeFlagProblems } from "./args.ts";
import type { Logger } from "../core/logger.ts";
import { Runtime, type RunResult } from "../runtime/runtime.ts";
import type { LoadedPipeline } from "../runtime/load.ts";
import { planPipeline, type Plan } from "../runtime/plan.ts";

/** Default `max_file_age_ms` of consume: a quiet partition still lands its rows and commits. */
export const KAFKA_DEFAULT_FILE_AGE_MS = 10_000;

type Doc = Record<string, unknown>;

const defined = (o: Doc): Doc => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

export interface PresetOptions {
  assemble: Doc;
  files: Doc;
  rewards?: unknown;
  /** Where a path inside the rewards document is (`file:line`), when it came from a file. */
  rewardsWhere?: (path: ReadonlyArray<string | number>) => string;
  staleness?: Doc;
  group?: Doc;
  /** Trajectory topic sink config (topic, format, ...). */
  topic?: Doc;
  deadLetters?: Doc;
  /** The memory limit that sizes the defaults (`--max-memory` or the cgroup's; core/memory-limit.ts). */
  memory?: MemoryLimit | null;
}

function document(source: Doc, o: PresetOptions): Doc {
  const transforms: Doc = { assemble: { type: "assemble", inputs: ["input"], ...defined(o.assemble) } };
  let tail = "assemble";
  const add = (name: string, config: unknown) => {
    if (config === undefined) return;
    transforms[name] = { ...(config as Doc), type: name, inputs: [tail] };
    tail = name;
  };
  add("rewards", o.rewards);
  add("staleness", o.staleness === undefined ? undefined : defined(o.staleness));
  add("group", o.group === undefined ? undefined : defined(o.group));
  const sinks: Doc = { files: { type: "parquet", inputs: [tail], ...defined(o.files) } };
  if (o.topic !== undefined) sinks.topic = { type: "kafka", inputs: [tail], ...defined(o.topic) };
  return {
    version: 1,
    sources: { input: source },
    transforms,
    sinks,
    ...(o.deadLetters === undefined ? {} : { dead_letters: o.deadLetters }),
  };
}

/**
 * Plans a preset's document; problems name the command, since there is no file, except those inside the
 * rewards document, which point into its file.
 */
function plan(command: string, doc: Doc, o: PresetOptions): Plan {
  const where = (path: ReadonlyArray<string | number>) =>
    o.rewardsWhere !== undefined && path[0] === "transforms" && path[1] === "rewards"
      ? o.rewardsWhere(path.slice(2))
      : `${command} options`;
  const pipeline: LoadedPipeline = { file: command, value: doc, where };
  try {
    // Bad flag values (not integers) are listed with the document's problems, all at once.
    return planPipeline(pipeline, takeFlagProblems(), o.memory ?? null);
  } catch (err) {
    if (err instanceof TrajflowError && err.code === "CONFIG_INVALID")
      throw new TrajflowError("CONFIG_INVALID", err.message.replace("invalid pipeline", "invalid options"), {
        details: err.details,
      });
    throw err;
  }
}

export function replayPlan(inputs: string[], decodeWorkers: number | undefined, o: PresetOptions): Plan {
  return plan(
    "replay",
    document(defined({ type: "jsonl", paths: inputs, decode_workers: decodeWorkers }), o),
    o,
  );
}

export function consumePlan(source: Doc, o: PresetOptions): Plan {
  return plan(
    "consume",
    document(
      { type: "kafka", ...defined(source) },
      {
        ...o,
        files: { max_file_age_ms: KAFKA_DEFAULT_FILE_AGE_MS, ...defined(o.files) },
      },
    ),
    o,
  );
}

/**
 * The gateway's embedded pipeline: its local event log followed live, written as `consume` writes a
 * topic (files named by the log's offsets, recovered on restart).
 */
export function embeddedPlan(logDir: string, decodeWorkers: number | undefined, o: PresetOptions): Plan {
  return plan(
    "gateway",
    document(defined({ type: "event_log", dir: logDir, decode_workers: decodeWorkers }), {
      ...o,
      files: { max_file_age_ms: KAFKA_DEFAULT_FILE_AGE_MS, ...defined(o.files) },
    }),
    o,
  );
}

/** Replays files in process (benchmarks, tests): the `replay` command without its flags and report. */
export async function replay(options: {
  inputs: string[];
  out: string;
  assemble?: Doc;
  files?: Doc;
  logger: Logger;
}): Promise<RunResult> {
  const plan = replayPlan(options.inputs, undefined, {
    assemble: options.assemble ?? {},
    files: { ...options.files, path: options.out },
  });
  return new Runtime(plan, { logger: options.logger, baseDir: process.cwd() }).run();
}
