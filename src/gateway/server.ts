/**
 * The gateway's HTTP server: routes, how a call finds its session, and the session lifecycle.
 *
 * Sessions, in each convention the field uses (docs/gateway.md):
 * - path: the agent's base URL is `/sessions/{id}/v1`;
 * - per-session key: `POST /sessions` returns an `api_key`; `Authorization: Bearer <key>` on `/v1/...`;
 * - header: `X-Session-Id` (with `X-Trajflow-Uid`, `X-Trajflow-Sample-Index`, `X-Trajflow-Group-Size`).
 * Agent APIs under /v1 (apis/): Chat Completions, Completions, Anthropic Messages, OpenAI Responses.
 * Lifecycle: `POST /sessions`, `GET|DELETE /sessions/{id}`, `POST /sessions/{id}/reward`,
 * `POST /sessions/{id}/end`; the trainer's `POST /weights`; `/metrics`, `/healthz`, `/readyz`.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { prometheusText, type Gauge } from "../core/status-server.ts";
import { ApiProblem, type AgentApi, type ApiSettings } from "./apis/api.ts";
import { chatApi, completionsApi } from "./apis/chat.ts";
import { messagesApi } from "./apis/messages.ts";
import { responsesApi } from "./apis/responses.ts";
import { endEvent, policyUpdateEvent, rewardEvent, startEvent } from "./call-events.ts";
import { forwardCall, type CallContext } from "./call.ts";
import { apiSettings, trainRule, type GatewayConfig } from "./config.ts";
import type { EngineAdapter } from "./engines/engine.ts";
import { sendError, sendJson, useErrorShape } from "./http.ts";
import { ModelRoutes } from "./model-routes.ts";
import type { EventOutput } from "./outputs/output.ts";
import { Recorder } from "./recorder.ts";
import { SessionTable, type GatewaySession } from "./sessions.ts";
import { findSession } from "./session-finder.ts";
import { UpstreamPool } from "./upstreams.ts";
import {
  checkBody,
  endBody,
  header,
  readJsonBody,
  rewardBody,
  sendText,
  startSessionBody,
  weightsBody,
} from "./requests.ts";

const SESSION_PATH = /^\/sessions\/([^/]+)(\/.*)?$/;

/** The agent APIs by their path under /v1 (POST). A new API is one codec and one line here. */
const APIS: Record<string, AgentApi> = {
  "/chat/completions": chatApi,
  "/completions": completionsApi,
  "/messages": messagesApi,
  "/responses": responsesApi,
};

export interface GatewayParts {
  config: GatewayConfig;
  adapter: EngineAdapter;
  output: EventOutput;
  metrics: Metrics;
  logger: Logger;
}

export class GatewayServer {
  readonly sessions: SessionTable;
  readonly metrics: Metrics;
  readonly pool: UpstreamPool;
  private readonly config: GatewayConfig;
  private readonly adapter: EngineAdapter;
  private readonly output: EventOutput;
  private readonly logger: Logger;
  private readonly recorder: Recorder;
  private readonly ctx: CallContext;
  private readonly apiSettings: ApiSettings;
  /** Whether a call is trained (untrained_models, X-Trajflow-Train). */
  private readonly trained: ReturnType<typeof trainRule>;
  /** The routes beside model calls: models lists, count_tokens, stored responses. */
  private readonly routes: ModelRoutes;
  private readonly gauges = new Map<string, Gauge>();
  private server: Server | null = null;
  private inFlight = 0;
  private weightVersion: number | undefined;
  private ready = false;
  private stopping = false;
  /** Call ids are `<boot>-<n>`: unique across restarts without remembering a counter. */
  private readonly boot = randomBytes(4).toString("hex");
  private callCounter = 0;

  constructor(parts: GatewayParts) {
    this.config = parts.config;
    this.adapter = parts.adapter;
    this.output = parts.output;
    this.metrics = parts.metrics;
    this.logger = parts.logger;
    this.sessions = new SessionTable({
      maxSessions: parts.config.max_sessions,
      idleMs: parts.config.session_idle_ms,
      maxTips: parts.config.max_tips_per_session,
      storedResponses: parts.config.stored_responses,
    });
    this.pool = new UpstreamPool(parts.config.upstreams, parts.logger, parts.config.upstream_api_key);
    this.recorder = new Recorder(parts.output, parts.metrics);
    this.ctx = {
      adapter: this.adapter,
      pool: this.pool,
      recorder: this.recorder,
      metrics: this.metrics,
      logger: this.logger,
      upstreamTimeoutMs: parts.config.upstream_timeout_ms,
      version: () => this.weightVersion,
      nextCallId: () => `${this.boot}-${++this.callCounter}`,
    };
    this.apiSettings = apiSettings(parts.config);
    this.trained = trainRule(parts.config);
    this.routes = new ModelRoutes({
      adapter: this.adapter,
      pool: this.pool,
      metrics: this.metrics,
      settings: this.apiSettings,
    });
    this.gauges.set("gateway_open_sessions", () => this.sessions.size);
    this.gauges.set("gateway_in_flight", () => this.inFlight);
    this.gauges.set("gateway_tips_bytes", () => this.sessions.tipBytes());
    this.gauges.set("gateway_upstream_healthy", () =>
      this.pool.upstreams.map((u) => ({ labels: { upstream: u.url.origin }, value: u.healthy ? 1 : 0 })),
    );
  }

  /** Rebuilds the sessions open before a restart from the output's recent events. */
  async restore(sinceMs: number): Promise<number> {
    let events = 0;
    for await (const line of this.output.restore(sinceMs)) {
      this.sessions.restoreFrom(line);
      events++;
    }
    this.sessions.restored();
    this.weightVersion ??= this.sessions.restoredVersion;
    return events;
  }

  /** Listens on `host:port`; resolves with the bound address. */
  async listen(address: string): Promise<string> {
    const at = address.lastIndexOf(":");
    const host = address.slice(0, at).replace(/^\[|\]$/g, "");
    const port = Number(address.slice(at + 1));
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const bound = this.server.address() as AddressInfo;
    this.ready = true;
    return `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${bound.port}`;
  }

  /** Stops taking calls, waits for those in flight (and their events), then closes. */
  async close(): Promise<void> {
    this.stopping = true;
    this.ready = false;
    if (this.server !== null) {
      const closed = new Promise<void>((r) => this.server!.close(() => r()));
      this.server.closeIdleConnections();
      while (this.inFlight > 0) await new Promise((r) => setTimeout(r, 20));
      this.server.closeAllConnections();
      await closed;
      this.server = null;
    }
    this.pool.close();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await this.route(req, res);
    } catch (err) {
      this.logger.error({ err }, "The gateway failed to handle a request.");
      if (!res.headersSent)
        sendError(res, 500, "upstream_failed", `the gateway failed: ${(err as Error).message}`);
      else res.destroy();
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0]!;
    const method = req.method ?? "GET";
    if (method === "GET" && path === "/healthz") return sendText(res, 200, "ok\n");
    if (method === "GET" && path === "/readyz") {
      const ok = this.ready && this.output.accepting() && this.pool.anyHealthy();
      return sendText(res, ok ? 200 : 503, ok ? "ready\n" : "not ready\n");
    }
    if (method === "GET" && path === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
      return void res.end(prometheusText(this.metrics, this.gauges));
    }
    if (method === "POST" && path === "/weights") return this.setWeights(req, res);
    if (method === "POST" && path === "/sessions") return this.startSession(req, res);
    if (path.startsWith("/v1/")) return this.model(req, res, path.slice(3), null);
    const m = SESSION_PATH.exec(path);
    if (m !== null) {
      const id = decodeURIComponent(m[1]!);
      const rest = m[2] ?? "";
      if (rest.startsWith("/v1/")) return this.model(req, res, rest.slice(3), id);
      if (rest === "" && method === "GET") return this.describe(res, id);
      if (rest === "" && method === "DELETE") return this.deleteSession(res, id);
      if (rest === "/reward" && method === "POST") return this.reward(req, res, id);
      if (rest === "/end" && method === "POST") return this.end(req, res, id);
    }
    sendError(
      res,
      404,
      "not_found",
      `no route ${method} ${path} (docs/gateway.md lists the gateway's routes)`,
    );
  }

  private jsonBody(req: IncomingMessage, res: ServerResponse): Promise<Record<string, unknown> | null> {
    return readJsonBody(req, res, this.config.max_body_bytes);
  }

  /** The session of a model call (created when implicit); answers the error itself when none. */
  private sessionFor(req: IncomingMessage, res: ServerResponse, pathId: string | null, create = true) {
    return findSession(req, res, pathId, this.sessions, this.config.implicit_sessions && create);
  }

  private async model(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    pathId: string | null,
  ): Promise<void> {
    const method = req.method ?? "GET";
    const api = method === "POST" ? APIS[path] : undefined;
    if (api === undefined) return this.modelRoute(req, res, method, path, pathId);
    useErrorShape(res, api.errorBody);
    this.metrics.inc("gateway_route_calls", api.name);
    if (this.stopping) return this.refuse(res, 503, "output_unavailable", "the gateway is stopping");
    const body = await this.jsonBody(req, res);
    if (body === null) return void this.metrics.inc("gateway_calls", "bad_request");
    const found = this.sessionFor(req, res, pathId);
    if (found === null) return void this.metrics.inc("gateway_calls", "bad_request");
    const { s, created } = found;
    const call = api.request(body, { session: s, settings: this.apiSettings, metrics: this.metrics });
    if (call instanceof ApiProblem) {
      // A refused first call leaves no session behind: nothing of it was recorded.
      if (created) this.sessions.drop(s);
      this.metrics.inc("gateway_calls", "bad_request");
      const shaped = api.errorBody(call.status, call.apiCode ?? call.code, call.message, call.param);
      return sendJson(res, call.status, shaped);
    }
    if (created) this.metrics.inc("gateway_lifecycle", "start");
    if (this.inFlight >= this.config.max_in_flight)
      return this.refuse(
        res,
        429,
        "too_many_calls",
        `${this.inFlight} calls are in flight (max_in_flight); retry shortly`,
      );
    if (s.inFlight >= this.config.max_in_flight_per_session)
      return this.refuse(
        res,
        429,
        "too_many_calls",
        `session ${s.id} has ${s.inFlight} calls in flight (max_in_flight_per_session)`,
      );
    // A sample nobody could record is never generated: refuse before forwarding.
    if (!this.output.accepting())
      return this.refuse(
        res,
        503,
        "output_unavailable",
        `events cannot be recorded now (${this.output.where}); retry shortly`,
      );
    this.inFlight++;
    s.inFlight++;
    this.sessions.touch(s);
    try {
      const train = this.trained(call.agentModel, header(req, "x-trajflow-train"));
      await forwardCall(this.ctx, s, call, res, { train });
    } finally {
      this.inFlight--;
      s.inFlight--;
      s.lastActive = Date.now();
    }
  }

  /** The routes under /v1 that are not model calls: models, count_tokens, stored responses. */
  private async modelRoute(
    req: IncomingMessage,
    res: ServerResponse,
    method: string,
    path: string,
    pathId: string | null,
  ): Promise<void> {
    const anthropic = req.headers["anthropic-version"] !== undefined;
    if (method === "GET" && path === "/models") return this.routes.models(res, anthropic);
    const model = /^\/models\/([^/]+)$/.exec(path);
    if (method === "GET" && model !== null)
      return this.routes.model(res, decodeURIComponent(model[1]!), anthropic);
    if (method === "POST" && path === "/messages/count_tokens") {
      useErrorShape(res, messagesApi.errorBody);
      const body = await this.jsonBody(req, res);
      if (body !== null) await this.routes.countTokens(res, body);
      return;
    }
    const stored = /^\/responses\/([^/]+)$/.exec(path);
    if (stored !== null && (method === "GET" || method === "DELETE")) {
      const found = this.sessionFor(req, res, pathId, false);
      if (found !== null) this.routes.storedResponse(res, found.s, decodeURIComponent(stored[1]!), method);
      return;
    }
    if (anthropic) useErrorShape(res, messagesApi.errorBody);
    sendError(res, 404, "not_found", `no route ${method} /v1${path}`);
  }

  private refuse(
    res: ServerResponse,
    status: number,
    code: "too_many_calls" | "output_unavailable",
    message: string,
  ): void {
    this.metrics.inc("gateway_calls", status === 429 ? "busy" : "output_unavailable");
    sendError(res, status, code, message, { "retry-after": "1" });
  }

  private async startSession(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await this.jsonBody(req, res);
    const body = raw === null ? null : checkBody(startSessionBody, raw, res);
    if (body === null) return;
    const id = body.session_id ?? `s-${randomBytes(9).toString("base64url")}`;
    const uid = body.uid ?? id;
    const { sample_index: sampleIndex, group_size: groupSize, metadata } = body;
    if (this.sessions.get(id) !== undefined)
      return sendError(res, 409, "session_exists", `session ${id} exists already`);
    // Its events are in the log up to some seq: starting it again would write a second seq 0.
    if (this.sessions.expired(id))
      return sendError(res, 409, "session_expired", `session ${id} was forgotten for idleness; use a new id`);
    if (!this.output.accepting())
      return this.refuse(
        res,
        503,
        "output_unavailable",
        `events cannot be recorded now (${this.output.where})`,
      );
    const s = this.sessions.create({
      uid,
      sessionId: id,
      ...(sampleIndex !== undefined ? { sampleIndex } : {}),
      ...(groupSize !== undefined ? { groupSize } : {}),
      ...(metadata !== undefined ? { metadata } : {}),
    });
    const key = this.sessions.issueKey(s);
    try {
      await this.recorder.record(s, () => ({ records: [startEvent(s, Date.now())] }));
    } catch (err) {
      this.sessions.drop(s);
      return this.refuse(
        res,
        503,
        "output_unavailable",
        `the session could not be recorded: ${(err as Error).message}`,
      );
    }
    this.metrics.inc("gateway_lifecycle", "start");
    const host = req.headers.host ?? "127.0.0.1";
    sendJson(res, 201, {
      session_id: s.id,
      uid: s.uid,
      base_url: `http://${host}/sessions/${encodeURIComponent(s.id)}/v1`,
      api_key: key,
    });
  }

  private describe(res: ServerResponse, id: string): void {
    const s = this.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    sendJson(res, 200, s.describe());
  }

  private async reward(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await this.jsonBody(req, res);
    if (body === null) return;
    const s = this.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    const fields = checkBody(rewardBody, body, res);
    if (fields === null) return;
    await this.lifecycle(res, s, "reward", () => rewardEvent(s, Date.now(), fields));
  }

  private async end(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const body = await this.jsonBody(req, res);
    if (body === null) return;
    const s = this.sessions.get(id);
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

  private async deleteSession(res: ServerResponse, id: string): Promise<void> {
    const s = this.sessions.get(id);
    if (s === undefined)
      return sendError(res, 404, "unknown_session", `no session ${id} in this gateway's memory`);
    if (s.state !== "ended") {
      s.state = "ended";
      s.endStatus = "aborted";
      const ok = await this.lifecycle(null, s, "delete", () => endEvent(s, Date.now(), "aborted"));
      if (!ok) return this.refuse(res, 503, "output_unavailable", "the session's end could not be recorded");
    }
    this.sessions.drop(s);
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
      await this.recorder.record(s, () => ({ records: build() }));
    } catch (err) {
      if (res !== null)
        this.refuse(res, 503, "output_unavailable", `could not be recorded: ${(err as Error).message}`);
      return false;
    }
    this.metrics.inc("gateway_lifecycle", action);
    if (res !== null) sendJson(res, 200, s.describe());
    return true;
  }

  private async setWeights(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.jsonBody(req, res);
    if (body === null) return;
    const checked = checkBody(weightsBody, body, res);
    if (checked === null) return;
    const v = checked.version;
    // Recorded as policy.update, so the pipeline's staleness stage and a restarted gateway know it.
    try {
      await this.output.broadcast(policyUpdateEvent(v, Date.now()));
    } catch (err) {
      return this.refuse(
        res,
        503,
        "output_unavailable",
        `the version could not be recorded: ${(err as Error).message}`,
      );
    }
    this.weightVersion = v;
    this.metrics.inc("gateway_lifecycle", "weights");
    this.logger.info({ version: v }, "The policy version is now this one.");
    sendJson(res, 200, { version: v });
  }
}
