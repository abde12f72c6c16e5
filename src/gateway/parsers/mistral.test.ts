import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const mistral = outputParser("mistral", "none");

const weather = { city: "San Francisco", state: "CA", unit: "celsius" };

describe("mistral tool calls", () => {
  it("passes text without calls through as content", () => {
    // vllm-project/vllm tests/tool_use/test_mistral_tool_parser.py test_extract_tool_calls_no_tools
    expectParse(mistral, "This is a test", { content: "This is a test", toolCalls: [], malformed: 0 });
  });

  it("reads the v0.3 JSON array format", () => {
    // vllm-project/vllm tests/tool_use/test_mistral_tool_parser.py single_tool_add, single_tool_weather,
    // argument_before_name, argument_before_name_and_name_in_argument, and the streaming single_tool_add
    expectParse(mistral, '[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]', {
      content: "",
      toolCalls: [{ name: "add", arguments: args({ a: 3.5, b: 4 }) }],
      malformed: 0,
    });
    expectParse(
      mistral,
      '[TOOL_CALLS] [{"name": "get_current_weather", "arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}}]',
      { content: "", toolCalls: [{ name: "get_current_weather", arguments: args(weather) }], malformed: 0 },
    );
    expectParse(
      mistral,
      '[TOOL_CALLS] [{"arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}, "name": "get_current_weather"}]',
      { content: "", toolCalls: [{ name: "get_current_weather", arguments: args(weather) }], malformed: 0 },
    );
    expectParse(mistral, '[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]', {
      content: "",
      toolCalls: [{ name: "get_age", arguments: args({ name: "John Doe" }) }],
      malformed: 0,
    });
    expectParse(mistral, '[TOOL_CALLS]  [ {"name":"add" , "arguments" : {"a": 3, "b": 4} } ]', {
      content: "",
      toolCalls: [{ name: "add", arguments: args({ a: 3, b: 4 }) }],
      malformed: 0,
    });
  });

  it("reads several calls in one array, after content", () => {
    expectParse(
      mistral,
      'Sure, both. [TOOL_CALLS][{"name": "add", "arguments": {"a": 3.5, "b": 4}}, ' +
        '{"name": "get_current_weather", "arguments": {"city": "São Paulo", "state": "SP", "unit": "celsius"}}]',
      {
        content: "Sure, both. ",
        toolCalls: [
          { name: "add", arguments: args({ a: 3.5, b: 4 }) },
          {
            name: "get_current_weather",
            arguments: args({ city: "São Paulo", state: "SP", unit: "celsius" }),
          },
        ],
        malformed: 0,
      },
    );
  });

  it("reads the v11 name[ARGS]{...} format, one marker per call", () => {
    // vllm-project/vllm tests/tool_use/test_mistral_tool_parser.py test_extract_tool_calls_v11_tokenizer
    // (whose decoder drops [ARGS]), and the [ARGS] and [CALL_ID] tokens of the v11/v13 tokenizers.
    expectParse(mistral, '[TOOL_CALLS]add{"a": 3.5, "b": 4}', {
      content: "",
      toolCalls: [{ name: "add", arguments: args({ a: 3.5, b: 4 }) }],
      malformed: 0,
    });
    expectParse(
      mistral,
      '[TOOL_CALLS]get_current_weather[ARGS]{"city": "San Francisco", "state": "CA", "unit": "celsius"}' +
        '[TOOL_CALLS]add[CALL_ID]a1B2c3D4e[ARGS]{"a": 1, "b": {"c": [2, "}"]}}',
      {
        content: "",
        toolCalls: [
          { name: "get_current_weather", arguments: args(weather) },
          { name: "add", arguments: args({ a: 1, b: { c: [2, "}"] } }) },
        ],
        malformed: 0,
      },
    );
  });

  it("keeps truncated and unreadable calls in the content", () => {
    // vllm-project/vllm tests/tool_use/test_mistral_tool_parser.py streaming multiple_tools: the second
    // object lacks its closing brace, so the array never closes.
    const unclosed =
      '[TOOL_CALLS][{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"name": "get_current_weather", ' +
      '"arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}]';
    expectParse(mistral, unclosed, { content: unclosed, toolCalls: [], malformed: 1 });
    const notCalls = '[TOOL_CALLS][{"name": "add"}, 3]';
    expectParse(mistral, notCalls, { content: notCalls, toolCalls: [], malformed: 1 });
    // A marker followed by prose is one unreadable block (the marker and name); the prose stays content.
    expectParse(mistral, "[TOOL_CALLS]sorry, I cannot", {
      content: "[TOOL_CALLS]sorry, I cannot",
      toolCalls: [],
      malformed: 1,
    });
    expectParse(mistral, '[TOOL_CALLS]add[ARGS]{"a": ', {
      content: '[TOOL_CALLS]add[ARGS]{"a": ',
      toolCalls: [],
      malformed: 1,
    });
  });
});
