/**
 * The control routes: the trainer's side of the gateway, which drives the training signal (start, read,
 * reward, end and delete sessions; announce the policy version). Who may call them is decided before
 * (control-auth.ts, server.ts): with a control token, only its holder; with a control listener, only on it.
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isTrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { endEvent, policyUpdateEvent, rewardEvent, startEvent } from "./call-events.ts";
import type { GatewayConfig } from "./config.ts";
import { withholdMoved } from "./fleet.ts";
import { sendError, sendJson } from "./http.ts";
import type { EventOutput } from "./outputs/output.ts";
import type { Recorder } from "./recorder.ts";
import { checkBody, endBody, readJsonBody, rewardBody, startSessionBody, weightsBody } from "./requests.ts";
import type { GatewaySession, SessionTable } from "./sessions.ts";

export interface ControlParts {
  config: GatewayConfig;
  sessions: SessionTable;
  recorder: Recorder;
  output: EventOutput;
  metrics: Metrics;
  logger: Logger;
  /** Answers 429 or 503 with Retry-After, counted. */
  refuse(
    res: ServerResponse,
    status: number,
    code: "too_many_calls" | "output_unavailable",
    message: string,
  ): void;
  /** Sets the policy version the gateway stamps on calls. */
  setVersion(version: number): void;
  /** The host:port agents reach, for a session's base URL, from the Host the trainer used. */
  agentsHost(host: string | undefined): string;
  /** The embedded pipeline's answer: has it finalized this session? Absent with Kafka (it cannot know). */
  finalized?: (uid: string, sessionId: string) => boolean;
}

export class ControlRoutes {
  private readonly parts: ControlParts;
  /** A replica of a fleet: tells the other replicas a new policy version (fleet.ts). */
  announce: ((version: number) => Promise<void>) | null = null;
  /**
   * A replica of a fleet: takes a session id over when another replica began it, or reserves it for this
   * one (fleet.ts); false once it answered the error itself.
   */
  take: ((res: ServerResponse, id: string, uid: string) => Promise<boolean>) | null = null;

  constructor(parts: ControlParts) {
    this.parts = parts;
  }

  async startSession(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readJsonBody(req, res, this.parts.config.max_body_bytes);
    const body = raw === null ? null : checkBody(startSessionBody, raw, res);
    if (body === null) return;
    const id = body.session_id ?? `s-${randomBytes(9).toString("base64url")}`;
    const uid = body.uid ?? id;
    const { sample_index: sampleIndex, group_size: groupSize, metadata } = body;
    if (this.take !== null && !(await this.take(res, id, uid))) return;
    if (this.parts.sessions.get(id) !== undefined)
      return sendError(res, 409, "session_exists", `session ${id} exists already`);
    // Its events are in the log up to some seq: starting it again would write a second seq 0.
    if (this.parts.sessions.expired(id))
      return sendError(res, 409, "session_expired", `session ${id} was forgotten for idleness; use a new id`);
    if (!this.parts.output.accepting())
      return this.parts.refuse(
        res,
        503,
        "output_unavailable",
        `events cannot be recorded now (${this.parts.output.where})`,
      );
    const s = this.parts.sessions.create({
      uid,
      sessionId: id,
      ...(sampleIndex !== undefined ? { sampleIndex } : {}),
      ...(groupSize !== undefined ? { groupSize } : {}),
      ...(metadata !== undefined ? { metadata } : {}),
    });
    const key = this.parts.sessions.issueKey(s);
    try {
      await this.parts.recorder.record(s, () => ({ records: [startEvent(s, Date.now())] }));
    } catch (err) {
      this.parts.sessions.drop(s);
      return this.parts.refuse(
        res,
        503,
        "output_unavailable",
        `the session could not be recorded: ${(err as Error).message}`,
      );
    }
    this.parts.metrics.inc("gateway_lifecycle", "start");
    const host = this.parts.agentsHost(req.headers.host);
    sendJson(res, 201, {
      session_id: s.id,
      uid: s.uid,
      base_url: `http://${host}/sessions/${encodeURIComponent(s.id)}/v1`,
      api_key: key,
    });
  }

  describe(res: ServerResponse, id: string): void {
    const s = this.parts.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    sendJson(res, 200, s.describe());
  }

  async reward(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await readJsonBody(req, res, this.parts.config.max_body_bytes);
    if (body === null) return;
    const s = this.parts.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    const fields = checkBody(rewardBody, body, res);
    if (fields === null) return;
    // Recorded, it would only be dead-lettered (LATE_EVENT): the pipeline wrote the session without it.
    if (this.parts.finalized?.(s.uid, s.id) === true) {
      this.parts.metrics.inc("gateway_rewards_refused", "session_written");
      return sendError(
        res,
        409,
        "session_written",
        `session ${s.id} was finalized by the pipeline (its rows are written without this reward); ` +
          "send rewards before its end, or within --reward-grace-ms after it",
      );
    }
    await this.lifecycle(res, s, "reward", () => rewardEvent(s, Date.now(), fields));
  }

  async end(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await readJsonBody(req, res, this.parts.config.max_body_bytes);
    if (body === null) return;
    const s = this.parts.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    const checked = checkBody(endBody, body, res);
    if (checked === null) return;
    const status = checked.status;
    if (s.state === "ended")
      return sendError(res, 409, "session_ended", `session ${s.id} has ended already (${s.endStatus})`);
    s.state = "ended";
    s.endStatus = status;
    await this.lifecycle(res, s, "end", () => endEvent(s, Date.now(), status));
  }

  async deleteSession(res: ServerResponse, id: string): Promise<void> {
    const s = this.parts.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    if (s.state !== "ended") {
      s.state = "ended";
      s.endStatus = "aborted";
      const ok = await this.lifecycle(null, s, "delete", () => endEvent(s, Date.now(), "aborted"));
      if (!ok)
        return this.parts.refuse(res, 503, "output_unavailable", "the session's end could not be recorded");
    }
    this.parts.sessions.drop(s);
    sendJson(res, 200, { ...s.describe(), deleted: true });
  }

  /** Records a lifecycle change and answers with the session; false (and a 503) when it could not be recorded. */
  private async lifecycle(
    res: ServerResponse | null,
    s: GatewaySession,
    action: string,
    build: () => Array<{ key: string; value: string }>,
  ): Promise<boolean> {
    try {
      await this.parts.recorder.record(s, () => ({ records: build() }));
    } catch (err) {
      if (res !== null && isTrajflowError(err) && err.code === "SESSION_MOVED") withholdMoved(res, err);
      else if (res !== null)
        this.parts.refuse(res, 503, "output_unavailable", `could not be recorded: ${(err as Error).message}`);
      return false;
    }
    this.parts.metrics.inc("gateway_lifecycle", action);
    if (res !== null) sendJson(res, 200, s.describe());
    return true;
  }

  async setWeights(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonBody(req, res, this.parts.config.max_body_bytes);
    if (body === null) return;
    const checked = checkBody(weightsBody, body, res);
    if (checked === null) return;
    const v = checked.version;
    // Recorded as policy.update, so the pipeline's staleness stage and a restarted gateway know it.
    try {
      await this.parts.output.broadcast(policyUpdateEvent(v, Date.now()));
      await this.announce?.(v);
    } catch (err) {
      return this.parts.refuse(
        res,
        503,
        "output_unavailable",
        `the version could not be recorded: ${(err as Error).message}`,
      );
    }
    this.parts.setVersion(v);
    this.parts.metrics.inc("gateway_lifecycle", "weights");
    this.parts.logger.info({ version: v }, "The policy version is now this one.");
    sendJson(res, 200, { version: v });
  }
}
