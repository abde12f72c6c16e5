/**
 * tool-grammar.ts: the exact GBNF of forced tool calls, which tools a call may call, and when a call is
 * forced. With LLAMA_SERVER set (a llama-server running the tiny test model, e.g. http://127.0.0.1:39480),
 * the hermes grammar is also given to the real server, whose output must then be a readable call.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { outputParser } from "../parsers/parser.ts";
import { CALL_LAYOUTS, forcedTools, forcesToolCall, toolCallGrammar } from "./tool-grammar.ts";
import { requiredOrSkip } from "../../../test/helpers/required.ts";

/** The rules every grammar ends with, as GBNF text (String.raw: backslashes as written). */
const BASE = [
  String.raw`ws ::= ""`,
  String.raw`string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""`,
  String.raw`number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?`,
  String.raw`integer ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} )`,
  String.raw`boolean ::= "true" | "false"`,
  String.raw`null ::= "null"`,
  String.raw`value ::= object | array | string | number | boolean | null`,
  String.raw`object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"`,
  String.raw`array ::= "[" ( value ( "," value )* )? "]"`,
];

const CALC = {
  type: "object",
  properties: { a: { type: "integer" }, b: { type: "integer" } },
  required: ["a", "b"],
};

const SEARCH = {
  type: "object",
  properties: {
    q: { type: "string" },
    mode: { enum: ["fast", "slow"] },
    tags: { type: "array", items: { type: "string" } },
    opts: {
      type: "object",
      properties: { n: { type: "number" }, f: { type: "boolean" } },
      required: ["n"],
    },
    none: { type: "object", properties: {} },
  },
  required: ["q"],
};

const tool = (name: string, parameters?: unknown) => ({
  type: "function",
  function: { name, ...(parameters !== undefined ? { parameters } : {}) },
});

describe("toolCallGrammar", () => {
  it("holds one hermes call with required integer arguments", () => {
    assert.equal(
      toolCallGrammar([{ name: "calc", parameters: CALC }], CALL_LAYOUTS.hermes!),
      [
        "root ::= r1",
        'r0 ::= "{" "\\"a\\":" integer "," "\\"b\\":" integer "}"',
        'r1 ::= "<tool_call>{\\"name\\":\\"calc\\",\\"arguments\\":" r0 "}</tool_call>"',
        ...BASE,
      ].join("\n"),
    );
  });

  it("writes required keys first, optional ones each maybe, an enum, an array, a nested object, an empty one (mistral)", () => {
    assert.equal(
      toolCallGrammar(
        [
          { name: "search", parameters: SEARCH },
          { name: "noop", parameters: { type: "object" } },
        ],
        CALL_LAYOUTS.mistral!,
      ),
      [
        "root ::= r5 | r6",
        'r0 ::= "\\"fast\\"" | "\\"slow\\""',
        'r1 ::= "[" ( string ( "," string )* )? "]"',
        'r2 ::= "{" "\\"n\\":" number ( "," "\\"f\\":" boolean )? "}"',
        'r3 ::= "{}"',
        'r4 ::= "{" "\\"q\\":" string ( "," "\\"mode\\":" r0 )? ( "," "\\"tags\\":" r1 )? ( "," "\\"opts\\":" r2 )? ( "," "\\"none\\":" r3 )? "}"',
        'r5 ::= "[TOOL_CALLS][{\\"name\\":\\"search\\",\\"arguments\\":" r4 "}]"',
        // An object schema without properties takes any object.
        'r6 ::= "[TOOL_CALLS][{\\"name\\":\\"noop\\",\\"arguments\\":" object "}]"',
        ...BASE,
      ].join("\n"),
    );
  });

  it("lets whichever optional key comes first go without a comma when none is required (llama3_json)", () => {
    assert.equal(
      toolCallGrammar(
        [
          {
            name: "o",
            parameters: { type: "object", properties: { x: { type: "string" }, y: { type: "null" } } },
          },
        ],
        CALL_LAYOUTS.llama3_json!,
      ),
      [
        "root ::= r1",
        'r0 ::= "{" ( "\\"x\\":" string ( "," "\\"y\\":" null )? | "\\"y\\":" null )? "}"',
        'r1 ::= "{\\"name\\":\\"o\\",\\"parameters\\":" r0 "}"',
        ...BASE,
      ].join("\n"),
    );
  });

  it("reads consts, number enums, type lists, anyOf, arrays without items and schemas it does not know", () => {
    const g = toolCallGrammar(
      [
        {
          name: "f",
          parameters: {
            type: "object",
            properties: {
              c: { const: "x" },
              e: { enum: [1, null] },
              t: { type: ["string", "null"] },
              u: { anyOf: [{ type: "integer" }, { type: "boolean" }] },
              l: { type: "array" },
              v: {},
              closed: { type: "object", additionalProperties: false },
            },
            required: ["c", "e", "t", "u", "l", "v", "closed"],
          },
        },
      ],
      CALL_LAYOUTS.hermes!,
    ).split("\n");
    assert.deepEqual(g.slice(0, g.length - BASE.length), [
      "root ::= r6",
      'r0 ::= "\\"x\\""',
      'r1 ::= "1" | "null"',
      "r2 ::= string | null",
      "r3 ::= integer | boolean",
      'r4 ::= "{}"',
      'r5 ::= "{" "\\"c\\":" r0 "," "\\"e\\":" r1 "," "\\"t\\":" r2 "," "\\"u\\":" r3 "," "\\"l\\":" array "," "\\"v\\":" value "," "\\"closed\\":" r4 "}"',
      'r6 ::= "<tool_call>{\\"name\\":\\"f\\",\\"arguments\\":" r5 "}</tool_call>"',
    ]);
  });

  it("admits only null when there is no tool to call", () => {
    assert.equal(toolCallGrammar([], CALL_LAYOUTS.hermes!), ["root ::= null", ...BASE].join("\n"));
  });
});

describe("forcedTools", () => {
  const tools = [tool("calc", CALC), tool("search", SEARCH), tool("bare"), { type: "function" }, null];

  it("lists every function tool (parameters {} when absent) without a named choice", () => {
    assert.deepEqual(forcedTools({ tools, tool_choice: "required" }), [
      { name: "calc", parameters: CALC },
      { name: "search", parameters: SEARCH },
      { name: "bare", parameters: {} },
    ]);
    assert.deepEqual(forcedTools({ tool_choice: "required" }), []);
  });

  it("keeps only the tool a named tool_choice names", () => {
    assert.deepEqual(
      forcedTools({ tools, tool_choice: { type: "function", function: { name: "search" } } }),
      [{ name: "search", parameters: SEARCH }],
    );
    assert.deepEqual(
      forcedTools({ tools, tool_choice: { type: "function", function: { name: "nope" } } }),
      [],
    );
  });
});

describe("forcesToolCall", () => {
  it("is true for required and a named function, false otherwise", () => {
    assert.equal(forcesToolCall({ tool_choice: "required" }), true);
    assert.equal(forcesToolCall({ tool_choice: { type: "function", function: { name: "calc" } } }), true);
    assert.equal(forcesToolCall({ tool_choice: "auto" }), false);
    assert.equal(forcesToolCall({ tool_choice: "none" }), false);
    assert.equal(forcesToolCall({ tool_choice: null }), false);
    assert.equal(forcesToolCall({}), false);
  });
});

describe("the hermes grammar on llama-server", () => {
  const server = process.env.LLAMA_SERVER;
  // "<|im_start|>user\nhi<|im_end|>\n<|im_start|>a\n" in the tiny test model's ids.
  const prompt = [459, 117, 115, 268, 10, 104, 105, 460, 10, 459, 97, 10];
  const grammar = toolCallGrammar([{ name: "calc", parameters: CALC }], CALL_LAYOUTS.hermes!);
  const hermes = outputParser("hermes", "none");

  for (const seed of [1, 2, 3, 4, 5]) {
    it(`samples a hermes call of calc with integer a and b (seed ${seed})`, async (t) => {
      const missing = requiredOrSkip(server !== undefined, "LLAMA_SERVER is not set: no llama-server to ask");
      if (missing !== false) {
        t.skip(missing);
        return;
      }
      const res = await fetch(new URL("/v1/completions", server), {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt, grammar, max_tokens: 200, seed }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const json = (await res.json()) as { choices: Array<{ text: string; finish_reason: string }> };
      const text = json.choices[0]!.text;
      assert.match(text, /^<tool_call>\{"name":"calc","arguments":\{"a":-?\d+,"b":-?\d+\}\}<\/tool_call>$/);
      const parsed = hermes.parse(text);
      assert.equal(parsed.malformed, 0, text);
      assert.equal(parsed.content, "");
      assert.equal(parsed.toolCalls.length, 1);
      assert.equal(parsed.toolCalls[0]!.name, "calc");
      const args = JSON.parse(parsed.toolCalls[0]!.arguments) as Record<string, unknown>;
      assert.deepEqual(Object.keys(args), ["a", "b"]);
      assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), parsed.toolCalls[0]!.arguments);
      assert.equal(json.choices[0]!.finish_reason, "stop");
    });
  }
});
