/**
 * The vLLM adapter against answers shaped as vLLM's OpenAI server builds them. Fixture sources (vLLM main,
 * late 2026):
 * - chat: vllm/entrypoints/openai/chat_completion/protocol.py (ChatCompletionResponse, ChatCompletionResponseChoice,
 *   ChatCompletionStreamResponse, ChatCompletionLogProbsContent) and serving.py (chat_completion_full_generator,
 *   chat_completion_stream_generator, _create_chat_logprobs); whole answers are `model_dump()`ed with every field
 *   (chat_completion/api_router.py), chunks `model_dump_json(exclude_unset=True)`, the usage chunk also
 *   `exclude_none=True`;
 * - completions: vllm/entrypoints/openai/completion/protocol.py (CompletionResponse, CompletionLogProbs, ...) and
 *   serving.py (request_output_to_completion_response, completion_stream_generator, _create_completion_logprobs).
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { AgentRoute, Capture } from "./engine.ts";
import { readNpy } from "./npy.ts";
import { createVllmAdapter } from "./vllm.ts";

const vllm = createVllmAdapter();
const noUpstream = async () => {
  throw new Error("the vLLM adapter makes no extra call");
};
const prepare = (route: AgentRoute, body: Record<string, unknown>) => vllm.prepare(route, body, noUpstream);

/** Captures with typed arrays as plain arrays (NaN stays NaN: deepEqual treats NaN as equal to NaN). */
const plain = (captures: Capture[]) =>
  captures.map((c) => ({
    ...c,
    ...(c.promptIds ? { promptIds: [...c.promptIds] } : {}),
    outputIds: [...c.outputIds],
    ...(c.logprobs ? { logprobs: [...c.logprobs] } : {}),
  }));

/** A vLLM chat logprob entry (ChatCompletionLogProbsContent) as a whole answer dumps it. */
const lp = (token: string, logprob: number) => ({
  token,
  logprob,
  bytes: [...Buffer.from(token)],
  top_logprobs: [],
});

/** float32 of a number, as the capture holds it. */
const f32 = (x: number) => Math.fround(x);

const TOOLS = [
  { type: "function", function: { name: "ls", parameters: { type: "object", properties: {} } } },
];
const USAGE = { prompt_tokens: 3, total_tokens: 8, completion_tokens: 5, prompt_tokens_details: null };

/** chat_completion_full_generator → ChatCompletionResponse.model_dump(), n=2, the second choice a tool call. */
function chatWhole(withLogprobs: boolean, withIds: boolean): Record<string, unknown> {
  return {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1700000000,
    model: "m",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: "Hi",
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
          reasoning: null,
        },
        logprobs: withLogprobs ? { content: [lp("H", -0.5), lp("i", -0.25), lp("<eos>", -0.125)] } : null,
        finish_reason: "stop",
        stop_reason: null,
        token_ids: withIds ? [20, 21, 2] : null,
        routed_experts: null,
      },
      {
        index: 1,
        message: {
          role: "assistant",
          content: null,
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
          tool_calls: [
            { id: "chatcmpl-tool-1", type: "function", function: { name: "ls", arguments: "{}" } },
          ],
          reasoning: null,
        },
        // -9999.0: _create_chat_logprobs's default for a token it has no logprob for.
        logprobs: withLogprobs ? { content: [lp("<tool>", -1.5), lp("ls", -9999.0)] } : null,
        finish_reason: "tool_calls",
        stop_reason: null,
        token_ids: withIds ? [30, 31] : null,
        routed_experts: null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage: USAGE,
    prompt_logprobs: null,
    prompt_token_ids: withIds ? [1, 2, 3] : null,
    prompt_text: null,
    kv_transfer_params: null,
    ec_transfer_params: null,
    metrics: null,
  };
}

describe("vLLM: prepare", () => {
  it("chat: adds return_token_ids and logprobs, changes nothing else, leaves the agent's body alone", async () => {
    const body = {
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      tools: TOOLS,
      n: 2,
      my_field: { a: 1 },
    };
    const frozen = structuredClone(body);
    const p = await prepare("chat", body);
    assert.equal(p.path, "/v1/chat/completions");
    assert.deepEqual(p.body, { ...frozen, return_token_ids: true, logprobs: true });
    assert.deepEqual(p.asked, { logprobs: false, topLogprobs: 0, tokenIds: false });
    assert.deepEqual(body, frozen);
  });

  it("chat: the agent's own logprobs and top_logprobs go up as sent", async () => {
    const p = await prepare("chat", { messages: [], logprobs: true, top_logprobs: 5 });
    assert.deepEqual(p.body, { messages: [], logprobs: true, top_logprobs: 5, return_token_ids: true });
    assert.deepEqual(p.asked, { logprobs: true, topLogprobs: 5, tokenIds: false });
  });

  it("completions: logprobs 0 (the sampled token alone) unless the agent set a number itself", async () => {
    const p = await prepare("completions", { prompt: "x" });
    assert.equal(p.path, "/v1/completions");
    assert.deepEqual(p.body, { prompt: "x", return_token_ids: true, logprobs: 0 });
    const own = await prepare("completions", { prompt: "x", logprobs: 3, return_token_ids: true });
    assert.deepEqual(own.body, { prompt: "x", logprobs: 3, return_token_ids: true });
    assert.deepEqual(own.asked, { logprobs: true, topLogprobs: 3, tokenIds: true });
  });
});

describe("vLLM: whole answers", () => {
  it("chat, n=2 with a tool call: captures per choice, and the agent's answer as vLLM writes it unasked", async () => {
    const p = await prepare("chat", { messages: [], tools: TOOLS, n: 2 });
    const { captures, forAgent } = vllm.answer(p, chatWhole(true, true));
    assert.deepEqual(plain(captures), [
      {
        choiceIndex: 0,
        outputIds: [20, 21, 2],
        finishReason: "stop",
        promptIds: [1, 2, 3],
        logprobs: [-0.5, -0.25, -0.125],
        text: "Hi",
      },
      {
        choiceIndex: 1,
        outputIds: [30, 31],
        finishReason: "tool_calls",
        promptIds: [1, 2, 3],
        logprobs: [-1.5, NaN],
        toolCalls: [{ id: "chatcmpl-tool-1", type: "function", function: { name: "ls", arguments: "{}" } }],
      },
    ]);
    assert.ok(captures[0]!.outputIds instanceof Int32Array && captures[0]!.logprobs instanceof Float32Array);
    // Exactly what vLLM answers when neither ids nor logprobs are asked for: the same fields, null.
    assert.deepEqual(forAgent, chatWhole(false, false));
  });

  it("chat: the agent that asked for logprobs (top_logprobs 2) and ids gets vLLM's answer untouched", async () => {
    const p = await prepare("chat", {
      messages: [],
      logprobs: true,
      top_logprobs: 2,
      return_token_ids: true,
    });
    const upstream = chatWhole(true, true);
    const choice = (upstream.choices as Record<string, unknown>[])[0]!;
    const top = [
      { token: "H", logprob: -0.5, bytes: [72] },
      { token: "J", logprob: -1, bytes: [74] },
    ];
    choice.logprobs = {
      content: [{ ...lp("H", -0.5), top_logprobs: top }, lp("i", -0.25), lp("<eos>", -0.125)],
    };
    const expected = structuredClone(upstream);
    const { forAgent } = vllm.answer(p, upstream);
    assert.deepEqual(forAgent, expected);
  });

  it("chat without logprobs anywhere: logprobs undefined, never zeros", async () => {
    const p = await prepare("chat", { messages: [] });
    const { captures } = vllm.answer(p, chatWhole(false, true));
    assert.equal(captures[0]!.logprobs, undefined);
    assert.deepEqual([...captures[0]!.outputIds], [20, 21, 2]);
  });

  it("completions, n=2: per-choice prompt ids, a null logprob is NaN, length and abort kept raw", async () => {
    // request_output_to_completion_response → CompletionResponse.model_dump(); logprobs from
    // _create_completion_logprobs with logprobs=0: one top entry per position, null where vLLM had none.
    const choice = (
      index: number,
      ids: number[],
      tokenLogprobs: (number | null)[],
      finish: string,
      withExtras: boolean,
    ) => ({
      index,
      text: "ab",
      logprobs: withExtras
        ? {
            text_offset: [0, 1],
            token_logprobs: tokenLogprobs,
            tokens: ["a", "b"],
            top_logprobs: tokenLogprobs.map((v, i) => (v === null ? null : { [["a", "b"][i]!]: v })),
          }
        : null,
      finish_reason: finish,
      stop_reason: null,
      token_ids: withExtras ? ids : null,
      prompt_logprobs: null,
      prompt_token_ids: withExtras ? [7, 8] : null,
      routed_experts: null,
    });
    const answer = (withExtras: boolean) => ({
      id: "cmpl-1",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        choice(0, [40, 41], [-0.5, null], "length", withExtras),
        choice(1, [42, 43], [-2, -3], "abort", withExtras),
      ],
      service_tier: null,
      system_fingerprint: null,
      usage: { prompt_tokens: 2, total_tokens: 6, completion_tokens: 4, prompt_tokens_details: null },
      kv_transfer_params: null,
      ec_transfer_params: null,
      metrics: null,
    });
    const p = await prepare("completions", { prompt: "x", n: 2 });
    const { captures, forAgent } = vllm.answer(p, answer(true));
    assert.deepEqual(plain(captures), [
      {
        choiceIndex: 0,
        outputIds: [40, 41],
        finishReason: "length",
        promptIds: [7, 8],
        logprobs: [-0.5, NaN],
        text: "ab",
      },
      {
        choiceIndex: 1,
        outputIds: [42, 43],
        finishReason: "abort",
        promptIds: [7, 8],
        logprobs: [-2, -3],
        text: "ab",
      },
    ]);
    assert.deepEqual(forAgent, answer(false));
  });
});

describe("vLLM: completions echo", () => {
  it("echo: the prompt's logprobs come first in token_logprobs; the sampled tokens' are the last ones", async () => {
    // request_output_to_completion_response with echo: logprobs over [*prompt, *output], token_ids the output's.
    const p = await prepare("completions", { prompt: "xy", echo: true });
    const { captures } = vllm.answer(p, {
      id: "cmpl-2",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        {
          index: 0,
          text: "xyab",
          logprobs: {
            text_offset: [0, 1, 2, 3],
            token_logprobs: [null, -4, -0.5, -0.25],
            tokens: ["x", "y", "a", "b"],
            top_logprobs: [null, { y: -4 }, { a: -0.5 }, { b: -0.25 }],
          },
          finish_reason: "stop",
          stop_reason: null,
          token_ids: [40, 41],
          prompt_logprobs: null,
          prompt_token_ids: [7, 8],
          routed_experts: null,
        },
      ],
      service_tier: null,
      system_fingerprint: null,
      usage: { prompt_tokens: 2, total_tokens: 4, completion_tokens: 2, prompt_tokens_details: null },
      kv_transfer_params: null,
      ec_transfer_params: null,
      metrics: null,
    });
    assert.deepEqual([...captures[0]!.logprobs!], [-0.5, -0.25]);
  });
});

/** A `.npy` file as numpy's np.save writes it (format 1.0, header padded to a multiple of 64). */
function npy(descr: string, shape: number[], data: Buffer): string {
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(", ")}${shape.length === 1 ? "," : ""}), }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += " ".repeat(pad === 64 ? 0 : pad) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  return Buffer.concat([head, Buffer.from(header, "latin1"), data]).toString("base64");
}

describe("vLLM: routed experts", () => {
  it("choices[].routed_experts (.npy, [prompt + output - 1, layers, top_k]) split into prompt and output rows", async () => {
    // 3 prompt + 3 output tokens → 5 rows, 2 layers, top-2, uint16 (vLLM picks the smallest dtype that fits).
    const ids = Array.from({ length: 5 * 2 * 2 }, (_, i) => i);
    const data = Buffer.alloc(ids.length * 2);
    ids.forEach((v, i) => data.writeUInt16LE(v, i * 2));
    const p = await prepare("chat", { messages: [] });
    const upstream = chatWhole(false, true);
    (upstream.choices as Record<string, unknown>[])[0]!.routed_experts = npy("<u2", [5, 2, 2], data);
    const { captures, forAgent } = vllm.answer(p, upstream);
    const c = captures[0]!;
    assert.deepEqual(
      { ...c.promptRoutedExperts, data: [...new Uint16Array(c.promptRoutedExperts!.data.buffer)] },
      { dtype: "uint16", tokens: 3, layers: 2, top_k: 2, data: ids.slice(0, 12) },
    );
    assert.deepEqual(
      { ...c.routedExperts, data: [...new Uint16Array(c.routedExperts!.data.buffer)] },
      { dtype: "uint16", tokens: 2, layers: 2, top_k: 2, data: ids.slice(12) },
    );
    // Each part has a buffer of its own (transferable).
    assert.equal(c.routedExperts!.data.byteOffset, 0);
    assert.equal(c.routedExperts!.data.buffer.byteLength, 2 * 2 * 2 * 2);
    // The server sent them without being asked by the gateway: the agent gets them as vLLM sent them.
    const agentChoice = (forAgent.choices as Record<string, unknown>[])[0]!;
    assert.equal(
      agentChoice.routed_experts,
      (upstream.choices as Record<string, unknown>[])[0]!.routed_experts,
    );
  });

  it("routed_experts_prompt_start leaves that many prompt rows out", async () => {
    const p = await prepare("chat", { messages: [], routed_experts_prompt_start: 2 });
    const upstream = chatWhole(false, true);
    (upstream.choices as Record<string, unknown>[])[0]!.routed_experts = npy(
      "|u1",
      [3, 1, 1],
      Buffer.from([9, 8, 7]),
    );
    const c = vllm.answer(p, upstream).captures[0]!;
    assert.deepEqual([...c.promptRoutedExperts!.data], [9]);
    assert.deepEqual([...c.routedExperts!.data], [8, 7]);
  });

  it("readNpy refuses what routed experts never are", () => {
    const file = (descr: string) =>
      new Uint8Array(Buffer.from(npy(descr, [1, 1, 1], Buffer.alloc(8)), "base64"));
    assert.equal(
      readNpy(file("<f8")),
      ".npy dtype <f8 is not one routed experts use (uint8, uint16, int16, int32)",
    );
    assert.equal(readNpy(new Uint8Array(12)), "not a .npy file (no \\x93NUMPY magic)");
  });
});

describe("vLLM: streams", () => {
  const base = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1700000000, model: "m" };
  /** A token chunk's logprob entry with exclude_unset: a missing one has no `logprob` and no `top_logprobs`. */
  const slp = (token: string, logprob?: number) =>
    logprob === undefined
      ? { token, bytes: [...Buffer.from(token)] }
      : { token, logprob, bytes: [...Buffer.from(token)], top_logprobs: [] };

  /** chat_completion_stream_generator, n=2, return_token_ids and logprobs on, include_usage. */
  function chatChunks(): Record<string, unknown>[] {
    const first = (index: number) => ({
      ...base,
      choices: [{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
      prompt_token_ids: [1, 2, 3],
      prompt_text: null,
    });
    const token = (
      index: number,
      delta: Record<string, unknown>,
      ids: number[],
      lps: Record<string, unknown>[],
    ) => ({
      ...base,
      choices: [{ index, delta, logprobs: { content: lps }, finish_reason: null, token_ids: ids }],
    });
    return [
      first(0),
      first(1),
      token(0, { content: "He" }, [20, 21], [slp("H", -0.5), slp("e", -0.25)]),
      // The tool parser holds these tokens back (delta None): vLLM sends the chunk only for the ids/logprobs.
      token(1, {}, [30], [slp("<tool>", -1.5)]),
      token(
        1,
        { tool_calls: [{ id: "t1", type: "function", index: 0, function: { name: "ls", arguments: "" } }] },
        [31],
        [slp("ls")],
      ),
      token(0, { content: "y" }, [22], [slp("y", -0.125)]),
      {
        ...base,
        choices: [
          {
            index: 1,
            delta: { tool_calls: [{ index: 0, function: { arguments: "{}" } }] },
            logprobs: { content: [slp("{}", -0.0625)] },
            finish_reason: "tool_calls",
            stop_reason: null,
            token_ids: [32],
          },
        ],
      },
      {
        ...base,
        choices: [
          {
            index: 0,
            delta: { content: "!" },
            logprobs: { content: [slp("!", -2)] },
            finish_reason: "length",
            stop_reason: null,
            token_ids: [23],
          },
        ],
      },
      { ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: 7, total_tokens: 10 } },
    ];
  }

  it("chat, n=2: prompt ids from the first chunk, ids and logprobs gathered across chunks, tool calls merged", async () => {
    const p = await prepare("chat", {
      messages: [],
      tools: TOOLS,
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const reader = vllm.stream(p);
    const chunks = chatChunks();
    const forwarded = chunks.map((c) => reader.chunk(c));
    assert.deepEqual(plain(reader.captures(true)), [
      {
        choiceIndex: 0,
        outputIds: [20, 21, 22, 23],
        finishReason: "length",
        promptIds: [1, 2, 3],
        logprobs: [-0.5, -0.25, -0.125, -2],
        text: "Hey!",
      },
      {
        choiceIndex: 1,
        outputIds: [30, 31, 32],
        finishReason: "tool_calls",
        promptIds: [1, 2, 3],
        logprobs: [-1.5, NaN, f32(-0.0625)],
        toolCalls: [{ id: "t1", type: "function", function: { name: "ls", arguments: "{}" } }],
      },
    ]);
    // What vLLM streams when neither is asked: null prompt_token_ids on the first chunks, null logprobs, no
    // token_ids on the choices (vLLM passes None: null), no chunk for the held-back token, usage untouched.
    const unasked = (c: Record<string, unknown>) => ({
      ...c,
      ...("prompt_token_ids" in c ? { prompt_token_ids: null } : {}),
      choices: (c.choices as Record<string, unknown>[]).map((ch) => ({
        ...ch,
        logprobs: null,
        ...("token_ids" in ch ? { token_ids: null } : {}),
      })),
    });
    assert.deepEqual(forwarded, [
      unasked(chunks[0]!),
      unasked(chunks[1]!),
      unasked(chunks[2]!),
      undefined,
      unasked(chunks[4]!),
      unasked(chunks[5]!),
      unasked(chunks[6]!),
      unasked(chunks[7]!),
      chunks[8],
    ]);
  });

  it("chat: the agent that asked for logprobs and ids gets every chunk untouched", async () => {
    const p = await prepare("chat", {
      messages: [],
      n: 2,
      stream: true,
      logprobs: true,
      return_token_ids: true,
    });
    const reader = vllm.stream(p);
    const chunks = chatChunks();
    const expected = structuredClone(chunks);
    assert.deepEqual(
      chunks.map((c) => reader.chunk(c)),
      expected,
    );
  });

  it("chat: a stream that ends before a choice's finish reason makes that choice an abort", async () => {
    const p = await prepare("chat", { messages: [], n: 2, stream: true });
    const reader = vllm.stream(p);
    for (const c of chatChunks().slice(0, 7)) reader.chunk(c);
    const captures = plain(reader.captures(false));
    assert.deepEqual(
      captures.map((c) => [c.choiceIndex, c.finishReason, c.outputIds]),
      [
        [0, "abort", [20, 21, 22]],
        [1, "tool_calls", [30, 31, 32]],
      ],
    );
  });

  it("completions: prompt ids on each choice's first chunk, ids per chunk, a chunk without logprobs is NaN", async () => {
    // completion_stream_generator: every chunk's choice lists all its fields (exclude_unset, all passed).
    const chunk = (
      ids: number[],
      tokenLogprobs: number[] | null,
      prompt: number[] | null,
      finish: string | null,
    ) => ({
      id: "cmpl-1",
      object: "text_completion",
      created: 1700000000,
      model: "m",
      choices: [
        {
          index: 0,
          text: "ab".slice(0, ids.length),
          logprobs:
            tokenLogprobs === null
              ? null
              : {
                  text_offset: [0],
                  token_logprobs: tokenLogprobs,
                  tokens: ["a"],
                  top_logprobs: [{ a: tokenLogprobs[0]! }],
                },
          finish_reason: finish,
          stop_reason: null,
          prompt_token_ids: prompt,
          token_ids: ids,
        },
      ],
    });
    const p = await prepare("completions", { prompt: "x", stream: true });
    const reader = vllm.stream(p);
    const forwarded = [
      chunk([40], [-0.5], [7, 8], null),
      chunk([41], null, null, null),
      chunk([], [], null, "abort"),
    ].map((c) => reader.chunk(c));
    assert.deepEqual(plain(reader.captures(true)), [
      {
        choiceIndex: 0,
        outputIds: [40, 41],
        finishReason: "abort",
        promptIds: [7, 8],
        logprobs: [-0.5, NaN],
        text: "aa",
      },
    ]);
    assert.deepEqual(
      forwarded.map((c) => (c!.choices as Record<string, unknown>[])[0]),
      [
        {
          index: 0,
          text: "a",
          logprobs: null,
          finish_reason: null,
          stop_reason: null,
          prompt_token_ids: null,
          token_ids: null,
        },
        {
          index: 0,
          text: "a",
          logprobs: null,
          finish_reason: null,
          stop_reason: null,
          prompt_token_ids: null,
          token_ids: null,
        },
        {
          index: 0,
          text: "",
          logprobs: null,
          finish_reason: "abort",
          stop_reason: null,
          prompt_token_ids: null,
          token_ids: null,
        },
      ],
    );
  });
});
