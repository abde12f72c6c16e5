/**
 * A running gateway: the event output opened (and the sessions open before a restart rebuilt from it),
 * the engine adapter chosen, the HTTP server listening. `trajflow gateway` and the tests start it here.
 */
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import type { GatewayConfig } from "./config.ts";
import { createAdapter } from "./engines/index.ts";
import { KafkaEventOutput } from "./outputs/kafka.ts";
import { EventLog } from "./outputs/log.ts";
import type { EventOutput } from "./outputs/output.ts";
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

export async function startGateway(
  config: GatewayConfig,
  logger: Logger,
  metrics = new Metrics(),
): Promise<RunningGateway> {
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
      adapter: await createAdapter(config.engine, config.engine_options),
      output,
      metrics,
      logger,
    });
    const window = config.output.type === "kafka" ? config.output.restore_window_ms : Infinity;
    const restoredEvents = await server.restore(Date.now() - window);
    if (restoredEvents > 0)
      logger.info(
        { events: restoredEvents, sessions: server.sessions.size },
        "Sessions open before the restart were rebuilt from their events.",
      );
    const address = await server.listen(config.listen);
    logger.info(
      { address, upstreams: config.upstreams, engine: config.engine, output: output.where },
      "The gateway serves agents at http://<address>/sessions/{id}/v1.",
    );
    let closing: Promise<void> | null = null;
    return {
      address,
      server,
      output,
      restoredEvents,
      close() {
        closing ??= server.close().then(() => output.close());
        return closing;
      },
    };
  } catch (err) {
    await output.close();
    throw err;
  }
}
