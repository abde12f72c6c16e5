import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const hermes = outputParser("hermes", "none");

describe("hermes tool calls", () => {
  it("passes text without calls through as content", () => {
    expectParse(hermes, "This is a test", { content: "This is a test", toolCalls: [], malformed: 0 });
  });

  it("reads the documented block, JSON wrapped in newlines", () => {
    // Hermes 2 Pro / Qwen2.5 chat template shape: the call JSON on its own line inside the tags.
    expectParse(
      hermes,
      '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Boston, MA", "unit": "fahrenheit"}}\n</tool_call>',
      {
        content: "",
        toolCalls: [
          { name: "get_current_weather", arguments: args({ location: "Boston, MA", unit: "fahrenheit" }) },
        ],
        malformed: 0,
      },
    );
  });

  it("keeps text before a block as written and drops the whitespace after it", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_hermes_tool_parser.py (lei_test_streaming_01),
    // reasoning abridged: Qwen3 output with `<think>` in the prompt, so only `</think>` is in the text.
    const text =
      "好的，用户现在要研发一个5MW的燃气轮机。\n</think>\n\n<tool_call>\n" +
      '{"name": "internet_search", "arguments": {"question": "5MW燃气轮机设计参数 空气流量 压气机压比 转速 燃烧室出口温度 压气机级数 支点布局"}}' +
      "\n</tool_call>\n\n ";
    expectParse(outputParser("hermes", "think"), text, {
      content: "\n\n",
      reasoning: "好的，用户现在要研发一个5MW的燃气轮机。\n",
      toolCalls: [
        {
          name: "internet_search",
          arguments: args({
            question: "5MW燃气轮机设计参数 空气流量 压气机压比 转速 燃烧室出口温度 压气机级数 支点布局",
          }),
        },
      ],
      malformed: 0,
    });
  });

  it("reads several blocks with content before, between and after them", () => {
    const text =
      "Let me check both.\n" +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_time", "arguments": {"city": "東京 🗼"}}\n</tool_call>\n' +
      "Then I will answer.";
    expectParse(hermes, text, {
      content: "Let me check both.\nThen I will answer.",
      toolCalls: [
        { name: "get_weather", arguments: args({ city: "Zürich" }) },
        { name: "get_time", arguments: args({ city: "東京 🗼" }) },
      ],
      malformed: 0,
    });
  });

  it("unwraps arguments given as a JSON string, and reads missing arguments as {}", () => {
    // vllm-project/vllm vllm/tool_parsers/hermes_tool_parser.py: `if isinstance(fc["arguments"], str): json.loads`.
    // sgl-project/sglang base_format_detector parse_base_json: arguments default to {}.
    expectParse(
      hermes,
      '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call><tool_call>{"name": "now"}</tool_call>',
      {
        content: "",
        toolCalls: [
          { name: "add", arguments: args({ a: 1, b: 2 }) },
          { name: "now", arguments: "{}" },
        ],
        malformed: 0,
      },
    );
  });

  it("keeps unreadable blocks in the content and counts them", () => {
    const text =
      'A<tool_call>{"name": "f", "arguments": {bad json}}</tool_call> B' +
      '<tool_call>{"arguments": {"a": 1}}</tool_call>' +
      '<tool_call>{"name": "g", "arguments": [1, 2]}</tool_call>' +
      '<tool_call>{"name": "ok", "arguments": {}}</tool_call>\n C';
    expectParse(hermes, text, {
      content:
        'A<tool_call>{"name": "f", "arguments": {bad json}}</tool_call> B' +
        '<tool_call>{"arguments": {"a": 1}}</tool_call>' +
        '<tool_call>{"name": "g", "arguments": [1, 2]}</tool_call>C',
      toolCalls: [{ name: "ok", arguments: "{}" }],
      malformed: 3,
    });
  });

  it("counts a block cut off by the end of the text as malformed, keeping its text", () => {
    const text = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par';
    expectParse(hermes, text, { content: text, toolCalls: [], malformed: 1 });
  });

  it("passes on a partial marker that never completes as content", () => {
    expectParse(hermes, "a < b and <tool_", { content: "a < b and <tool_", toolCalls: [], malformed: 0 });
  });
});
