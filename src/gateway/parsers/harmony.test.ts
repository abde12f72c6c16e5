import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const harmony = outputParser("openai", "none");

describe("openai (gpt-oss harmony) output", () => {
  it("reads a final answer, with and without <|start|>assistant", () => {
    // vllm-project/vllm tests/tool_use/test_openai_tool_parser.py test_extract_tool_calls_no_tools
    expectParse(harmony, "<|channel|>final<|message|>This is a test<|return|>", {
      content: "This is a test",
      toolCalls: [],
      malformed: 0,
    });
    expectParse(
      harmony,
      "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi ☺<|return|>",
      { content: "Hi ☺", reasoning: "Easy.", toolCalls: [], malformed: 0 },
    );
  });

  it("reads reasoning then a call, as in the harmony format's own example", () => {
    // openai/harmony docs (format.md), "Receiving tool calls"; also vllm-project/vllm
    // tests/tool_use/test_openai_tool_parser.py test_extract_tool_calls_single_tool (both argument spellings)
    expectParse(
      harmony,
      "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>" +
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json" +
        '<|message|>{"location":"San Francisco"}<|call|>',
      {
        content: "",
        reasoning: "Need to use function get_weather.",
        toolCalls: [{ name: "get_weather", arguments: args({ location: "San Francisco" }) }],
        malformed: 0,
      },
    );
    expectParse(
      harmony,
      "<|channel|>commentary to=functions.get_current_weather <|constrain|>json" +
        '<|message|>{\n"location": "Tokyo"\n}<|call|>',
      {
        content: "",
        toolCalls: [{ name: "get_current_weather", arguments: args({ location: "Tokyo" }) }],
        malformed: 0,
      },
    );
  });

  it("reads several calls, the recipient before the channel, and a final answer after them", () => {
    // vllm-project/vllm tests/tool_use/test_openai_tool_parser.py test_extract_tool_calls_multiple_tools and
    // test_extract_tool_calls_with_content. vLLM passes non-JSON and empty arguments through ("foo", "");
    // here arguments must be an object, so those two are malformed.
    const text =
      "<|channel|>analysis<|message|>User asks the weather in Tokyo.<|end|>" +
      '<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{"location": "Tokyo"}<|call|>' +
      '<|start|>assistant to=functions.get_user_location<|channel|>commentary json<|message|>{"location": "東京"}<|call|>' +
      '<|start|>assistant<|channel|>commentary to=functions.no_content_type<|message|>{"location": "Tokyo"}<|call|>' +
      "<|start|>assistant<|channel|>commentary to=functions.empty_args <|constrain|>json<|message|>{}<|call|>" +
      "<|start|>assistant<|channel|>commentary to=functions.not_json<|message|>foo<|call|>" +
      "<|start|>assistant<|channel|>commentary to=functions.no_args <|constrain|>json<|message|><|call|>" +
      "<|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|return|>";
    expectParse(harmony, text, {
      content:
        "<|start|>assistant<|channel|>commentary to=functions.not_json<|message|>foo<|call|>" +
        "<|start|>assistant<|channel|>commentary to=functions.no_args <|constrain|>json<|message|><|call|>" +
        "This tool call will get the weather.",
      reasoning: "User asks the weather in Tokyo.",
      toolCalls: [
        { name: "get_current_weather", arguments: args({ location: "Tokyo" }) },
        { name: "get_user_location", arguments: args({ location: "東京" }) },
        { name: "no_content_type", arguments: args({ location: "Tokyo" }) },
        { name: "empty_args", arguments: "{}" },
      ],
      malformed: 2,
    });
  });

  it("shows a commentary preamble as content", () => {
    expectParse(
      harmony,
      "<|channel|>commentary<|message|>Checking the weather now.<|end|>" +
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>',
      {
        content: "Checking the weather now.",
        toolCalls: [{ name: "get_weather", arguments: args({ city: "Oslo" }) }],
        malformed: 0,
      },
    );
  });

  it("takes a whole call whose <|call|> stop token was left out, and keeps a cut-off one as content", () => {
    expectParse(harmony, '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": [1, 2]}', {
      content: "",
      toolCalls: [{ name: "f", arguments: args({ a: [1, 2] }) }],
      malformed: 0,
    });
    const cut =
      '<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{"a": ';
    expectParse(harmony, cut, {
      content: '<|start|>assistant<|channel|>commentary to=functions.f<|message|>{"a": ',
      reasoning: "Think.",
      toolCalls: [],
      malformed: 1,
    });
  });

  it("keeps a call to a non-function recipient and a header cut off before <|message|> as content", () => {
    expectParse(
      harmony,
      '<|channel|>analysis to=browser.search code<|message|>{"query": "x"}<|call|><|start|>assistant<|channel|>fin',
      {
        content:
          '<|channel|>analysis to=browser.search code<|message|>{"query": "x"}<|call|><|start|>assistant<|channel|>fin',
        toolCalls: [],
        malformed: 2,
      },
    );
  });

  it("ignores the reasoning setting, since harmony has its own", () => {
    expectParse(outputParser("openai", "think"), "<|channel|>final<|message|><think>x</think><|return|>", {
      content: "<think>x</think>",
      toolCalls: [],
      malformed: 0,
    });
  });
});
