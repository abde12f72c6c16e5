/** What the gateway tests share: a free port to listen on, and waiting for a condition. */
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { decodeTokenIds } from "../../src/schemas/tokens.ts";

/** A TCP port nothing listens on right now (for a gateway started as a process). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** `n` consecutive TCP ports nothing listens on right now (a broker's listener, controller and TLS port). */
export async function freePorts(n: number): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
  for (;;) {
    const base = await freePort();
    if (base + n > 65_535) continue;
    let all = true;
    for (let i = 1; i < n && all; i++) all = await free(base + i);
    if (all) return base;
  }
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

/**
 * One call as the gateway's log `logDir` recorded it: its request and response events, its full prompt ids
 * (the delta form resolved: the parent's prompt, the parent's output, then the delta) and its sampled ids.
 */
export function recordedCall(
  logDir: string,
  callId: string,
): { request: LoggedEvent; response: LoggedEvent; prompt: number[]; output: number[] } {
  const events = logEvents(logDir);
  const find = (type: string, id: string) => events.find((e) => e.type === type && e.call_id === id);
  const ids = (value: unknown) => [...(decodeTokenIds(value as never) as Int32Array)];
  const promptOf = (id: string): number[] => {
    const req = find("request", id)!;
    const full = req.prompt_ids ?? find("response", id)?.prompt_ids;
    if (full !== undefined) return ids(full);
    const parent = req.parent_call_id as string;
    return [...promptOf(parent), ...ids(find("response", parent)!.output_ids), ...ids(req.prompt_delta_ids)];
  };
  const request = find("request", callId);
  const response = find("response", callId);
  if (request === undefined || response === undefined)
    throw new Error(`no request and response for ${callId}`);
  return { request, response, prompt: promptOf(callId), output: ids(response.output_ids) };
}
