/**
 * The routes under /v1 beside model calls: the model list (OpenAI's shape, or Anthropic's for a client that
 * sends `anthropic-version`), one model, Anthropic's `POST /v1/messages/count_tokens`, and a session's stored
 * Responses (`GET` / `DELETE /v1/responses/{id}`).
 *
 * count_tokens counts what the engine would render: the Messages body is translated as for a call, then the
 * engine adapter's own count (llama.cpp: /apply-template + /tokenize; vLLM: /tokenize with the messages), or,
 * for an engine without one, a one-token call whose `usage.prompt_tokens` says it. Nothing is recorded.
 */
import type { ServerResponse } from "node:http";
import type { Metrics } from "../core/metrics.ts";
import { ApiProblem, isObject, type ApiSettings, type Json } from "./apis/api.ts";
import { messagesToChat } from "./apis/messages-request.ts";
import type { EngineAdapter, UpstreamJson } from "./engines/engine.ts";
import { sendError, sendJson } from "./http.ts";
import type { GatewaySession } from "./sessions.ts";
import { readAll, type UpstreamPool } from "./upstreams.ts";

export interface ModelRouteParts {
  adapter: EngineAdapter;
  pool: UpstreamPool;
  metrics: Metrics;
  settings: ApiSettings;
}

const COUNT_TIMEOUT_MS = 60_000;

export class ModelRoutes {
  private readonly parts: ModelRouteParts;

  constructor(parts: ModelRouteParts) {
    this.parts = parts;
  }

  /** The upstream's model list: as it is for OpenAI clients, in Anthropic's shape for Anthropic's. */
  async models(res: ServerResponse, anthropic: boolean): Promise<void> {
    const { pool, metrics } = this.parts;
    const upstream = pool.pick();
    if (upstream === null)
      return sendError(res, 503, "no_upstream", "no inference server answers", { "retry-after": "1" });
    metrics.inc("gateway_route_calls", "models");
    const answer = await pool.send(upstream, "GET", "/v1/models", null, {}, AbortSignal.timeout(10_000));
    const body = await readAll(answer);
    if (!anthropic || (answer.statusCode ?? 500) >= 400) {
      res.writeHead(answer.statusCode ?? 502, {
        "content-type": answer.headers["content-type"] ?? "application/json",
      });
      return void res.end(body);
    }
    let ids: string[] = [];
    try {
      const list = JSON.parse(body.toString("utf8")) as { data?: unknown };
      ids = (Array.isArray(list.data) ? list.data : []).flatMap((m) =>
        isObject(m) && typeof m.id === "string" ? [m.id] : [],
      );
    } catch {
      // an engine that lists nothing readable: an empty list
    }
    const data = ids.map((id) => anthropicModel(id));
    sendJson(res, 200, { data, has_more: false, first_id: ids[0] ?? null, last_id: ids.at(-1) ?? null });
  }

  /**
   * One model: any name an agent uses is served (the gateway maps it to the upstream's model), so it is
   * described under the name asked.
   */
  model(res: ServerResponse, id: string, anthropic: boolean): void {
    this.parts.metrics.inc("gateway_route_calls", "models");
    sendJson(
      res,
      200,
      anthropic
        ? anthropicModel(id)
        : { id, object: "model", created: 0, owned_by: this.parts.settings.upstreamModel(id) },
    );
  }

  async countTokens(res: ServerResponse, body: Json): Promise<void> {
    const { pool, adapter, metrics, settings } = this.parts;
    metrics.inc("gateway_route_calls", "count_tokens");
    let chat: Json;
    try {
      chat = messagesToChat(body, { session: { responses: null }, settings, metrics }, true);
    } catch (err) {
      if (!(err instanceof ApiProblem)) throw err;
      return sendError(res, err.status, err.code, err.message);
    }
    const upstream = pool.pick();
    if (upstream === null)
      return sendError(res, 503, "no_upstream", "no inference server answers", { "retry-after": "1" });
    upstream.inFlight++;
    try {
      const signal = AbortSignal.timeout(COUNT_TIMEOUT_MS);
      const json: UpstreamJson = (path, payload, sig) => pool.json(upstream, path, payload, sig ?? signal);
      const count =
        adapter.countTokens !== undefined
          ? await adapter.countTokens(chat, json, signal)
          : await this.countByCall(chat, json, signal);
      sendJson(res, 200, { input_tokens: count });
    } catch (err) {
      sendError(
        res,
        502,
        "upstream_failed",
        `the inference server could not count: ${(err as Error).message}`,
      );
    } finally {
      upstream.inFlight--;
    }
  }

  /** The prompt's length as the engine reports it for a call of one token (sampled, never recorded). */
  private async countByCall(chat: Json, json: UpstreamJson, signal: AbortSignal): Promise<number> {
    const { adapter } = this.parts;
    const prepared = await adapter.prepare("chat", { ...chat, max_tokens: 1 }, json, signal);
    const answer = await json(prepared.path, prepared.body, signal);
    const usage = isObject(answer) && isObject(answer.usage) ? answer.usage : {};
    if (typeof usage.prompt_tokens !== "number")
      throw new Error("the engine's answer has no usage.prompt_tokens");
    return usage.prompt_tokens;
  }

  /** A session's stored Response, or its deletion. */
  storedResponse(res: ServerResponse, s: GatewaySession, id: string, method: "GET" | "DELETE"): void {
    const { metrics } = this.parts;
    metrics.inc("gateway_route_calls", method === "GET" ? "responses_get" : "responses_delete");
    const stored = s.responses?.get(id);
    if (stored === undefined)
      return sendJson(res, 404, {
        error: {
          message: `Response with id '${id}' not found in session ${s.id} (only responses stored with store left true are kept, the latest of each session)`,
          type: "invalid_request_error",
          param: null,
          code: null,
        },
      });
    if (method === "DELETE") {
      s.responses!.delete(id);
      return sendJson(res, 200, { id, object: "response", deleted: true });
    }
    sendJson(res, 200, stored.response);
  }
}

function anthropicModel(id: string): Json {
  return { type: "model", id, display_name: id, created_at: "1970-01-01T00:00:00Z" };
}
