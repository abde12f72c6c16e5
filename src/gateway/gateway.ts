/**
 * A running gateway: the event output opened (and the sessions open before a restart rebuilt from it),
 * the engine adapter chosen, the HTTP server listening. `trajflow gateway` and the tests start it here.
 */
import { existsSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import { TrajflowError } from "../core/errors.ts";
import type { GatewayConfig } from "./config.ts";
import { readTokenFile, tokenProblems } from "./control-auth.ts";
import { createAdapter } from "./engines/index.ts";
import { KafkaEventOutput } from "./outputs/kafka.ts";
import { EventLog } from "./outputs/log.ts";
import type { EventOutput } from "./outputs/output.ts";
import { Fleet } from "./fleet.ts";
import { GatewayServer } from "./server.ts";

export interface RunningGateway {
  /** The address it listens on (host:port). */
  address: string;
  server: GatewayServer;
  output: EventOutput;
  /** Events read back at start to rebuild sessions. */
  restoredEvents: number;
  close(): Promise<void>;
}

/** The control token: `control_token`, or the first line of `control_token_file`; checked either way. */
function controlTokenOf(config: GatewayConfig): string | undefined {
  if (config.control_token !== undefined) return config.control_token;
  if (config.control_token_file === undefined) return undefined;
  let token: string;
  try {
    token = readTokenFile(config.control_token_file);
  } catch (err) {
    throw new TrajflowError(
      "CONFIG_INVALID",
      `gateway.control_token_file: ${config.control_token_file} cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`,
      { details: { problems: [`gateway.control_token_file: cannot be read`] } },
    );
  }
  const problems = tokenProblems(token).map((p) => `gateway.control_token_file: ${p}`);
  if (problems.length > 0)
    throw new TrajflowError("CONFIG_INVALID", problems.join("; "), { details: { problems } });
  return token;
}

/** Whether a bound address is a loopback one (127.0.0.0/8, ::1). */
function loopback(address: string): boolean {
  const host = address.slice(0, address.lastIndexOf(":")).replace(/^\[|\]$/g, "");
  return host.startsWith("127.") || host === "::1" || host === "::ffff:127.0.0.1";
}

/**
 * The sessions a gateway holds when it starts: a replica of a fleet none (each is taken over, as it is
 * then, on its first call: fleet.ts), a gateway alone every session of its output's recent events.
 */
async function sessionsAtStart(
  config: GatewayConfig,
  server: GatewayServer,
  output: EventOutput,
  metrics: Metrics,
  logger: Logger,
): Promise<{ fleet: Fleet | null; restoredEvents: number }> {
  if (
    config.replica_id !== undefined &&
    output instanceof KafkaEventOutput &&
    config.output.type === "kafka"
  ) {
    const fleet = await Fleet.start(
      config.replica_id,
      config.output,
      output.keyedProducer,
      server.sessions,
      metrics,
      logger.child({ component: "fleet" }),
    );
    server.joinFleet(fleet);
    return { fleet, restoredEvents: 0 };
  }
  const window = config.output.type === "kafka" ? config.output.restore_window_ms : Infinity;
  return { fleet: null, restoredEvents: await server.restore(Date.now() - window) };
}

export async function startGateway(
  config: GatewayConfig,
  logger: Logger,
  metrics = new Metrics(),
  /** The embedded pipeline's answer: has it finalized this session? (A reward for it is refused, 409.) */
  finalized?: (uid: string, sessionId: string) => boolean,
): Promise<RunningGateway> {
  // Read before anything opens: an unreadable or unusable token file fails the start, every problem listed.
  const controlToken = controlTokenOf(config);
  const madeDir = config.output.type === "log" ? firstMissing(config.output.dir) : undefined;
  const output: EventOutput =
    config.output.type === "log"
      ? await EventLog.open(
          config.output.dir,
          config.output.segment_bytes,
          logger.child({ component: "event-log" }),
        )
      : await KafkaEventOutput.open(config.output, logger.child({ component: "kafka-events" }));
  try {
    const server = new GatewayServer({
      config,
      ...(controlToken !== undefined ? { controlToken } : {}),
      adapter: await createAdapter(config.engine, config.engine_options),
      output,
      metrics,
      logger,
      ...(finalized !== undefined ? { finalized } : {}),
    });
    const { fleet, restoredEvents } = await sessionsAtStart(config, server, output, metrics, logger);
    if (restoredEvents > 0)
      logger.info(
        { events: restoredEvents, sessions: server.sessions.size },
        "Sessions open before the restart were rebuilt from their events.",
      );
    // The control listener first: the agents' listener must not serve control routes for a moment.
    const controlAddress =
      config.control_listen !== undefined ? await server.listenControl(config.control_listen) : undefined;
    const address = await server.listen(config.listen);
    logger.info(
      {
        address,
        ...(controlAddress !== undefined ? { control: controlAddress } : {}),
        control_token: controlToken !== undefined,
        upstreams: config.upstreams,
        engine: config.engine,
        output: output.where,
      },
      `The gateway serves agents at http://${address}/sessions/{id}/v1.`,
    );
    if (controlToken === undefined) warnOpenControl(logger, address, controlAddress);
    let closing: Promise<void> | null = null;
    return {
      address,
      server,
      output,
      restoredEvents,
      close() {
        closing ??= server
          .close()
          .then(() => fleet?.close())
          .then(() => output.close());
        return closing;
      },
    };
  } catch (err) {
    await output.close();
    if (madeDir !== undefined && holdsNoData(madeDir)) rmSync(madeDir, { recursive: true, force: true });
    throw err;
  }
}

/** Without a control token, a control route reachable beyond loopback is anyone's: said at the start. */
function warnOpenControl(logger: Logger, address: string, controlAddress: string | undefined): void {
  if (controlAddress !== undefined && !loopback(controlAddress))
    logger.warn(
      { control: controlAddress },
      "The control listener listens beyond loopback without a control token: whoever reaches it can post " +
        "rewards, end sessions and set the policy version. Set $TRAJFLOW_CONTROL_TOKEN, or keep it off the " +
        "agents' network (docs/gateway.md#security).",
    );
  if (controlAddress === undefined && !loopback(address))
    logger.warn(
      { address },
      "The gateway listens beyond loopback with neither a control token nor a control listener: any agent " +
        "that reaches it can post rewards, end sessions and set the policy version. Set " +
        "$TRAJFLOW_CONTROL_TOKEN or --control-listen (docs/gateway.md#security).",
    );
}

/**
 * The outermost directory of `dir` that does not exist yet (what opening it will create), if any: a start
 * that fails (the port taken) removes it again, so it leaves no event log directory behind.
 */
function firstMissing(dir: string): string | undefined {
  let missing: string | undefined;
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) missing = d;
  return missing;
}

/** Whether a directory holds nothing written: directories and empty files only (a fresh log's first segment). */
function holdsNoData(dir: string): boolean {
  if (!existsSync(dir)) return false;
  return readdirSync(dir, { withFileTypes: true }).every((e) => {
    const path = join(dir, e.name);
    return e.isDirectory() ? holdsNoData(path) : e.isFile() && statSync(path).size === 0;
  });
}
