/**
 * The `http` stage's side of the wire: JSON POSTs to one server, rate limited, with every credential kept
 * out of the errors they raise (5xx and network errors are retryable, 4xx and bad JSON are not).
 */
import { headerSecrets, redactor, urlSecrets } from "../../../../core/redact.ts";
import { RewardStageError } from "../../contract.ts";
import type { HttpStageOptions } from "./options.ts";

/** A token bucket: `take` waits until a request may go. */
class RateLimit {
  private next = 0;
  private readonly interval: number;
  constructor(perSecond: number) {
    this.interval = 1000 / perSecond;
  }
  async take(): Promise<void> {
    const at = Math.max(performance.now(), this.next);
    this.next = at + this.interval;
    // setTimeout counts from the event loop's cached time, which lags the clock by whatever ran earlier in
    // the same turn, so one timer can fire before the slot: wait until the slot has really come.
    for (let left = at - performance.now(); left > 0; left = at - performance.now())
      await new Promise((r) => setTimeout(r, Math.ceil(left)));
  }
}

/**
 * The first 200 characters of a server's text, for a message: redacted first, then cut, so a secret the
 * cut runs through cannot leave in part (it did: 14 of a 43-character token).
 */
function redactedHead(redact: (text: string) => string, text: string): string {
  return redact(text).slice(0, 200);
}

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string>,
  signal: AbortSignal,
  redact: (text: string) => string,
) {
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    throw new RewardStageError(redact(`${url}: ${(err as Error).message}`), true);
  }
  const text = await response.text();
  if (!response.ok) {
    throw new RewardStageError(
      `${redact(url)} answered ${response.status}: ${redactedHead(redact, text)}`,
      response.status >= 500,
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new RewardStageError(
      `${redact(url)} answered with invalid JSON: ${redactedHead(redact, text)}`,
      false,
    );
  }
}

/** Posts to the configured server: `post(path, body, signal)` resolves with the parsed reply. */
export interface HttpClient {
  post(path: string, body: unknown, signal: AbortSignal): Promise<unknown>;
  /** A server's text as a message may quote it: redacted, then cut to 200 characters. */
  head(text: string): string;
}

export function httpClient(options: HttpStageOptions): HttpClient {
  const limit =
    options.max_requests_per_second === undefined ? null : new RateLimit(options.max_requests_per_second);
  const base = options.url.replace(/\/+$/, "");
  // Error messages reach logs, dead letters and reward_info: no credential may ride along.
  const redact = redactor([...headerSecrets(options.headers), ...urlSecrets(options.url)]);
  return {
    post: async (path, body, signal) => {
      await limit?.take();
      return post(`${base}${path}`, body, options.headers, signal, redact);
    },
    head: (text) => redactedHead(redact, text),
  };
}
