/**
 * HTTP plumbing the gateway's routes share: JSON answers, errors in the agent API's shape, and splitting a
 * server-sent-events stream into its events without copying the bytes more than once.
 */
import { TrajflowError } from "../core/errors.ts";
import type { Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";

/** Answers with a JSON body. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

/** The gateway's own error codes in answers (`error.code`), documented in docs/gateway.md. */
export type GatewayErrorCode =
  | "invalid_json"
  | "invalid_request"
  | "body_too_large"
  | "no_session"
  | "unknown_session"
  | "session_ended"
  | "session_expired"
  | "session_written"
  | "session_exists"
  | "too_many_calls"
  | "output_unavailable"
  | "session_moved"
  | "no_upstream"
  | "upstream_timeout"
  | "upstream_failed"
  | "not_recorded"
  | "call_aborted"
  | "context_length_exceeded"
  | "control_token_required"
  | "control_token_wrong"
  | "not_found";

/** An error body in some agent API's shape (apis/: OpenAI's, Anthropic's). */
export type ErrorShape = (
  status: number,
  code: string,
  message: string,
  param?: string | null,
) => Record<string, unknown>;

/** OpenAI's error `type` for an HTTP status. */
function openAiErrorType(status: number): string {
  if (status === 429) return "rate_limit_error";
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  return status >= 500 ? "server_error" : "invalid_request_error";
}

/** OpenAI's error shape (also the gateway's own routes'). */
export const openAiErrorShape: ErrorShape = (status, code, message, param = null) => ({
  error: { message, type: openAiErrorType(status), param, code },
});

/** The error shape an exchange answers in, once its route knows the agent's API (OpenAI's otherwise). */
const shapes = new WeakMap<ServerResponse, ErrorShape>();

export function useErrorShape(res: ServerResponse, shape: ErrorShape): void {
  shapes.set(res, shape);
}

/** An error answer in the shape of the agent's API, so its client raises its usual exception. */
export function sendError(
  res: ServerResponse,
  status: number,
  code: GatewayErrorCode,
  message: string,
  headers: Record<string, string> = {},
): void {
  const shape = shapes.get(res) ?? openAiErrorShape;
  sendJson(res, status, shape(status, code, message), headers);
}

/** One server-sent event: its raw bytes (up to and including the blank line) and its data, if any. */
export interface SseEvent {
  raw: Buffer;
  /** The joined `data:` lines, or null for an event without data (a comment, a keep-alive). */
  data: string | null;
}

/**
 * Splits a byte stream into server-sent events (separated by a blank line; lines end in \n or \r\n).
 * Bytes of an unfinished event wait for the next chunk.
 */
export class SseSplitter {
  private rest: Buffer | null = null;

  push(chunk: Buffer): SseEvent[] {
    const buf = this.rest === null ? chunk : Buffer.concat([this.rest, chunk]);
    const events: SseEvent[] = [];
    let start = 0;
    for (;;) {
      const end = blankLine(buf, start);
      if (end < 0) break;
      const raw = buf.subarray(start, end);
      events.push({ raw, data: dataOf(raw) });
      start = end;
    }
    this.rest = start < buf.length ? buf.subarray(start) : null;
    return events;
  }

  /** What is left at the end of the stream (an event without its blank line), as a last event. */
  end(): SseEvent[] {
    if (this.rest === null || this.rest.toString("utf8").trim() === "") return [];
    const raw = this.rest;
    this.rest = null;
    return [{ raw, data: dataOf(raw) }];
  }
}

/** The index just past the first blank line at or after `from` (\n\n or \r\n\r\n), or -1. */
function blankLine(buf: Buffer, from: number): number {
  for (let i = buf.indexOf(0x0a, from); i >= 0; i = buf.indexOf(0x0a, i + 1)) {
    const next = buf[i + 1];
    if (next === 0x0a) return i + 2;
    if (next === 0x0d && buf[i + 2] === 0x0a) return i + 3;
  }
  return -1;
}

function dataOf(raw: Buffer): string | null {
  let data: string | null = null;
  for (const line of raw.toString("utf8").split(/\r?\n/)) {
    if (!line.startsWith("data:")) continue;
    const value = line.slice(line[5] === " " ? 6 : 5);
    data = data === null ? value : `${data}\n${value}`;
  }
  return data;
}

/** An SSE event carrying `data` as JSON text. */
export function sseData(text: string): string {
  return `data: ${text}\n\n`;
}

const refused = new WeakSet<Duplex>();

/**
 * A request Node's HTTP parser refused before any route saw it (a header past 16 KiB, a NUL byte or another
 * forbidden character in a header): a clean answer, 431 or 400 in OpenAI's error shape, then the connection
 * closes. What the client still sends is read and dropped first, so closing does not reset the answer away.
 */
function refuseUnparsed(err: NodeJS.ErrnoException, socket: Duplex): void {
  // Node's parser reports each later chunk of the refused request again: answered once, then drained.
  if (refused.has(socket)) return;
  refused.add(socket);
  if (!socket.writable) return void socket.destroy();
  const large = err.code === "HPE_HEADER_OVERFLOW";
  const body = JSON.stringify({
    error: {
      message: large ? "the request's headers are larger than 16 KiB" : "the request is not valid HTTP",
      type: "invalid_request_error",
      param: null,
      code: large ? "headers_too_large" : "invalid_request",
    },
  });
  const status = large ? "431 Request Header Fields Too Large" : "400 Bad Request";
  socket.end(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `connection: close\r\n\r\n${body}`,
  );
  socket.resume();
  setTimeout(() => socket.destroy(), 5_000).unref();
}

/** Binds `server` to `host:port`; resolves with the bound address. */
export async function bind(server: Server, address: string): Promise<string> {
  server.on("clientError", refuseUnparsed);
  const at = address.lastIndexOf(":");
  const host = address.slice(0, at).replace(/^\[|\]$/g, "");
  const port = Number(address.slice(at + 1));
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        err.code === "EADDRINUSE"
          ? new TrajflowError(
              "ADDRESS_IN_USE",
              `${address} is taken by another process: stop it, or listen elsewhere (--listen host:port)`,
            )
          : err,
      ),
    );
    server.listen(port, host, () => resolve());
  });
  const bound = server.address() as AddressInfo;
  return `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${bound.port}`;
}
