/**
 * The llama.cpp adapter against answers shaped as llama-server builds them (tools/server/server-task.cpp of
 * llama-cpp-python 0.3.36's vendor/llama.cpp; the integration test, test/llamacpp.test.ts, runs the real
 * server). Token ids are the tiny test model's: a byte's token id is the byte's value (scripts/tiny_llm.py),
 * 460 is `<|im_end|>`.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { Capture, UpstreamJson } from "./engine.ts";
import { LlamaCppAdapter } from "./llamacpp.ts";
import { placeByPieces, placeEntries, validUtf8Length } from "./llamacpp-read.ts";

type Json = Record<string, unknown>;

const EOS = 460;

/** An upstream that answers /apply-template and /tokenize from tables and records what it was asked. */
function fakeUpstream(answers: Record<string, unknown>): {
  upstream: UpstreamJson;
  calls: Array<[string, unknown]>;
} {
  const calls: Array<[string, unknown]> = [];
  const upstream: UpstreamJson = async (path, body) => {
    calls.push([path, structuredClone(body)]);
    if (!(path in answers)) throw new Error(`unexpected upstream call ${path}`);
    return answers[path];
  };
  return { upstream, calls };
}

const PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
const PROMPT_IDS = [459, 117, 115, 101, 114, 10, 104, 105, EOS, 10, 459, 97, 10];

async function prepared(
  body: Record<string, unknown>,
  route: "chat" | "completions" = "chat",
  streams: "whole" | "relay" = "whole",
) {
  const { upstream, calls } = fakeUpstream({
    "/apply-template": { prompt: PROMPT },
    "/tokenize": { tokens: PROMPT_IDS },
  });
  const call = await new LlamaCppAdapter({ streams }).prepare(route, body, upstream);
  return { call, calls, upstream };
}

/** One logprob entry as probs_vector_to_json writes it (n_probs 1: one alternative). */
function entry(id: number, logprob: number, bytes: number[]) {
  const token = Buffer.from(bytes).toString("utf8");
  return { id, token, bytes, logprob, top_logprobs: [{ id, token, bytes, logprob }] };
}

/** A whole chat answer as to_json_oaicompat_chat builds it, with the gateway's additions. */
function chatAnswer(ids: number[], entries: unknown[], extra: Record<string, unknown> = {}) {
  return {
    choices: [
      {
        finish_reason: "stop",
        index: 0,
        message: { role: "assistant", content: "H中!" },
        logprobs: { content: entries },
      },
    ],
    created: 1764000000,
    model: "tiny.gguf",
    system_fingerprint: "b1-0c1e570",
    object: "chat.completion",
    usage: {
      completion_tokens: ids.length,
      prompt_tokens: PROMPT_IDS.length,
      total_tokens: ids.length + PROMPT_IDS.length,
      prompt_tokens_details: { cached_tokens: 0 },
    },
    id: "chatcmpl-x",
    __verbose: { index: 0, tokens: ids },
    timings: { cache_n: 0, prompt_n: PROMPT_IDS.length, predicted_n: ids.length },
    ...extra,
  };
}

describe("llama.cpp adapter: prepare", () => {
  it("adds n_probs, return_tokens, verbose and response_fields to a whole chat call and tokenizes its rendered prompt", async () => {
    const body = { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 8 };
    const { call, calls } = await prepared(body);
    assert.equal(call.path, "/v1/chat/completions");
    assert.deepEqual(call.body, {
      ...body,
      n_probs: 1,
      return_tokens: true,
      verbose: true,
      response_fields: ["tokens", "index", "stop_type", "stopping_word"],
    });
    assert.deepEqual(body, { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 8 });
    assert.deepEqual(call.asked, { logprobs: false, topLogprobs: 0, tokenIds: false });
    assert.deepEqual(calls, [
      ["/apply-template", body],
      ["/tokenize", { content: PROMPT, add_special: true, parse_special: true }],
    ]);
  });

  it("sends a streamed call upstream whole by default, for every sampled id, and says so", async () => {
    const body = {
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
    };
    const { call } = await prepared(body);
    assert.deepEqual(call.body, {
      messages: body.messages,
      n_probs: 1,
      return_tokens: true,
      verbose: true,
      response_fields: ["tokens", "index", "stop_type", "stopping_word"],
    });
    assert.equal(call.wholeAsStream, true);
  });

  it("relays a stream (streams: relay) asking n_probs and timings_per_token only (a stream's final result has no ids)", async () => {
    const body = { messages: [{ role: "user", content: "hi" }], stream: true, tools: [] };
    const { call } = await prepared(body, "chat", "relay");
    assert.deepEqual(call.body, { ...body, n_probs: 1, timings_per_token: true });
    assert.equal(call.wholeAsStream, undefined);
  });

  it("leaves the agent's own logprobs request alone (llama.cpp then sends 20 alternatives, which are cut)", async () => {
    const body = { messages: [{ role: "user", content: "hi" }], logprobs: true };
    const { call } = await prepared(body);
    assert.deepEqual(call.body, {
      ...body,
      return_tokens: true,
      verbose: true,
      response_fields: ["tokens", "index", "stop_type", "stopping_word"],
    });
    // logprobs alone asks no alternatives (OpenAI's meaning): the 20 llama-server writes are cut from the answer.
    assert.deepEqual(call.asked, { logprobs: true, topLogprobs: 0, tokenIds: false });
  });

  it("uses a completions prompt of token ids as it is, with no round trip", async () => {
    const { upstream, calls } = fakeUpstream({});
    const call = await new LlamaCppAdapter().prepare(
      "completions",
      { prompt: [1, 2, 3], max_tokens: 4 },
      upstream,
    );
    assert.equal(call.path, "/v1/completions");
    assert.deepEqual(calls, []);
    const { captures } = new LlamaCppAdapter().answer(call, {
      choices: [
        { text: "a", index: 0, logprobs: { content: [entry(97, -1.5, [97])] }, finish_reason: "length" },
      ],
      usage: { completion_tokens: 1, prompt_tokens: 3, total_tokens: 4 },
      __verbose: { index: 0, tokens: [97] },
    });
    assert.deepEqual(captures[0]!.promptIds, Int32Array.of(1, 2, 3));
  });
});

describe("llama.cpp adapter: whole answers", () => {
  it("captures every sampled id, NaN where a token ended inside a UTF-8 character, and strips what the gateway added", async () => {
    // "H", then 中 (E4 B8 AD) as three byte tokens, "!", end of turn: the server writes no entry for E4 and
    // B8 (the text ends inside 中 after them), so 6 tokens have 4 entries.
    const ids = [72, 0xe4, 0xb8, 0xad, 33, EOS];
    const entries = [
      entry(72, -5.1, [72]),
      entry(0xad, -6.2, [0xe4, 0xb8, 0xad]),
      entry(33, -4.4, [33]),
      entry(EOS, -7.25, []),
    ];
    const { call } = await prepared({ messages: [{ role: "user", content: "hi" }] });
    const json = chatAnswer(ids, entries);
    const before = structuredClone(json);
    const { captures, forAgent } = new LlamaCppAdapter().answer(call, json);
    assert.deepEqual(json, before, "the engine's answer is not changed in place");
    assert.equal(captures.length, 1);
    const c = captures[0]!;
    assert.deepEqual(c.outputIds, Int32Array.from(ids));
    assert.equal(c.outputIds.length, json.usage.completion_tokens);
    assert.deepEqual(Array.from(c.logprobs!), [
      Math.fround(-5.1),
      Number.NaN,
      Number.NaN,
      Math.fround(-6.2),
      Math.fround(-4.4),
      -7.25,
    ]);
    assert.equal(c.finishReason, "stop");
    assert.equal(c.text, "H中!");
    assert.deepEqual(c.promptIds, Int32Array.from(PROMPT_IDS));
    assert.equal(c.missingIds, undefined);
    const expected: Record<string, unknown> = structuredClone(before);
    delete expected.__verbose;
    delete (expected.choices as Array<Record<string, unknown>>)[0]!.logprobs;
    assert.deepEqual(forAgent, expected);
    assert.deepEqual(Object.keys(forAgent), Object.keys(expected), "keys keep the engine's order");
  });

  it("keeps logprobs and __verbose the agent asked for", async () => {
    const { call } = await prepared({
      messages: [],
      logprobs: true,
      top_logprobs: 1,
      verbose: true,
      return_tokens: true,
    });
    const json = chatAnswer([72, EOS], [entry(72, -1, [72]), entry(EOS, -2, [])]);
    const { forAgent } = new LlamaCppAdapter().answer(call, json);
    assert.deepEqual(forAgent, json);
  });

  it("cuts the alternatives of logprobs asked without top_logprobs (OpenAI writes top_logprobs: [])", async () => {
    const { call } = await prepared({ messages: [], logprobs: true });
    const json = chatAnswer([72, EOS], [entry(72, -1, [72]), entry(EOS, -2, [])]);
    const { captures, forAgent } = new LlamaCppAdapter().answer(call, json);
    const content = ((forAgent.choices as Json[])[0]!.logprobs as Json).content as Json[];
    assert.deepEqual(
      content.map((e) => [e.id, e.logprob, e.top_logprobs]),
      [
        [72, -1, []],
        [EOS, -2, []],
      ],
    );
    assert.deepEqual([...captures[0]!.outputIds], [72, EOS]);
  });

  it("empties __verbose.tokens again when the agent asked __verbose but not return_tokens", async () => {
    const { call } = await prepared({ messages: [], verbose: true });
    assert.deepEqual(call.body, { messages: [], verbose: true, n_probs: 1, return_tokens: true });
    const json = chatAnswer([72, EOS], [entry(72, -1, [72]), entry(EOS, -2, [])], {
      __verbose: { index: 0, content: "H", tokens: [72, EOS], stop: true },
    });
    const { captures, forAgent } = new LlamaCppAdapter().answer(call, json);
    assert.deepEqual(captures[0]!.outputIds, Int32Array.of(72, EOS));
    assert.deepEqual(forAgent.__verbose, { index: 0, content: "H", tokens: [], stop: true });
    assert.equal("logprobs" in (forAgent.choices as Array<Record<string, unknown>>)[0]!, false);
  });

  it("takes no prompt ids when the engine counted a different prompt", async () => {
    const { call } = await prepared({ messages: [] });
    const json = chatAnswer([72], [entry(72, -1, [72])]);
    json.usage.prompt_tokens = PROMPT_IDS.length + 1;
    const { captures } = new LlamaCppAdapter().answer(call, json);
    assert.equal(captures[0]!.promptIds, undefined);
  });

  it("places an entry on a repeated byte with the tokens' bytes (丸 is E4 B8 B8: which B8 completed it?)", async () => {
    const ids = [0xe4, 0xb8, 0xb8, EOS];
    const entries = [entry(0xb8, -3.5, [0xe4, 0xb8, 0xb8]), entry(EOS, -2.5, [])];
    const adapter = new LlamaCppAdapter();
    const { call } = await prepared({ messages: [] });
    const { captures } = adapter.answer(call, chatAnswer(ids, entries));
    // From ids alone the B8 entry could sit at 1 or 2: not placed yet (never guessed).
    assert.deepEqual(Array.from(captures[0]!.logprobs!), [Number.NaN, Number.NaN, Number.NaN, -2.5]);
    const { upstream, calls } = fakeUpstream({
      "/tokenize": {
        tokens: [
          { id: 0xe4, piece: [0xe4] },
          { id: 0xb8, piece: [0xb8] },
          { id: 0xb8, piece: [0xb8] },
          { id: EOS, piece: "<|im_end|>" },
        ],
      },
    });
    await adapter.complete(call, captures as Capture[], upstream);
    assert.deepEqual(calls, [["/tokenize", { content: ids, with_pieces: true }]]);
    assert.deepEqual(Array.from(captures[0]!.logprobs!), [Number.NaN, Number.NaN, -3.5, -2.5]);
  });

  it("strips a completions answer's logprobs back to null, as the route writes it without n_probs", async () => {
    const { upstream } = fakeUpstream({ "/tokenize": { tokens: [104, 105] } });
    const adapter = new LlamaCppAdapter();
    const call = await adapter.prepare("completions", { prompt: "hi" }, upstream);
    const json = {
      choices: [
        { text: "a", index: 0, logprobs: { content: [entry(97, -1, [97])] }, finish_reason: "length" },
      ],
      created: 1,
      model: "m",
      system_fingerprint: "b1",
      object: "text_completion",
      usage: {
        completion_tokens: 1,
        prompt_tokens: 2,
        total_tokens: 3,
        prompt_tokens_details: { cached_tokens: 0 },
      },
      id: "cmpl-x",
      __verbose: { index: 0, tokens: [97] },
    };
    const { captures, forAgent } = adapter.answer(call, json);
    assert.deepEqual(forAgent.choices, [{ text: "a", index: 0, logprobs: null, finish_reason: "length" }]);
    assert.equal("__verbose" in forAgent, false);
    assert.deepEqual(captures[0]!.promptIds, Int32Array.of(104, 105));
    assert.equal(captures[0]!.text, "a");
  });
});

describe("llama.cpp adapter: placing entries", () => {
  it("places entries only where the ids allow one placement", () => {
    const e = (id: number) => ({ id, logprob: 0 });
    assert.deepEqual(placeEntries(Int32Array.of(1, 2, 3), [e(1), e(3)]), Int32Array.of(0, 2));
    assert.deepEqual(placeEntries(Int32Array.of(5, 7, 7, 9), [e(7), e(9)]), Int32Array.of(-1, 3));
    assert.deepEqual(placeEntries(Int32Array.of(1, 2), [e(3)]), Int32Array.of(-1));
  });

  it("replays validate_utf8 as llama.cpp does (a cut lead byte within the last four bytes)", () => {
    const b = (...x: number[]) => Uint8Array.from(x);
    assert.equal(validUtf8Length(b(0x61, 0xe4), 2), 1);
    assert.equal(validUtf8Length(b(0xe4, 0xb8), 2), 0);
    assert.equal(validUtf8Length(b(0xe4, 0xb8, 0xad), 3), 3);
    assert.equal(validUtf8Length(b(0xf0, 0x9f, 0x99), 3), 0);
    assert.equal(validUtf8Length(b(0xb8), 1), 1, "a lone continuation byte counts as complete");
    const pieces = [b(0xe4), b(0xb8), b(0xb8)];
    assert.deepEqual(
      placeByPieces(Int32Array.of(0xe4, 0xb8, 0xb8), pieces, [{ id: 0xb8, logprob: 0 }]),
      Int32Array.of(2),
    );
    assert.equal(
      placeByPieces(Int32Array.of(0xe4, 0xb8, 0xb8), pieces, [{ id: 0xe4, logprob: 0 }]),
      undefined,
    );
  });
});

/** Chat stream chunks as to_json_oaicompat_chat (partial) and to_json_oaicompat_chat_stream (final) build them. */
function streamChunk(
  delta: Record<string, unknown>,
  more: Record<string, unknown> = {},
  choice: Record<string, unknown> = {},
) {
  return {
    choices: [{ finish_reason: null, index: 0, delta, ...choice }],
    created: 1,
    id: "chatcmpl-s",
    model: "m",
    system_fingerprint: "b1",
    object: "chat.completion.chunk",
    ...more,
  };
}
const timings = (predicted: number) => ({
  cache_n: 0,
  prompt_n: PROMPT_IDS.length,
  prompt_ms: 1,
  prompt_per_token_ms: 0.1,
  prompt_per_second: 10000,
  predicted_n: predicted,
  predicted_ms: 2,
  predicted_per_token_ms: 1,
  predicted_per_second: 1000,
});

describe("llama.cpp adapter: streams", () => {
  it("puts each reported id at its position, marks the tokens the stream never reported, strips the additions", async () => {
    const { call } = await prepared({ messages: [], stream: true }, "chat", "relay");
    const reader = new LlamaCppAdapter({ streams: "relay" }).stream(call);
    // Tokens: H, E4, B8, AD (中 complete), <|im_end|>. No chunk for E4 and B8 (cut character) nor for the
    // end of turn (no message delta); the final result's chunk says 5 were sampled.
    const chunks = [
      {
        ...streamChunk({ role: "assistant", content: null }),
      },
      streamChunk(
        { content: "H" },
        { timings: timings(1) },
        { logprobs: { content: [entry(72, -5, [72])] } },
      ),
      streamChunk(
        { content: "中" },
        { timings: timings(4) },
        { logprobs: { content: [entry(0xad, -6, [0xe4, 0xb8, 0xad])] } },
      ),
      {
        choices: [{ finish_reason: "stop", index: 0, delta: {} }],
        created: 1,
        id: "chatcmpl-s",
        model: "m",
        system_fingerprint: "b1",
        object: "chat.completion.chunk",
        timings: timings(5),
      },
    ];
    // The role delta and the first content delta come as two chunks of one partial result; the first has
    // neither entry nor timings.
    const forwarded = chunks.map((c) => reader.chunk(structuredClone(c)));
    assert.deepEqual(forwarded[0], chunks[0]);
    assert.deepEqual(forwarded[1], {
      ...streamChunk({ content: "H" }),
    });
    assert.deepEqual(forwarded[2], streamChunk({ content: "中" }));
    assert.deepEqual(
      forwarded[3],
      chunks[3],
      "the final chunk keeps its timings: the engine always sends them",
    );
    const [c] = reader.captures(true);
    assert.deepEqual(c!.outputIds, Int32Array.of(72, -1, -1, 0xad, -1));
    assert.deepEqual(c!.missingIds, Int32Array.of(1, 2, 4));
    assert.deepEqual(Array.from(c!.logprobs!), [-5, Number.NaN, Number.NaN, -6, Number.NaN]);
    assert.equal(c!.finishReason, "stop");
    assert.equal(c!.text, "H中");
    assert.deepEqual(c!.promptIds, Int32Array.from(PROMPT_IDS));
  });

  it("gives abort to a stream cut short, with what it sampled so far", async () => {
    const { call } = await prepared({ messages: [], stream: true }, "chat", "relay");
    const reader = new LlamaCppAdapter({ streams: "relay" }).stream(call);
    reader.chunk(
      streamChunk(
        { content: "H" },
        { timings: timings(1) },
        { logprobs: { content: [entry(72, -5, [72])] } },
      ),
    );
    reader.chunk(
      streamChunk(
        { content: "i" },
        { timings: timings(2) },
        { logprobs: { content: [entry(105, -4, [105])] } },
      ),
    );
    const [c] = reader.captures(false);
    assert.equal(c!.finishReason, "abort");
    assert.deepEqual(c!.outputIds, Int32Array.of(72, 105));
    assert.deepEqual(Array.from(c!.logprobs!), [-5, -4]);
    assert.equal(c!.missingIds, undefined);
    assert.equal(c!.text, "Hi");
  });

  it("keeps the finish reason of a choice the engine finished before the stream broke", async () => {
    const { call } = await prepared({ messages: [], stream: true }, "chat", "relay");
    const reader = new LlamaCppAdapter({ streams: "relay" }).stream(call);
    reader.chunk(
      streamChunk(
        { content: "H" },
        { timings: timings(1) },
        { logprobs: { content: [entry(72, -5, [72])] } },
      ),
    );
    reader.chunk(streamChunk({}, { timings: timings(1) }, { finish_reason: "length" }));
    assert.equal(reader.captures(false)[0]!.finishReason, "length");
  });

  it("gives abort when the upstream ended without a finish reason, even if the reader was told it finished", async () => {
    const { call } = await prepared({ messages: [], stream: true }, "chat", "relay");
    const reader = new LlamaCppAdapter({ streams: "relay" }).stream(call);
    reader.chunk(
      streamChunk(
        { content: "H" },
        { timings: timings(1) },
        { logprobs: { content: [entry(72, -5, [72])] } },
      ),
    );
    assert.equal(reader.captures(true)[0]!.finishReason, "abort");
  });

  it("merges streamed tool-call deltas into OpenAI tool calls", async () => {
    const { call } = await prepared({
      messages: [],
      stream: true,
      tools: [{ type: "function", function: { name: "f" } }],
    });
    const reader = new LlamaCppAdapter().stream(call);
    reader.chunk(
      streamChunk({
        tool_calls: [{ index: 0, id: "c1", type: "function", function: { name: "f", arguments: '{"a"' } }],
      }),
    );
    reader.chunk(streamChunk({ tool_calls: [{ index: 0, function: { arguments: ": 1}" } }] }));
    reader.chunk({ ...streamChunk({}, { timings: timings(9) }, { finish_reason: "tool_calls" }) });
    const [c] = reader.captures(true);
    assert.deepEqual(c!.toolCalls, [
      { type: "function", id: "c1", function: { name: "f", arguments: '{"a": 1}' } },
    ]);
    assert.equal(c!.finishReason, "tool_calls");
    assert.equal(c!.outputIds.length, 9);
  });
});
