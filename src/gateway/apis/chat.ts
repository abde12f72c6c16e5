/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`) and Completions (`POST /v1/completions`): the
 * canonical calls themselves, so both directions are nearly the identity. The agent's body goes upstream as
 * it is (its model mapped where model_map says), the answer and each chunk come back as the engine adapter
 * leaves them (the gateway's own fields taken out), with the agent's model name where it was mapped.
 * Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
 */
import type { AgentRoute } from "../engines/engine.ts";
import { openAiErrorShape, sseData, type GatewayErrorCode } from "../http.ts";
import {
  ApiProblem,
  isObject,
  modelNameProblem,
  type AgentApi,
  type ApiCall,
  type ApiName,
  type ApiStream,
  type CallOutcome,
  type Json,
  type RequestContext,
  type StreamText,
} from "./api.ts";

function chatProblem(body: Json): string | null {
  const model = modelNameProblem(body.model);
  if (model !== null) return model;
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    return "messages must be a non-empty array";
  for (const [i, m] of body.messages.entries())
    if (!isObject(m) || typeof m.role !== "string") return `messages[${i}] must be an object with a role`;
  if (body.tools !== undefined && !Array.isArray(body.tools)) return "tools must be an array";
  return null;
}

function completionProblem(body: Json): string | null {
  const model = modelNameProblem(body.model);
  if (model !== null) return model;
  const p = body.prompt;
  if (typeof p === "string") return null;
  if (Array.isArray(p) && p.length > 0 && p.every((t) => Number.isInteger(t) && (t as number) >= 0))
    return null;
  return "prompt must be a string or an array of token ids (one prompt per call)";
}

/** Whether a canonical chunk finishes a choice (its finish reason is set). */
export function finishesAChoice(chunk: Json): boolean {
  const choices = chunk.choices;
  if (!Array.isArray(choices)) return false;
  return choices.some((c) => isObject(c) && c.finish_reason !== null && c.finish_reason !== undefined);
}

class OpenAiCall implements ApiCall {
  readonly api: ApiName;
  readonly route: AgentRoute;
  readonly body: Json;
  readonly stream: boolean;
  readonly passesEngineErrors = true;
  readonly agentModel: string | undefined;
  details(): undefined {
    return undefined;
  }
  /** The agent's model name where it was mapped to another upstream; answers are renamed back. */
  private readonly rename: string | undefined;

  constructor(api: ApiName, route: AgentRoute, body: Json, ctx: RequestContext) {
    this.api = api;
    this.route = route;
    this.stream = body.stream === true;
    this.agentModel = typeof body.model === "string" ? body.model : undefined;
    const upstream = this.agentModel === undefined ? undefined : ctx.settings.upstreamModel(this.agentModel);
    this.body = upstream === undefined || upstream === this.agentModel ? body : { ...body, model: upstream };
    this.rename = upstream !== this.agentModel ? this.agentModel : undefined;
  }

  stopReason(): undefined {
    return undefined;
  }

  named(obj: Json): Json {
    return this.rename === undefined || obj.model === undefined ? obj : { ...obj, model: this.rename };
  }

  answer(canonical: Json): { status: number; body: Json } {
    return { status: 200, body: this.named(canonical) };
  }

  streamer(): ApiStream {
    return new OpenAiStream(this);
  }
}

class OpenAiStream implements ApiStream {
  private readonly call: OpenAiCall;

  constructor(call: OpenAiCall) {
    this.call = call;
  }

  chunk(chunk: Json): StreamText {
    const out = this.call.named(chunk);
    return { text: sseData(JSON.stringify(out)), finishes: finishesAChoice(out) };
  }

  other(raw: string): string {
    return raw;
  }

  end(_outcome: CallOutcome, finished: boolean): string {
    return finished ? "data: [DONE]\n\n" : "";
  }

  error(code: GatewayErrorCode, message: string): string {
    return sseData(JSON.stringify(openAiErrorShape(500, code, message)));
  }
}

function openAiApi(name: ApiName, route: AgentRoute, problem: (body: Json) => string | null): AgentApi {
  return {
    name,
    request(body, ctx) {
      const p = problem(body);
      return p === null ? new OpenAiCall(name, route, body, ctx) : new ApiProblem(p);
    },
    errorBody: openAiErrorShape,
  };
}

export const chatApi = openAiApi("chat", "chat", chatProblem);
export const completionsApi = openAiApi("completions", "completions", completionProblem);
