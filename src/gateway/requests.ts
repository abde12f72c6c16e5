/**
 * What the gateway's routes check of a request before anything is forwarded or recorded: a JSON object
 * body within the size limit, the session headers, the lifecycle routes' bodies (each API's call shape is
 * its codec's, apis/).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { sendError } from "./http.ts";
import { BodyTooLarge, readAll } from "./upstreams.ts";

/** Reads and parses a JSON object body; answers 400/413 itself and returns null when it is not one. */
export async function readJsonBody(
  req: IncomingMessage,
  res: ServerResponse,
  maxBytes: number,
): Promise<Record<string, unknown> | null> {
  let buf: Buffer;
  const declared = Number(req.headers["content-length"] ?? "0");
  if (declared > maxBytes) {
    req.resume();
    sendError(res, 413, "body_too_large", `the request body is larger than ${maxBytes} bytes`);
    return null;
  }
  try {
    buf = await readAll(req, maxBytes);
  } catch (err) {
    if (err instanceof BodyTooLarge) sendError(res, 413, "body_too_large", err.message);
    else res.destroy();
    return null;
  }
  let value: unknown;
  try {
    value = buf.length === 0 ? {} : JSON.parse(buf.toString("utf8"));
  } catch (err) {
    sendError(res, 400, "invalid_json", `the request body is not valid JSON: ${(err as Error).message}`);
    return null;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    sendError(res, 400, "invalid_json", "the request body must be a JSON object");
    return null;
  }
  return value as Record<string, unknown>;
}

export function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain" });
  res.end(text);
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === "string" && v !== "" ? v : undefined;
}

export function intHeader(req: IncomingMessage, name: string): number | undefined {
  const v = header(req, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 && n <= 2147483647 ? n : undefined;
}

/** Session ids and uids: what fits in a URL path, a header and a row key without escaping. */
export const SAFE_ID = /^[A-Za-z0-9._:@-]{1,200}$/;
const INT32_MAX = 2147483647;
const identifier = z.string().regex(SAFE_ID, "must be 1-200 letters, digits and . _ : @ -");

/** `POST /sessions`. */
export const startSessionBody = z.object({
  session_id: identifier.optional(),
  uid: identifier.optional(),
  sample_index: z.int().min(0).max(INT32_MAX).optional(),
  group_size: z.int().min(1).max(INT32_MAX).optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

/** `POST /sessions/{id}/reward`: the protocol's reward fields. */
export const rewardBody = z.object({
  value: z.number(),
  target: z.string().min(1).optional(),
  stage: z.string().min(1).optional(),
  key: z.string().min(1).optional(),
  finished: z.boolean().optional(),
  info: z.record(z.string(), z.unknown()).optional(),
});

/** `POST /sessions/{id}/end`. */
export const endBody = z.object({ status: z.enum(["ok", "aborted", "failed"]).default("ok") });

/** `POST /weights`. */
export const weightsBody = z.object({ version: z.int().min(0).max(INT32_MAX) });

/** The body checked by `schema`, or null after answering 400 with every problem. */
export function checkBody<S extends z.ZodType>(
  schema: S,
  body: unknown,
  res: ServerResponse,
): z.output<S> | null {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => `${i.path.join(".") || "body"}: ${i.message}`);
  sendError(res, 400, "invalid_request", problems.join("; "));
  return null;
}
