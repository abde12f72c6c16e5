/** What the gateway tests share: a free port to listen on, and waiting for a condition. */
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";

/** A TCP port nothing listens on right now (for a gateway started as a process). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** Polls `condition` until it holds; fails after `timeoutMs` (tests wait for conditions, not durations). */
export async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await Promise.resolve(condition()).catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An event as the gateway wrote it (parsed JSON). */
export type LoggedEvent = Record<string, unknown>;

/** Every event of a gateway's local event log, in order (segments by name, lines in order). */
export function logEvents(logDir: string): LoggedEvent[] {
  return readdirSync(logDir)
    .filter((f) => f.endsWith(".jsonl"))
    .sort()
    .flatMap((f) =>
      readFileSync(join(logDir, f), "utf8")
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as LoggedEvent),
    );
}

/** The columns of a trajectory row the gateway tests compare, as pyarrow reads them (read_output.py). */
export interface GatewayRow {
  key: string;
  session_id: string;
  prompt_ids: number[];
  response_ids: number[];
  response_mask: number[];
  rollout_log_probs: number[] | null;
  reward: number | null;
  status: string;
  flags: string[];
  weight_version_min: number | null;
  weight_version_max: number | null;
}
