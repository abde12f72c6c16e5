/**
 * The gateway in front of a real vLLM (scripts/vllm.sh: vLLM's CPU build from PyPI, serving the tiny
 * random-weight Llama the project writes; VLLM_SERVER names another), in both prompt modes: `engine` (vLLM's
 * chat route renders each call) and `tokens` (the gateway sends token prompts to /v1/completions and parses
 * the hermes tool calls back). What each test holds the gateway to is vLLM's own account of the call:
 * - what the rows record is exactly what vLLM samples: every id and logprob of Chat, Completions, Messages
 *   and Responses calls, whole and streamed, equals a direct /v1/completions call on the same prompt ids with
 *   the same seed and sampling, and no logprob is missing;
 * - a stream is relayed as vLLM streams it: the agent's first chunk arrives while vLLM still runs the request
 *   (its /metrics), and the ids of every chunk are recorded;
 * - a client that leaves mid-stream cancels vLLM's request (vLLM's request log) and its tokens are recorded as
 *   an `abort`;
 * - forced tool calls (Chat `required` and a named tool, Messages `any`, Responses `required`) come back as
 *   tool calls in both modes: through vLLM's hermes tool parser in engine mode, through a grammar on
 *   /v1/completions (vLLM's structured outputs) in tokens mode, never through the chat route;
 * - a continued call in tokens mode hits vLLM's prefix cache, as its `prompt_tokens_details.cached_tokens`
 *   reports.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import { killRunning, startCli, type RunningCli } from "./helpers/cli.ts";
import { vllmServer } from "./helpers/engines.ts";
import { freePort, logEvents, recordedCall, waitUntil } from "./helpers/gateway.ts";
import { sseEvents } from "./helpers/sse.ts";

type Json = Record<string, unknown>;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-vllm-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

const MODES = ["engine", "tokens"] as const;
type Mode = (typeof MODES)[number];

interface Gateway {
  base: string;
  out: string;
  cli: RunningCli;
}

let vllm = "";
const gateways = new Map<Mode, Gateway>();

before(async () => {
  vllm = vllmServer();
  for (const mode of MODES) {
    const port = await freePort();
    const out = join(scratch, `rows-${mode}`);
    const cli = startCli([
      "gateway",
      ...["--upstream", vllm, "--engine", "vllm", "--listen", `127.0.0.1:${port}`, "--out", out],
      ...(mode === "tokens" ? ["--prompt-mode", "tokens", "--tool-parser", "hermes"] : []),
    ]);
    const base = `http://127.0.0.1:${port}`;
    await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
    gateways.set(mode, { base, out, cli });
  }
});
after(async () => {
  for (const g of gateways.values()) {
    g.cli.child.kill("SIGTERM");
    await g.cli.exited;
  }
});

async function post(url: string, body: unknown): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify(body),
  });
}

async function postJson(url: string, body: unknown): Promise<Json> {
  const response = await post(url, body);
  const json = (await response.json()) as Json;
  assert.equal(response.status, 200, JSON.stringify(json).slice(0, 2000));
  return json;
}

/** vLLM's /metrics as name{labels} -> value. */
async function vllmMetrics(): Promise<Map<string, number>> {
  const text = await (await fetch(`${vllm}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line === "") continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

const running = async () =>
  [...(await vllmMetrics()).entries()]
    .filter(([k]) => k.startsWith("vllm:num_requests_running"))
    .reduce((n, [, v]) => n + v, 0);

/** A call as gateway `g` recorded it (helpers/gateway.ts). */
const callEvents = (g: Gateway, callId: string) => recordedCall(join(g.out, "_events"), callId);

/**
 * Asserts that the recorded call is what vLLM samples for its prompt: a direct /v1/completions call on the
 * recorded prompt ids with the same seed, temperature and length gives the same ids and logprobs.
 */
async function assertSameAsDirect(
  g: Gateway,
  callId: string,
  sampling: { seed?: number; temperature: number; max_tokens: number; ignore_eos?: boolean },
): Promise<number> {
  const { response, prompt } = callEvents(g, callId);
  const ids = [...(decodeTokenIds(response.output_ids) as Int32Array)];
  assert.ok(response.logprobs !== undefined, `${callId}: no logprobs recorded`);
  const logprobs = [...(decodeLogprobs(response.logprobs) as Float32Array)];
  assert.deepEqual(
    logprobs.filter((lp) => Number.isNaN(lp)),
    [],
    `${callId}: a logprob is missing`,
  );
  const direct = await postJson(`${vllm}/v1/completions`, {
    model: "tiny",
    prompt,
    ...sampling,
    logprobs: 0,
    return_token_ids: true,
  });
  const choice = (direct.choices as Json[])[0]!;
  assert.deepEqual(ids, choice.token_ids, `${callId}: sampled ids`);
  const directLps = ((choice.logprobs as Json).token_logprobs as number[]).map((v) => Math.fround(v));
  assert.deepEqual(logprobs, directLps, `${callId}: logprobs`);
  assert.ok(ids.length > 0);
  return ids.length;
}

/** Reads a stream to its end; returns the call id and the events (name, data) in order. */
async function readStream(
  response: Response,
): Promise<{ callId: string; events: Array<{ event?: string; data: Json }> }> {
  assert.equal(response.status, 200);
  const callId = response.headers.get("x-trajflow-call-id")!;
  const events: Array<{ event?: string; data: Json }> = [];
  for await (const e of sseEvents(response)) events.push(e);
  return { callId, events };
}

const TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
// A quote (byte token 34) likelier, so the random model ends a forced call's strings soon.
const QUOTE_BIAS = { "34": 6 };

for (const mode of MODES) {
  describe(`gateway in front of vLLM, prompt mode ${mode}`, () => {
    const g = () => gateways.get(mode)!;
    const url = (session: string, path: string) => `${g().base}/sessions/${mode}-${session}${path}`;

    it("records exactly what vLLM samples for Chat and Completions, whole and streamed: the same ids and logprobs as a direct call", async () => {
      const sampling = { seed: 11, temperature: 1, max_tokens: 24 };
      const messages = [{ role: "user", content: "Wie ist das Wetter in Zürich? 天气怎么样？" }];
      const whole = await post(url("chat", "/v1/chat/completions"), { model: "tiny", messages, ...sampling });
      assert.equal(whole.status, 200);
      const answer = (await whole.json()) as Json;
      // The agent asked for neither ids nor logprobs: it gets none.
      assert.equal((answer.choices as Json[])[0]!.logprobs, null);
      assert.equal(answer.prompt_token_ids ?? null, null);
      const n = await assertSameAsDirect(g(), whole.headers.get("x-trajflow-call-id")!, sampling);
      assert.equal((answer.usage as Json).completion_tokens, n);

      const streamed = await readStream(
        await post(url("chat-stream", "/v1/chat/completions"), {
          model: "tiny",
          messages,
          ...sampling,
          seed: 12,
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
      await assertSameAsDirect(g(), streamed.callId, { ...sampling, seed: 12 });

      const prompt = "The quick brown fox";
      const completion = await post(url("completions", "/v1/completions"), {
        model: "tiny",
        prompt,
        ...sampling,
      });
      assert.equal(completion.status, 200);
      await assertSameAsDirect(g(), completion.headers.get("x-trajflow-call-id")!, sampling);
      const completionStream = await readStream(
        await post(url("completions-stream", "/v1/completions"), {
          model: "tiny",
          prompt,
          ...sampling,
          stream: true,
        }),
      );
      await assertSameAsDirect(g(), completionStream.callId, sampling);
    });

    it("records exactly what vLLM samples for Messages and Responses, whole and streamed", async () => {
      // Neither API has a seed: greedy sampling makes the direct call comparable.
      const sampling = { temperature: 0, max_tokens: 20 };
      const messages = await post(url("messages", "/v1/messages"), {
        model: "tiny",
        max_tokens: 20,
        temperature: 0,
        system: "You are terse.",
        messages: [{ role: "user", content: "Say hi." }],
      });
      const m = (await messages.json()) as Json;
      assert.equal(messages.status, 200, JSON.stringify(m));
      assert.equal(m.type, "message");
      await assertSameAsDirect(g(), messages.headers.get("x-trajflow-call-id")!, sampling);
      const messagesStream = await readStream(
        await post(url("messages-stream", "/v1/messages"), {
          model: "tiny",
          max_tokens: 20,
          temperature: 0,
          stream: true,
          messages: [{ role: "user", content: "Say hello." }],
        }),
      );
      assert.deepEqual(
        [messagesStream.events[0]!.event, messagesStream.events.at(-1)!.event],
        ["message_start", "message_stop"],
      );
      await assertSameAsDirect(g(), messagesStream.callId, sampling);

      const responses = await post(url("responses", "/v1/responses"), {
        model: "tiny",
        input: "Say hi.",
        max_output_tokens: 20,
        temperature: 0,
      });
      const r = (await responses.json()) as Json;
      assert.equal(responses.status, 200, JSON.stringify(r));
      assert.equal(r.object, "response");
      await assertSameAsDirect(g(), responses.headers.get("x-trajflow-call-id")!, sampling);
      const responsesStream = await readStream(
        await post(url("responses-stream", "/v1/responses"), {
          model: "tiny",
          input: "Say hello.",
          max_output_tokens: 20,
          temperature: 0,
          stream: true,
        }),
      );
      await assertSameAsDirect(g(), responsesStream.callId, sampling);
    });

    it("ends a Responses stream cut at max_output_tokens as incomplete, as the whole answer says", async () => {
      for (let seed = 1; seed <= 6; seed++) {
        const body = { model: "tiny", input: `Tell me a story (${seed}).`, max_output_tokens: 12, seed };
        const whole = await postJson(url(`cut-${seed}`, "/v1/responses"), body);
        const stream = await readStream(
          await post(url(`cut-stream-${seed}`, "/v1/responses"), { ...body, stream: true }),
        );
        const last = stream.events.at(-1)!;
        assert.equal(whole.status, "incomplete", `seed ${seed}`);
        assert.equal(
          last.event,
          "response.incomplete",
          `seed ${seed}: ${JSON.stringify(stream.events.map((e) => e.event))}`,
        );
        assert.deepEqual((last.data.response as Json).incomplete_details, { reason: "max_output_tokens" });
      }
    });

    it("relays a stream chunk by chunk: the agent's first chunk arrives while vLLM is still generating", async () => {
      const response = await post(url("relay", "/v1/chat/completions"), {
        model: "tiny",
        messages: [{ role: "user", content: "Talk for a while." }],
        max_tokens: 1500,
        ignore_eos: true,
        seed: 5,
        stream: true,
      });
      assert.equal(response.status, 200);
      const callId = response.headers.get("x-trajflow-call-id")!;
      let chunks = 0;
      let stillRunning: boolean | undefined;
      for await (const { data } of sseEvents(response)) {
        const delta = ((data.choices as Json[] | undefined)?.[0]?.delta ?? {}) as Json;
        if (typeof delta.content !== "string" || delta.content === "") continue;
        chunks++;
        // At the first chunk with text, vLLM has the request in its running batch: 1500 tokens take seconds.
        if (chunks === 1) stillRunning = (await running()) >= 1;
      }
      assert.equal(stillRunning, true, "vLLM had finished before the agent's first chunk");
      const n = await assertSameAsDirect(g(), callId, {
        seed: 5,
        temperature: 1,
        max_tokens: 1500,
        ignore_eos: true,
      });
      assert.equal(n, 1500);
      // Relayed as vLLM streams it (a chunk per token or few), not one chunk at the end.
      assert.ok(chunks > 100, `${chunks} chunks for 1500 tokens`);
    });

    it("cancels vLLM's request when the agent leaves mid-stream, and records what was sampled as an abort", async () => {
      const controller = new AbortController();
      const response = await fetch(url("abort", "/v1/chat/completions"), {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "tiny",
          messages: [{ role: "user", content: "Talk forever." }],
          max_tokens: 60_000,
          ignore_eos: true,
          stream: true,
        }),
        signal: controller.signal,
      });
      const callId = response.headers.get("x-trajflow-call-id")!;
      let requestId = "";
      let seen = 0;
      try {
        for await (const { data } of sseEvents(response)) {
          requestId = data.id as string;
          if (++seen === 5) controller.abort();
        }
      } catch (e) {
        assert.equal((e as Error).name, "AbortError");
      }
      // vLLM's own account: the request it ran for this call was aborted. Its log is where vLLM 0.32 says
      // so: its /metrics does not count a client's abort (request_success_total{finished_reason="abort"}
      // stayed 0 with two aborts logged, measured 2026-12-02, and no other series names them).
      const log = join(process.env.TRAJFLOW_VLLM_LOG ?? defaultVllmLog());
      // The completions route runs prompt i as request `<id>-<i>`.
      const aborted = new RegExp(`Request ${requestId}(-\\d+)? aborted\\.`);
      await waitUntil(() => aborted.test(readFileSync(log, "utf8")), 60_000);
      // The gateway recorded the tokens sampled before the agent left, as an abort (never a stop).
      await waitUntil(() =>
        logEvents(join(g().out, "_events")).some((e) => e.type === "response" && e.call_id === callId),
      );
      const { response: event } = callEvents(g(), callId);
      assert.equal(event.finish_reason, "abort");
      const ids = decodeTokenIds(event.output_ids) as Int32Array;
      assert.ok(ids.length >= 1 && ids.length < 60_000, `${ids.length} tokens recorded`);
    });

    it("answers forced tool calls with tool calls: Chat required and named, Messages any and named, Responses required", async () => {
      const messages = [{ role: "user", content: "What is the weather in Paris?" }];
      const forced = ["required", { type: "function", function: { name: "get_weather" } }];
      for (const [i, tool_choice] of forced.entries()) {
        const answer = await postJson(url(`tool-${i}`, "/v1/chat/completions"), {
          model: "tiny",
          messages,
          tools: [TOOL],
          tool_choice,
          max_tokens: 200,
          seed: 3,
          logit_bias: QUOTE_BIAS,
        });
        const choice = (answer.choices as Json[])[0]!;
        const calls = (choice.message as Json).tool_calls as Json[];
        assert.equal(calls.length >= 1, true, JSON.stringify(choice));
        assert.equal((calls[0]!.function as Json).name, "get_weather");
        if (mode === "tokens")
          assert.equal(
            typeof (JSON.parse((calls[0]!.function as Json).arguments as string) as Json).city,
            "string",
          );
        // A named tool ends with `stop` on vLLM's chat route, as OpenAI's API does; `required` with tool_calls.
        if (tool_choice === "required") assert.equal(choice.finish_reason, "tool_calls");
      }
      // Messages, a named tool and `any`: in tokens mode the gateway's grammar holds the arguments to the
      // tool's schema, in engine mode vLLM's (scripts/vllm.sh: --tool-strict-level parameter).
      // One call (parallel calls off): a random model keeps calling until max_tokens cuts it.
      const messageChoices: Json[] = [
        { type: "tool", name: "get_weather" },
        { type: "any", disable_parallel_tool_use: true },
      ];
      for (const [i, tool_choice] of messageChoices.entries()) {
        const response = await post(url(`tool-messages-${i}`, "/v1/messages"), {
          model: "tiny",
          max_tokens: 200,
          messages,
          tools: [
            { name: "get_weather", description: "The weather", input_schema: TOOL.function.parameters },
          ],
          tool_choice,
          logit_bias: QUOTE_BIAS,
          // Passed through to vLLM like logit_bias: the same answer every run.
          seed: 4,
        });
        const m = (await response.json()) as Json;
        assert.equal(response.status, 200, JSON.stringify(m));
        const { response: event } = callEvents(g(), response.headers.get("x-trajflow-call-id")!);
        const recorded = (event.tool_calls ?? []) as Json[];
        assert.ok(recorded.length >= 1, JSON.stringify(event));
        assert.ok(
          recorded.every((c) => (c.function as Json).name === "get_weather"),
          JSON.stringify(recorded),
        );
        const uses = (m.content as Json[]).filter((b) => b.type === "tool_use");
        assert.ok(uses.length >= 1 && uses.every((b) => b.name === "get_weather"), JSON.stringify(m));
        assert.equal(typeof (uses[0]!.input as Json).city, "string", JSON.stringify(m));
        assert.equal(m.stop_reason, "tool_use");
      }
      const responses = await post(url("tool-responses", "/v1/responses"), {
        model: "tiny",
        input: "What is the weather in Paris?",
        tools: [{ type: "function", name: "get_weather", parameters: TOOL.function.parameters }],
        tool_choice: "required",
        parallel_tool_calls: false,
        max_output_tokens: 200,
        logit_bias: QUOTE_BIAS,
        seed: 4,
      });
      const r = (await responses.json()) as Json;
      assert.equal(responses.status, 200, JSON.stringify(r));
      const recorded = (callEvents(g(), responses.headers.get("x-trajflow-call-id")!).response.tool_calls ??
        []) as Json[];
      assert.deepEqual(
        recorded.map((c) => (c.function as Json).name),
        ["get_weather"],
      );
      const call = (r.output as Json[]).find((o) => o.type === "function_call");
      assert.equal(call?.name, "get_weather", JSON.stringify(r));
      assert.equal(typeof (JSON.parse(call.arguments as string) as Json).city, "string");
      // In tokens mode none of them went to vLLM's chat route: the grammar went to /v1/completions.
      const metrics = await (await fetch(`${g().base}/metrics`)).text();
      if (mode === "tokens")
        assert.doesNotMatch(metrics, /trajflow_gateway_chat_route_calls_total\{reason="tool_choice"\}/);
    });

    it("reports vLLM's prefix cache hit for a session's next call (prompt_tokens_details.cached_tokens)", async () => {
      // vLLM caches whole blocks (128 tokens on CPU): a system prompt of a few hundred tokens fills some.
      const system = "You are a careful assistant. Answer in full sentences. ".repeat(12);
      const history: Json[] = [
        { role: "system", content: system },
        { role: "user", content: "Count to three, slowly, in three languages." },
      ];
      const first = await postJson(url("cache", "/v1/chat/completions"), {
        model: "tiny",
        messages: history,
        max_tokens: 16,
        seed: 1,
      });
      history.push({ role: "assistant", content: ((first.choices as Json[])[0]!.message as Json).content });
      history.push({ role: "user", content: "Again." });
      const second = await postJson(url("cache", "/v1/chat/completions"), {
        model: "tiny",
        messages: history,
        max_tokens: 16,
        seed: 2,
      });
      const usage = second.usage as Json;
      const cached = (usage.prompt_tokens_details as Json | null)?.cached_tokens as number;
      assert.ok(
        cached > 0 && cached <= (usage.prompt_tokens as number),
        `cached_tokens ${cached} of ${usage.prompt_tokens as number}`,
      );
    });
  });
}

/** Where scripts/vllm.sh writes the server's log (its default directory for the default port). */
function defaultVllmLog(): string {
  const port = new URL(vllm).port;
  return new URL(`../.cache/vllm/run-${port}/server.log`, import.meta.url).pathname;
}
