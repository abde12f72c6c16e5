/**
 * history.ts: digests that identify a conversation however a harness re-serialises it, and change with
 * anything that changes what the model sees.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { historyDigests, seedDigest, settingsKey, withAnswer } from "./history.ts";

const TOOLS = [
  {
    type: "function",
    function: {
      name: "calc",
      parameters: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] },
    },
  },
];

/** A conversation with a tool call, its result and a follow-up. */
function conversation(): Array<Record<string, unknown>> {
  return [
    { role: "system", content: "You add numbers." },
    { role: "user", content: "What is 1+2?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_abc_0", type: "function", function: { name: "calc", arguments: '{"a":1,"b":2}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_abc_0", content: "3" },
    { role: "user", content: "Thanks" },
  ];
}

const body = (messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: "m",
  tools: TOOLS,
  messages,
  ...extra,
});

const digestsOf = (b: Record<string, unknown>) => historyDigests(seedDigest(b), b.messages as unknown[]);

describe("history digests", () => {
  it("gives one digest per prefix, the seed first, each a sha1 hex", () => {
    const d = digestsOf(body(conversation()));
    assert.equal(d.length, 6);
    assert.equal(d[0], seedDigest(body(conversation())));
    for (const x of d) assert.match(x, /^[0-9a-f]{40}$/);
    assert.equal(new Set(d).size, 6);
  });

  it("is the same for the same conversation re-serialised", () => {
    const a = digestsOf(body(conversation()));
    const m = conversation();
    // Another tool-call id, arguments with other key order and whitespace, "" for null content.
    m[2] = {
      role: "assistant",
      content: "",
      tool_calls: [
        { id: "call_zzz_9", type: "function", function: { name: "calc", arguments: '{ "b": 2,\n "a": 1 }' } },
      ],
    };
    m[3] = { role: "tool", tool_call_id: "call_zzz_9", content: [{ type: "text", text: "3" }] };
    // Content parts for a string, whitespace around content.
    m[0] = {
      role: "system",
      content: [
        { type: "text", text: "You add " },
        { type: "text", text: "numbers." },
      ],
    };
    m[1] = { role: "user", content: "  What is 1+2?\n" };
    // Other fields (name, model, sampling settings) do not matter.
    const b = body(m, { temperature: 0.3, max_tokens: 9 });
    b.model = "other";
    assert.deepEqual(digestsOf(b), a);
  });

  it("is the same whatever order the tools' and template settings' keys are in", () => {
    const a = seedDigest({ tools: TOOLS, chat_template_kwargs: { enable_thinking: false, x: 1 } });
    const reordered = [
      {
        function: {
          parameters: { required: ["a"], properties: { a: { type: "integer" } }, type: "object" },
          name: "calc",
        },
        type: "function",
      },
    ];
    assert.equal(seedDigest({ chat_template_kwargs: { x: 1, enable_thinking: false }, tools: reordered }), a);
  });

  it("treats absent tools, settings and effort as empty", () => {
    assert.equal(seedDigest({}), seedDigest({ tools: [], chat_template_kwargs: {}, reasoning_effort: null }));
  });

  it("changes with a message's content, role, tool call or tool result", () => {
    const base = digestsOf(body(conversation()));
    const variants: Array<(m: Array<Record<string, unknown>>) => void> = [
      (m) => (m[1]!.content = "What is 1+3?"),
      (m) => (m[1]!.role = "system"),
      (m) =>
        ((m[2]!.tool_calls as Array<{ function: { arguments: string } }>)[0]!.function.arguments =
          '{"a":1,"b":3}'),
      (m) => ((m[2]!.tool_calls as Array<{ function: { name: string } }>)[0]!.function.name = "calc2"),
      (m) => (m[3]!.content = "4"),
      (m) => (m[2]!.content = "Let me compute."),
    ];
    for (const [i, change] of variants.entries()) {
      const m = conversation();
      change(m);
      const d = digestsOf(body(m));
      const at = [1, 1, 2, 2, 3, 2][i]!;
      assert.deepEqual(d.slice(0, at + 1), base.slice(0, at + 1), `variant ${i}: the prefix before is kept`);
      for (let k = at + 1; k < d.length; k++) assert.notEqual(d[k], base[k], `variant ${i}, prefix ${k}`);
    }
  });

  it("changes everywhere with other tools; other template settings or reasoning effort change the settings key", () => {
    const base = digestsOf(body(conversation()));
    const others = [
      body(conversation(), { tools: [] }),
      body(conversation(), { tools: [{ ...TOOLS[0], function: { ...TOOLS[0]!.function, name: "add" } }] }),
    ];
    for (const [i, b] of others.entries()) {
      const d = digestsOf(b);
      for (let k = 0; k < d.length; k++) assert.notEqual(d[k], base[k], `variant ${i}, prefix ${k}`);
    }
    const key = settingsKey(body(conversation()));
    for (const extra of [{ chat_template_kwargs: { enable_thinking: false } }, { reasoning_effort: "low" }]) {
      assert.deepEqual(digestsOf(body(conversation(), extra)), base, "the settings are not in the digests");
      assert.notEqual(settingsKey(body(conversation(), extra)), key);
    }
    assert.equal(
      settingsKey({ chat_template_kwargs: { b: 1, a: 2 } }),
      settingsKey({ chat_template_kwargs: { a: 2, b: 1 } }),
    );
  });

  it("does not drop a message that is not an object", () => {
    const a = historyDigests("s", [{ role: "user", content: "x" }, 7]);
    const b = historyDigests("s", [{ role: "user", content: "x" }, 8]);
    assert.equal(a[1], b[1]);
    assert.notEqual(a[2], b[2]);
  });
});

describe("withAnswer", () => {
  it("equals the digest of the messages and the assistant message", () => {
    const m = conversation().slice(0, 2);
    const b = body(m);
    const d = digestsOf(b);
    const calls = [
      { id: "call_x_0", type: "function", function: { name: "calc", arguments: '{"a":1,"b":2}' } },
    ];
    const withCalls = withAnswer(d[2]!, "", calls);
    assert.equal(withCalls, digestsOf(body(conversation().slice(0, 3)))[3]);
    assert.equal(
      withCalls,
      historyDigests(seedDigest(b), [...m, { role: "assistant", content: null, tool_calls: calls }])[3],
    );
    assert.equal(
      withAnswer(d[2]!, "It is 3.", undefined),
      historyDigests(seedDigest(b), [...m, { role: "assistant", content: " It is 3. " }])[3],
    );
    assert.equal(withAnswer(d[2]!, undefined, undefined), withAnswer(d[2]!, "", undefined));
    assert.equal(withAnswer(d[2]!, "", []), withAnswer(d[2]!, "", undefined));
    assert.notEqual(withAnswer(d[2]!, "It is 3.", undefined), withAnswer(d[2]!, "It is 4.", undefined));
  });

  it("drops <think> blocks from the answer, as a re-rendered history does", () => {
    const d = digestsOf(body([{ role: "user", content: "hi" }]));
    assert.equal(
      withAnswer(d[1]!, "<think>hmm</think>Hello", undefined),
      withAnswer(d[1]!, "Hello", undefined),
    );
  });
});
