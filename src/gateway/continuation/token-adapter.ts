/**
 * Prompt mode tokens: an engine adapter wrapped so a chat call goes to the engine as token ids. `prepare`
 * makes the prompt ids (plan.ts) and sends them to the engine's completions route through the engine's own
 * adapter, which reports every sampled id and logprob as it does for any completions call; the answer's
 * text is then parsed in the model family's format (parsers/) into the chat answer every API codec
 * translates: content, reasoning, tool calls. A call that needs what only the engine's chat route does
 * (response_format, logprobs for the agent on an engine other than llama.cpp, a forced tool call without a
 * grammar for the format or on SGLang) goes to
 * the chat route as in prompt mode engine, counted.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import type {
  Capture,
  ContinuationRecord,
  EngineAdapter,
  PreparedCall,
  PromptRenderer,
  StreamReader,
  UpstreamJson,
} from "../engines/engine.ts";
import {
  outputParser,
  type OutputParser,
  type ParsedDelta,
  type ParsedOutput,
  type ReasoningParserName,
  type StreamingParser,
  type ToolParserName,
} from "../parsers/parser.ts";
import type { GatewaySession } from "../sessions.ts";
import { historyDigests, seedDigest, settingsKey } from "./history.ts";
import { localRenderer } from "./local-renderer.ts";
import { Continuations } from "./plan.ts";
import { CALL_LAYOUTS, forcedTools, forcesToolCall, toolCallGrammar } from "./tool-grammar.ts";

type Json = Record<string, unknown>;

/** Chat fields the completions route does not take: the prompt is the ids, tools are in them. */
const CHAT_ONLY = [
  "messages",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "chat_template_kwargs",
  "reasoning_effort",
  "max_completion_tokens",
  "logprobs",
  "top_logprobs",
];

/** Text a format's markers are written in, which llama.cpp hides when they are control tokens. */
const MARKERS: Record<string, string[]> = {
  hermes: ["<tool_call>", "</tool_call>"],
  qwen3_coder: ["<tool_call>", "</tool_call>"],
  llama3_json: ["<|python_tag|>"],
  mistral: ["[TOOL_CALLS]", "[ARGS]"],
  openai: ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"],
  think: ["<think>", "</think>"],
};

export interface TokenPromptSettings {
  toolParser: string;
  reasoningParser: string;
  parser: OutputParser;
  /** Renders in the gateway (local-renderer.ts) instead of through the engine's routes. */
  renderer?: PromptRenderer;
}

/** What `prepare` carries to reading the answer of a call sent as ids. */
class TokenCall {
  readonly inner: PreparedCall;
  /** Tool-call ids are `call_<nonce>_<n>`: the same in a stream and in the recorded answer. */
  readonly nonce = randomBytes(6).toString("hex");
  /** The alternatives per token the agent asked for with `logprobs: true`; null: it asked no logprobs. */
  readonly topLogprobs: number | null;
  constructor(inner: PreparedCall, topLogprobs: number | null) {
    this.inner = inner;
    this.topLogprobs = topLogprobs;
  }

  /**
   * The agent's logprobs of a choice: llama.cpp's completions route writes the chat route's shape
   * (`{content: [{id, token, logprob, bytes, top_logprobs}]}`), cut to the alternatives asked for; the
   * entries keep every field the chat route writes (`id` too), so an answer reads the same in both modes.
   */
  logprobsOf(choice: Json): Json[] | null {
    if (this.topLogprobs === null) return null;
    const content = (choice.logprobs as { content?: unknown } | null | undefined)?.content;
    if (!Array.isArray(content)) return [];
    const k = this.topLogprobs;
    return content.map((e: Json) => {
      const top = Array.isArray(e.top_logprobs) ? (e.top_logprobs as Json[]) : [];
      return { ...e, top_logprobs: top.slice(0, k) };
    });
  }
}

export class TokenPrompts {
  private readonly inner: EngineAdapter;
  private readonly continuations: Continuations;
  private readonly settings: TokenPromptSettings;
  private readonly metrics: Metrics;
  private readonly markers: string[];

  constructor(inner: EngineAdapter, settings: TokenPromptSettings, metrics: Metrics, logger: Logger) {
    const renderer = settings.renderer ?? inner.renderer;
    if (renderer === undefined) throw new Error(`engine ${inner.name} has no template routes`);
    this.inner = inner;
    this.continuations = new Continuations(renderer);
    this.settings = settings;
    this.metrics = metrics;
    this.markers = [...(MARKERS[settings.toolParser] ?? []), ...(MARKERS[settings.reasoningParser] ?? [])];
    logger.info(
      {
        tool_parser: settings.toolParser,
        reasoning_parser: settings.reasoningParser,
        renderer: settings.renderer !== undefined ? "gateway" : "engine",
      },
      "Prompt mode tokens: a session's calls continue its sampled tokens.",
    );
  }

  /** The adapter the calls of session `s` go through. */
  adapterFor(s: GatewaySession): EngineAdapter {
    const inner = this.inner;
    const unwrap = (p: PreparedCall) => (p.state instanceof TokenCall ? p.state.inner : p);
    return {
      name: inner.name,
      prepare: (route, body, upstream, signal) => this.prepare(s, route, body, upstream, signal),
      answer: (prepared, json) =>
        prepared.state instanceof TokenCall
          ? this.answer(prepared.state, json)
          : inner.answer(prepared, json),
      stream: (prepared) =>
        prepared.state instanceof TokenCall
          ? new TokenStreamReader(
              inner.stream(prepared.state.inner),
              this.settings.parser,
              prepared.state,
              this,
            )
          : inner.stream(prepared),
      ...(inner.complete !== undefined
        ? {
            complete: (prepared, captures, upstream) => inner.complete!(unwrap(prepared), captures, upstream),
          }
        : {}),
      ...(inner.countTokens !== undefined ? { countTokens: inner.countTokens.bind(inner) } : {}),
      ...(inner.renderer !== undefined ? { renderer: inner.renderer } : {}),
    };
  }

  private async prepare(
    s: GatewaySession,
    route: "chat" | "completions",
    body: Json,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<PreparedCall> {
    if (route !== "chat") return this.inner.prepare(route, body, upstream, signal);
    const chatRoute = this.chatRouteNeed(body);
    if (chatRoute !== null) {
      this.metrics.inc("gateway_prompt_modes", "engine");
      this.metrics.inc("gateway_chat_route_calls", chatRoute);
      const messages = Array.isArray(body.messages) ? body.messages : [];
      const digests = historyDigests(seedDigest(body), messages);
      const prepared = await this.inner.prepare(route, body, upstream, signal);
      const continuation: ContinuationRecord = {
        form: "engine",
        promptDigest: digests[messages.length]!,
        messageCount: messages.length,
        settings: settingsKey(body),
      };
      return { ...prepared, continuation };
    }
    const plan = await this.continuations.plan(s, body, upstream, signal);
    this.metrics.inc("gateway_prompt_modes", plan.form);
    if (plan.reason !== undefined) this.metrics.inc("gateway_prompt_renders", plan.reason);
    const completions: Json = { ...body, prompt: Array.from(plan.ids) };
    for (const k of CHAT_ONLY) delete completions[k];
    if (body.max_completion_tokens !== undefined && body.max_tokens === undefined)
      completions.max_tokens = body.max_completion_tokens;
    // The agent's own logprobs (llama.cpp: the chat route's entries, n_probs alternatives each).
    const top =
      body.logprobs === true ? (typeof body.top_logprobs === "number" ? body.top_logprobs : 0) : null;
    if (top !== null) completions.n_probs = Math.max(1, top);
    const grammar = forcesToolCall(body)
      ? toolCallGrammar(forcedTools(body), CALL_LAYOUTS[this.settings.toolParser]!)
      : undefined;
    if (this.inner.name === "llamacpp") {
      // Markers that are control tokens are hidden from llama.cpp's text unless preserved.
      if (this.markers.length > 0) completions.preserved_tokens = this.markers;
      if (grammar !== undefined) completions.grammar = grammar;
    } else if (grammar !== undefined) {
      // vLLM's structured outputs take the same GBNF (xgrammar's EBNF is GBNF) on the completions route.
      completions.structured_outputs = { grammar };
    }
    const inner = await this.inner.prepare("completions", completions, upstream, signal);
    const continuation: ContinuationRecord = {
      form: plan.form,
      promptDigest: plan.promptDigest,
      messageCount: plan.messageCount,
      settings: plan.settings,
      ...(plan.parent !== undefined ? { parent: plan.parent } : {}),
      ...(plan.messagesOffset !== undefined ? { messagesOffset: plan.messagesOffset } : {}),
    };
    return {
      path: inner.path,
      body: inner.body,
      asked: inner.asked,
      promptIds: plan.ids,
      ...(inner.wholeAsStream === true ? { wholeAsStream: true } : {}),
      state: new TokenCall(inner, top),
      continuation,
    };
  }

  /** Why a call must go to the engine's chat route, or null when its ids can go to the completions route. */
  private chatRouteNeed(body: Json): string | null {
    if (body.response_format !== undefined && body.response_format !== null) return "response_format";
    // llama.cpp's completions route writes logprobs in the chat route's shape; others' need translating.
    if (body.logprobs === true && this.inner.name !== "llamacpp") return "logprobs";
    if (forcesToolCall(body)) {
      // A forced call is constrained by a grammar of the format: llama.cpp's `grammar`, vLLM's
      // `structured_outputs.grammar` (both GBNF). SGLang's calls go to its chat route.
      const engine = this.inner.name === "llamacpp" || this.inner.name === "vllm";
      if (!engine || CALL_LAYOUTS[this.settings.toolParser] === undefined) return "tool_choice";
    }
    return null;
  }

  private answer(call: TokenCall, json: Json): { captures: Capture[]; forAgent: Json } {
    const { captures, forAgent } = this.inner.answer(call.inner, json);
    const choices = Array.isArray(forAgent.choices) ? (forAgent.choices as Json[]) : [];
    const chat = choices.map((c) => {
      const index = typeof c.index === "number" ? c.index : 0;
      const parsed = this.settings.parser.parse(typeof c.text === "string" ? c.text : "");
      const toolCalls = chatToolCalls(call.nonce, parsed.toolCalls);
      const capture = captures.find((k) => k.choiceIndex === index);
      if (capture !== undefined) this.applyParsed(capture, parsed, toolCalls);
      const message: Json = {
        role: "assistant",
        content: parsed.content === "" && toolCalls.length > 0 ? null : parsed.content,
      };
      if (parsed.reasoning !== undefined) message.reasoning_content = parsed.reasoning;
      if (toolCalls.length > 0) message.tool_calls = toolCalls;
      const logprobs = call.logprobsOf(c);
      return {
        index,
        message,
        logprobs: logprobs === null ? null : { content: logprobs },
        finish_reason: chatFinish(c.finish_reason, toolCalls.length),
      };
    });
    const { choices: _dropped, object: _object, ...rest } = forAgent;
    return { captures, forAgent: { ...rest, object: "chat.completion", choices: chat } };
  }

  /** The capture records what the agent was given: the parsed content and tool calls. */
  applyParsed(capture: Capture, parsed: ParsedOutput, toolCalls: Json[]): void {
    capture.text = parsed.content;
    if (toolCalls.length > 0) capture.toolCalls = toolCalls;
    else delete capture.toolCalls;
    if (parsed.malformed > 0) {
      capture.malformedToolCalls = parsed.malformed;
      this.metrics.inc("gateway_malformed_tool_calls", "tokens", parsed.malformed);
    }
  }
}

function chatToolCalls(nonce: string, calls: ParsedOutput["toolCalls"], from = 0): Json[] {
  return calls.map((c, i) => ({
    id: `call_${nonce}_${from + i}`,
    type: "function",
    function: { name: c.name, arguments: c.arguments },
  }));
}

/** The chat finish reason: the engine's, `tool_calls` where it stopped after calls it was asked for. */
function chatFinish(finish: unknown, calls: number): unknown {
  return finish === "stop" && calls > 0 ? "tool_calls" : (finish ?? null);
}

/** A completions stream read as a chat stream: each choice's text through the parser, deltas as they come. */
class TokenStreamReader implements StreamReader {
  private readonly inner: StreamReader;
  private readonly parser: OutputParser;
  private readonly call: TokenCall;
  private readonly owner: TokenPrompts;
  private readonly choices = new Map<
    number,
    {
      stream: StreamingParser;
      calls: number;
      text: string;
      started: boolean;
      logprobs: Json[];
      /** Sampled ids not yet given to the agent (it asked `return_token_ids`), as logprobs are held. */
      ids: number[];
    }
  >();
  /** The prompt's ids, for the first chunk the agent gets (it asked `return_token_ids`). */
  private promptIds: unknown[] | undefined;
  private promptSent = false;

  constructor(inner: StreamReader, parser: OutputParser, call: TokenCall, owner: TokenPrompts) {
    this.inner = inner;
    this.parser = parser;
    this.call = call;
    this.owner = owner;
  }

  chunk(data: Json): Json | undefined {
    const out = this.inner.chunk(data);
    if (out === undefined) return undefined;
    const raw = Array.isArray(out.choices) ? (out.choices as Json[]) : [];
    const choices: Json[] = [];
    for (const c of raw) {
      const index = typeof c.index === "number" ? c.index : 0;
      let state = this.choices.get(index);
      if (state === undefined) {
        state = { stream: this.parser.stream(), calls: 0, text: "", started: false, logprobs: [], ids: [] };
        this.choices.set(index, state);
      }
      const text = typeof c.text === "string" ? c.text : "";
      state.text += text;
      // Logprob entries go with the next chunk that says something (a held-back marker holds them too).
      state.logprobs.push(...(this.call.logprobsOf(c) ?? []));
      // Token ids likewise (present only when the agent asked for them: the engine's adapter hides them).
      if (Array.isArray(c.token_ids)) state.ids.push(...(c.token_ids as number[]));
      if (Array.isArray(c.prompt_token_ids)) this.promptIds ??= c.prompt_token_ids;
      const deltas = state.stream.push(text);
      const finish = c.finish_reason ?? null;
      if (finish !== null) deltas.push(...state.stream.end());
      const delta = this.delta(deltas, state);
      // Nothing to say yet (a held-back marker, a hidden control token): no chunk, and the role waits.
      if (Object.keys(delta).length === 0 && finish === null) continue;
      if (!state.started) {
        delta.role = "assistant";
        state.started = true;
      }
      const choice: Json = {
        index,
        delta,
        logprobs: this.call.topLogprobs === null ? null : { content: state.logprobs.splice(0) },
        finish_reason: finish === null ? null : chatFinish(finish, state.calls),
      };
      if (this.call.inner.asked.tokenIds) choice.token_ids = state.ids.splice(0);
      choices.push(choice);
    }
    if (choices.length === 0 && out.usage === undefined) return undefined;
    const { choices: _dropped, object: _object, ...rest } = out;
    const chunk: Json = { ...rest, object: "chat.completion.chunk", choices };
    // Chat writes the prompt's ids once, at the top of the first chunk.
    if (this.call.inner.asked.tokenIds) {
      const now = !this.promptSent && this.promptIds !== undefined && choices.length > 0;
      chunk.prompt_token_ids = now ? this.promptIds : null;
      if (now) this.promptSent = true;
    }
    return chunk;
  }

  private delta(deltas: ParsedDelta[], state: { calls: number }): Json {
    const delta: Json = {};
    let content = "";
    let reasoning = "";
    const calls: Json[] = [];
    for (const d of deltas) {
      if (d.kind === "content" || d.kind === "malformed") content += d.text;
      else if (d.kind === "reasoning") reasoning += d.text;
      else {
        const [call] = chatToolCalls(this.call.nonce, [d.call], state.calls);
        calls.push({ index: state.calls, ...call });
        state.calls++;
      }
    }
    if (reasoning !== "") delta.reasoning_content = reasoning;
    if (content !== "") delta.content = content;
    if (calls.length > 0) delta.tool_calls = calls;
    return delta;
  }

  captures(finished: boolean): Capture[] {
    const captures = this.inner.captures(finished);
    for (const c of captures) {
      const parsed = this.parser.parse(c.text ?? this.choices.get(c.choiceIndex)?.text ?? "");
      this.owner.applyParsed(c, parsed, chatToolCalls(this.call.nonce, parsed.toolCalls));
    }
    return captures;
  }
}

/** The token-prompt adapter of a gateway in prompt mode tokens (config checked: a parser is set). */
export function tokenPrompts(
  config: {
    tool_parser?: ToolParserName | undefined;
    reasoning_parser: ReasoningParserName;
    tokenizer_dir?: string | undefined;
  },
  adapter: EngineAdapter,
  metrics: Metrics,
  logger: Logger,
): TokenPrompts {
  const tool = config.tool_parser ?? "none";
  return new TokenPrompts(
    adapter,
    {
      toolParser: tool,
      reasoningParser: config.reasoning_parser,
      parser: outputParser(tool, config.reasoning_parser),
      ...(config.tokenizer_dir !== undefined ? { renderer: localRenderer(config.tokenizer_dir) } : {}),
    },
    metrics,
    logger,
  );
}
