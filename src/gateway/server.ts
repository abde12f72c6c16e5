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
import type { AddressInfo } from "node:net";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import { prometheusText, type Gauge } from "../core/status-server.ts";
import { ApiProblem, type AgentApi, type ApiSettings } from "./apis/api.ts";
import { chatApi, completionsApi } from "./apis/chat.ts";
import { messagesApi } from "./apis/messages.ts";
import { responsesApi } from "./apis/responses.ts";
import { forwardCall, type CallContext } from "./call.ts";
import { ControlAuth } from "./control-auth.ts";
import { ControlRoutes } from "./control-routes.ts";
import { apiSettings, trainRule, type GatewayConfig } from "./config.ts";
import type { EngineAdapter } from "./engines/engine.ts";
import { bind, sendError, sendJson, useErrorShape } from "./http.ts";
import { ModelRoutes } from "./model-routes.ts";
import type { EventOutput } from "./outputs/output.ts";
import { tokenPrompts } from "./continuation/token-adapter.ts";
import { Recorder } from "./recorder.ts";
import type { Fleet } from "./fleet.ts";
import { SessionTable } from "./sessions.ts";
import { findSession } from "./session-finder.ts";
import { UpstreamPool } from "./upstreams.ts";
import { header, readJsonBody, sendText } from "./requests.ts";

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
  /** The control token (from the environment or its file), when one is set. */
  controlToken?: string;
  adapter: EngineAdapter;
  output: EventOutput;
  metrics: Metrics;
  logger: Logger;
  /** The embedded pipeline's answer: has it finalized this session? */
  finalized?: (uid: string, sessionId: string) => boolean;
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
  /** The control listener (`control_listen`), when the control routes have one of their own. */
  private controlServer: Server | null = null;
  /** Who may use the control routes (`control_token`). */
  private readonly auth: ControlAuth;
  private readonly control: ControlRoutes;
  private inFlight = 0;
  private weightVersion: number | undefined;
  /** A replica of a fleet (fleet.ts): null for a gateway alone on its output. */
  private fleet: Fleet | null = null;
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
      ...(parts.config.prompt_mode === "tokens"
        ? { tokenPrompts: tokenPrompts(parts.config, this.adapter, this.metrics, this.logger) }
        : {}),
    };
    this.auth = new ControlAuth(parts.controlToken);
    this.control = new ControlRoutes({
      config: parts.config,
      sessions: this.sessions,
      recorder: this.recorder,
      output: this.output,
      metrics: this.metrics,
      logger: this.logger,
      refuse: (res, status, code, message) => this.refuse(res, status, code, message),
      setVersion: (v) => (this.weightVersion = v),
      agentsHost: (host) => this.agentsHost(host),
      ...(parts.finalized !== undefined ? { finalized: parts.finalized } : {}),
    });
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

  /**
   * Makes this gateway a replica of `fleet`: sessions created here get a generation, sessions held
   * elsewhere are taken over on their first call, and every append is confirmed before its answer.
   */
  joinFleet(fleet: Fleet): void {
    this.fleet = fleet;
    this.sessions.onCreate = (s) => fleet.adopt(s);
    this.recorder.confirm = (s, at) => fleet.confirm(s, at);
    fleet.onPolicy = (v) => (this.weightVersion = v);
    this.control.announce = (v) => fleet.announcePolicy(v);
    this.control.take = (res, id, uid) =>
      fleet.takeId(res, id, uid, (status, message) =>
        this.refuse(res, status, "output_unavailable", message),
      );
  }

  /** A replica of a fleet: the call's session taken over (fleet.ts); false once answered 503. */
  private takeSession(req: IncomingMessage, res: ServerResponse, pathId: string | null): Promise<boolean> {
    if (this.fleet === null) return Promise.resolve(true);
    return this.fleet.takeCall(req, res, pathId, (status, message) =>
      this.refuse(res, status, "output_unavailable", message),
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

  /**
   * Listens on `host:port` for agents (and, without a control listener, the control routes); resolves with
   * the bound address.
   */
  async listen(address: string): Promise<string> {
    // Decided once: closing the control listener must never open the control routes to agents.
    const mode: Listener = this.controlServer === null ? "both" : "agents";
    this.server = createServer((req, res) => void this.handle(req, res, mode));
    this.server.keepAliveTimeout = 65_000;
    const bound = await bind(this.server, address);
    this.ready = true;
    return bound;
  }

  /**
   * The host:port agents reach, from the Host a trainer used: the same, or with a control listener (which
   * has no model routes) the same host at the agents' port.
   */
  private agentsHost(host: string | undefined): string {
    const given = host ?? "127.0.0.1";
    if (this.controlServer === null || this.server === null) return given;
    const port = (this.server.address() as AddressInfo).port;
    const at = given.lastIndexOf(":");
    const name = at > given.lastIndexOf("]") ? given.slice(0, at) : given;
    return `${name}:${port}`;
  }

  /** Listens on `host:port` for the control routes alone; the agents' listener then has none of them. */
  async listenControl(address: string): Promise<string> {
    this.controlServer = createServer((req, res) => void this.handle(req, res, "control"));
    return bind(this.controlServer, address);
  }

  /** Stops taking calls, waits for those in flight (and their events), then closes. */
  async close(): Promise<void> {
    this.stopping = true;
    this.ready = false;
    if (this.controlServer !== null) {
      const control = this.controlServer;
      this.controlServer = null;
      control.closeAllConnections();
      await new Promise<void>((r) => control.close(() => r()));
    }
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

  private async handle(req: IncomingMessage, res: ServerResponse, listener: Listener): Promise<void> {
    try {
      await this.route(req, res, listener);
    } catch (err) {
      this.logger.error({ err }, "The gateway failed to handle a request.");
      if (!res.headersSent)
        sendError(res, 500, "upstream_failed", `the gateway failed: ${(err as Error).message}`);
      else res.destroy();
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse, listener: Listener): Promise<void> {
    const path = (req.url ?? "/").split("?")[0]!;
    const method = req.method ?? "GET";
    if (method === "GET" && path === "/healthz") return sendText(res, 200, "ok\n");
    if (method === "GET" && path === "/readyz") {
      const ok =
        this.ready && this.output.accepting() && this.pool.anyHealthy() && (this.fleet?.ready ?? true);
      return sendText(res, ok ? 200 : 503, ok ? "ready\n" : "not ready\n");
    }
    if (method === "GET" && path === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
      return void res.end(prometheusText(this.metrics, this.gauges));
    }
    const control = controlRoute(method, path);
    if (control !== null && listener !== "agents") return this.controlCall(req, res, control);
    if (listener !== "control") {
      if (path.startsWith("/v1/")) return this.model(req, res, path.slice(3), null);
      const m = SESSION_PATH.exec(path);
      if (m !== null && (m[2] ?? "").startsWith("/v1/"))
        return this.model(req, res, m[2]!.slice(3), decodeURIComponent(m[1]!));
    }
    sendError(
      res,
      404,
      "not_found",
      `no route ${method} ${path} on this listener (docs/gateway.md lists the gateway's routes)`,
    );
  }

  /** A control route, once its caller is the trainer: the control token's holder when one is set. */
  private async controlCall(req: IncomingMessage, res: ServerResponse, route: ControlRoute): Promise<void> {
    const verdict = this.auth.check(req);
    if (verdict !== "allowed") {
      this.metrics.inc("gateway_control_refused", route.name);
      return verdict === "missing"
        ? sendError(
            res,
            401,
            "control_token_required",
            "this route is the trainer's: send Authorization: Bearer <control token>",
          )
        : sendError(
            res,
            403,
            "control_token_wrong",
            "this route is the trainer's, and the credential sent is not its control token",
          );
    }
    const c = this.control;
    const id = route.session!;
    if (route.session !== undefined && !(await this.takeSession(req, res, id))) return;
    switch (route.name) {
      case "sessions_create":
        return c.startSession(req, res);
      case "weights":
        return c.setWeights(req, res);
      case "session_read":
        return c.describe(res, id);
      case "session_delete":
        return c.deleteSession(res, id);
      case "reward":
        return c.reward(req, res, id);
      case "end":
        return c.end(req, res, id);
    }
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
    if (!(await this.takeSession(req, res, pathId))) return;
    // An agent that left while its session was taken over (a lease waited out) gets no call made for it.
    if (res.destroyed || req.socket.destroyed) return void this.metrics.inc("gateway_calls", "client_gone");
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
    if (method === "GET" && path === "/models")
      return this.bounded(res, () => this.routes.models(res, anthropic));
    const model = /^\/models\/([^/]+)$/.exec(path);
    if (method === "GET" && model !== null)
      return this.routes.model(res, decodeURIComponent(model[1]!), anthropic);
    if (method === "POST" && path === "/messages/count_tokens") {
      useErrorShape(res, messagesApi.errorBody);
      const body = await this.jsonBody(req, res);
      if (body !== null) await this.bounded(res, () => this.routes.countTokens(res, body));
      return;
    }
    const stored = /^\/responses\/([^/]+)$/.exec(path);
    if (stored !== null && (method === "GET" || method === "DELETE")) {
      if (!(await this.takeSession(req, res, pathId))) return;
      const found = this.sessionFor(req, res, pathId, false);
      if (found !== null) this.routes.storedResponse(res, found.s, decodeURIComponent(stored[1]!), method);
      return;
    }
    if (anthropic) useErrorShape(res, messagesApi.errorBody);
    sendError(res, 404, "not_found", `no route ${method} /v1${path}`);
  }

  /**
   * A call upstream beside a model call (a model list, a token count: each can reach the engine), under the
   * same bounds: refused while stopping or past max_in_flight, counted in flight until done.
   */
  private async bounded(res: ServerResponse, work: () => Promise<void>): Promise<void> {
    if (this.stopping) return this.refuse(res, 503, "output_unavailable", "the gateway is stopping");
    if (this.inFlight >= this.config.max_in_flight)
      return this.refuse(
        res,
        429,
        "too_many_calls",
        `${this.inFlight} calls are in flight (max_in_flight); retry shortly`,
      );
    this.inFlight++;
    try {
      await work();
    } finally {
      this.inFlight--;
    }
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
}

/** Which routes a listener serves: agents' model calls, the control routes, or both (no control listener). */
type Listener = "agents" | "control" | "both";

/** The control routes, as `gateway_control_refused` labels them. */
interface ControlRoute {
  name: "sessions_create" | "session_read" | "session_delete" | "reward" | "end" | "weights";
  session?: string;
}

function controlRoute(method: string, path: string): ControlRoute | null {
  if (method === "POST" && path === "/weights") return { name: "weights" };
  if (method === "POST" && path === "/sessions") return { name: "sessions_create" };
  const m = SESSION_PATH.exec(path);
  if (m === null) return null;
  const session = decodeURIComponent(m[1]!);
  const rest = m[2] ?? "";
  if (rest === "" && method === "GET") return { name: "session_read", session };
  if (rest === "" && method === "DELETE") return { name: "session_delete", session };
  if (rest === "/reward" && method === "POST") return { name: "reward", session };
  if (rest === "/end" && method === "POST") return { name: "end", session };
  return null;
}
