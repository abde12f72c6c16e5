import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { expectParse } from "../../../test/helpers/expect-parse.ts";
import { REASONING_PARSERS, TOOL_PARSERS, outputParser } from "./parser.ts";

describe("output parsers", () => {
  it("has one parser for every tool and reasoning format", () => {
    assert.deepEqual(TOOL_PARSERS, ["none", "hermes", "qwen3_coder", "llama3_json", "mistral", "openai"]);
    assert.deepEqual(REASONING_PARSERS, ["none", "think"]);
    assert.equal(outputParser("hermes", "none").name, "hermes");
    assert.equal(outputParser("hermes", "think").name, "hermes+think");
    assert.equal(outputParser("openai", "think").name, "openai");
  });

  it("passes everything through as content with no formats", () => {
    const text = '<think>x</think><tool_call>{"name": "f", "arguments": {}}</tool_call> ✓';
    expectParse(outputParser("none", "none"), text, { content: text, toolCalls: [], malformed: 0 });
  });
});
