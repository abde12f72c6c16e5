/**
 * The load generator of `npm run bench:gateway`, in its own process so that its CPU is not the proxy's:
 * `concurrency` agents, each running multi-turn sessions in Chat Completions, Anthropic Messages or OpenAI
 * Responses (each turn sends the previous prompt, the
 * answer and a new user message, so a recording gateway exercises the delta form), over keep-alive
 * connections (node:http Agent). Measures each call from the request's first byte to the answer's last (and,
 * streaming, to the first content chunk), after a warm-up. Prints one JSON object: latencies (ms), calls,
 * errors, seconds, and its own CPU seconds.
 *
 * Argument: one JSON object, ClientSpec.
 */
import { Agent, request } from "node:http";

export interface ClientSpec {
  /** The call's URL (chat completions, messages or responses); `{sid}` is replaced by the session id. */
  url: string;
  /** The API the agents speak (default chat): the body, the answer and the first content chunk differ. */
  api?: "chat" | "messages" | "responses";
  model: string;
  concurrency: number;
  /** Stop after this many measured calls (with `seconds`, whichever comes first). */
  calls: number;
  seconds: number;
  /** Calls (over all agents, not measured) before measuring starts, or this many seconds, whichever is first. */
  warmupCalls: number;
  warmupSeconds: number;
  turns: number;
  stream: boolean;
  maxTokens: number;
  sessionPrefix: string;
  /** Sent as `authorization: Bearer <key>`. */
  apiKey?: string;
}

export interface ClientResult {
  calls: number;
  /** Calls made before measuring began (and in flight then). */
  warmupCalls: number;
  errors: number;
  /** Calls sent again after a reused keep-alive connection was reset. */
  retries: number;
  firstError: string | null;
  seconds: number;
  latencyMs: number[];
  ttftMs: number[];
  cpuSeconds: number;
  /**
   * Output tokens over the measured whole calls, as each answer's usage said (0 for streams): a real engine's
   * answers differ in length from path to path, so calls/s compare only with tokens per call beside them.
   */
  outputTokens: number;
}

const spec = JSON.parse(process.argv[2]!) as ClientSpec;
const target = new URL(spec.url.replace("{sid}", "x"));
const agent = new Agent({ keepAlive: true, maxSockets: spec.concurrency, maxFreeSockets: spec.concurrency });
// About 200 bytes of user text per turn: the instant engine's tokens are bytes.
const FILLER = "Please continue the task; here is the next observation from the environment. ".repeat(3);

const api = spec.api ?? "chat";
/** The first chunk with content, per API (not the role chunk or message_start every server sends first). */
const FIRST_CONTENT = {
  chat: /"content":\s?"[^"]/,
  // Either key order, with or without spaces (LiteLLM writes them with spaces, trajflow without).
  messages: /"type":\s?"text_delta",\s?"text":\s?"[^"]|"text":\s?"[^"][^}]*"type":\s?"text_delta"/,
  responses: /"response\.output_text\.delta"[^\n]*"delta":"[^"]/,
}[api];

/** One turn's body in the agents' API. */
function body(messages: Array<{ role: string; content: string }>): string {
  const [system, ...turns] = messages;
  const common = { model: spec.model, temperature: 0, ...(spec.stream ? { stream: true } : {}) };
  if (api === "messages")
    return JSON.stringify({
      ...common,
      max_tokens: spec.maxTokens,
      system: system!.content,
      messages: turns,
    });
  if (api === "responses")
    return JSON.stringify({
      ...common,
      max_output_tokens: spec.maxTokens,
      instructions: system!.content,
      input: turns,
      store: false,
    });
  return JSON.stringify({ ...common, messages, max_tokens: spec.maxTokens });
}

interface Answer {
  status: number;
  body: string;
  ttft: number;
}

function post(path: string, payload: string, started: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: target.hostname,
        port: target.port,
        path,
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(payload),
          ...(spec.apiKey !== undefined ? { authorization: `Bearer ${spec.apiKey}` } : {}),
          ...(api === "messages"
            ? {
                "anthropic-version": "2023-06-01",
                ...(spec.apiKey !== undefined ? { "x-api-key": spec.apiKey } : {}),
              }
            : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let ttft = NaN;
        res.on("data", (c: Buffer) => {
          // Streaming: the first content chunk, not the role chunk every server sends first.
          if (Number.isNaN(ttft) && spec.stream && FIRST_CONTENT!.test(c.toString("latin1")))
            ttft = performance.now() - started;
          chunks.push(c);
        });
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8"), ttft }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", (err: NodeJS.ErrnoException) => {
      // A keep-alive socket the server closed as this request went out (llama.cpp's server closes after
      // some streams): nothing was processed; send again on a fresh connection, as Node's docs advise.
      if (req.reusedSocket && err.code === "ECONNRESET") {
        retries++;
        post(path, payload, started).then(resolve, reject);
      } else reject(err);
    });
    req.end(payload);
  });
}

/** The output tokens a whole answer's usage reports (chat `completion_tokens`, else `output_tokens`). */
function outputTokensOf(a: Answer): number {
  if (spec.stream) return 0;
  const usage = (JSON.parse(a.body) as { usage?: { completion_tokens?: number; output_tokens?: number } })
    .usage;
  return usage?.completion_tokens ?? usage?.output_tokens ?? 0;
}

function replyOf(a: Answer): string {
  // The answers' shapes are each API's; reading them loosely keeps this short.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  type Loose = any;
  if (!spec.stream) {
    const j = JSON.parse(a.body) as Loose;
    if (api === "messages")
      return (j.content as Loose[]).map((b) => (b.type === "text" ? b.text : "")).join("");
    if (api === "responses")
      return (j.output as Loose[])
        .flatMap((o) => (o.type === "message" ? (o.content as Loose[]) : []))
        .map((c) => c.text ?? "")
        .join("");
    return j.choices[0]?.message.content ?? "";
  }
  let text = "";
  for (const line of a.body.split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const j = JSON.parse(line.slice(6)) as Loose;
    if (api === "messages") text += j.type === "content_block_delta" ? (j.delta.text ?? "") : "";
    else if (api === "responses") text += j.type === "response.output_text.delta" ? j.delta : "";
    else text += j.choices?.[0]?.delta?.content ?? "";
  }
  return text;
}

let retries = 0;
let outputTokens = 0;
const latencyMs: number[] = [];
const ttftMs: number[] = [];
let started = 0;
let issued = 0;
let measured = 0;
let errors = 0;
let firstError: string | null = null;
let measuringSince = NaN;
let cpuAtStart = process.cpuUsage();
let deadline = Infinity;
let sessions = 0;

/** Counts a failed call; a path that fails every call ends the phase at once (its report shows why). */
function failed(message: string): void {
  errors++;
  firstError ??= message;
  if (errors >= 100 && measured === 0) givenUp = true;
}

let givenUp = false;

function begin(): void {
  measuringSince = performance.now();
  cpuAtStart = process.cpuUsage();
  deadline = measuringSince + spec.seconds * 1000;
}

async function agentLoop(): Promise<void> {
  while (!givenUp && measured < spec.calls && performance.now() < deadline) {
    const sid = `${spec.sessionPrefix}-${sessions++}`;
    const path = new URL(spec.url.replace("{sid}", sid)).pathname;
    const messages: Array<{ role: string; content: string }> = [
      { role: "system", content: "You are a careful agent." },
    ];
    for (let turn = 0; turn < spec.turns; turn++) {
      if (givenUp || measured >= spec.calls || performance.now() >= deadline) return;
      messages.push({ role: "user", content: `turn ${turn}: ${FILLER}` });
      const payload = body(messages);
      const measuring =
        issued++ >= spec.warmupCalls || performance.now() - started >= spec.warmupSeconds * 1000;
      if (measuring && Number.isNaN(measuringSince)) begin();
      const t0 = performance.now();
      let answer: Answer;
      try {
        answer = await post(path, payload, t0);
      } catch (err) {
        failed((err as Error).message);
        break;
      }
      const ms = performance.now() - t0;
      if (answer.status !== 200) {
        failed(`HTTP ${answer.status}: ${answer.body.slice(0, 300)}`);
        break;
      }
      let reply: string;
      try {
        reply = replyOf(answer);
      } catch {
        failed(`HTTP 200 without an answer in the API's shape: ${answer.body.slice(0, 300)}`);
        break;
      }
      if (measuring && measuringSince <= t0) {
        measured++;
        latencyMs.push(ms);
        outputTokens += outputTokensOf(answer);
        if (spec.stream) ttftMs.push(answer.ttft);
      }
      messages.push({ role: "assistant", content: reply });
    }
  }
}

started = performance.now();
await Promise.all(Array.from({ length: spec.concurrency }, () => agentLoop()));
const ended = performance.now();
const cpu = process.cpuUsage(cpuAtStart);
agent.destroy();
const result: ClientResult = {
  calls: measured,
  warmupCalls: Math.max(0, issued - measured),
  errors,
  retries,
  firstError,
  seconds: (ended - (Number.isNaN(measuringSince) ? started : measuringSince)) / 1000,
  latencyMs,
  ttftMs,
  cpuSeconds: (cpu.user + cpu.system) / 1e6,
  outputTokens,
};
process.stdout.write(`${JSON.stringify(result)}\n`);
