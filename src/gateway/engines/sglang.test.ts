/**
 * The SGLang adapter against answers shaped as SGLang's OpenAI server builds them. Fixture sources (SGLang main,
 * late 2026), all under python/sglang/srt/entrypoints/openai/:
 * - protocol.py: ChatCompletionResponse / CompletionResponse (choice `token_ids`, `prompt_token_ids`,
 *   `hidden_states`, `meta_info` popped when None; `sglext` popped when None; SglExt drops its None fields),
 *   ChatCompletionStreamResponse, ChoiceLogprobs, ChatCompletionTokenLogprob, LogProbs, UsageInfo;
 * - serving_chat.py: _build_chat_response (sglext input_ids / output_ids / routed_experts, metadata with the
 *   weight version), _generate_chat_stream (finish-reason chunks after the tokens, then one `choices: []` sglext
 *   chunk, then the usage chunk), _generate_stream_content (the logprob flush chunk when a parser is active);
 * - sse_utils.py: build_sse_content (msgspec, `delta` omits None fields, the chunk omits a None usage);
 * - serving_completions.py and utils.py (to_openai_style_logprobs: text_offset -1).
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { AgentRoute, Capture } from "./engine.ts";
import { createSglangAdapter, sglangWeightVersion } from "./sglang.ts";

const noUpstream = async () => {
  throw new Error("the SGLang adapter makes no extra call");
};
const sglang = createSglangAdapter();
const withRouting = createSglangAdapter({ routedExperts: { layers: 2, topK: 1 } });
const prepare = (route: AgentRoute, body: Record<string, unknown>, adapter = sglang) =>
  adapter.prepare(route, body, noUpstream);

const plain = (captures: Capture[]) =>
  captures.map((c) => ({
    ...c,
    ...(c.promptIds ? { promptIds: [...c.promptIds] } : {}),
    outputIds: [...c.outputIds],
    ...(c.logprobs ? { logprobs: [...c.logprobs] } : {}),
  }));

/** ChatCompletionTokenLogprob as SGLang dumps it. */
const lp = (token: string, logprob: number) => ({
  token,
  bytes: [...Buffer.from(token)],
  logprob,
  top_logprobs: [],
});

const TOOLS = [
  { type: "function", function: { name: "ls", parameters: { type: "object", properties: {} } } },
];
const TOOL_CALL = { id: "call_1", index: 0, type: "function", function: { name: "ls", arguments: "{}" } };
/** The tool call merged from its streamed pieces, as OpenAI clients merge them (no streaming `index`). */
const MERGED_CALL = { id: "call_1", type: "function", function: { name: "ls", arguments: "{}" } };
const USAGE = {
  prompt_tokens: 3,
  total_tokens: 8,
  completion_tokens: 5,
  prompt_tokens_details: null,
  reasoning_tokens: 0,
};

/** _build_chat_response, n=2, the second choice a tool call (finish "tool_calls", matched_stop None). */
function chatWhole(
  asked: boolean,
  sglext: Record<string, unknown> | undefined,
  version = "7",
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: "req-1",
    object: "chat.completion",
    created: 1700000000,
    model: "m",
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: "Hi", reasoning_content: null, tool_calls: null },
        logprobs: asked ? { content: [lp("H", -0.5), lp("i", -0.25), lp("<eos>", -0.125)] } : null,
        finish_reason: "stop",
        matched_stop: 2,
      },
      {
        index: 1,
        message: { role: "assistant", content: "", reasoning_content: null, tool_calls: [TOOL_CALL] },
        logprobs: asked ? { content: [lp("<tool>", -1.5), lp("ls", -3)] } : null,
        finish_reason: "tool_calls",
        matched_stop: null,
      },
    ],
    usage: USAGE,
    metadata: { weight_version: version },
  };
  if (sglext !== undefined) out.sglext = sglext;
  return out;
}

const IDS = {
  input_ids: [1, 2, 3],
  output_ids: [
    [20, 21, 2],
    [30, 31],
  ],
};

describe("SGLang: prepare", () => {
  it("chat: the sglext id flags and logprobs, nothing else changed", async () => {
    const body = {
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      tools: TOOLS,
      n: 2,
      stream: true,
      extra: 1,
    };
    const frozen = structuredClone(body);
    const p = await prepare("chat", body);
    assert.equal(p.path, "/v1/chat/completions");
    assert.deepEqual(p.body, {
      ...frozen,
      return_input_ids_in_sglext: true,
      return_output_ids_in_sglext: true,
      logprobs: true,
    });
    assert.deepEqual(p.asked, { logprobs: false, topLogprobs: 0, tokenIds: false });
    assert.deepEqual(body, frozen);
  });

  it("completions: return_token_ids and logprobs 0; routed experts asked for only with a layout", async () => {
    const p = await prepare("completions", { prompt: "x" });
    assert.equal(p.path, "/v1/completions");
    assert.deepEqual(p.body, { prompt: "x", return_token_ids: true, logprobs: 0 });
    const r = await prepare("chat", { messages: [], logprobs: true, top_logprobs: 5 }, withRouting);
    assert.deepEqual(r.body, {
      messages: [],
      logprobs: true,
      top_logprobs: 5,
      return_input_ids_in_sglext: true,
      return_output_ids_in_sglext: true,
      return_routed_experts: true,
    });
    assert.deepEqual(r.asked, { logprobs: true, topLogprobs: 5, tokenIds: false });
  });

  it("a routing layout must be the model's: positive layers and top-k", () => {
    assert.throws(
      () => createSglangAdapter({ routedExperts: { layers: 0, topK: 8 } }),
      /routedExperts.layers must be a positive integer \(the served model's\), got 0/,
    );
  });

  it("weight versions: SGLang's strings read as numbers when they are numbers", () => {
    assert.deepEqual(["7", 7, "default", "step-42", "", "99999999999", -1].map(sglangWeightVersion), [
      7,
      7,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });
});

describe("SGLang: whole answers", () => {
  it("chat, n=2: ids from sglext, logprobs, raw finish reasons, weight version; the agent's answer unasked", async () => {
    const p = await prepare("chat", { messages: [], tools: TOOLS, n: 2 });
    const { captures, forAgent } = sglang.answer(p, chatWhole(true, IDS));
    assert.deepEqual(plain(captures), [
      {
        choiceIndex: 0,
        outputIds: [20, 21, 2],
        finishReason: "stop",
        promptIds: [1, 2, 3],
        logprobs: [-0.5, -0.25, -0.125],
        weightVersion: 7,
        text: "Hi",
      },
      {
        choiceIndex: 1,
        outputIds: [30, 31],
        finishReason: "tool_calls",
        promptIds: [1, 2, 3],
        logprobs: [-1.5, -3],
        weightVersion: 7,
        text: "",
        toolCalls: [TOOL_CALL],
      },
    ]);
    // SGLang without the gateway's flags: null logprobs and no sglext at all.
    assert.deepEqual(forAgent, chatWhole(false, undefined));
  });

  it("chat: what the agent asked for itself stays (logprobs, its own sglext ids)", async () => {
    const p = await prepare("chat", { messages: [], logprobs: true, return_output_ids_in_sglext: true });
    const { forAgent } = sglang.answer(p, chatWhole(true, IDS));
    assert.deepEqual(forAgent, chatWhole(true, { output_ids: IDS.output_ids }));
  });

  it('chat: a "default" weight version is no version; a choice\'s own token_ids (return_token_ids) are kept', async () => {
    const p = await prepare("chat", { messages: [], return_token_ids: true });
    const upstream = chatWhole(false, IDS, "default");
    const choices = upstream.choices as Record<string, unknown>[];
    choices[0]!.prompt_token_ids = [1, 2, 3];
    choices[0]!.token_ids = [20, 21, 2];
    const { captures, forAgent } = sglang.answer(p, upstream);
    assert.equal(captures[0]!.weightVersion, undefined);
    assert.equal(captures[0]!.logprobs, undefined);
    assert.deepEqual((forAgent.choices as Record<string, unknown>[])[0], choices[0]);
    assert.equal("sglext" in forAgent, false);
  });

  it("routed experts: sglext.routed_experts (base64 int32, [prompt + output - 1, layers, top_k]) on choice 0", async () => {
    const ids = [5, 6, 7, 8, 9, 10, 11, 12]; // 4 rows (3 prompt + 2 output - 1) × 2 layers × top-1
    const raw = Buffer.alloc(ids.length * 4);
    ids.forEach((v, i) => raw.writeInt32LE(v, i * 4));
    const routed = raw.toString("base64");
    const p = await prepare("chat", { messages: [], n: 2 }, withRouting);
    const upstream = chatWhole(false, { ...IDS, routed_experts: routed });
    const { captures, forAgent } = withRouting.answer(p, upstream);
    const c = captures[0]!;
    const ints = (d: Uint8Array) => [...new Int32Array(d.buffer, d.byteOffset, d.byteLength / 4)];
    assert.deepEqual(
      { ...c.promptRoutedExperts, data: ints(c.promptRoutedExperts!.data) },
      { dtype: "int32", tokens: 3, layers: 2, top_k: 1, data: [5, 6, 7, 8, 9, 10] },
    );
    assert.deepEqual(
      { ...c.routedExperts, data: ints(c.routedExperts!.data) },
      { dtype: "int32", tokens: 1, layers: 2, top_k: 1, data: [11, 12] },
    );
    assert.equal(captures[1]!.routedExperts, undefined);
    assert.equal("sglext" in forAgent, false);
  });

  it("completions: per-choice ids (popped for the agent), token_logprobs, length kept raw", async () => {
    // serving_completions: choices carry token_ids / prompt_token_ids only when asked (popped when None).
    const answer = (asked: boolean) => ({
      id: "req-2",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        {
          index: 0,
          text: "ab",
          logprobs: asked
            ? {
                text_offset: [-1, -1],
                token_logprobs: [-0.5, -0.75],
                tokens: ["a", "b"],
                top_logprobs: [{}, {}],
              }
            : null,
          finish_reason: "length",
          matched_stop: null,
          ...(asked ? { token_ids: [40, 41], prompt_token_ids: [7, 8] } : {}),
        },
      ],
      usage: {
        prompt_tokens: 2,
        total_tokens: 4,
        completion_tokens: 2,
        prompt_tokens_details: null,
        reasoning_tokens: 0,
      },
      metadata: { weight_version: "3" },
    });
    const p = await prepare("completions", { prompt: "x" });
    const { captures, forAgent } = sglang.answer(p, answer(true));
    assert.deepEqual(plain(captures), [
      {
        choiceIndex: 0,
        outputIds: [40, 41],
        finishReason: "length",
        promptIds: [7, 8],
        logprobs: [-0.5, -0.75],
        weightVersion: 3,
        text: "ab",
      },
    ]);
    assert.deepEqual(forAgent, answer(false));
  });

  it("completions echo: the prompt's logprobs (the first null) come first; the sampled tokens' are the last", async () => {
    // _build_completion_response with echo: to_openai_style_logprobs(input_token_logprobs, output_token_logprobs).
    const p = await prepare("completions", { prompt: "xy", echo: true });
    const { captures } = sglang.answer(p, {
      id: "req-3",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        {
          index: 0,
          text: "xyab",
          logprobs: {
            text_offset: [-1, -1, -1, -1],
            token_logprobs: [null, -4, -0.5, -0.25],
            tokens: ["x", "y", "a", "b"],
            top_logprobs: [],
          },
          finish_reason: "stop",
          matched_stop: 2,
          token_ids: [40, 41],
          prompt_token_ids: [7, 8],
        },
      ],
      usage: {
        prompt_tokens: 2,
        total_tokens: 4,
        completion_tokens: 2,
        prompt_tokens_details: null,
        reasoning_tokens: 0,
      },
      metadata: { weight_version: "default" },
    });
    assert.deepEqual([...captures[0]!.logprobs!], [-0.5, -0.25]);
  });
});

describe("SGLang: streams", () => {
  const base = { id: "req-1", object: "chat.completion.chunk", created: 1700000000, model: "m" };
  /** build_sse_content: msgspec drops the delta's None fields and a None usage. */
  const sse = (
    index: number,
    delta: Record<string, unknown>,
    logprobs: unknown,
    finish: string | null,
    matched: unknown = null,
  ) => ({
    ...base,
    choices: [{ index, delta, logprobs, finish_reason: finish, matched_stop: matched }],
  });

  /** _generate_chat_stream, n=2, a tool parser active for the second choice, include_usage. */
  function chatChunks(sglext: Record<string, unknown> = IDS): Record<string, unknown>[] {
    return [
      sse(0, { role: "assistant", content: "" }, null, null),
      sse(0, { content: "He" }, { content: [lp("H", -0.5), lp("e", -0.25)] }, null),
      sse(1, { role: "assistant", content: "" }, null, null),
      // The tool parser consumed the text: SGLang flushes the step's logprobs in a chunk of their own.
      sse(1, {}, { content: [lp("<tool>", -1.5)] }, null),
      // _process_tool_call_stream: a pydantic ChatCompletionStreamResponse (DeltaMessage keeps its None fields).
      {
        ...base,
        choices: [
          {
            index: 1,
            delta: { role: null, content: null, reasoning_content: null, tool_calls: [TOOL_CALL] },
            logprobs: { content: [lp("ls", -3)] },
            finish_reason: null,
            matched_stop: null,
          },
        ],
        usage: null,
      },
      sse(0, { content: "y" }, { content: [lp("y", -0.125)] }, null),
      // After the loop: one finish chunk per choice, then sglext, then usage.
      sse(0, {}, null, "length"),
      sse(1, {}, null, "tool_calls"),
      { ...base, choices: [], usage: null, sglext },
      { ...base, choices: [], usage: USAGE },
    ];
  }

  it("chat, n=2: ids from the sglext chunk, logprobs gathered in order, tool calls; chunks as SGLang sends them unasked", async () => {
    const p = await prepare("chat", { messages: [], tools: TOOLS, n: 2, stream: true });
    const reader = sglang.stream(p);
    const chunks = chatChunks({
      input_ids: [1, 2, 3],
      output_ids: [
        [20, 21, 22],
        [30, 31],
      ],
    });
    const forwarded = chunks.map((c) => reader.chunk(c));
    assert.deepEqual(plain(reader.captures(true)), [
      {
        choiceIndex: 0,
        outputIds: [20, 21, 22],
        finishReason: "length",
        promptIds: [1, 2, 3],
        logprobs: [-0.5, -0.25, -0.125],
        text: "Hey",
      },
      {
        choiceIndex: 1,
        outputIds: [30, 31],
        finishReason: "tool_calls",
        promptIds: [1, 2, 3],
        logprobs: [-1.5, -3],
        toolCalls: [MERGED_CALL],
      },
    ]);
    const unasked = (c: Record<string, unknown>) => ({
      ...c,
      choices: (c.choices as Record<string, unknown>[]).map((ch) => ({ ...ch, logprobs: null })),
    });
    assert.deepEqual(forwarded, [
      chunks[0],
      unasked(chunks[1]!),
      chunks[2],
      undefined, // the logprob flush
      unasked(chunks[4]!),
      unasked(chunks[5]!),
      chunks[6],
      chunks[7],
      undefined, // the sglext chunk
      chunks[9],
    ]);
  });

  it("chat: the agent's own logprobs and sglext flags get every chunk untouched", async () => {
    const body = { messages: [], n: 2, stream: true, logprobs: true };
    const p = await prepare("chat", {
      ...body,
      return_input_ids_in_sglext: true,
      return_output_ids_in_sglext: true,
    });
    const reader = sglang.stream(p);
    const chunks = chatChunks();
    const expected = structuredClone(chunks);
    assert.deepEqual(
      chunks.map((c) => reader.chunk(c)),
      expected,
    );
  });

  it("chat: logprobs that do not match the ids one to one are all missing, not shifted", async () => {
    // SGLang's plain path drops a step's logprobs when its text delta is empty: 3 ids, 2 logprobs.
    const p = await prepare("chat", { messages: [], stream: true });
    const reader = sglang.stream(p);
    reader.chunk(sse(0, { role: "assistant", content: "" }, null, null));
    reader.chunk(sse(0, { content: "é" }, { content: [lp("é", -0.5)] }, null));
    reader.chunk(sse(0, { content: "!" }, { content: [lp("!", -0.25)] }, null));
    reader.chunk(sse(0, {}, null, "stop", 2));
    reader.chunk({
      ...base,
      choices: [],
      usage: null,
      sglext: { input_ids: [1], output_ids: [[200, 201, 33]] },
    });
    const [c] = plain(reader.captures(true));
    assert.deepEqual(c!.logprobs, [NaN, NaN, NaN]);
    assert.deepEqual(c!.outputIds, [200, 201, 33]);
  });

  it("chat: a stream cut before SGLang's sglext chunk is an abort with no ids and no logprobs", async () => {
    const p = await prepare("chat", { messages: [], n: 2, stream: true });
    const reader = sglang.stream(p);
    for (const c of chatChunks().slice(0, 6)) reader.chunk(c);
    assert.deepEqual(plain(reader.captures(false)), [
      { choiceIndex: 0, outputIds: [], finishReason: "abort", text: "Hey" },
      { choiceIndex: 1, outputIds: [], finishReason: "abort", toolCalls: [MERGED_CALL] },
    ]);
  });

  it("completions: ids and prompt ids per chunk (removed for the agent), abort kept raw", async () => {
    // serving_completions stream: CompletionStreamResponse, choice token_ids / prompt_token_ids popped when None.
    const chunk = (ids: number[], lps: number[], prompt: number[] | null, finish: string | null) => ({
      id: "req-2",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        {
          index: 0,
          text: "a".repeat(ids.length),
          logprobs: {
            text_offset: lps.map(() => -1),
            token_logprobs: lps,
            tokens: lps.map(() => "a"),
            top_logprobs: lps.map(() => ({})),
          },
          finish_reason: finish,
          matched_stop: null,
          token_ids: ids,
          ...(prompt ? { prompt_token_ids: prompt } : {}),
        },
      ],
      usage: null,
    });
    const p = await prepare("completions", { prompt: "x", stream: true });
    const reader = sglang.stream(p);
    const forwarded = [chunk([40, 41], [-0.5, -0.75], [7, 8], null), chunk([42], [-1], null, "abort")].map(
      (c) => reader.chunk(c),
    );
    assert.deepEqual(plain(reader.captures(true)), [
      {
        choiceIndex: 0,
        outputIds: [40, 41, 42],
        finishReason: "abort",
        promptIds: [7, 8],
        logprobs: [-0.5, -0.75, -1],
        text: "aaa",
      },
    ]);
    assert.deepEqual(
      forwarded.map((c) => (c!.choices as Record<string, unknown>[])[0]),
      [
        { index: 0, text: "aa", logprobs: null, finish_reason: null, matched_stop: null },
        { index: 0, text: "a", logprobs: null, finish_reason: "abort", matched_stop: null },
      ],
    );
  });
});
