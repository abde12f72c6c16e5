/**
 * Generates examples/sessions.jsonl: recorded gateway events of realistic agent sessions, tokenized with
 * a real BPE tokenizer (gpt-tokenizer's cl100k vocabulary) and a ChatML chat template. Deterministic: the
 * same code writes the same bytes (a test checks the committed file is current).
 *
 *   node examples/generate.ts            # writes examples/sessions.jsonl
 *   node examples/generate.ts --check    # fails when the committed file is stale
 *
 * Scenarios: a GRPO group of two tool-using math sessions (full prompts), a main agent with an
 * interleaved research sub-agent (delta form, packed arrays), a branch after a shared turn, a retry
 * after a timeout, retokenization drift from a reasoning template, and rewards (per call, per session,
 * a redelivered one, one inside the grace period).
 */
import { mulberry32 } from "../test/helpers/prng.ts";
import { readFileSync, writeFileSync } from "node:fs";
import { encode } from "gpt-tokenizer/model/gpt-3.5-turbo";
import { packLogprobs, packTokenIds } from "../src/schemas/tokens.ts";

type Message = { role: string; content: string; tool_calls?: unknown[]; tool_call_id?: string };
type Event = Record<string, unknown>;

const tok = (text: string): number[] => encode(text, { allowedSpecial: "all" });
const renderMessage = (m: Message): string => {
  const calls = (m.tool_calls ?? []).map(
    (c) => `\n<tool_call>${JSON.stringify((c as { function: unknown }).function)}</tool_call>`,
  );
  return `<|im_start|>${m.role}\n${m.content}${calls.join("")}<|im_end|>\n`;
};
const GEN_PROMPT = "<|im_start|>assistant\n";
/** The chat template over a whole message list (how a re-rendering gateway builds prompts). */
const render = (messages: Message[], dropThinking = false): number[] =>
  tok(
    messages
      .map((m) =>
        renderMessage(
          dropThinking && m.role === "assistant"
            ? { ...m, content: m.content.replace(/<think>[\s\S]*?<\/think>/g, "") }
            : m,
        ),
      )
      .join("") + GEN_PROMPT,
  );

const random = mulberry32(20260101);
const logprobsFor = (ids: number[]): number[] => ids.map(() => Math.fround(-Math.pow(random(), 3) * 4));

const T0 = Date.UTC(2026, 0, 1);

class Recorder {
  readonly events: Event[] = [];
  private seq = 0;
  ts: number;
  readonly uid: string;
  readonly sessionId: string;
  readonly packed: boolean;
  constructor(uid: string, sessionId: string, start: number, packed = false) {
    this.uid = uid;
    this.sessionId = sessionId;
    this.ts = start;
    this.packed = packed;
  }
  private ids(ids: number[]): unknown {
    return this.packed ? packTokenIds(ids) : ids;
  }
  emit(type: string, fields: Event): void {
    this.events.push({
      v: 1,
      type,
      session_id: this.sessionId,
      uid: this.uid,
      seq: this.seq++,
      ts: this.ts,
      ...fields,
    });
    this.ts += 250;
  }
  start(fields: Event = {}): void {
    this.emit("session.start", fields);
  }
  /** One model call: request then response; returns the output ids. */
  call(
    callId: string,
    prompt: { ids: number[] } | { parent: string; delta: number[] },
    output: string,
    opts: {
      messages?: Message[];
      finish?: string;
      toolCalls?: unknown[];
      weight?: number;
      choice?: number;
    } = {},
  ): number[] {
    const outIds = tok(output + "<|im_end|>");
    const promptFields =
      "ids" in prompt
        ? { prompt_ids: this.ids(prompt.ids) }
        : { parent_call_id: prompt.parent, prompt_delta_ids: this.ids(prompt.delta) };
    this.emit("request", {
      call_id: callId,
      ...promptFields,
      ...(opts.messages !== undefined ? { messages: opts.messages } : {}),
      ...(opts.choice !== undefined ? { choice_index: opts.choice } : {}),
      weight_version: opts.weight ?? 12,
    });
    const lps = logprobsFor(outIds);
    this.emit("response", {
      call_id: callId,
      output_ids: this.ids(outIds),
      logprobs: this.packed ? packLogprobs(lps) : lps,
      finish_reason: opts.finish ?? (opts.toolCalls !== undefined ? "tool_calls" : "stop"),
      weight_version: opts.weight ?? 12,
      text: output,
      ...(opts.toolCalls !== undefined ? { tool_calls: opts.toolCalls } : {}),
    });
    return outIds;
  }
}

const toolCall = (name: string, args: Record<string, unknown>) => ({
  id: `call_${name}`,
  type: "function",
  function: { name, arguments: JSON.stringify(args) },
});

const all: Event[] = [];

// 1. A GRPO group: two rollouts of one math task, tool loop, full prompts built incrementally.
for (const [sample, correct] of [
  [0, true],
  [1, false],
] as const) {
  const r = new Recorder("gsm8k-0042", `rollout-${sample}`, T0 + sample * 40);
  r.start({ sample_index: sample, group_size: 2, metadata: { reference: "391" } });
  const system: Message = {
    role: "system",
    content: "You are a careful math assistant. Use the calculator tool for arithmetic.",
  };
  const user: Message = {
    role: "user",
    content: "A crate holds 17 rows of 23 apples. How many apples are in the crate?",
  };
  let prompt = render([system, user]);
  const args = correct ? { expression: "17 * 23" } : { expression: "17 + 23" };
  const turn1 = `I'll compute the total with the calculator.`;
  const out1 = r.call("c1", { ids: prompt }, turn1, {
    toolCalls: [toolCall("calculator", args)],
    messages: [system, user],
  });
  const toolResult: Message = {
    role: "tool",
    content: correct ? "391" : "40",
    tool_call_id: "call_calculator",
  };
  prompt = [...prompt, ...out1, ...tok("\n" + renderMessage(toolResult) + GEN_PROMPT)];
  const answer = correct ? "The crate holds 17 × 23 = 391 apples." : "The crate holds 40 apples.";
  r.call("c2", { ids: prompt }, answer, {
    messages: [
      system,
      user,
      { role: "assistant", content: turn1, tool_calls: [toolCall("calculator", args)] },
      toolResult,
    ],
  });
  r.emit("reward", { value: correct ? 1 : 0, stage: "env", key: "final", info: { checker: "exact_match" } });
  r.emit("session.end", { status: "ok" });
  all.push(...r.events);
}

// 2. A main agent with an interleaved research sub-agent; delta form and packed arrays.
{
  const r = new Recorder("swe-0007", "main", T0 + 5_000, true);
  r.start({ sample_index: 0, group_size: 1 });
  const mainSys = tok(
    renderMessage({ role: "system", content: "You are a software engineer fixing a failing test." }),
  );
  const mainUser = tok(
    renderMessage({ role: "user", content: "tests/test_dates.py::test_leap_year fails. Fix it." }) +
      GEN_PROMPT,
  );
  const subSys = tok(
    renderMessage({ role: "system", content: "You are a research sub-agent. Answer briefly from the docs." }),
  );
  const subUser = tok(
    renderMessage({ role: "user", content: "How does calendar.isleap treat the year 1900?" }) + GEN_PROMPT,
  );
  r.call(
    "m1",
    { ids: [...mainSys, ...mainUser] },
    "Let me ask the research agent about leap-year rules first.",
    {
      toolCalls: [toolCall("spawn_researcher", { question: "isleap 1900" })],
    },
  );
  r.call(
    "r1",
    { ids: [...subSys, ...subUser] },
    "calendar.isleap(1900) is False: centuries are leap years only if divisible by 400.",
  );
  r.call(
    "m2",
    {
      parent: "m1",
      delta: tok(
        "\n" +
          renderMessage({
            role: "tool",
            content: "1900 is not a leap year (divisible by 100, not by 400).",
          }) +
          GEN_PROMPT,
      ),
    },
    "The helper treats every year divisible by 4 as leap. I'll add the century rule.",
    {
      toolCalls: [
        toolCall("edit_file", {
          path: "dates.py",
          patch: "return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)",
        }),
      ],
    },
  );
  r.call(
    "r2",
    { parent: "r1", delta: tok("\n" + renderMessage({ role: "user", content: "And 2000?" }) + GEN_PROMPT) },
    "2000 is a leap year: it is divisible by 400.",
  );
  r.call(
    "m3",
    {
      parent: "m2",
      delta: tok("\n" + renderMessage({ role: "tool", content: "1 passed in 0.02s" }) + GEN_PROMPT),
    },
    "The test passes now.",
  );
  r.emit("reward", { value: 1, stage: "env", key: "tests", info: { passed: 1, failed: 0 } });
  r.emit("session.end", { status: "ok" });
  all.push(...r.events);
}

// 3. A branch: the same tool call run twice with different results (a flaky tool), both continued.
{
  const r = new Recorder("web-0311", "s0", T0 + 9_000);
  r.start({ sample_index: 0, group_size: 1 });
  const prompt = render([
    { role: "system", content: "You browse the web to answer questions." },
    { role: "user", content: "What is the boiling point of water at the top of Mount Everest?" },
  ]);
  const out1 = r.call("c1", { ids: prompt }, "Searching.", {
    toolCalls: [toolCall("search", { q: "boiling point water Everest" })],
  });
  const ok = [
    ...prompt,
    ...out1,
    ...tok("\n" + renderMessage({ role: "tool", content: "About 70 °C (158 °F) at 8,849 m." }) + GEN_PROMPT),
  ];
  const failed = [
    ...prompt,
    ...out1,
    ...tok("\n" + renderMessage({ role: "tool", content: "Error: timeout" }) + GEN_PROMPT),
  ];
  r.call("c2a", { ids: failed }, "The search timed out; I'll answer from memory: roughly 70 °C.");
  r.call("c2b", { ids: ok }, "Water boils at about 70 °C on the summit of Everest.");
  r.emit("reward", { value: 0.8, stage: "judge" });
  r.emit("session.end", { status: "ok" });
  all.push(...r.events);
}

// 4. A retry: the first attempt was aborted by a weight update, the agent retried the same prompt.
{
  const r = new Recorder("gsm8k-0099", "s0", T0 + 12_000);
  r.start({ sample_index: 0, group_size: 1 });
  const prompt = render([{ role: "user", content: "What is 12 squared?" }]);
  r.call("c1", { ids: prompt }, "12 squared", { finish: "abort", weight: 12 });
  const out = r.call("c1-retry", { ids: prompt }, "12 squared is 144.", { weight: 13 });
  r.call(
    "c2",
    {
      ids: [
        ...prompt,
        ...out,
        ...tok("\n" + renderMessage({ role: "user", content: "And 13 squared?" }) + GEN_PROMPT),
      ],
    },
    "13 squared is 169.",
    { weight: 13 },
  );
  r.emit("reward", { value: 1, key: "final" });
  r.emit("reward", { value: 1, key: "final" }); // redelivered: applied once
  r.emit("session.end", { status: "ok" });
  all.push(...r.events);
}

// 5. Drift: a reasoning template drops the earlier <think> block when the gateway re-renders messages.
{
  const r = new Recorder("math-0500", "s0", T0 + 15_000);
  r.start({ sample_index: 0, group_size: 1 });
  const user: Message = { role: "user", content: "Is 221 prime?" };
  const text1 = "<think>221 = 13 × 17, so it has divisors.</think>No, 221 = 13 × 17.";
  r.call("c1", { ids: render([user]) }, text1, { messages: [user] });
  const follow: Message = { role: "user", content: "What about 223?" };
  const messages = [user, { role: "assistant", content: text1 }, follow];
  r.call(
    "c2",
    { ids: render(messages, true) },
    "<think>Not divisible by 2, 3, 5, 7, 11 or 13.</think>Yes, 223 is prime.",
    { messages },
  );
  r.emit("reward", { value: 1, target: "c1", stage: "verifier" });
  r.emit("session.end", { status: "ok" });
  // The outcome's score comes after the end (a slow checker): the session waits for it (a per-call
  // reward does not complete a session), within reward_grace_ms.
  r.ts += 2_000;
  r.emit("reward", {
    value: 0.5,
    stage: "style",
    key: "style-1",
    info: { note: "arrived within the grace period" },
  });
  all.push(...r.events);
}

const text = all.map((e) => JSON.stringify(e)).join("\n") + "\n";
const target = new URL("./sessions.jsonl", import.meta.url);
if (process.argv.includes("--check")) {
  if (readFileSync(target, "utf8") !== text) {
    console.error("examples/sessions.jsonl is stale: run `node examples/generate.ts` and commit it.");
    process.exit(1);
  }
} else {
  writeFileSync(target, text);
  console.log(`wrote examples/sessions.jsonl: ${all.length} events`);
}
