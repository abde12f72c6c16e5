/**
 * How a model call finds its session, in each convention the field uses (docs/gateway.md): the path's
 * session id (`/sessions/{id}/v1`), a per-session key (`Authorization: Bearer`, or Anthropic's `x-api-key`),
 * or an `X-Session-Id` header (with `X-Trajflow-Uid`, `-Sample-Index`, `-Group-Size` to start it).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { sendError } from "./http.ts";
import { header, intHeader, SAFE_ID } from "./requests.ts";
import type { GatewaySession, SessionTable } from "./sessions.ts";

/** A session key as clients send it: `Authorization: Bearer <key>`, or Anthropic's `x-api-key`. */
export function apiKey(req: IncomingMessage): string | null {
  const auth = req.headers.authorization;
  if (auth !== undefined && /^Bearer /i.test(auth)) return auth.slice(7).trim();
  const key = req.headers["x-api-key"];
  return typeof key === "string" && key !== "" ? key : null;
}

/**
 * The session a model call belongs to, created when `implicit` and unknown (`created`); answers the error
 * itself (400, 404, 409) and returns null when there is none.
 */
export function findSession(
  req: IncomingMessage,
  res: ServerResponse,
  pathId: string | null,
  sessions: SessionTable,
  implicit: boolean,
): { s: GatewaySession; created: boolean } | null {
  let id = pathId;
  if (id === null) {
    const key = apiKey(req);
    const byKey = key !== null ? sessions.byApiKey(key) : undefined;
    if (byKey !== undefined) return open(byKey, res);
    const header = req.headers["x-session-id"];
    id = typeof header === "string" && header !== "" ? header : null;
    if (id === null) {
      sendError(
        res,
        400,
        "no_session",
        "this call names no session: use the base URL /sessions/{id}/v1, a session's API key from POST /sessions, or an X-Session-Id header",
      );
      return null;
    }
  }
  if (!SAFE_ID.test(id)) {
    sendError(res, 400, "invalid_request", "a session id is 1-200 letters, digits and . _ : @ -");
    return null;
  }
  const known = sessions.get(id);
  if (known !== undefined) return open(known, res);
  if (sessions.expired(id)) {
    sendError(
      res,
      409,
      "session_expired",
      `session ${id} had no call for longer than session_idle_ms and was forgotten (the pipeline has finalized it); start a new session`,
    );
    return null;
  }
  if (!implicit) {
    sendError(res, 404, "unknown_session", `no session ${id}: start it with POST /sessions first`);
    return null;
  }
  return create(req, res, id, sessions);
}

function create(
  req: IncomingMessage,
  res: ServerResponse,
  id: string,
  sessions: SessionTable,
): { s: GatewaySession; created: true } | null {
  const uid = header(req, "x-trajflow-uid") ?? id;
  if (!SAFE_ID.test(uid)) {
    sendError(res, 400, "invalid_request", "X-Trajflow-Uid is 1-200 letters, digits and . _ : @ -");
    return null;
  }
  const sampleIndex = intHeader(req, "x-trajflow-sample-index");
  const groupSize = intHeader(req, "x-trajflow-group-size");
  const s = sessions.create({
    uid,
    sessionId: id,
    ...(sampleIndex !== undefined ? { sampleIndex } : {}),
    ...(groupSize !== undefined && groupSize > 0 ? { groupSize } : {}),
  });
  return { s, created: true };
}

function open(s: GatewaySession, res: ServerResponse): { s: GatewaySession; created: false } | null {
  if (s.state === "ended") {
    sendError(res, 409, "session_ended", `session ${s.id} has ended (${s.endStatus}); start a new session`);
    return null;
  }
  return { s, created: false };
}
