/**
 * vLLM's OpenAI server (`vllm serve`): `/v1/chat/completions` and `/v1/completions`, whole or streamed.
 * docs/engines.md (## vLLM) has the facts this file relies on, each with the vLLM source file it comes from.
 *
 * What the gateway adds to a call:
 * - `return_token_ids: true`: prompt ids (chat: `prompt_token_ids` at the top of the answer, or of the first
 *   chunk of each choice; completions: `choices[].prompt_token_ids`) and sampled ids (`choices[].token_ids`,
 *   in a stream the ids of that chunk only);
 * - chat `logprobs: true` (vLLM then returns the sampled token's logprob with `top_logprobs` alternatives,
 *   0 unless the agent asked); completions `logprobs: 0` (the sampled token only: vLLM lists `logprobs + 1`
 *   entries per position in `top_logprobs`).
 * Everything else the agent sent (tools, `n`, unknown fields) goes upstream unchanged.
 *
 * What the agent gets back: the answer as vLLM would have written it without the gateway's fields, which
 * vLLM writes as `null` when not asked (its whole answers are `model_dump()`ed with every field, its chunks
 * pass `None` explicitly): `prompt_token_ids`, `token_ids` and `logprobs` become `null` again unless the agent
 * asked for them, and a streamed chunk vLLM only sent because ids or logprobs were asked for is dropped.
 *
 * Logprobs: vLLM writes -9999.0 both as its floor for a very low logprob and as the default of a chat entry
 * it has no logprob for; neither is the sampled token's value, so -9999.0 reads as NaN (missing), like a
 * completions `null`.
 *
 * Routed experts (server started with `--enable-return-routed-experts`): `choices[].routed_experts` of whole
 * answers, a base64 `.npy` of shape `[prompt + output - 1 - routed_experts_prompt_start, layers, top_k]`,
 * split here into the prompt's rows and the output's. Streams carry none (vLLM issue #56745).
 *
 * Weight version: vLLM's answers carry none (its version lives in the engine, `GET /weight_info` in dev mode);
 * the gateway stamps versions itself.
 */
import type { AgentRoute, Asked, Capture, EngineAdapter, PreparedCall, StreamReader } from "./engine.ts";
import { readNpyBase64 } from "./npy.ts";
import {
  appendIds,
  appendLogprobs,
  Choices,
  emptyStreamChoice,
  float32Builder,
  hide,
  isRecord,
  logprobEntries,
  readIds,
  splitRoutedExperts,
  stopStringOf,
  type Json,
} from "./openai-read.ts";
import { vllmRenderer } from "./vllm-render.ts";

/** vLLM's logprob floor, also its chat default for "no logprob" (ChatCompletionLogProb.logprob = -9999.0). */
export const VLLM_LOGPROB_FLOOR = -9999;

interface VllmState {
  route: AgentRoute;
  /** `routed_experts_prompt_start` as sent: the prompt rows vLLM leaves out of routed experts. */
  routedExpertsPromptStart: number;
}

const PATHS: Record<AgentRoute, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };

/** What the agent asked for itself, in vLLM's terms. */
export function vllmAsked(route: AgentRoute, body: Json): Asked {
  if (route === "chat") {
    const logprobs = body.logprobs === true;
    const top = typeof body.top_logprobs === "number" ? body.top_logprobs : 0;
    return { logprobs, topLogprobs: logprobs ? top : 0, tokenIds: body.return_token_ids === true };
  }
  // Completions: `logprobs` is a number; 0 asks for the sampled token's logprob alone.
  const logprobs = typeof body.logprobs === "number";
  return {
    logprobs,
    topLogprobs: logprobs ? (body.logprobs as number) : 0,
    tokenIds: body.return_token_ids === true,
  };
}

/** The fields of a choice (and, for chat, of the answer) the gateway hides again. */
function hiddenChoiceKeys(route: AgentRoute, asked: Asked): string[] {
  const keys: string[] = [];
  if (!asked.tokenIds) keys.push(...(route === "chat" ? ["token_ids"] : ["token_ids", "prompt_token_ids"]));
  if (!asked.logprobs) keys.push("logprobs");
  return keys;
}

function forAgent(route: AgentRoute, asked: Asked, json: Json, stream: boolean): Json | undefined {
  let out = json;
  if (route === "chat" && !asked.tokenIds) out = hide(out, ["prompt_token_ids"], "null");
  const keys = hiddenChoiceKeys(route, asked);
  const choices = out.choices;
  if (keys.length === 0 || !Array.isArray(choices)) return out;
  let changed = false;
  const next = choices.map((c: unknown) => {
    if (!isRecord(c)) return c;
    const h = hide(c, keys, "null");
    if (h !== c) changed = true;
    return h;
  });
  if (!changed) return out;
  if (
    stream &&
    route === "chat" &&
    next.length > 0 &&
    next.every((c) => isRecord(c) && emptyStreamChoice(c))
  ) {
    return undefined;
  }
  return { ...out, choices: next };
}

function routedExpertsOf(capture: Capture, value: unknown, promptStart: number): void {
  if (typeof value !== "string" || capture.promptIds === undefined) return;
  const npy = readNpyBase64(value);
  // A malformed array is left out rather than failing the agent's call; docs/engines.md says so.
  if (typeof npy === "string" || npy.shape.length !== 3) return;
  const [, layers, topK] = npy.shape as [number, number, number];
  if (layers === 0 || topK === 0) return;
  const { prompt, output } = splitRoutedExperts(
    npy.data,
    npy.dtype,
    layers,
    topK,
    capture.promptIds.length - promptStart,
  );
  if (prompt !== undefined) capture.promptRoutedExperts = prompt;
  if (output !== undefined) capture.routedExperts = output;
}

function wholeCapture(
  route: AgentRoute,
  c: Json,
  promptIds: Int32Array | undefined,
  state: VllmState,
): Capture {
  const outputIds = readIds(c.token_ids) ?? new Int32Array(0);
  const capture: Capture = {
    choiceIndex: typeof c.index === "number" ? c.index : 0,
    outputIds,
    // A whole answer always has one; "abort" only if a choice ever comes without.
    finishReason: typeof c.finish_reason === "string" ? c.finish_reason : "abort",
  };
  const stop = stopStringOf(c);
  if (stop !== undefined) capture.stopSequence = stop;
  const prompt = route === "chat" ? promptIds : readIds(c.prompt_token_ids);
  if (prompt !== undefined) capture.promptIds = prompt;
  const entries = logprobEntries(route, c.logprobs);
  if (entries !== undefined) {
    const lp = float32Builder();
    appendLogprobs(route, entries, outputIds.length, lp, VLLM_LOGPROB_FLOOR);
    capture.logprobs = lp.take();
  }
  if (route === "chat") {
    const message = c.message;
    if (isRecord(message)) {
      if (typeof message.content === "string") capture.text = message.content;
      if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0)
        capture.toolCalls = message.tool_calls;
    }
  } else if (typeof c.text === "string") {
    capture.text = c.text;
  }
  routedExpertsOf(capture, c.routed_experts, state.routedExpertsPromptStart);
  return capture;
}

class VllmStream implements StreamReader {
  private readonly choices = new Choices();
  private promptIds: Int32Array | undefined;
  private readonly prepared: PreparedCall;
  private readonly route: AgentRoute;

  constructor(prepared: PreparedCall) {
    this.prepared = prepared;
    this.route = (prepared.state as VllmState).route;
  }

  chunk(data: Json): Json | undefined {
    const route = this.route;
    // Chat: on the first chunk of each choice; the same ids every time.
    if (route === "chat" && this.promptIds === undefined) this.promptIds = readIds(data.prompt_token_ids);
    const choices = Array.isArray(data.choices) ? data.choices : [];
    for (const c of choices) {
      if (!isRecord(c)) continue;
      const s = this.choices.get(c.index);
      if (route === "completions" && s.promptIds === undefined) s.promptIds = readIds(c.prompt_token_ids);
      const k = appendIds(c.token_ids, s.ids);
      const entries = logprobEntries(route, c.logprobs);
      if (entries !== undefined) s.sawLogprobs = true;
      // Aligned chunk by chunk: a chunk's logprobs describe that chunk's ids, NaN where it has none.
      appendLogprobs(route, entries, k, s.logprobs, VLLM_LOGPROB_FLOOR);
      if (route === "chat") {
        const delta = c.delta;
        if (isRecord(delta)) {
          s.addText(delta.content);
          s.toolCalls.add(delta.tool_calls);
        }
      } else {
        s.addText(c.text);
      }
      if (typeof c.finish_reason === "string") s.finishReason = c.finish_reason;
      s.stopSequence ??= stopStringOf(c);
    }
    return forAgent(route, this.prepared.asked, data, true);
  }

  captures(_finished: boolean): Capture[] {
    // A choice without a finish reason gets "abort" whether or not the stream ended cleanly: vLLM sends every
    // choice's finish reason before [DONE], so one missing means the choice was cut off.
    return this.choices.all().map((s) => {
      const c = s.capture();
      if (this.route === "chat" && this.promptIds !== undefined) c.promptIds = this.promptIds;
      return c;
    });
  }
}

/** The vLLM adapter. It has no options: everything it needs is in the call or in vLLM's answer. */
export function createVllmAdapter(): EngineAdapter {
  return {
    name: "vllm",

    async prepare(route, body) {
      const asked = vllmAsked(route, body);
      const upstream: Json = { ...body, return_token_ids: true };
      if (!asked.logprobs) upstream.logprobs = route === "chat" ? true : 0;
      const start = body.routed_experts_prompt_start;
      const state: VllmState = {
        route,
        routedExpertsPromptStart: typeof start === "number" && start > 0 ? start : 0,
      };
      return { path: PATHS[route], body: upstream, asked, state };
    },

    answer(prepared, json) {
      const state = prepared.state as VllmState;
      const route = state.route;
      const promptIds = route === "chat" ? readIds(json.prompt_token_ids) : undefined;
      const choices = Array.isArray(json.choices) ? json.choices : [];
      const captures = choices.filter(isRecord).map((c) => wholeCapture(route, c, promptIds, state));
      return { captures, forAgent: forAgent(route, prepared.asked, json, false) ?? json };
    },

    stream(prepared) {
      return new VllmStream(prepared);
    },

    // vLLM's /tokenize renders chat messages with the served template (TokenizeChatRequest:
    // add_generation_prompt defaults to true) and answers { count, max_model_len, tokens }.
    async countTokens(body, upstream, signal) {
      const { model, messages, tools, chat_template_kwargs: kwargs } = body;
      const answer = await upstream(
        "/tokenize",
        {
          model,
          messages,
          ...(tools !== undefined ? { tools } : {}),
          ...(kwargs ? { chat_template_kwargs: kwargs } : {}),
        },
        signal,
      );
      if (!isRecord(answer) || typeof answer.count !== "number")
        throw new Error("vLLM /tokenize answered without a count");
      return answer.count;
    },

    renderer: vllmRenderer,
  };
}
