import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const qwen3Coder = outputParser("qwen3_coder", "none");

// The weather call used throughout vllm-project/vllm tests/tool_use/test_qwen3coder_tool_parser.py.
const weather = (city: string, state: string): string =>
  "<tool_call>\n<function=get_current_weather>\n" +
  `<parameter=city>\n${city}\n</parameter>\n<parameter=state>\n${state}\n</parameter>\n` +
  "<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>";

describe("qwen3_coder tool calls", () => {
  it("passes text without calls through as content", () => {
    // vllm-project/vllm tests/tool_use/test_qwen3coder_tool_parser.py test_extract_tool_calls_no_tools
    const text = "This is a test response without any tool calls";
    expectParse(qwen3Coder, text, { content: text, toolCalls: [], malformed: 0 });
  });

  it("reads a single call, and one after content", () => {
    // vllm-project/vllm tests/tool_use/test_qwen3coder_tool_parser.py single_tool, single_tool_with_content
    const call = {
      name: "get_current_weather",
      arguments: args({ city: "Dallas", state: "TX", unit: "fahrenheit" }),
    };
    expectParse(qwen3Coder, weather("Dallas", "TX"), { content: "", toolCalls: [call], malformed: 0 });
    expectParse(qwen3Coder, "Sure! Let me check the weather for you." + weather("Dallas", "TX"), {
      content: "Sure! Let me check the weather for you.",
      toolCalls: [call],
      malformed: 0,
    });
  });

  it("reads parallel calls", () => {
    // vllm-project/vllm tests/tool_use/test_qwen3coder_tool_parser.py parallel_tools
    expectParse(qwen3Coder, weather("Dallas", "TX") + "\n" + weather("Orlando", "FL"), {
      content: "",
      toolCalls: [
        { name: "get_current_weather", arguments: args({ city: "Dallas", state: "TX", unit: "fahrenheit" }) },
        {
          name: "get_current_weather",
          arguments: args({ city: "Orlando", state: "FL", unit: "fahrenheit" }),
        },
      ],
      malformed: 0,
    });
  });

  it("reads values that are JSON as JSON and the rest as strings", () => {
    // vllm-project/vllm tests/tool_use/test_qwen3coder_tool_parser.py single_tool_multiline_param and
    // test_extract_tool_calls_type_conversion, without the request's schema.
    const text =
      "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n" +
      "<parameter=shape>\nrectangle\n</parameter>\n" +
      '<parameter=dimensions>\n{"width": 10, \n "height": 20}\n</parameter>\n' +
      "<parameter=precision>\n2\n</parameter>\n<parameter=float_param>\n3.14\n</parameter>\n" +
      "<parameter=bool_param>\ntrue\n</parameter>\n<parameter=none>\nnull\n</parameter>\n" +
      "<parameter=code>\ndef f():\n    return 1\n\n</parameter>\n</function>\n</tool_call>";
    expectParse(qwen3Coder, text, {
      content: "Let me calculate that area for you.",
      toolCalls: [
        {
          name: "calculate_area",
          arguments: args({
            shape: "rectangle",
            dimensions: { width: 10, height: 20 },
            precision: 2,
            float_param: 3.14,
            bool_param: true,
            none: null,
            code: "def f():\n    return 1\n",
          }),
        },
      ],
      malformed: 0,
    });
  });

  it("reads the compact form without newlines, and unicode values", () => {
    // The tags may come without the template's newlines around them.
    expectParse(
      qwen3Coder,
      "<tool_call>\n<function=get_weather><parameter=city>Paris</parameter><parameter=days>3</parameter>" +
        "<parameter=note>café ☕ 東京</parameter></function></tool_call>",
      {
        content: "",
        toolCalls: [
          { name: "get_weather", arguments: args({ city: "Paris", days: 3, note: "café ☕ 東京" }) },
        ],
        malformed: 0,
      },
    );
  });

  it("keeps unknown shapes and truncated calls in the content", () => {
    const noFunction = "<tool_call>\n<parameter=city>\nDallas\n</parameter>\n</tool_call>";
    const stray =
      "<tool_call>\n<function=f>\nhello\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
    const truncated = "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal";
    expectParse(qwen3Coder, `${noFunction}ok${stray}\n${truncated}`, {
      content: `${noFunction}ok${stray}\n${truncated}`,
      toolCalls: [],
      malformed: 3,
    });
  });
});
