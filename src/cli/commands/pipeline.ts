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
import { runReport } from "../report.ts";
import { stopOnSignals } from "../signals.ts";

export const VALIDATE_HELP = `trajflow validate <pipeline.yaml> [--set path=value]...

Checks a pipeline file without running it: every component's configuration, environment variables,
the wiring (inputs exist, no cycles, nothing unconnected) and that the runtime runs its shape. Lists every
problem with file:line. Exit code 0 when valid, 2 when not.
`;

export const RUN_HELP = `trajflow run <pipeline.yaml> [options]

Validates, then runs a pipeline file on the runtime replay and consume are presets of. A jsonl source
runs to the end of its files; a kafka source runs until SIGTERM or SIGINT (a second signal exits at once).

Options:
  --set <path=value>     override a value, e.g. --set sinks.files.path=/data/out (repeatable)
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
    "until-idle-ms": { type: "string" },
    ...PIPELINE_COMMAND_FLAGS,
  });
  if (values.help === true) {
    process.stdout.write(command === "run" ? RUN_HELP : VALIDATE_HELP);
    return ExitCode.OK;
  }
  if (positionals.length !== 1) throw usageError(`${command} takes one pipeline file`);
  if (command === "validate" && values["until-idle-ms"] !== undefined)
    throw usageError("--until-idle-ms is for run");
  const file = positionals[0]!;
  const { pipeline, problems } = loadPipeline(file, { set: values.set ?? [] });
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
