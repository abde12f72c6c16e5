#!/usr/bin/env node
/**
 * The trajflow command line. Exit codes: 0 success, 1 the run failed, 2 usage or configuration error.
 */
import { isTrajflowError } from "../core/errors.ts";
import { ExitCode, usageError } from "./args.ts";
import { runConsume } from "./commands/consume.ts";
import { runInspect } from "./commands/inspect.ts";
import { runPipelineCommand } from "./commands/pipeline.ts";
import { runProduce } from "./commands/produce.ts";
import { runReplay } from "./commands/replay.ts";

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
