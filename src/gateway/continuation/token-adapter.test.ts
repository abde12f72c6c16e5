/**
 * token-adapter.ts: TokenPrompts around the real llama.cpp adapter. The upstream answers /apply-template
 * and /tokenize from a ChatML renderer over a deterministic toy tokenizer (one id per UTF-16 code unit,
 * `<|im_start|>` = 1000, `<|im_end|>` = 1001): enough for what is checked here, which is where the call
 * goes, what it sends and how the completions answer becomes a chat answer. The answers are shaped as
 * llama-server writes them (server-task.cpp: to_json_oaicompat, partial and final; see
 * engines/llamacpp.test.ts).
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { createLogger } from "../../core/logger.ts";
import { Metrics } from "../../core/metrics.ts";
import type { Capture, PreparedCall, UpstreamJson } from "../engines/engine.ts";
import { LlamaCppAdapter } from "../engines/llamacpp.ts";
import { outputParser } from "../parsers/parser.ts";
import { GatewaySession } from "../sessions.ts";
import { historyDigests, seedDigest, settingsKey, withAnswer } from "./history.ts";
import { tokenPrompts } from "./token-adapter.ts";
import { CALL_LAYOUTS, toolCallGrammar } from "./tool-grammar.ts";
import { chatml, END, NO_SETTINGS, toyPiece, toyTokenize } from "../../../test/helpers/toy-chatml.ts";

const tokenize = toyTokenize;
const pieceOf = toyPiece;

/** llama-server's /apply-template and /tokenize (text, or ids with_pieces) over the toy ChatML renderer. */
function fakeUpstream() {
  const calls: Array<[string, unknown]> = [];
  const upstream: UpstreamJson = async (path, body) => {
    calls.push([path, structuredClone(body)]);
    const b = body as Record<string, unknown>;
    if (path === "/apply-template") return { prompt: chatml(b) };
    if (path === "/tokenize" && b.with_pieces === true)
      return { tokens: (b.content as number[]).map((id) => ({ id, piece: pieceOf(id) })) };
    if (path === "/tokenize") return { tokens: tokenize(b.content as string) };
    throw new Error(`unexpected upstream call ${path}`);
  };
  return { upstream, calls };
}

const CALC_PARAMS = {
  type: "object",
  properties: { a: { type: "integer" }, b: { type: "integer" } },
  required: ["a"],
};
const TOOLS = [{ type: "function", function: { name: "calc", parameters: CALC_PARAMS } }];
const USER = { role: "user", content: "add" };
const PROMPT = tokenize(chatml({ messages: [USER] }));
const RESPONSE_FIELDS = ["tokens", "index", "stop_type", "stopping_word"];

function setup(options: { streams?: "whole" | "relay"; toolParser?: "hermes" | "qwen3_coder" } = {}) {
  const metrics = new Metrics();
  const logger = createLogger({ level: "silent", pretty: false });
  const tokens = tokenPrompts(
    { tool_parser: options.toolParser ?? "hermes", reasoning_parser: "none" },
    new LlamaCppAdapter(options.streams !== undefined ? { streams: options.streams } : {}),
    metrics,
    logger,
  );
  const s = new GatewaySession({ uid: "u", sessionId: "s1" }, 8);
  return { metrics, adapter: tokens.adapterFor(s), s, ...fakeUpstream() };
}

const nonceOf = (p: PreparedCall) => (p.state as { nonce: string }).nonce;

/** One logprob entry (n_probs 1). */
function entry(id: number, logprob: number) {
  const token = pieceOf(id);
  const bytes = Array.from(Buffer.from(token));
  return { id, token, bytes, logprob, top_logprobs: [{ id, token, bytes, logprob }] };
}

/** A whole /v1/completions answer with the gateway's additions (verbose tokens, n_probs entries). */
function completionsAnswer(text: string, ids: number[], promptLength: number, finish = "stop") {
  return {
    choices: [
      {
        text,
        index: 0,
        logprobs: { content: ids.map((id, i) => entry(id, -(i + 1) / 8)) },
        finish_reason: finish,
      },
    ],
    created: 1764000000,
    model: "tiny.gguf",
    system_fingerprint: "b1-0c1e570",
    object: "text_completion",
    usage: {
      completion_tokens: ids.length,
      prompt_tokens: promptLength,
      total_tokens: ids.length + promptLength,
      prompt_tokens_details: { cached_tokens: 0 },
    },
    id: "chatcmpl-x",
    __verbose: { index: 0, tokens: ids, stop_type: "eos", stopping_word: "" },
    timings: { cache_n: 0, prompt_n: promptLength, predicted_n: ids.length },
  };
}

const CALL_TEXT = '<tool_call>{"name":"calc","arguments":{"a":1}}</tool_call>';

describe("TokenPrompts: prepare", () => {
  it("sends a chat call to the completions route as ids, without the chat fields", async () => {
    const { adapter, upstream, calls, metrics } = setup();
    const body = {
      model: "m",
      messages: [USER],
      tools: TOOLS,
      tool_choice: "auto",
      parallel_tool_calls: false,
      chat_template_kwargs: { enable_thinking: false },
      max_completion_tokens: 50,
      top_logprobs: 2,
      logprobs: false,
      temperature: 0.5,
    };
    const p = await adapter.prepare("chat", body, upstream);
    assert.equal(p.path, "/v1/completions");
    assert.deepEqual(p.body, {
      model: "m",
      temperature: 0.5,
      prompt: PROMPT,
      max_tokens: 50,
      preserved_tokens: ["<tool_call>", "</tool_call>"],
      n_probs: 1,
      return_tokens: true,
      verbose: true,
      response_fields: RESPONSE_FIELDS,
    });
    for (const k of ["messages", "tools", "tool_choice", "grammar"]) assert.equal(k in p.body, false, k);
    assert.deepEqual(p.promptIds, Int32Array.from(PROMPT));
    assert.deepEqual(p.asked, { logprobs: false, topLogprobs: 0, tokenIds: false });
    assert.deepEqual(p.continuation, {
      form: "rendered",
      promptDigest: historyDigests(seedDigest(body), [USER])[1],
      settings: settingsKey(body),
      messageCount: 1,
    });
    // The first call is rendered by the engine's template: /apply-template, then /tokenize.
    assert.deepEqual(calls, [
      ["/apply-template", body],
      ["/tokenize", { content: chatml(body), add_special: true, parse_special: true }],
    ]);
    assert.equal(metrics.get("gateway_prompt_modes", "rendered"), 1);
    assert.equal(metrics.get("gateway_prompt_renders", "first_call"), 1);
    assert.equal(metrics.get("gateway_chat_route_calls", "response_format"), 0);
  });

  it("keeps the agent's max_tokens over max_completion_tokens", async () => {
    const { adapter, upstream } = setup();
    const p = await adapter.prepare(
      "chat",
      { messages: [USER], max_tokens: 7, max_completion_tokens: 50 },
      upstream,
    );
    assert.equal(p.body.max_tokens, 7);
    assert.equal("max_completion_tokens" in p.body, false);
  });

  it("holds a forced call with the hermes grammar of the tool it names", async () => {
    const { adapter, upstream } = setup();
    const tools = [
      ...TOOLS,
      { type: "function", function: { name: "other", parameters: { type: "object" } } },
    ];
    const required = await adapter.prepare(
      "chat",
      { messages: [USER], tools, tool_choice: "required" },
      upstream,
    );
    assert.equal(required.path, "/v1/completions");
    assert.equal(
      required.body.grammar,
      toolCallGrammar(
        [
          { name: "calc", parameters: CALC_PARAMS },
          { name: "other", parameters: { type: "object" } },
        ],
        CALL_LAYOUTS.hermes!,
      ),
    );
    assert.equal("tool_choice" in required.body, false);
    const named = await adapter.prepare(
      "chat",
      { messages: [USER], tools, tool_choice: { type: "function", function: { name: "calc" } } },
      upstream,
    );
    assert.equal(
      named.body.grammar,
      toolCallGrammar([{ name: "calc", parameters: CALC_PARAMS }], CALL_LAYOUTS.hermes!),
    );
    assert.match(named.body.grammar as string, /^root ::= r\d+\n/);
  });

  it("sends response_format and a forced call without a grammar to the chat route (form engine)", async () => {
    const cases: Array<[Record<string, unknown>, string, "hermes" | "qwen3_coder"]> = [
      [{ response_format: { type: "json_object" } }, "response_format", "hermes"],
      [{ tools: TOOLS, tool_choice: "required" }, "tool_choice", "qwen3_coder"],
    ];
    for (const [extra, reason, toolParser] of cases) {
      const { adapter, upstream, metrics } = setup({ toolParser });
      const body = { messages: [USER], ...extra };
      const p = await adapter.prepare("chat", body, upstream);
      assert.equal(p.path, "/v1/chat/completions", reason);
      assert.deepEqual(p.body.messages, [USER]);
      assert.equal("prompt" in p.body, false);
      assert.equal("grammar" in p.body, false);
      assert.equal("preserved_tokens" in p.body, false);
      assert.deepEqual(p.continuation, {
        form: "engine",
        promptDigest: historyDigests(seedDigest(body), [USER])[1],
        settings: NO_SETTINGS,
        messageCount: 1,
      });
      assert.equal(metrics.get("gateway_prompt_modes", "engine"), 1);
      assert.equal(metrics.get("gateway_chat_route_calls", reason), 1);
      assert.equal(metrics.get("gateway_prompt_modes", "rendered"), 0);
      // The chat route's own answer is read by the engine's adapter as it is.
      const { forAgent } = adapter.answer(p, {
        choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "{}" } }],
        object: "chat.completion",
      });
      assert.equal(forAgent.object, "chat.completion");
    }
  });

  it("gives the agent the logprobs it asked for, in the chat shape, cut to its top_logprobs", async () => {
    const { adapter, upstream } = setup();
    const p = await adapter.prepare("chat", { messages: [USER], logprobs: true, top_logprobs: 0 }, upstream);
    assert.equal(p.path, "/v1/completions");
    assert.equal(p.body.n_probs, 1, "at least one alternative makes llama.cpp write entries");
    assert.equal("logprobs" in p.body, false);
    const ids = [...tokenize("Hi"), END];
    const { forAgent, captures } = adapter.answer(p, completionsAnswer("Hi", ids, PROMPT.length));
    const choice = (forAgent.choices as Array<Record<string, unknown>>)[0]!;
    // Every field the chat route writes (the id too), the alternatives cut to those asked for.
    const expected = ids.map((id, i) => ({ ...entry(id, -(i + 1) / 8), top_logprobs: [] }));
    assert.deepEqual(choice.logprobs, { content: expected });
    assert.deepEqual(
      [...captures[0]!.logprobs!],
      ids.map((_, i) => Math.fround(-(i + 1) / 8)),
    );
    // Without logprobs asked, none: the entries the gateway asked for are its own.
    const q = await adapter.prepare("chat", { messages: [USER] }, upstream);
    const other = adapter.answer(q, completionsAnswer("Hi", ids, PROMPT.length)).forAgent;
    assert.equal((other.choices as Array<Record<string, unknown>>)[0]!.logprobs, null);
  });

  it("passes a completions call through untouched", async () => {
    const { adapter, upstream, metrics } = setup();
    const p = await adapter.prepare("completions", { prompt: [1, 2], max_tokens: 3 }, upstream);
    assert.equal(p.path, "/v1/completions");
    assert.equal(p.continuation, undefined);
    assert.deepEqual(p.body.prompt, [1, 2]);
    assert.equal(metrics.total("gateway_prompt_modes"), 0);
  });
});

describe("TokenPrompts: whole answers", () => {
  it("turns a hermes call into a chat.completion with tool_calls, and records it in the capture", async () => {
    const { adapter, upstream, metrics } = setup();
    const p = await adapter.prepare("chat", { messages: [USER], tools: TOOLS }, upstream);
    const ids = [...tokenize(CALL_TEXT), END];
    const json = completionsAnswer(CALL_TEXT, ids, PROMPT.length);
    const before = structuredClone(json);
    const { captures, forAgent } = adapter.answer(p, json);
    assert.deepEqual(json, before, "the engine's answer is not changed in place");
    const call = {
      id: `call_${nonceOf(p)}_0`,
      type: "function",
      function: { name: "calc", arguments: '{"a":1}' },
    };
    assert.match(call.id, /^call_[0-9a-f]{12}_0$/);
    assert.deepEqual(forAgent, {
      created: 1764000000,
      model: "tiny.gguf",
      system_fingerprint: "b1-0c1e570",
      usage: json.usage,
      id: "chatcmpl-x",
      timings: json.timings,
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: null, tool_calls: [call] },
          logprobs: null,
          finish_reason: "tool_calls",
        },
      ],
    });
    assert.equal(captures.length, 1);
    const c = captures[0]!;
    assert.deepEqual(c.outputIds, Int32Array.from(ids));
    assert.deepEqual(
      Array.from(c.logprobs!),
      ids.map((_, i) => Math.fround(-(i + 1) / 8)),
    );
    assert.equal(c.finishReason, "stop");
    assert.deepEqual(c.promptIds, Int32Array.from(PROMPT));
    assert.equal(c.text, "");
    assert.deepEqual(c.toolCalls, [call]);
    assert.equal(c.malformedToolCalls, undefined);
    assert.equal(metrics.get("gateway_malformed_tool_calls", "tokens"), 0);
  });

  it("keeps text around a call as content, and plain text as content with finish stop", async () => {
    const { adapter, upstream } = setup();
    const p = await adapter.prepare("chat", { messages: [USER], tools: TOOLS }, upstream);
    const text = `Sure.\n${CALL_TEXT}\n`;
    const { captures, forAgent } = adapter.answer(p, completionsAnswer(text, [...tokenize(text), END], 1));
    const choice = (forAgent.choices as Array<Record<string, unknown>>)[0]!;
    assert.deepEqual(choice.message, {
      role: "assistant",
      content: "Sure.\n",
      tool_calls: [
        { id: `call_${nonceOf(p)}_0`, type: "function", function: { name: "calc", arguments: '{"a":1}' } },
      ],
    });
    assert.equal(captures[0]!.text, "Sure.\n");
    assert.equal(captures[0]!.promptIds, undefined, "the engine counted another prompt length");

    const plain = adapter.answer(p, completionsAnswer("Hi", [72, 105], PROMPT.length, "length"));
    assert.deepEqual((plain.forAgent.choices as unknown[])[0], {
      index: 0,
      message: { role: "assistant", content: "Hi" },
      logprobs: null,
      finish_reason: "length",
    });
    assert.equal(plain.captures[0]!.toolCalls, undefined);
    assert.equal(plain.captures[0]!.text, "Hi");
  });

  it("gives malformed tool JSON to the agent as content and counts it", async () => {
    const { adapter, upstream, metrics } = setup();
    const p = await adapter.prepare("chat", { messages: [USER], tools: TOOLS }, upstream);
    const bad = '<tool_call>{"name":"calc","arguments":{"a":1}</tool_call>';
    const { captures, forAgent } = adapter.answer(
      p,
      completionsAnswer(bad, [...tokenize(bad), END], PROMPT.length),
    );
    assert.deepEqual((forAgent.choices as unknown[])[0], {
      index: 0,
      message: { role: "assistant", content: bad },
      logprobs: null,
      finish_reason: "stop",
    });
    assert.equal(captures[0]!.text, bad);
    assert.equal(captures[0]!.toolCalls, undefined);
    assert.equal(captures[0]!.malformedToolCalls, 1);
    assert.equal(metrics.get("gateway_malformed_tool_calls", "tokens"), 1);
  });

  it("continues the session's branch on the next call: its tokens, then the tool result rendered", async () => {
    const { adapter, upstream, calls, s, metrics } = setup();
    const body1 = { messages: [USER], tools: TOOLS };
    const p1 = await adapter.prepare("chat", body1, upstream);
    const output = [...tokenize(CALL_TEXT), END];
    const { captures, forAgent } = adapter.answer(p1, completionsAnswer(CALL_TEXT, output, PROMPT.length));
    const c = captures[0]!;
    // What call-events.ts records for the call.
    s.addTip("c1", p1.promptIds!, c.outputIds, null, {
      digest: withAnswer(p1.continuation!.promptDigest, c.text, c.toolCalls),
      count: p1.continuation!.messageCount + 1,
      promptDigest: p1.continuation!.promptDigest,
    });
    // The agent sends the answer back as it got it, then the tool's result.
    const message = (forAgent.choices as Array<{ message: Record<string, unknown> }>)[0]!.message;
    const body2 = {
      messages: [USER, message, { role: "tool", tool_call_id: "x", content: "1" }],
      tools: TOOLS,
    };
    calls.length = 0;
    const p2 = await adapter.prepare("chat", body2, upstream);
    const delta = tokenize("\n<|im_start|>tool\n1<|im_end|>\n<|im_start|>assistant\n");
    assert.deepEqual(p2.body.prompt, [...PROMPT, ...output, ...delta]);
    assert.deepEqual(p2.continuation, {
      form: "continued",
      promptDigest: historyDigests(seedDigest(body2), body2.messages)[3],
      settings: NO_SETTINGS,
      messageCount: 3,
      parent: "c1",
      messagesOffset: 2,
    });
    assert.deepEqual(
      calls.map(([path]) => path),
      ["/apply-template", "/tokenize"],
      "the stand-in render, the continuation's ids",
    );
    assert.deepEqual(calls[1], [
      "/tokenize",
      {
        content: "<|im_end|>\n<|im_start|>tool\n1<|im_end|>\n<|im_start|>assistant\n",
        add_special: false,
        parse_special: true,
      },
    ]);
    assert.equal(metrics.get("gateway_prompt_modes", "continued"), 1);
  });
});

/** A /v1/completions stream chunk (partial: one token, timings_per_token; final: usage and timings). */
function partial(text: string, id: number, predicted: number) {
  return {
    choices: [{ text, index: 0, logprobs: { content: [entry(id, -predicted / 16)] }, finish_reason: null }],
    created: 1,
    model: "tiny.gguf",
    system_fingerprint: "b1",
    object: "text_completion",
    id: "cmpl-s",
    timings: { cache_n: 0, prompt_n: PROMPT.length, predicted_n: predicted },
  };
}
function final(predicted: number) {
  return {
    choices: [{ text: "", index: 0, logprobs: null, finish_reason: "stop" }],
    created: 1,
    model: "tiny.gguf",
    system_fingerprint: "b1",
    object: "text_completion",
    usage: {
      completion_tokens: predicted,
      prompt_tokens: PROMPT.length,
      total_tokens: predicted + PROMPT.length,
    },
    id: "cmpl-s",
    timings: { cache_n: 0, prompt_n: PROMPT.length, predicted_n: predicted },
  };
}

describe("TokenPrompts: streams (streams: relay)", () => {
  it("turns completions chunks into chat chunks: role first, content deltas, one whole tool call", async () => {
    const { adapter, upstream } = setup({ streams: "relay" });
    const p = await adapter.prepare("chat", { messages: [USER], tools: TOOLS, stream: true }, upstream);
    assert.equal(p.path, "/v1/completions");
    assert.equal(p.body.stream, true);
    assert.equal(p.body.timings_per_token, true);
    assert.equal(p.wholeAsStream, undefined);
    const text = `Ok.${CALL_TEXT}`;
    const ids = [...tokenize(text), END];
    const reader = adapter.stream(p);
    const chunks = [
      ...ids.map((id, i) => partial(id === END ? "" : pieceOf(id), id, i + 1)),
      final(ids.length),
    ];
    const out = chunks.map((c) => reader.chunk(structuredClone(c)));
    const sent = out.filter((c) => c !== undefined);
    for (const c of sent) {
      assert.equal(c.object, "chat.completion.chunk");
      assert.equal(c.id, "cmpl-s");
    }
    const deltas = sent.map((c) => (c.choices as Array<{ delta: Record<string, unknown> }>)[0]!.delta);
    assert.deepEqual(deltas[0], { role: "assistant", content: "O" });
    assert.equal(deltas.filter((d) => d.role !== undefined).length, 1, "the role once, first");
    assert.equal(deltas.map((d) => d.content ?? "").join(""), "Ok.");
    const toolDeltas = deltas.filter((d) => d.tool_calls !== undefined);
    const call = {
      id: `call_${nonceOf(p)}_0`,
      type: "function",
      function: { name: "calc", arguments: '{"a":1}' },
    };
    assert.deepEqual(toolDeltas, [{ tool_calls: [{ index: 0, ...call }] }]);
    // The call is given whole when its closing tag is complete: in the chunk of the last ">".
    // Chunks with nothing to give (the call's text being held) are not sent at all.
    const at = out.findIndex(
      (c) => c !== undefined && (c.choices as Array<{ delta: Record<string, unknown> }>)[0]!.delta.tool_calls,
    );
    assert.equal(at, tokenize(text).length - 1);
    assert.ok(sent.length < out.length);
    const finishes = sent.map((c) => (c.choices as Array<{ finish_reason: unknown }>)[0]!.finish_reason);
    assert.deepEqual(finishes.slice(0, -1), Array(finishes.length - 1).fill(null));
    assert.equal(finishes.at(-1), "tool_calls");
    // Partial chunks lose the timings the gateway asked for; the last keeps usage and timings.
    for (const c of sent.slice(0, -1)) assert.equal("timings" in c, false);
    assert.deepEqual(sent.at(-1)!.usage, final(ids.length).usage);
    for (const c of sent)
      assert.equal(
        (c.choices as Array<{ logprobs: unknown }>)[0]!.logprobs,
        null,
        "no logprob entries for the agent",
      );

    const whole = outputParser("hermes", "none").parse(text);
    const [capture] = reader.captures(true) as [Capture];
    assert.deepEqual(capture.outputIds, Int32Array.from(ids));
    assert.equal(capture.missingIds, undefined);
    assert.deepEqual(
      Array.from(capture.logprobs!),
      ids.map((_, i) => Math.fround(-(i + 1) / 16)),
    );
    assert.equal(capture.finishReason, "stop");
    assert.deepEqual(capture.promptIds, Int32Array.from(PROMPT));
    assert.equal(capture.text, whole.content);
    assert.equal(capture.text, "Ok.");
    assert.deepEqual(capture.toolCalls, [call]);
    assert.deepEqual(
      capture.toolCalls,
      whole.toolCalls.map((t, i) => ({ id: `call_${nonceOf(p)}_${i}`, type: "function", function: t })),
    );
    // The same answer read whole gives the same capture text and calls.
    const fromWhole = adapter.answer(
      await adapter.prepare("chat", { messages: [USER], tools: TOOLS }, upstream),
      completionsAnswer(text, ids, PROMPT.length),
    );
    assert.equal(fromWhole.captures[0]!.text, capture.text);
  });

  it("reads a plain text stream as content deltas with finish stop", async () => {
    const { adapter, upstream } = setup({ streams: "relay" });
    const p = await adapter.prepare("chat", { messages: [USER], stream: true }, upstream);
    const reader = adapter.stream(p);
    const ids = [...tokenize("Hi <b>"), END];
    const out = [...ids.map((id, i) => partial(id === END ? "" : pieceOf(id), id, i + 1)), final(ids.length)]
      .map((c) => reader.chunk(c))
      .filter((c) => c !== undefined);
    const deltas = out.map((c) => (c.choices as Array<{ delta: Record<string, unknown> }>)[0]!.delta);
    assert.equal(deltas.map((d) => d.content ?? "").join(""), "Hi <b>");
    assert.equal(deltas[0]!.role, "assistant");
    assert.equal((out.at(-1)!.choices as Array<{ finish_reason: unknown }>)[0]!.finish_reason, "stop");
    const [c] = reader.captures(true);
    assert.equal(c!.text, "Hi <b>");
    assert.equal(c!.toolCalls, undefined);
  });

  it("gives the role even when the first chunk has no text (an answer that is only the end of turn)", async () => {
    const { adapter, upstream } = setup({ streams: "relay" });
    const p = await adapter.prepare("chat", { messages: [USER], stream: true }, upstream);
    const reader = adapter.stream(p);
    const out = [partial("", END, 1), final(1)].map((c) => reader.chunk(c)).filter((c) => c !== undefined);
    const deltas = out.map((c) => (c.choices as Array<{ delta: Record<string, unknown> }>)[0]!.delta);
    assert.equal(deltas[0]?.role, "assistant");
  });
});
