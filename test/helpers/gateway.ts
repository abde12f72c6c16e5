/** What the gateway tests share: a free port to listen on, and waiting for a condition. */
import { createServer } from "node:net";

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
