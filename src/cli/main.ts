#!/usr/bin/env node
/**
 * The trajflow command line. Exit codes: 0 success, 1 the run failed, 2 usage or configuration error
 * (including an output store that refuses the configuration: a missing bucket, rejected credentials).
 */
import { enableCompileCache } from "node:module";

// Startup: V8's compiled code (and the stripped TypeScript) is cached on disk, in $NODE_COMPILE_CACHE
// or the system's temporary directory; NODE_DISABLE_COMPILE_CACHE=1 turns it off. Measured: `consume
// --help` 0.65 s → 0.38 s. Worker threads (encoders, decoders) inherit the directory via the environment.
// Everything else is imported after this (ES imports would load first), and a command only when it runs.
const cache = enableCompileCache();
if (cache.directory !== undefined) process.env.NODE_COMPILE_CACHE ??= cache.directory;

const HELP = `trajflow: LLM agent gateway events → training-ready RL trajectories (Parquet)

Usage:
  trajflow run <pipeline.yaml> [--set path=value]... [--out <dir>] [--until-idle-ms <n>] [--json]
  trajflow validate <pipeline.yaml>... [--set path=value]... [--out <dir>]
  trajflow replay <events.jsonl[.gz]...> --out <dir> [options]
  trajflow inspect <file|dir> [--uid <uid|key>] [--key <key>] [--session <id>] [--limit <n>] [--tokens] [--json]
                   [--html <out.html> [--tokenizer <name>]]
  trajflow produce <events.jsonl[.gz]...> --topic <t> [--brokers <list>] [--compression <c>]
  trajflow consume --topic <t> --group <g> --out <dir> [--brokers <list>] [options]
  trajflow gateway --upstream <url> [--engine vllm|sglang|llamacpp] (--out <dir> | --event-log <dir> | --topic <t>) [options]
  trajflow <command> --help
  trajflow --version

Exit codes: 0 success, 1 the run failed, 2 usage or configuration error.
`;

const COMMANDS = ["run", "validate", "replay", "inspect", "produce", "consume", "gateway"];

/** The version in the project's package.json. */
async function version(): Promise<string> {
  const { readFileSync } = await import("node:fs");
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

export async function main(argv: string[]): Promise<number> {
  const { ExitCode, usageError } = await import("./args.ts");
  const { isTrajflowError } = await import("../core/errors.ts");
  const { failureText } = await import("./failure.ts");
  // What escapes every handler (a timer's throw, a promise nobody awaited) ends the run the same way as a
  // failure of the command: one coded line, no stack trace.
  const fatal = (err: unknown) => {
    process.stderr.write(failureText(err));
    process.exit(ExitCode.FAILURE);
  };
  process.on("uncaughtException", fatal);
  process.on("unhandledRejection", fatal);
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "replay":
        return await (await import("./commands/replay.ts")).runReplay(rest);
      case "inspect":
        return await (await import("./commands/inspect.ts")).runInspect(rest);
      case "produce":
        return await (await import("./commands/produce.ts")).runProduce(rest);
      case "consume":
        return await (await import("./commands/consume.ts")).runConsume(rest);
      case "gateway":
        return await (await import("./commands/gateway.ts")).runGateway(rest);
      case "validate":
      case "run":
        return await (await import("./commands/pipeline.ts")).runPipelineCommand(command, rest);
      case "--version":
      case "-V":
      case "version":
        process.stdout.write(`trajflow ${await version()}\n`);
        return ExitCode.OK;
      case undefined:
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(HELP);
        return command === undefined ? ExitCode.USAGE : ExitCode.OK;
      default: {
        const { closest } = await import("./args.ts");
        const near = closest(command, COMMANDS);
        throw usageError(
          `unknown command ${JSON.stringify(command)}${near === undefined ? "" : ` (did you mean ${near}?)`}`,
        );
      }
    }
  } catch (err) {
    if (isTrajflowError(err) && (err.code === "USAGE" || err.code === "CONFIG_INVALID")) {
      // The subcommand's own help for its flags; the top-level one for a command it does not know.
      const help = COMMANDS.includes(command ?? "") ? `trajflow ${command} --help` : "trajflow --help";
      process.stderr.write(
        `trajflow: [${err.code}] ${err.message}\n${err.code === "USAGE" ? `Run \`${help}\` for usage.\n` : ""}`,
      );
      return ExitCode.USAGE;
    }
    process.stderr.write(failureText(err));
    // The output's store refused the configuration (a missing bucket, credentials, a read-only or
    // unreachable endpoint): fixed by changing the configuration, not by running again.
    return isTrajflowError(err) && OUTPUT_CONFIG_CODES.has(err.code) ? ExitCode.USAGE : ExitCode.FAILURE;
  }
}

const OUTPUT_CONFIG_CODES = new Set<string>([
  "S3_BUCKET_NOT_FOUND",
  "S3_ACCESS_DENIED",
  "S3_WRITE_REFUSED",
  "S3_UNREACHABLE",
]);

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2));
}
