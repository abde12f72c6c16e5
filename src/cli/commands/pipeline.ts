/**
 * `trajflow validate <pipeline>` and `trajflow run <pipeline>`: pipeline files (docs/pipelines.md).
 * `validate` checks everything `run` would (every component's config, the graph, the shape) without
 * opening a file or a connection.
 */
import { createLogger } from "../../core/logger.ts";
import { dirname, resolve } from "node:path";
import { loadPipeline } from "../../runtime/load.ts";
import { describePlan, planPipeline } from "../../runtime/plan.ts";
import { checkGatewaySection } from "../../gateway/section.ts";
import { ExitCode, intOption, memoryOption, parse, takeFlagProblems, usageError } from "../args.ts";
import { operationsOptions, PIPELINE_COMMAND_FLAGS } from "../operations.ts";
import { execute } from "../execute.ts";
import { failureText } from "../failure.ts";
import { runReport } from "../report.ts";
import { stopOnSignals } from "../signals.ts";

export const VALIDATE_HELP = `trajflow validate <pipeline.yaml>... [--set path=value]... [--out <dir>]

Checks a pipeline file without running it: every component's configuration, environment variables,
the wiring (inputs exist, no cycles, nothing unconnected) and that the runtime runs its shape. Lists every
problem with file:line. Several files are checked one after another, each with the same --set and --out.
Exit code 0 when all are valid, 2 when one is not.
`;

export const RUN_HELP = `trajflow run <pipeline.yaml> [options]

Validates, then runs a pipeline file on the runtime replay and consume are presets of. A jsonl source
runs to the end of its files; a kafka source runs until SIGTERM or SIGINT (a second signal exits at once).

Options:
  --set <path=value>     override a value, e.g. --set sinks.files.path=/data/out (repeatable)
  --out <dir>            where the pipeline's one file sink writes (its path), and its dead letters
                         with it when they sat under the sink's old path (unless --set names them)
  --until-idle-ms <n>    kafka: drain; stop once every assigned partition is read to its high watermark
                         and no message came for n ms, writing open sessions too
  --metrics-address <h:p>  serve Prometheus /metrics, /healthz and /readyz there (docs/operations.md)
  --status-interval-ms <n> log a status line every n ms (default 5000; 0: off)
  --max-memory <size>    size the defaults for this much memory (MiB, or 768MiB, 2GiB; default: the
                         container's cgroup limit, if any; settings the file gives stay)
  --json                 print the summary as JSON
  --log-level <level>    trace, debug, info (default), warn, error, silent
  -h, --help             show this help
`;

export async function runPipelineCommand(command: "validate" | "run", argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    set: { type: "string", multiple: true },
    out: { type: "string" },
    "until-idle-ms": { type: "string" },
    ...PIPELINE_COMMAND_FLAGS,
  });
  if (values.help === true) {
    process.stdout.write(command === "run" ? RUN_HELP : VALIDATE_HELP);
    return ExitCode.OK;
  }
  if (positionals.length === 0) throw usageError(`${command} needs a pipeline file`);
  if (command === "run" && positionals.length !== 1) throw usageError("run takes one pipeline file");
  if (command === "validate" && values["until-idle-ms"] !== undefined)
    throw usageError("--until-idle-ms is for run");
  if (command === "validate" && positionals.length > 1) {
    // Each file on its own: every one is checked and reported, and the exit says whether all are valid.
    let failed = false;
    for (const file of positionals) {
      try {
        await runPipelineCommand("validate", [file, ...argvFlags(argv, positionals)]);
      } catch (err) {
        process.stderr.write(failureText(err));
        failed = true;
      }
    }
    return failed ? ExitCode.USAGE : ExitCode.OK;
  }
  const file = positionals[0]!;
  const { pipeline, problems } = loadPipeline(file, { set: outSets(file, values.set ?? [], values.out) });
  const operations = operationsOptions(values);
  const untilIdleMs = intOption("until-idle-ms", values["until-idle-ms"]);
  const memory = memoryOption(values["max-memory"]);
  const root = (pipeline.value ?? {}) as Record<string, unknown>;
  const gateway = checkGatewaySection(root.gateway, pipeline.where);
  // Bad flag values are listed with the file's problems, all at once.
  const plan = planPipeline(pipeline, [...takeFlagProblems(), ...problems, ...gateway.problems], memory);
  if (command === "validate") {
    const feeding = gateway.config === null ? "" : `; fed by a gateway on ${gateway.config.listen}`;
    const sized =
      plan.memory === null
        ? ""
        : `\n  sized for ${Math.round(plan.memory.limit.bytes / 2 ** 20)} MiB (${plan.memory.limit.source}): ` +
          (plan.memory.sized.join(", ") || "nothing left unset");
    process.stdout.write(`${file}: valid: ${describePlan(plan)}${feeding}${sized}\n`);
    return ExitCode.OK;
  }
  const logger = createLogger({ level: values["log-level"] });
  logger.info({ pipeline: file }, describePlan(plan));
  const stop = plan.sourceTraits.live || gateway.config !== null ? stopOnSignals(logger) : undefined;
  // The gateway feeding the pipeline starts first and stops first: calls in flight finish and their
  // events are recorded before the pipeline stops reading them.
  const running =
    gateway.config === null
      ? null
      : await (await import("../../gateway/gateway.ts")).startGateway(gateway.config, logger);
  const result = await execute(plan, {
    logger,
    // Model and module paths of reward stages are relative to the pipeline file.
    baseDir: dirname(resolve(file)),
    untilIdleMs,
    stopSignal: stop === undefined ? undefined : running === null ? stop : stop.then(() => running.close()),
    operations,
  }).finally(() => running?.close());
  process.stdout.write(runReport("run", result, values.json === true));
  return ExitCode.OK;
}

/** The command line without its positionals (the flags and their values), to check several files alike. */
function argvFlags(argv: string[], positionals: string[]): string[] {
  const rest = [...argv];
  for (const p of positionals) rest.splice(rest.indexOf(p), 1);
  return rest;
}

/**
 * `--out <dir>` as the --set overrides it stands for: the path of the pipeline's one file sink (parquet or
 * arrow), and the dead letters' path too when it lay under the sink's old path and no --set names it.
 * A pipeline with no file sink, or several, is a usage error: which one is meant cannot be guessed.
 */
function outSets(file: string, sets: string[], out: string | undefined): string[] {
  if (out === undefined) return sets;
  const { pipeline } = loadPipeline(file, { set: sets });
  const root = (pipeline.value ?? {}) as Record<string, Record<string, Record<string, unknown>> | undefined>;
  const sinks = Object.entries(root.sinks ?? {}).filter(
    ([, s]) => (s?.type === "parquet" || s?.type === "arrow") && typeof s.path === "string",
  );
  if (sinks.length !== 1)
    throw usageError(
      `--out needs exactly one parquet or arrow sink; ${file} has ${sinks.length}` +
        (sinks.length > 1
          ? ` (${sinks.map(([n]) => n).join(", ")}): name one with --set sinks.<name>.path=`
          : ""),
    );
  const [name, sink] = sinks[0]!;
  const old = String(sink.path).replace(/\/+$/, "");
  const extra = [`sinks.${name}.path=${out}`];
  const letters = (root.dead_letters as Record<string, unknown> | undefined)?.path;
  const lettersSet = sets.some((s) => s.startsWith("dead_letters.path="));
  if (typeof letters === "string" && !lettersSet && (letters === old || letters.startsWith(`${old}/`)))
    extra.push(`dead_letters.path=${out}${letters.slice(old.length)}`);
  return [...sets, ...extra];
}
