/**
 * The llama.cpp adapter against a real llama-server (scripts/llama.sh: built from the llama-cpp-python sdist,
 * serving the tiny generated model; LLAMA_SERVER names another). What the adapter captures is checked against
 * what the server itself reports: `usage.completion_tokens`, its logprob entries, `/apply-template` and
 * `/tokenize`, and the answer the same request gets without the gateway's additions.
 */
import { strict as assert } from "node:assert";
import { before, describe, it } from "node:test";
import type { Capture, PreparedCall, UpstreamJson } from "../src/gateway/engines/engine.ts";
import { LlamaCppAdapter } from "../src/gateway/engines/llamacpp.ts";
import { llamaServer } from "./helpers/llama.ts";
import { sseData } from "./helpers/sse.ts";

type Json = Record<string, unknown>;
let base = "";

async function post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  const response = await fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  return response;
}

const upstream: UpstreamJson = async (path, body, signal) => {
  const response = await post(path, body, signal);
  const json = (await response.json()) as unknown;
  if (!response.ok) throw new Error(`${path} answered ${response.status}: ${JSON.stringify(json)}`);
  return json;
};

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

/** A conversation with a tool call and its result in the history: the template renders both. */
function toolConversation(seed: number): Json {
  return {
    model: "tiny",
    messages: [
      { role: "system", content: "You answer about the weather." },
      { role: "user", content: "Wie ist das Wetter in Zürich? 天气怎么样？" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          {
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city": "Zürich"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: '{"temperature": 21, "sky": "☀️"}' },
      { role: "user", content: "Und morgen?" },
    ],
    tools: TOOLS,
    max_tokens: 40,
    temperature: 1,
    seed,
    // Each call computes its whole prompt: the same request then samples the same tokens (used below to
    // compare with the answer the gateway's additions must not change).
    cache_prompt: false,
  };
}

/** The prompt as the server renders and tokenizes it, asked here directly. */
async function serverPrompt(body: Json): Promise<{ text: string; ids: number[] }> {
  const { prompt } = (await upstream("/apply-template", body)) as { prompt: string };
  const { tokens } = (await upstream("/tokenize", {
    content: prompt,
    add_special: true,
    parse_special: true,
  })) as {
    tokens: number[];
  };
  return { text: prompt, ids: tokens };
}

interface Entry {
  id: number;
  logprob: number;
}
const entriesOf = (choice: Json): Entry[] =>
  ((choice.logprobs as { content?: Entry[] } | null)?.content ?? []) as Entry[];

/** The engine's entries, in order, are the capture's logprobs where it has one (and at ids equal to theirs). */
function assertEntriesPlaced(capture: Capture, entries: Entry[]): void {
  const placed: Entry[] = [];
  capture.logprobs!.forEach((lp, i) => {
    if (!Number.isNaN(lp)) placed.push({ id: capture.outputIds[i]!, logprob: lp });
  });
  assert.deepEqual(
    placed,
    entries.map((e) => ({ id: e.id, logprob: Math.fround(e.logprob) })),
  );
}

/** An answer without the fields that differ between two identical requests (time, ids, speed). */
function comparable(json: Json): Json {
  const { created: _c, id: _i, timings: _t, ...rest } = json;
  return rest;
}

describe("llama.cpp adapter against llama-server", () => {
  before(() => {
    base = llamaServer();
  });

  it("captures every sampled id of a whole chat call with tools, its prompt, and the engine's logprobs where it gave them", async () => {
    const adapter = new LlamaCppAdapter();
    // Seeds until an answer split a UTF-8 character over tokens (the tiny model samples single bytes
    // often: the first seeds do); every answer is checked on the way.
    let split: { ids: number; entries: number } | undefined;
    for (let seed = 1; seed <= 12 && split === undefined; seed++) {
      const body = toolConversation(seed);
      const prepared: PreparedCall = await adapter.prepare("chat", body, upstream);
      const json = (await upstream(prepared.path, prepared.body)) as Json;
      const { captures, forAgent } = adapter.answer(prepared, json);
      await adapter.complete(prepared, captures, upstream);
      const usage = json.usage as { completion_tokens: number; prompt_tokens: number };
      assert.equal(captures.length, 1);
      const capture = captures[0]!;
      assert.equal(capture.outputIds.length, usage.completion_tokens);
      assert.equal(capture.missingIds, undefined);
      const prompt = await serverPrompt(body);
      assert.deepEqual(Array.from(capture.promptIds!), prompt.ids);
      assert.equal(prompt.ids.length, usage.prompt_tokens);
      const choice = (json.choices as Json[])[0]!;
      const entries = entriesOf(choice);
      assertEntriesPlaced(capture, entries);
      assert.equal(capture.finishReason, choice.finish_reason);
      // What the agent gets is what the same request gets from the server without the gateway.
      const plain = (await upstream("/v1/chat/completions", body)) as Json;
      assert.deepEqual(comparable(forAgent), comparable(plain));
      if (entries.length < capture.outputIds.length)
        split = { ids: capture.outputIds.length, entries: entries.length };
    }
    assert.notEqual(split, undefined, "no answer split a UTF-8 character in 12 seeds");
  });

  it("captures a tool call the server parsed, with the same answer the agent would get without the gateway", async () => {
    // The random model does not write tool calls by itself: the call continues an assistant message that
    // holds one (llama-server's prefill) and the end of turn is made certain, so the answer is the parsed
    // call (finish reason tool_calls) after one sampled token.
    const adapter = new LlamaCppAdapter();
    const conversation = toolConversation(5);
    const body = {
      ...conversation,
      messages: [
        ...(conversation.messages as Json[]),
        {
          role: "assistant",
          content: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>',
        },
      ],
      logit_bias: [[460, 100]],
    };
    const prepared = await adapter.prepare("chat", body, upstream);
    const json = (await upstream(prepared.path, prepared.body)) as Json;
    const { captures, forAgent } = adapter.answer(prepared, json);
    const capture = captures[0]!;
    const choice = (json.choices as Json[])[0]!;
    assert.equal(capture.finishReason, "tool_calls");
    assert.deepEqual(capture.outputIds, Int32Array.of(460));
    assert.equal(capture.outputIds.length, (json.usage as { completion_tokens: number }).completion_tokens);
    assert.deepEqual(capture.toolCalls, (choice.message as Json).tool_calls);
    assert.deepEqual(
      (capture.toolCalls as Array<{ function: unknown }>).map((c) => c.function),
      [{ name: "get_weather", arguments: '{"city": "Zürich"}' }],
    );
    assert.deepEqual(Array.from(capture.promptIds!), (await serverPrompt(body)).ids);
    assertEntriesPlaced(capture, entriesOf(choice));
    // The plain request's answer differs only in its time, id and tool-call id (random per answer).
    const plain = (await upstream("/v1/chat/completions", body)) as Json;
    const withoutCallIds = (j: Json) => {
      const c = comparable(j);
      for (const ch of c.choices as Array<{ message: { tool_calls: Json[] } }>) {
        for (const t of ch.message.tool_calls) delete t.id;
      }
      return c;
    };
    assert.deepEqual(withoutCallIds(structuredClone(forAgent)), withoutCallIds(plain));
  });

  it("captures a relayed stream (streams: relay): ids where the stream reported them, the gaps marked, the same tokens as the whole call", async () => {
    const adapter = new LlamaCppAdapter({ streams: "relay" });
    let gaps = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const body = { ...toolConversation(seed), stream: true, stream_options: { include_usage: true } };
      const prepared = await adapter.prepare("chat", body, upstream);
      const reader = adapter.stream(prepared);
      const response = await post(prepared.path, prepared.body);
      assert.equal(response.status, 200);
      const raw: Json[] = [];
      const forwarded: Json[] = [];
      for await (const data of sseData(response)) {
        raw.push(data);
        const out = reader.chunk(structuredClone(data));
        if (out !== undefined) forwarded.push(out);
      }
      const [capture] = reader.captures(true);
      const usage = raw.at(-1)!.usage as { completion_tokens: number };
      assert.equal(capture!.outputIds.length, usage.completion_tokens);
      // Each reported entry sits at the position the chunk's timings give, with its logprob.
      let reported = 0;
      for (const data of raw) {
        for (const choice of (data.choices as Json[]) ?? []) {
          for (const e of entriesOf(choice)) {
            const at = (data.timings as { predicted_n: number }).predicted_n - 1;
            assert.equal(capture!.outputIds[at], e.id);
            assert.equal(capture!.logprobs![at], Math.fround(e.logprob));
            reported++;
          }
        }
      }
      assert.equal((capture!.missingIds?.length ?? 0) + reported, usage.completion_tokens);
      gaps += capture!.missingIds?.length ?? 0;
      assert.deepEqual(Array.from(capture!.promptIds!), (await serverPrompt(body)).ids);
      // The agent gets the chunks without logprobs, and timings only where the server always sends them.
      for (const out of forwarded) {
        for (const choice of (out.choices as Json[]) ?? []) assert.equal("logprobs" in choice, false);
        if ("timings" in out) {
          const choices = out.choices as Json[];
          assert.ok(choices.length === 0 || choices.some((c) => c.finish_reason !== null));
        }
      }
      // The same request whole (same seed, prompt computed afresh) samples the same tokens: the stream's
      // reported ids are those tokens at those positions, and the gaps are real tokens it left out.
      const whole = { ...toolConversation(seed) };
      const wholePrepared = await adapter.prepare("chat", whole, upstream);
      const wholeJson = (await upstream(wholePrepared.path, wholePrepared.body)) as Json;
      const wholeIds = adapter.answer(wholePrepared, wholeJson).captures[0]!.outputIds;
      assert.equal(wholeIds.length, capture!.outputIds.length);
      capture!.outputIds.forEach((id, i) => {
        if (id !== -1) assert.equal(id, wholeIds[i]);
      });
    }
    assert.ok(gaps > 0, "no stream in 6 seeds left a token unreported");
  });

  it("captures a completions call with a text prompt, whole and relayed, and a stream cut short as abort", async () => {
    const adapter = new LlamaCppAdapter({ streams: "relay" });
    const body = { model: "tiny", prompt: "Grüße aus Köln: ", max_tokens: 24, temperature: 1, seed: 3 };
    const prepared = await adapter.prepare("completions", body, upstream);
    const json = (await upstream(prepared.path, prepared.body)) as Json;
    const { captures, forAgent } = adapter.answer(prepared, json);
    await adapter.complete(prepared, captures, upstream);
    const usage = json.usage as { completion_tokens: number; prompt_tokens: number };
    assert.equal(captures[0]!.outputIds.length, usage.completion_tokens);
    const { tokens } = (await upstream("/tokenize", {
      content: body.prompt,
      add_special: true,
      parse_special: true,
    })) as {
      tokens: number[];
    };
    assert.deepEqual(Array.from(captures[0]!.promptIds!), tokens);
    assertEntriesPlaced(captures[0]!, entriesOf((json.choices as Json[])[0]!));
    assert.equal((forAgent.choices as Json[])[0]!.logprobs, null);
    assert.equal("__verbose" in forAgent, false);

    // A stream the agent leaves after three chunks: what was sampled so far, finish reason abort.
    const streamed = await adapter.prepare(
      "completions",
      { ...body, stream: true, max_tokens: 200 },
      upstream,
    );
    const reader = adapter.stream(streamed);
    const abort = new AbortController();
    const response = await post(streamed.path, streamed.body, abort.signal);
    let seen = 0;
    try {
      for await (const data of sseData(response)) {
        reader.chunk(data);
        if (++seen === 3) abort.abort();
      }
    } catch (error) {
      assert.equal((error as Error).name, "AbortError");
    }
    const [cut] = reader.captures(false);
    assert.equal(cut!.finishReason, "abort");
    assert.ok(cut!.outputIds.length >= 3);
  });
});
