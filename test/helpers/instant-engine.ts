/**
 * An upstream that answers at once, in vLLM's OpenAI shapes (`return_token_ids`, chat logprobs), for the
 * gateway's own behaviour tests and for measuring the gateway's cost without an engine's. It is not a model:
 * the real engine behind the gateway in the end-to-end tests is llama.cpp's and vLLM's servers (test/gateway-engines).
 *
 * Its "tokenizer" is bytes: a chat prompt is, per message, a role token (1000 + role), the content's UTF-8
 * bytes and END (999), then the assistant's role token; an answer is the reply's bytes and END. A
 * conversation that sends the answer back as an assistant message therefore extends the previous prompt +
 * output exactly, as an engine's chat template does when nothing drifts.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export const END = 999;
const ROLES: Record<string, number> = { system: 1000, user: 1001, assistant: 1002, tool: 1003 };

export interface InstantEngineOptions {
  /** The reply to a call (default: `ok <n>` where n counts the engine's calls). */
  reply?: (call: number, body: Record<string, unknown>) => string;
  /** Milliseconds between streamed tokens (default 0). */
  tokenDelayMs?: number;
  /**
   * Output positions the engine has no logprob for: vLLM writes its default -9999.0 there (which the vLLM
   * adapter reads as missing).
   */
  missingLogprobs?: number[];
  /** Answer this status and body instead, for calls whose last message's content equals `trigger`. */
  fail?: { trigger: string; status: number; body: unknown };
  /** A tool call the answer makes (finish reason tool_calls), when this returns one. */
  toolCall?: (call: number, body: Record<string, unknown>) => { name: string; arguments: string } | undefined;
  /** The finish reason (default stop, or tool_calls with a tool call): e.g. abort, as vLLM preempted. */
  finishReason?: (call: number) => string | undefined;
  /** Holds the answer until the promise it returns settles (a call a test keeps in flight). */
  hold?: (call: number, body: Record<string, unknown>) => Promise<void> | undefined;
}

export interface InstantEngine {
  url: string;
  calls: number;
  /** Streams the agent left before their end (the engine saw its connection close). */
  cancelled: number;
  /** The bodies the engine received. */
  bodies: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

export function renderPrompt(messages: Array<{ role: string; content?: unknown }>): number[] {
  const ids: number[] = [];
  for (const m of messages) {
    ids.push(ROLES[m.role] ?? 1004);
    if (typeof m.content === "string") ids.push(...Buffer.from(m.content, "utf8"));
    ids.push(END);
  }
  ids.push(ROLES.assistant!);
  return ids;
}

export function outputIds(reply: string): number[] {
  return [...Buffer.from(reply, "utf8"), END];
}

/** The logprob the engine reports for output position i. */
export const logprobAt = (i: number): number => -0.25 * ((i % 4) + 1);

export async function startInstantEngine(options: InstantEngineOptions = {}): Promise<InstantEngine> {
  const engine: InstantEngine = { url: "", calls: 0, cancelled: 0, bodies: [], close: async () => {} };
  const server: Server = createServer((req, res) => void handle(req, res));
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === "GET" && (req.url === "/health" || req.url === "/v1/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify(
          req.url === "/health"
            ? { status: "ok" }
            : { object: "list", data: [{ id: "instant", object: "model" }] },
        ),
      );
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
    engine.bodies.push(body);
    const call = ++engine.calls;
    const messages = (body.messages ?? []) as Array<{ role: string; content?: unknown }>;
    const last = messages.at(-1)?.content;
    if (options.fail !== undefined && last === options.fail.trigger) {
      res.writeHead(options.fail.status, { "content-type": "application/json" });
      res.end(JSON.stringify(options.fail.body));
      return;
    }
    await options.hold?.(call, body);
    const prompt = renderPrompt(messages);
    const reply = options.reply?.(call, body) ?? `ok ${call}`;
    const tool = options.toolCall?.(call, body);
    const toolCalls =
      tool === undefined ? [] : [{ id: `call_${call}`, type: "function", function: { ...tool } }];
    const finish = options.finishReason?.(call) ?? (tool !== undefined ? "tool_calls" : "stop");
    const out = outputIds(reply);
    const tokenIds = body.return_token_ids === true;
    const logprobs = body.logprobs === true;
    const entry = (i: number) => ({
      token: `t${out[i]}`,
      logprob: options.missingLogprobs?.includes(i) === true ? -9999.0 : logprobAt(i),
      bytes: [out[i]! % 256],
      top_logprobs: [],
    });
    if (body.stream !== true) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${call}`,
          object: "chat.completion",
          created: 1,
          model: "instant",
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: reply, tool_calls: toolCalls },
              logprobs: logprobs ? { content: out.map((_, i) => entry(i)) } : null,
              finish_reason: finish,
              stop_reason: null,
              token_ids: tokenIds ? out : null,
            },
          ],
          usage: {
            prompt_tokens: prompt.length,
            completion_tokens: out.length,
            total_tokens: prompt.length + out.length,
          },
          prompt_logprobs: null,
          prompt_token_ids: tokenIds ? prompt : null,
        }),
      );
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    let gone = false;
    res.once("close", () => {
      if (!res.writableFinished) {
        gone = true;
        engine.cancelled++;
      }
    });
    const send = (chunk: unknown) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    const base = { id: `chatcmpl-${call}`, object: "chat.completion.chunk", created: 1, model: "instant" };
    send({
      ...base,
      choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
      prompt_token_ids: tokenIds ? prompt : null,
    });
    const text = Buffer.from(reply, "utf8");
    if (toolCalls.length > 0)
      send({
        ...base,
        choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...toolCalls[0] }] }, finish_reason: null }],
      });
    for (let i = 0; i < out.length; i++) {
      if (gone) return;
      if (options.tokenDelayMs) await new Promise((r) => setTimeout(r, options.tokenDelayMs));
      const isLast = i === out.length - 1;
      send({
        ...base,
        choices: [
          {
            index: 0,
            delta: { content: isLast ? "" : text.subarray(i, i + 1).toString("latin1") },
            logprobs: logprobs ? { content: [entry(i)] } : null,
            finish_reason: isLast ? finish : null,
            token_ids: tokenIds ? [out[i]] : null,
          },
        ],
      });
    }
    res.end("data: [DONE]\n\n");
  }
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  engine.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  engine.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return engine;
}
