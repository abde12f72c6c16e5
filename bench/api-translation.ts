/**
 * What the API codecs (src/gateway/apis/) cost per call, in this process: a Messages or Responses request
 * translated to the canonical chat call, and its answer translated back, whole or as a stream of chunks.
 * Measured on two sizes of call: a short agent turn (the bench's 8-turn sessions) and a harness-sized one
 * (a 6 KB system prompt, 12 tools with 2.5 KB schemas, 40 turns of tool calls and results: about Claude
 * Code's or Codex's body). The Chat codec is measured beside them as the floor (it forwards the body as it
 * is). `npm run bench:gateway` prints this table first.
 */
import { Metrics } from "../src/core/metrics.ts";
import type { AgentApi, CallOutcome, Json } from "../src/gateway/apis/api.ts";
import { chatApi } from "../src/gateway/apis/chat.ts";
import { messagesApi } from "../src/gateway/apis/messages.ts";
import { responsesApi } from "../src/gateway/apis/responses.ts";

const settings = { upstreamModel: (m: string) => m, hostedTools: "refuse" as const, storedResponses: 16 };

const schema = (i: number) => ({
  type: "object",
  properties: Object.fromEntries(
    Array.from({ length: 12 }, (_, k) => [
      `arg${k}`,
      { type: "string", description: `argument ${k} of tool ${i} `.repeat(8) },
    ]),
  ),
  required: ["arg0"],
});

/** A conversation of `turns` tool calls and results after a user task, as chat-shaped pieces. */
function turnsOf(turns: number): Array<{ call: string; args: Json; result: string; text: string }> {
  return Array.from({ length: turns }, (_, i) => ({
    call: `call_${i}`,
    args: { arg0: `ls -la src/part${i}`, arg1: "x".repeat(80) },
    result: `output of step ${i}: `.repeat(20),
    text: `Step ${i}: looking at the next part.`,
  }));
}

function messagesBody(big: boolean): Json {
  const system = big ? "You are an agent. ".repeat(340) : "You are a careful agent.";
  const tools = big
    ? Array.from({ length: 12 }, (_, i) => ({
        name: `tool${i}`,
        description: `Tool ${i}. `.repeat(20),
        input_schema: schema(i),
      }))
    : undefined;
  const messages: Json[] = [{ role: "user", content: "Fix the failing test." }];
  for (const t of turnsOf(big ? 40 : 4)) {
    messages.push(
      big
        ? {
            role: "assistant",
            content: [
              { type: "text", text: t.text },
              { type: "tool_use", id: t.call, name: "tool0", input: t.args },
            ],
          }
        : { role: "assistant", content: t.text },
    );
    messages.push(
      big
        ? { role: "user", content: [{ type: "tool_result", tool_use_id: t.call, content: t.result }] }
        : { role: "user", content: t.result },
    );
  }
  return { model: "claude-sonnet-4-5", max_tokens: 4096, system, messages, ...(tools ? { tools } : {}) };
}

function responsesBody(big: boolean): Json {
  const tools = big
    ? Array.from({ length: 12 }, (_, i) => ({
        type: "function",
        name: `tool${i}`,
        description: `Tool ${i}. `.repeat(20),
        parameters: schema(i),
      }))
    : undefined;
  const input: Json[] = [{ role: "user", content: "Fix the failing test." }];
  for (const t of turnsOf(big ? 40 : 4)) {
    if (big) {
      input.push({ type: "message", role: "assistant", content: [{ type: "output_text", text: t.text }] });
      input.push({
        type: "function_call",
        call_id: t.call,
        name: "tool0",
        arguments: JSON.stringify(t.args),
      });
      input.push({ type: "function_call_output", call_id: t.call, output: t.result });
    } else {
      input.push({ role: "assistant", content: t.text }, { role: "user", content: t.result });
    }
  }
  return {
    model: "gpt-5-codex",
    instructions: big ? "You are an agent. ".repeat(340) : "You are a careful agent.",
    input,
    store: false,
    ...(tools ? { tools } : {}),
  };
}

function chatBody(big: boolean): Json {
  const m = messagesBody(big);
  return {
    model: "m",
    max_tokens: 4096,
    messages: [
      { role: "system", content: m.system },
      { role: "user", content: "Fix it." },
    ],
  };
}

/** An engine's whole answer: 60 tokens of text and a tool call. */
const answer: Json = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "m",
  choices: [
    {
      index: 0,
      message: {
        role: "assistant",
        content: "I will look at the failing test first, then the code it covers. ".repeat(4),
        tool_calls: [
          { id: "call_9", type: "function", function: { name: "tool0", arguments: '{"arg0": "npm test"}' } },
        ],
      },
      finish_reason: "tool_calls",
    },
  ],
  usage: { prompt_tokens: 20_000, completion_tokens: 80, total_tokens: 20_080 },
};

/** The same answer as 40 streamed chunks and a usage chunk. */
const chunks: Json[] = [
  ...Array.from({ length: 40 }, (_, i) => ({
    id: "c",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: { content: `word${i} ` }, finish_reason: null }],
  })),
  {
    id: "c",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [
      {
        index: 0,
        delta: {
          tool_calls: [
            {
              index: 0,
              id: "call_9",
              type: "function",
              function: { name: "tool0", arguments: '{"arg0": "npm test"}' },
            },
          ],
        },
        finish_reason: null,
      },
    ],
  },
  {
    id: "c",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }],
  },
  { id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: answer.usage },
];

const outcome: CallOutcome = {
  callIds: ["b-1"],
  captures: [{ choiceIndex: 0, outputIds: new Int32Array(80), finishReason: "tool_calls" }],
  promptLengths: [20_000],
};

export interface TranslationCost {
  api: string;
  size: "turn" | "harness";
  bodyKiB: number;
  wholeP50Us: number;
  wholeP99Us: number;
  streamP50Us: number;
  streamP99Us: number;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** One call's translation, both directions (the body parsed before: the server parses it whatever the API). */
function once(api: AgentApi, body: Json, stream: boolean): void {
  const call = api.request(body, { session: { responses: null }, settings, metrics: new Metrics() });
  if (!("body" in call)) throw new Error(`the bench's ${api.name} body was refused: ${call.message}`);
  if (!stream) {
    call.answer(answer, outcome);
    return;
  }
  const s = call.streamer("b-1");
  for (const c of chunks) s.chunk(c);
  s.end(outcome, true);
}

const WARMUP = 1_000;

export function translationCost(iterations = 2_000): TranslationCost[] {
  const out: TranslationCost[] = [];
  const cases: Array<[AgentApi, (big: boolean) => Json]> = [
    [chatApi, chatBody],
    [messagesApi, messagesBody],
    [responsesApi, responsesBody],
  ];
  for (const [api, make] of cases)
    for (const big of [false, true]) {
      const body = JSON.stringify(make(big));
      const time = (stream: boolean) => {
        const us: number[] = [];
        // 1,000 calls of warm-up: with 200, the first cases measured were still being compiled (run C's
        // in-bench figures were up to 1.7x those of a warmed process).
        for (let i = 0; i < iterations + WARMUP; i++) {
          const parsed = JSON.parse(body) as Json;
          const t0 = performance.now();
          once(api, parsed, stream);
          if (i >= WARMUP) us.push((performance.now() - t0) * 1000);
        }
        return us.sort((a, b) => a - b);
      };
      const whole = time(false);
      const stream = time(true);
      out.push({
        api: api.name,
        size: big ? "harness" : "turn",
        bodyKiB: body.length / 1024,
        wholeP50Us: quantile(whole, 0.5),
        wholeP99Us: quantile(whole, 0.99),
        streamP50Us: quantile(stream, 0.5),
        streamP99Us: quantile(stream, 0.99),
      });
    }
  return out;
}
