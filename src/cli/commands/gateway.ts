/** `trajflow gateway`: the OpenAI-compatible gateway that records every call as events. */
import { resolve } from "node:path";
import { ConfigProblems } from "../../core/config.ts";
import { createLogger } from "../../core/logger.ts";
import { gatewayConfigSchema, type GatewayConfig } from "../../gateway/config.ts";
import { ExitCode, intOption, parse, throwFlagProblems, usageError } from "../args.ts";
import { CONNECTION_FLAGS, CONNECTION_HELP, connectionOptions } from "./shared.ts";

export const GATEWAY_HELP = `trajflow gateway --upstream <url> [--upstream <url>]... (--out <dir> | --topic <t>) [options]

Serves agents an OpenAI-compatible API (chat and text completions, streamed or not) in front of one or
more inference servers, and records every call as protocol-v1 events: the prompt's token ids (in the delta
form when it extends an earlier call), the sampled ids, their logprobs, the raw finish reason and the
policy version. A call's answer is released only once its events are durable. docs/gateway.md.

The agent's base URL: http://<listen>/sessions/<session-id>/v1 (or a key from POST /sessions, or an
X-Session-Id header on /v1). Rewards: POST /sessions/<id>/reward; the end: POST /sessions/<id>/end.

Options:
  --upstream <url>          an inference server's base URL (repeat for several; a session sticks to one)
  --engine <e>              vllm (default), sglang or llamacpp: which server the upstreams run
  --listen <host:port>      where to serve agents (default 127.0.0.1:8000)
  --out <dir>               record to a local event log in <dir>/_events (fsynced before each answer)
  --event-log <dir>         the event log's directory (default <out>/_events)
  --topic <t>               record to this Kafka topic instead, keyed by uid
${CONNECTION_HELP}
  --ack <mode>              all (default): answer once the in-sync replicas have the events;
                            async: answer at once, events sent from a bounded buffer
  --no-implicit-sessions    a call for a session not started with POST /sessions is answered 404
  --max-in-flight <n>       calls forwarded at once (default 1024); more are answered 429
  --max-body-bytes <n>      largest request body (default 32 MiB); larger ones are answered 413
  --upstream-timeout-ms <n> longest a call may take upstream (default 600000)
  -h, --help                show this help
`;

export async function runGateway(argv: string[]): Promise<number> {
  const { values } = parse(argv, {
    upstream: { type: "string", multiple: true },
    engine: { type: "string" },
    listen: { type: "string" },
    out: { type: "string" },
    "event-log": { type: "string" },
    topic: { type: "string" },
    ...CONNECTION_FLAGS,
    ack: { type: "string" },
    "no-implicit-sessions": { type: "boolean" },
    "max-in-flight": { type: "string" },
    "max-body-bytes": { type: "string" },
    "upstream-timeout-ms": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help === true) {
    process.stdout.write(GATEWAY_HELP);
    return ExitCode.OK;
  }
  if (values.upstream === undefined) throw usageError("gateway needs --upstream <url>");
  if ((values.out === undefined && values["event-log"] === undefined) === (values.topic === undefined))
    throw usageError("gateway needs one of --out <dir> (a local event log) or --topic <t> (Kafka)");
  const output =
    values.topic !== undefined
      ? {
          type: "kafka",
          topic: values.topic,
          connection: { ...connectionOptions(values), client_id: "trajflow-gateway" },
          ...(values.ack !== undefined ? { ack: values.ack } : {}),
        }
      : { type: "log", dir: resolve(values["event-log"] ?? `${values.out}/_events`) };
  const input = {
    upstreams: values.upstream,
    ...(values.engine !== undefined ? { engine: values.engine } : {}),
    ...(values.listen !== undefined ? { listen: values.listen } : {}),
    output,
    ...(values["no-implicit-sessions"] === true ? { implicit_sessions: false } : {}),
    max_in_flight: intOption("max-in-flight", values["max-in-flight"]),
    max_body_bytes: intOption("max-body-bytes", values["max-body-bytes"]),
    upstream_timeout_ms: intOption("upstream-timeout-ms", values["upstream-timeout-ms"]),
  };
  throwFlagProblems();
  const problems = new ConfigProblems();
  const config = problems.check("gateway", gatewayConfigSchema.safeParse(stripUndefined(input)));
  problems.throwIfAny();
  return serve(config!);
}

async function serve(config: GatewayConfig): Promise<number> {
  const { startGateway } = await import("../../gateway/gateway.ts");
  const logger = createLogger({});
  const gateway = await startGateway(config, logger);
  process.stdout.write(
    `trajflow gateway: serving on http://${gateway.address} (events to ${gateway.output.where})\n`,
  );
  await new Promise<void>((resolveStop) => {
    const stop = () => resolveStop();
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
  });
  logger.info("Stopping: calls in flight finish and their events are recorded.");
  await gateway.close();
  return ExitCode.OK;
}

function stripUndefined(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
