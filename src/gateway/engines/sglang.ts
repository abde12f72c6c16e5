/**
 * SGLang's OpenAI server (`python -m sglang.launch_server`): `/v1/chat/completions` and `/v1/completions`,
 * whole or streamed. docs/engines.md (## SGLang) has the facts this file relies on, each with its source file,
 * and why the OpenAI routes rather than the native `/generate`: the agent's chat call needs SGLang's chat
 * template, tool-call and reasoning parsers, which only the OpenAI routes apply.
 *
 * What the gateway adds to a call:
 * - chat: `return_input_ids_in_sglext` and `return_output_ids_in_sglext` (the prompt's ids and each choice's
 *   sampled ids in the answer's `sglext`: in the body when whole, in one last `choices: []` chunk when
 *   streamed; SGLang refuses its older `return_token_ids` on streamed chat with a 400) and `logprobs: true`;
 * - completions: `return_token_ids: true` (`choices[].prompt_token_ids` and `choices[].token_ids`, per chunk
 *   when streamed) and `logprobs: 0` (SGLang returns the sampled token's logprob for any `logprobs` set);
 * - `return_routed_experts: true` when the adapter is given the routing layout (`routedExperts` option).
 * Everything else the agent sent goes upstream unchanged.
 *
 * What the agent gets back: the answer as SGLang would have written it. SGLang's serializers drop `token_ids`,
 * `prompt_token_ids` and an empty `sglext` rather than writing null, so those are removed again; `logprobs` is
 * written as null. A streamed chunk that only carried the gateway's fields (SGLang's logprob flush, the
 * `sglext` chunk) is dropped.
 *
 * Weight version: `metadata.weight_version` of a whole answer (a string; SGLang's default is "default"), read
 * as a number when it is one. Streams carry none.
 */
import type { AgentRoute, Asked, Capture, EngineAdapter, PreparedCall, StreamReader } from "./engine.ts";
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
import type { RoutedExpertDtype } from "../../schemas/routed-experts.ts";
import { sglangRenderer } from "./sglang-render.ts";

export interface SglangAdapterOptions {
  /**
   * The MoE routing layout of the served model. SGLang sends routed experts as bare base64 ids (no shape, no
   * dtype), so the adapter can only read them when told `layers` (MoE layers) and `topK` (experts per token),
   * and `dtype`, the ids' wire type: int32 unless the server was started with a narrower one. Set only for a
   * server started with `--enable-return-routed-experts`: the adapter then asks for them on every call.
   * Unset (the default): routed experts are neither asked for nor read.
   */
  routedExperts?: { layers: number; topK: number; dtype?: RoutedExpertDtype };
}

interface SglangState {
  route: AgentRoute;
  /** Each sglext field the agent asked for itself (kept for it); the others are the gateway's. */
  keepSglext: { input_ids: boolean; output_ids: boolean; routed_experts: boolean };
  /**
   * Whether `choices[].token_ids` / `prompt_token_ids` stay for the agent: always on chat (the gateway never
   * adds them there: they are the agent's own `return_token_ids` / `return_prompt_token_ids`), on completions
   * only when the agent set `return_token_ids` itself.
   */
  keepChoiceIds: boolean;
  /** `routed_experts_start_len` as sent: the prompt rows SGLang leaves out of routed experts. */
  routedExpertsStart: number;
}

const PATHS: Record<AgentRoute, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };

/** What the agent asked for itself, in SGLang's terms. */
export function sglangAsked(route: AgentRoute, body: Json): Asked {
  const tokenIds =
    body.return_token_ids === true ||
    body.return_input_ids_in_sglext === true ||
    body.return_output_ids_in_sglext === true;
  if (route === "chat") {
    const logprobs = body.logprobs === true;
    const top = typeof body.top_logprobs === "number" ? body.top_logprobs : 0;
    return { logprobs, topLogprobs: logprobs ? top : 0, tokenIds };
  }
  const logprobs = typeof body.logprobs === "number";
  return { logprobs, topLogprobs: logprobs ? (body.logprobs as number) : 0, tokenIds };
}

/** `metadata.weight_version` as a number, when SGLang's string is one ("default" and labels are not). */
export function sglangWeightVersion(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  if (typeof value !== "string" || !/^\d{1,10}$/.test(value)) return undefined;
  const n = Number(value);
  return n <= 2147483647 ? n : undefined;
}

/** Hides the gateway's sglext fields; undefined when nothing of sglext is left for the agent. */
function sglextForAgent(sglext: unknown, state: SglangState): Json | undefined {
  if (!isRecord(sglext)) return undefined;
  const drop = (Object.keys(state.keepSglext) as (keyof SglangState["keepSglext"])[]).filter(
    (k) => !state.keepSglext[k],
  );
  const out = hide(sglext, drop, "delete");
  return Object.keys(out).length > 0 ? out : undefined;
}

function forAgent(state: SglangState, asked: Asked, json: Json, stream: boolean): Json | undefined {
  let out = json;
  if ("sglext" in json) {
    const sglext = sglextForAgent(json.sglext, state);
    if (sglext !== json.sglext) {
      out = { ...json };
      if (sglext === undefined) delete out.sglext;
      else out.sglext = sglext;
    }
  }
  const choices = out.choices;
  if (!Array.isArray(choices)) return out;
  // SGLang pops both from a choice when not asked, rather than writing null.
  const deleted = state.keepChoiceIds ? [] : ["token_ids", "prompt_token_ids"];
  let changed = false;
  const next = choices.map((c: unknown) => {
    if (!isRecord(c)) return c;
    let h = hide(c, deleted, "delete");
    if (!asked.logprobs) h = hide(h, ["logprobs"], "null");
    if (h !== c) changed = true;
    return h;
  });
  if (stream) {
    if (changed && next.length > 0 && next.every((c) => isRecord(c) && emptyStreamChoice(c)))
      return undefined;
    // The sglext chunk, once emptied, is a chunk SGLang would not have sent.
    if (
      out !== json &&
      next.length === 0 &&
      !("sglext" in out) &&
      (out.usage === null || out.usage === undefined)
    ) {
      return undefined;
    }
  }
  return changed ? { ...out, choices: next } : out;
}

/** Logprobs of a chat choice whose ids came separately: placed only if there is one per id. */
function alignedLogprobs(values: Float32Array, ids: number): Float32Array {
  if (values.length === ids) return values;
  // SGLang's plain streaming path drops the logprobs of a step whose text delta is empty, so which position
  // lacks one is unknowable: every position is missing rather than one shifted onto the wrong token.
  return new Float32Array(ids).fill(NaN);
}

function routedExpertsOf(
  capture: Capture,
  value: unknown,
  state: SglangState,
  layout: SglangAdapterOptions["routedExperts"],
): void {
  if (layout === undefined || typeof value !== "string" || capture.promptIds === undefined) return;
  const file = Buffer.from(value, "base64");
  const bytes = new Uint8Array(file.buffer, file.byteOffset, file.byteLength);
  const { prompt, output } = splitRoutedExperts(
    bytes,
    layout.dtype ?? "int32",
    layout.layers,
    layout.topK,
    capture.promptIds.length - state.routedExpertsStart,
  );
  if (prompt !== undefined) capture.promptRoutedExperts = prompt;
  if (output !== undefined) capture.routedExperts = output;
}

function textOf(route: AgentRoute, c: Json, capture: Capture): void {
  if (route === "completions") {
    if (typeof c.text === "string") capture.text = c.text;
    return;
  }
  const message = c.message;
  if (!isRecord(message)) return;
  if (typeof message.content === "string") capture.text = message.content;
  if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0)
    capture.toolCalls = message.tool_calls;
}

class SglangStream implements StreamReader {
  private readonly choices = new Choices();
  private readonly prepared: PreparedCall;
  private readonly state: SglangState;
  private readonly layout: SglangAdapterOptions["routedExperts"];
  /** Chat: from the sglext chunk at the end. */
  private inputIds: Int32Array | undefined;
  private outputIds: unknown[] | undefined;
  private routed: unknown;

  constructor(prepared: PreparedCall, layout: SglangAdapterOptions["routedExperts"]) {
    this.prepared = prepared;
    this.state = prepared.state as SglangState;
    this.layout = layout;
  }

  chunk(data: Json): Json | undefined {
    const route = this.state.route;
    const sglext = data.sglext;
    if (isRecord(sglext)) {
      this.inputIds ??= readIds(sglext.input_ids);
      if (Array.isArray(sglext.output_ids)) this.outputIds = sglext.output_ids;
      if (typeof sglext.routed_experts === "string") this.routed = sglext.routed_experts;
    }
    const choices = Array.isArray(data.choices) ? data.choices : [];
    for (const c of choices) {
      if (!isRecord(c)) continue;
      const s = this.choices.get(c.index);
      const entries = logprobEntries(route, c.logprobs);
      if (entries !== undefined) s.sawLogprobs = true;
      if (route === "chat") {
        // Ids come at the end; logprobs are kept in order and placed then.
        appendLogprobs(route, entries, entries?.length ?? 0, s.logprobs);
        const delta = c.delta;
        if (isRecord(delta)) {
          s.addText(delta.content);
          s.toolCalls.add(delta.tool_calls);
        }
      } else {
        if (s.promptIds === undefined) s.promptIds = readIds(c.prompt_token_ids);
        const k = appendIds(c.token_ids, s.ids);
        appendLogprobs(route, entries, k, s.logprobs);
        s.addText(c.text);
      }
      if (typeof c.finish_reason === "string") s.finishReason = c.finish_reason;
      s.stopSequence ??= stopStringOf(c);
    }
    return forAgent(this.state, this.prepared.asked, data, true);
  }

  captures(_finished: boolean): Capture[] {
    const chat = this.state.route === "chat";
    return this.choices.all().map((s) => {
      const c = s.capture();
      if (chat) {
        // A stream cut before SGLang's sglext chunk has no ids at all: the capture says so (empty, abort).
        c.outputIds = readIds(this.outputIds?.[s.index]) ?? new Int32Array(0);
        if (this.inputIds !== undefined) c.promptIds = this.inputIds;
        if (c.logprobs !== undefined) {
          if (c.outputIds.length === 0) delete c.logprobs;
          else c.logprobs = alignedLogprobs(c.logprobs, c.outputIds.length);
        }
      }
      // SGLang sends one routing per request: the first choice's.
      if (s.index === 0) routedExpertsOf(c, this.routed, this.state, this.layout);
      return c;
    });
  }
}

/** The SGLang adapter; see SglangAdapterOptions. */
/** The capture of one choice of a whole answer (ids from sglext on chat, else the choice's own). */
function wholeCapture(
  c: Json,
  state: SglangState,
  sglext: Json,
  weightVersion: number | undefined,
  layout: SglangAdapterOptions["routedExperts"],
): Capture {
  const route = state.route;
  const inputIds = readIds(sglext.input_ids);
  const outputIds = Array.isArray(sglext.output_ids) ? sglext.output_ids : [];
  const index = typeof c.index === "number" ? c.index : 0;
  const ids =
    (route === "chat" ? readIds(outputIds[index]) : undefined) ?? readIds(c.token_ids) ?? new Int32Array(0);
  const capture: Capture = {
    choiceIndex: index,
    outputIds: ids,
    finishReason: typeof c.finish_reason === "string" ? c.finish_reason : "abort",
  };
  const stop = stopStringOf(c);
  if (stop !== undefined) capture.stopSequence = stop;
  const prompt = (route === "chat" ? inputIds : undefined) ?? readIds(c.prompt_token_ids);
  if (prompt !== undefined) capture.promptIds = prompt;
  const entries = logprobEntries(route, c.logprobs);
  if (entries !== undefined) {
    const lp = float32Builder();
    if (route === "chat") {
      appendLogprobs(route, entries, entries.length, lp);
      capture.logprobs = alignedLogprobs(lp.take(), ids.length);
    } else {
      // Completions `echo` puts the prompt's logprobs first: the last ones are the sampled tokens'.
      appendLogprobs(route, entries, ids.length, lp);
      capture.logprobs = lp.take();
    }
  }
  if (weightVersion !== undefined) capture.weightVersion = weightVersion;
  textOf(route, c, capture);
  if (index === 0) routedExpertsOf(capture, sglext.routed_experts, state, layout);
  return capture;
}

export function createSglangAdapter(options: SglangAdapterOptions = {}): EngineAdapter {
  const layout = options.routedExperts;
  if (layout !== undefined) {
    for (const [name, v] of [
      ["layers", layout.layers],
      ["topK", layout.topK],
    ] as const) {
      if (!Number.isSafeInteger(v) || v <= 0) {
        throw new Error(`routedExperts.${name} must be a positive integer (the served model's), got ${v}`);
      }
    }
  }
  return {
    name: "sglang",

    async prepare(route, body) {
      const asked = sglangAsked(route, body);
      const upstream: Json = { ...body };
      if (route === "chat") {
        upstream.return_input_ids_in_sglext = true;
        upstream.return_output_ids_in_sglext = true;
        if (!asked.logprobs) upstream.logprobs = true;
      } else {
        upstream.return_token_ids = true;
        if (!asked.logprobs) upstream.logprobs = 0;
      }
      if (layout !== undefined) upstream.return_routed_experts = true;
      const start = body.routed_experts_start_len;
      const state: SglangState = {
        route,
        keepSglext: {
          input_ids: body.return_input_ids_in_sglext === true,
          output_ids: body.return_output_ids_in_sglext === true,
          routed_experts: body.return_routed_experts === true,
        },
        keepChoiceIds: route === "chat" || body.return_token_ids === true,
        routedExpertsStart: typeof start === "number" && start > 0 ? start : 0,
      };
      return { path: PATHS[route], body: upstream, asked, state };
    },

    answer(prepared, json) {
      const state = prepared.state as SglangState;
      const sglext = isRecord(json.sglext) ? json.sglext : {};
      const weightVersion = isRecord(json.metadata)
        ? sglangWeightVersion(json.metadata.weight_version)
        : undefined;
      const choices = Array.isArray(json.choices) ? json.choices.filter(isRecord) : [];
      const captures = choices.map((c) => wholeCapture(c, state, sglext, weightVersion, layout));
      return { captures, forAgent: forAgent(state, prepared.asked, json, false) ?? json };
    },

    stream(prepared) {
      return new SglangStream(prepared, layout);
    },

    renderer: sglangRenderer,
  };
}
