/**
 * The inference servers behind the gateway: pooled keep-alive connections to each, which one a new
 * session goes to (the least loaded healthy one), and health: an upstream that refused a connection is
 * marked down and probed (`GET /health`, else `/v1/models`) until it answers again.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { Logger } from "../core/logger.ts";

export interface Upstream {
  readonly index: number;
  readonly url: URL;
  healthy: boolean;
  inFlight: number;
}

/** A connection that failed before any byte was sent or received: safe to try on another upstream. */
export class ConnectFailed extends Error {
  readonly upstream: Upstream;
  constructor(upstream: Upstream, cause: unknown) {
    super(`upstream ${upstream.url.origin} refused the connection: ${(cause as Error).message}`, { cause });
    this.upstream = upstream;
  }
}

/**
 * The engine refused one of the adapter's own round trips (llama.cpp's /apply-template refuses what its
 * chat route would refuse): the agent gets the engine's status and body, as for the call itself.
 */
export class UpstreamRefused extends Error {
  readonly status: number;
  readonly contentType: string;
  readonly body: Buffer;
  constructor(status: number, contentType: string, body: Buffer) {
    super(`the upstream answered ${status}: ${body.toString("utf8").slice(0, 300)}`);
    this.status = status;
    this.contentType = contentType;
    this.body = body;
  }
}

/** A reused keep-alive connection reset before any answer: the server had closed it while idle. */
class StaleConnection extends Error {
  constructor(cause: unknown) {
    super("the upstream had closed a kept-alive connection", { cause });
  }
}

const CONNECT_ERRORS = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

export class UpstreamPool {
  readonly upstreams: Upstream[];
  private readonly httpAgent = new HttpAgent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256 });
  private readonly httpsAgent = new HttpsAgent({
    keepAlive: true,
    maxSockets: Infinity,
    maxFreeSockets: 256,
  });
  private readonly logger: Logger;
  private probeTimer: NodeJS.Timeout | null = null;

  /** Sent to every upstream (an engine started with --api-key); never logged. */
  private readonly auth: Record<string, string>;

  constructor(urls: string[], logger: Logger, apiKey?: string) {
    this.upstreams = urls.map((u, index) => ({ index, url: new URL(u), healthy: true, inFlight: 0 }));
    this.logger = logger;
    this.auth = apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` };
  }

  /** The upstream for a new session: the healthy one with the fewest calls in flight (lowest index on ties). */
  pick(exclude: ReadonlySet<number> = new Set()): Upstream | null {
    let best: Upstream | null = null;
    for (const u of this.upstreams) {
      if (!u.healthy || exclude.has(u.index)) continue;
      if (best === null || u.inFlight < best.inFlight) best = u;
    }
    return best;
  }

  anyHealthy(): boolean {
    return this.upstreams.some((u) => u.healthy);
  }

  /**
   * Sends one request; resolves with the response once its headers arrived. A connection refused before
   * any byte marks the upstream down and rejects with ConnectFailed (the caller may try another). A reused
   * keep-alive connection the server had closed (reset before any answer: llama-server closes after some
   * answers) is tried once more on a fresh one.
   */
  async send(
    upstream: Upstream,
    method: string,
    path: string,
    body: Buffer | null,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<IncomingMessage> {
    try {
      return await this.sendOnce(upstream, method, path, body, headers, signal);
    } catch (err) {
      if (!(err instanceof StaleConnection)) throw err;
      return this.sendOnce(upstream, method, path, body, headers, signal);
    }
  }

  private sendOnce(
    upstream: Upstream,
    method: string,
    path: string,
    body: Buffer | null,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<IncomingMessage> {
    const url = new URL(path, upstream.url);
    const https = url.protocol === "https:";
    return new Promise((resolve, reject) => {
      let sentAny = false;
      let reused = false;
      const req = (https ? httpsRequest : httpRequest)(
        url,
        {
          method,
          agent: https ? this.httpsAgent : this.httpAgent,
          headers: {
            ...headers,
            ...this.auth,
            ...(body !== null ? { "content-length": String(body.length) } : {}),
          },
          signal,
        },
        (res) => resolve(res),
      );
      req.on("socket", (socket) => {
        // A reused keep-alive socket has already carried bytes; a fresh one has not until it connects.
        if (!socket.connecting) sentAny = reused = true;
        else socket.once("connect", () => (sentAny = true));
      });
      req.on("error", (err: NodeJS.ErrnoException) => {
        if (!sentAny && err.code !== undefined && CONNECT_ERRORS.has(err.code)) {
          this.markDown(upstream, err);
          reject(new ConnectFailed(upstream, err));
        } else if (reused && err.code === "ECONNRESET" && !signal.aborted) reject(new StaleConnection(err));
        else reject(err);
      });
      req.end(body ?? undefined);
    });
  }

  /** POSTs JSON and parses the JSON answer (the adapters' extra round trips). */
  async json(upstream: Upstream, path: string, payload: unknown, signal?: AbortSignal): Promise<unknown> {
    const res = await this.send(
      upstream,
      "POST",
      path,
      Buffer.from(JSON.stringify(payload)),
      { "content-type": "application/json" },
      signal ?? new AbortController().signal,
    );
    const text = await readAll(res);
    const status = res.statusCode ?? 500;
    if (status >= 400)
      throw new UpstreamRefused(status, res.headers["content-type"] ?? "application/json", text);
    return JSON.parse(text.toString("utf8"));
  }

  private markDown(upstream: Upstream, err: Error): void {
    if (!upstream.healthy) return;
    upstream.healthy = false;
    this.logger.warn(
      { upstream: upstream.url.origin, err: err.message },
      "An upstream refused a connection; it is probed until it answers.",
    );
    this.probeTimer ??= setInterval(() => void this.probe(), 1000);
    this.probeTimer.unref();
  }

  private async probe(): Promise<void> {
    const down = this.upstreams.filter((u) => !u.healthy);
    if (down.length === 0) {
      clearInterval(this.probeTimer!);
      this.probeTimer = null;
      return;
    }
    for (const u of down) {
      // llama.cpp, vLLM and SGLang answer /health; an OpenAI-compatible server without it, /v1/models.
      for (const path of ["/health", "/v1/models"]) {
        try {
          const res = await this.send(u, "GET", path, null, {}, AbortSignal.timeout(2000));
          res.resume();
          const status = res.statusCode ?? 500;
          if (status === 404) continue;
          if (status < 500) {
            u.healthy = true;
            this.logger.info({ upstream: u.url.origin }, "An upstream answers again.");
          }
        } catch {
          // still down
        }
        break;
      }
    }
  }

  close(): void {
    if (this.probeTimer !== null) clearInterval(this.probeTimer);
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}

/** Reads a whole message body. */
export async function readAll(stream: IncomingMessage, limit = Infinity): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLarge(limit);
    chunks.push(chunk);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
}

export class BodyTooLarge extends Error {
  readonly limit: number;
  constructor(limit: number) {
    super(`the request body is larger than ${limit} bytes`);
    this.limit = limit;
  }
}
