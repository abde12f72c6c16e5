/**
 * A pass-through HTTP proxy in front of a real engine that can hold one generation request before it reaches
 * the engine, for a test that needs a call to be in flight at a moment it chooses (a replica paused with a
 * call it has not answered yet). Everything else, and every request while nothing is held, goes through as
 * it came: method, path, headers and body, the engine's status, headers and body streamed back.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** A generation call: what the engine samples for (not /tokenize, /detokenize, /health, /v1/models). */
const GENERATION = /(^\/completion$)|(\/completions$)|(\/messages$)|(\/responses$)/;

export interface HeldCall {
  /** Resolves once a generation request arrived and is held (not yet sent to the engine). */
  arrived: Promise<void>;
  /** Sends the held request on to the engine (before it arrived: it goes straight through when it does). */
  release(): void;
}

export interface HoldProxy {
  url: string;
  /** Holds the next generation request until `release()`; one hold at a time. */
  holdNext(): HeldCall;
  close(): Promise<void>;
}

export async function startHoldProxy(upstream: string): Promise<HoldProxy> {
  const target = new URL(upstream);
  let armed: { arrive: () => void; released: Promise<void> } | undefined;
  const forward = (req: IncomingMessage, res: ServerResponse) => {
    const out = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: target.host },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on("error", (err) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
      res.end(`hold proxy: ${err.message}`);
    });
    // The caller gone (a killed replica): the engine's request goes too, as it would without the proxy.
    res.on("close", () => {
      if (!res.writableFinished) out.destroy();
    });
    req.pipe(out);
  };
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    const hold = req.method === "POST" && GENERATION.test(path) ? armed : undefined;
    if (hold === undefined) return forward(req, res);
    armed = undefined;
    req.pause();
    hold.arrive();
    void hold.released.then(() => {
      req.resume();
      forward(req, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    holdNext() {
      if (armed !== undefined) throw new Error("hold proxy: a hold is already armed");
      let arrive: () => void = () => {};
      let release: () => void = () => {};
      const arrived = new Promise<void>((r) => (arrive = r));
      const released = new Promise<void>((r) => (release = r));
      armed = { arrive, released };
      return { arrived, release };
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
