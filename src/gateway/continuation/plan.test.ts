/**
 * plan.ts: which prompt ids a call gets from its session's branches. The renderer is a real ChatML
 * renderer (`<|im_start|>role\ncontent<|im_end|>\n` per message, `<|im_start|>assistant\n` as the
 * generation prompt) over a deterministic toy tokenizer: one id per UTF-16 code unit, `<|im_start|>` = 1000
 * and `<|im_end|>` = 1001. A toy tokenizer is enough here: the unit under test is the matching of messages
 * to branches and the splicing of ids, which only needs render and tokenize to agree with each other.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import type { PromptRenderer, UpstreamJson } from "../engines/engine.ts";
import { GatewaySession } from "../sessions.ts";
import { historyDigests, seedDigest, settingsKey, withAnswer } from "./history.ts";
import { Continuations, type PromptPlan } from "./plan.ts";
import { chatml, END, NO_SETTINGS, toyTokenize } from "../../../test/helpers/toy-chatml.ts";

const tokenize = (text: string) => Int32Array.from(toyTokenize(text));

/** The ChatML renderer, counting what it is asked. */
class ToyRenderer implements PromptRenderer {
  readonly renderIdsCalls: Array<Record<string, unknown>> = [];
  readonly renderTextCalls: Array<Record<string, unknown>> = [];
  readonly tokenizeCalls: string[] = [];
  /** Renders without the assistant turns' content (a template that drops it): the marker is lost. */
  dropAssistant = false;

  async renderIds(body: Record<string, unknown>): Promise<Int32Array> {
    this.renderIdsCalls.push(body);
    return tokenize(chatml(body));
  }
  async renderText(body: Record<string, unknown>): Promise<string> {
    this.renderTextCalls.push(body);
    if (!this.dropAssistant) return chatml(body);
    const messages = (body.messages as Array<{ role: string }>).map((m) =>
      m.role === "assistant" ? { ...m, content: "" } : m,
    );
    return chatml({ ...body, messages });
  }
  async tokenize(text: string): Promise<Int32Array> {
    this.tokenizeCalls.push(text);
    return tokenize(text);
  }
}

const upstream: UpstreamJson = async (path) => {
  throw new Error(`the renderer is local: no upstream call expected (${path})`);
};

const SYSTEM = { role: "system", content: "Be brief." };
const USER = { role: "user", content: "hi" };

function setup() {
  const renderer = new ToyRenderer();
  const plans = new Continuations(renderer);
  const s = new GatewaySession({ uid: "u", sessionId: "s1" }, 8);
  return { renderer, plans, s };
}

/**
 * Records a call's answer as the gateway does (call-events.ts): the tip is prompt ++ output, its parent the
 * longest tip the prompt starts with, its history the plan's digest plus the answer.
 */
function answered(
  s: GatewaySession,
  callId: string,
  plan: PromptPlan,
  answer: string,
  ended = true,
  parent: string | null | undefined = undefined,
): Int32Array {
  const output = ended ? Int32Array.from([...tokenize(answer), END]) : tokenize(answer);
  s.addTip(callId, plan.ids, output, parent === undefined ? (s.parentOf(plan.ids)?.callId ?? null) : parent, {
    digest: withAnswer(plan.promptDigest, answer, undefined),
    count: plan.messageCount + 1,
    promptDigest: plan.promptDigest,
  });
  return s.tipOf(callId)!;
}

const cat = (...parts: ArrayLike<number>[]) => Int32Array.from(parts.flatMap((p) => Array.from(p)));

const digestOf = (body: Record<string, unknown>) => {
  const m = body.messages as unknown[];
  return historyDigests(seedDigest(body), m)[m.length]!;
};

describe("Continuations.plan", () => {
  it("renders a session's first call whole (first_call)", async () => {
    const { renderer, plans, s } = setup();
    const body = { model: "m", messages: [SYSTEM, USER] };
    const plan = await plans.plan(s, body, upstream);
    assert.deepEqual(plan, {
      ids: tokenize(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      ),
      form: "rendered",
      reason: "first_call",
      promptDigest: digestOf(body),
      settings: NO_SETTINGS,
      messageCount: 2,
    });
    assert.deepEqual(renderer.renderIdsCalls, [body]);
    assert.deepEqual(renderer.renderTextCalls, []);
  });

  it("continues a branch with its tokens and only the new messages (the branch's <|im_end|> not repeated)", async () => {
    const { renderer, plans, s } = setup();
    const first = { model: "m", messages: [SYSTEM, USER], chat_template_kwargs: { x: 1 } };
    const p1 = await plans.plan(s, first, upstream);
    const tip = answered(s, "c1", p1, "Hello!");
    const body = {
      model: "m",
      chat_template_kwargs: { x: 1 },
      messages: [SYSTEM, USER, { role: "assistant", content: "Hello!" }, { role: "user", content: "more" }],
    };
    const plan = await plans.plan(s, body, upstream);
    assert.deepEqual(plan, {
      ids: cat(tip, tokenize("\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")),
      form: "continued",
      parent: "c1",
      messagesOffset: 3,
      promptDigest: digestOf(body),
      settings: settingsKey(body),
      messageCount: 4,
    });
    assert.equal(plan.ids[tip.length - 1], END);
    assert.equal(plan.ids[tip.length], "\n".charCodeAt(0));
    // The branch's tokens are the ones sampled, not a re-rendering: the first call's prompt, then its output.
    assert.deepEqual(plan.ids.subarray(0, p1.ids.length), p1.ids);
    // One render of the stand-in conversation: a user turn, an assistant turn holding the marker, the new
    // message; the template settings and model go with it, the branch's messages do not.
    assert.equal(renderer.renderIdsCalls.length, 1);
    assert.equal(renderer.renderTextCalls.length, 1);
    const standIn = renderer.renderTextCalls[0]!;
    assert.deepEqual(Object.keys(standIn).sort(), ["chat_template_kwargs", "messages", "model"]);
    assert.deepEqual(standIn.chat_template_kwargs, { x: 1 });
    const m = standIn.messages as Array<{ role: string; content: string }>;
    assert.deepEqual(m[0], { role: "user", content: "." });
    assert.equal(m[1]!.role, "assistant");
    assert.deepEqual(m.slice(2), [{ role: "user", content: "more" }]);
    // The text after the marker, closing token included; the branch holds that token, so it is dropped.
    assert.deepEqual(renderer.tokenizeCalls, [
      "<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n",
    ]);
  });

  it("continues with several new messages (a tool result and a user turn)", async () => {
    const { plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [USER] }, upstream);
    const tip = answered(s, "c1", p1, "calling");
    const plan = await plans.plan(
      s,
      {
        messages: [
          USER,
          { role: "assistant", content: "calling" },
          { role: "tool", content: "3" },
          { role: "user", content: "ok" },
        ],
      },
      upstream,
    );
    assert.equal(plan.form, "continued");
    assert.equal(plan.messagesOffset, 2);
    assert.deepEqual(
      plan.ids,
      cat(
        tip,
        tokenize("\n<|im_start|>tool\n3<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"),
      ),
    );
  });

  it("adds the <|im_end|> a branch cut by length never sampled", async () => {
    const { plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [USER] }, upstream);
    const tip = answered(s, "c1", p1, "Hel", false);
    assert.equal(tip[tip.length - 1], "l".charCodeAt(0));
    const plan = await plans.plan(
      s,
      { messages: [USER, { role: "assistant", content: "Hel" }, { role: "user", content: "go on" }] },
      upstream,
    );
    assert.equal(plan.form, "continued");
    assert.equal(plan.parent, "c1");
    assert.deepEqual(
      plan.ids,
      cat(tip, [END], tokenize("\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")),
    );
  });

  it("adds the <|im_end|> also after a length cut on a token that is a prefix of it ('<')", async () => {
    const { plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [USER] }, upstream);
    const tip = answered(s, "c1", p1, "a<", false);
    assert.equal(tip[tip.length - 1], "<".charCodeAt(0));
    const plan = await plans.plan(
      s,
      { messages: [USER, { role: "assistant", content: "a<" }, { role: "user", content: "go on" }] },
      upstream,
    );
    assert.deepEqual(
      plan.ids,
      cat(tip, [END], tokenize("\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")),
    );
  });

  it("continues a branch only with the template settings it was made with (unknown after a restore: any)", async () => {
    const { plans, s } = setup();
    const first = { messages: [USER], chat_template_kwargs: { enable_thinking: false } };
    const p1 = await plans.plan(s, first, upstream);
    const output = Int32Array.from([...tokenize("hi"), END]);
    const history = (settings?: string) => ({
      digest: withAnswer(p1.promptDigest, "hi", undefined),
      count: 2,
      promptDigest: p1.promptDigest,
      ...(settings !== undefined ? { settings } : {}),
    });
    s.addTip("c1", p1.ids, output, null, history(settingsKey(first)));
    const next = (kwargs: Record<string, unknown>) => ({
      messages: [USER, { role: "assistant", content: "hi" }, { role: "user", content: "more" }],
      chat_template_kwargs: kwargs,
    });
    assert.equal((await plans.plan(s, next({ enable_thinking: false }), upstream)).form, "continued");
    const other = await plans.plan(s, next({ enable_thinking: true }), upstream);
    assert.deepEqual([other.form, other.reason], ["rendered", "no_branch"]);
    s.dropTips();
    s.addTip("c1", p1.ids, output, null, history());
    assert.equal((await plans.plan(s, next({ enable_thinking: true }), upstream)).form, "continued");
  });

  it("renders an edited history whole (no_branch)", async () => {
    const { renderer, plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [SYSTEM, USER] }, upstream);
    answered(s, "c1", p1, "Hello!");
    const edits: Array<Record<string, unknown>> = [
      // The system prompt rewritten.
      {
        messages: [
          { role: "system", content: "Be long." },
          USER,
          { role: "assistant", content: "Hello!" },
          { role: "user", content: "x" },
        ],
      },
      // The answer rewritten (compacted).
      { messages: [SYSTEM, USER, { role: "assistant", content: "Hi." }, { role: "user", content: "x" }] },
      // Other tools: the prompt's head renders differently.
      {
        tools: [{ type: "function", function: { name: "f" } }],
        messages: [SYSTEM, USER, { role: "assistant", content: "Hello!" }, { role: "user", content: "x" }],
      },
    ];
    for (const body of edits) {
      const plan = await plans.plan(s, body, upstream);
      assert.equal(plan.form, "rendered");
      assert.equal(plan.reason, "no_branch");
      assert.deepEqual(plan.ids, tokenize(chatml(body)));
      assert.equal(plan.parent, undefined);
      assert.equal(plan.messagesOffset, undefined);
    }
    assert.deepEqual(renderer.renderTextCalls, []);
  });

  it("gives the same messages as an earlier call that call's prompt ids (continued, no parent)", async () => {
    const { renderer, plans, s } = setup();
    const body1 = { messages: [SYSTEM, USER] };
    const p1 = await plans.plan(s, body1, upstream);
    answered(s, "c1", p1, "Hello!");
    const body2 = {
      messages: [SYSTEM, USER, { role: "assistant", content: "Hello!" }, { role: "user", content: "x" }],
    };
    const p2 = await plans.plan(s, body2, upstream);
    answered(s, "c2", p2, "Sure.");
    const renders = renderer.renderIdsCalls.length + renderer.renderTextCalls.length;
    // A retry of the second call, re-serialised (content parts), with other sampling settings.
    const retry = {
      temperature: 1,
      messages: [
        SYSTEM,
        { role: "user", content: [{ type: "text", text: "hi" }] },
        { role: "assistant", content: "Hello!" },
        { role: "user", content: "x" },
      ],
    };
    const plan = await plans.plan(s, retry, upstream);
    assert.deepEqual(plan, {
      ids: p2.ids,
      form: "continued",
      promptDigest: p2.promptDigest,
      settings: NO_SETTINGS,
      messageCount: 4,
    });
    assert.equal(
      renderer.renderIdsCalls.length + renderer.renderTextCalls.length,
      renders,
      "nothing rendered",
    );
  });

  it("renders a call that ends with the branch's own answer whole (answer_last)", async () => {
    const { plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [USER] }, upstream);
    answered(s, "c1", p1, "Hello!");
    const body = { messages: [USER, { role: "assistant", content: "Hello!" }] };
    const plan = await plans.plan(s, body, upstream);
    assert.deepEqual(plan, {
      ids: tokenize(chatml(body)),
      form: "rendered",
      reason: "answer_last",
      promptDigest: digestOf(body),
      settings: NO_SETTINGS,
      messageCount: 2,
    });
  });

  it("renders whole when the template loses the marker (template_marker)", async () => {
    const { renderer, plans, s } = setup();
    const p1 = await plans.plan(s, { messages: [USER] }, upstream);
    answered(s, "c1", p1, "Hello!");
    renderer.dropAssistant = true;
    const body = {
      messages: [USER, { role: "assistant", content: "Hello!" }, { role: "user", content: "x" }],
    };
    const plan = await plans.plan(s, body, upstream);
    assert.equal(plan.form, "rendered");
    assert.equal(plan.reason, "template_marker");
    assert.deepEqual(plan.ids, tokenize(chatml(body)));
  });

  it("continues the longest branch the call extends, and ignores tips without a history", async () => {
    const { plans, s } = setup();
    const m1 = [USER];
    const m2 = [USER, { role: "assistant", content: "A" }, { role: "user", content: "again" }];
    const p2 = await plans.plan(s, { messages: m2 }, upstream);
    // The longer branch first, kept beside the shorter one (no parent: each rendered whole).
    const long = answered(s, "long", p2, "B", true, null);
    const p1 = await plans.plan(s, { messages: m1 }, upstream);
    assert.equal(p1.reason, "no_branch");
    answered(s, "short", p1, "A", true, null);
    s.addTip("bare", Int32Array.of(1, 2), Int32Array.of(3), null);
    assert.deepEqual(s.tipCallIds(), ["long", "short", "bare"]);
    const body = { messages: [...m2, { role: "assistant", content: "B" }, { role: "user", content: "z" }] };
    const plan = await plans.plan(s, body, upstream);
    assert.equal(plan.parent, "long");
    assert.equal(plan.messagesOffset, 4);
    assert.deepEqual(
      plan.ids,
      cat(long, tokenize("\n<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n")),
    );
    // A call extending only the shorter one continues that.
    const other = await plans.plan(
      s,
      { messages: [USER, { role: "assistant", content: "A" }, { role: "user", content: "other" }] },
      upstream,
    );
    assert.equal(other.parent, "short");
    assert.equal(other.messagesOffset, 2);
  });

  it("continues five turns, some ended and some cut by length, as one sequence of ids", async () => {
    const { plans, s } = setup();
    let messages: Array<Record<string, unknown>> = [USER];
    // Five turns: three end on <|im_end|>, two are cut by length on "x".
    const endings = [true, false, true, false, true];
    let plan = await plans.plan(s, { messages }, upstream);
    for (const [i, ended] of endings.entries()) {
      const answer = `a${i}x`;
      answered(s, `c${i}`, plan, answer, ended);
      messages = [...messages, { role: "assistant", content: answer }, { role: "user", content: `u${i}` }];
      plan = await plans.plan(s, { messages }, upstream);
      assert.equal(plan.form, "continued", `turn ${i}`);
      assert.equal(plan.parent, `c${i}`);
    }
    // The whole session is one sequence of ids: each call's prompt starts with the previous tip.
    assert.equal(s.branches().length, 1);
  });
});
