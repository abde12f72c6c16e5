import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const llama = outputParser("llama3_json", "none");

describe("llama3_json tool calls", () => {
  it("passes text without calls through as content", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py no_json
    const text = "This is just some text without any tool calls";
    expectParse(llama, text, { content: text, toolCalls: [], malformed: 0 });
  });

  it("reads a call with parameters or arguments, with or without <|python_tag|>", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py
    // with_arguments, with_arguments_key
    expectParse(llama, '{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}', {
      content: "",
      toolCalls: [{ name: "searchTool", arguments: args({ query: "test query", limit: 10 }) }],
      malformed: 0,
    });
    expectParse(llama, '\n<|python_tag|>{"name": "searchTool", "arguments": {"query": "test"}}', {
      content: "",
      toolCalls: [{ name: "searchTool", arguments: args({ query: "test" }) }],
      malformed: 0,
    });
  });

  it("reads several calls joined by semicolons, with or without spaces", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py multiple_json,
    // multiple_json_with_whitespace
    const expected = {
      content: "",
      toolCalls: [
        { name: "searchTool", arguments: args({ query: "test1" }) },
        { name: "getOpenIncidentsTool", arguments: "{}" },
        { name: "searchTool", arguments: args({ query: "test2" }) },
      ],
      malformed: 0,
    };
    expectParse(
      llama,
      '{"name": "searchTool", "parameters": {"query": "test1"}}; ' +
        '{"name": "getOpenIncidentsTool", "parameters": {}}; ' +
        '{"name": "searchTool", "parameters": {"query": "test2"}}',
      expected,
    );
    expectParse(
      llama,
      '{"name": "searchTool", "parameters": {"query": "test1"}} ; ' +
        '{"name": "getOpenIncidentsTool", "parameters": {}} ; ' +
        '{"name": "searchTool", "parameters": {"query": "test2"}}',
      expected,
    );
  });

  it("reads nested arguments and brackets or quotes inside strings", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py
    // multiple_with_deep_nesting, with_quotes_and_brackets_in_string, with_escaped_quotes_in_nested_json
    expectParse(
      llama,
      '{"name": "simpleTool", "parameters": {"value": "test"}}; ' +
        '{"name": "complexTool", "parameters": {"config": {"database": {"connection": {"pool": {"size": 10}}}}}}',
      {
        content: "",
        toolCalls: [
          { name: "simpleTool", arguments: args({ value: "test" }) },
          {
            name: "complexTool",
            arguments: args({ config: { database: { connection: { pool: { size: 10 } } } } }),
          },
        ],
        malformed: 0,
      },
    );
    expectParse(
      llama,
      '{"name": "searchTool", "parameters": {"query": "test {value} [complex]","nested": {"inner": "more {brackets}"}}}',
      {
        content: "",
        toolCalls: [
          {
            name: "searchTool",
            arguments: args({ query: "test {value} [complex]", nested: { inner: "more {brackets}" } }),
          },
        ],
        malformed: 0,
      },
    );
    expectParse(
      llama,
      '{"name": "parserTool", "parameters": {"text": "He said \\"Hello {world}\\" — ok 👍"}}',
      {
        content: "",
        toolCalls: [{ name: "parserTool", arguments: args({ text: 'He said "Hello {world}" — ok 👍' }) }],
        malformed: 0,
      },
    );
  });

  it("takes a call inside prose as content (vLLM would extract it)", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py simple:
    // vLLM pulls the call out of the prose; here the whole output must be calls.
    const text =
      'Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?';
    expectParse(llama, text, { content: text, toolCalls: [], malformed: 0 });
  });

  it("keeps invalid, partly valid and truncated call text as content", () => {
    // vllm-project/vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py invalid_json
    const invalid = '{"name": "invalidTool", "parameters": {invalid json}';
    expectParse(llama, invalid, { content: invalid, toolCalls: [], malformed: 1 });
    const trailing = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {}} and then some prose';
    expectParse(llama, trailing, { content: trailing, toolCalls: [], malformed: 1 });
    const truncated = '<|python_tag|>{"name": "a", "parameters": {"q": "x';
    expectParse(llama, truncated, { content: truncated, toolCalls: [], malformed: 1 });
    const noName = '{"parameters": {"q": 1}}';
    expectParse(llama, noName, { content: noName, toolCalls: [], malformed: 1 });
  });
});
