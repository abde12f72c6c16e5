import { describe, it } from "node:test";
import { args, expectParse } from "../../../test/helpers/expect-parse.ts";
import { outputParser } from "./parser.ts";

const think = outputParser("none", "think");

describe("think reasoning", () => {
  it("splits <think>...</think> from the content after it", () => {
    // Content after the closing tag is kept as written, as vLLM's qwen3 reasoning parser reports it.
    expectParse(think, "<think>This is a reasoning section</think>This is the rest", {
      content: "This is the rest",
      reasoning: "This is a reasoning section",
      toolCalls: [],
      malformed: 0,
    });
    expectParse(think, "\n<think>\nLet me think… 🤔\n</think>\n\nAnswer: 42", {
      content: "\n\nAnswer: 42",
      reasoning: "\nLet me think… 🤔\n",
      toolCalls: [],
      malformed: 0,
    });
  });

  it("reads text before a lone </think> as reasoning (the opening tag was in the prompt)", () => {
    expectParse(think, "The user wants 2+2.\n</think>\n\n4", {
      content: "\n\n4",
      reasoning: "The user wants 2+2.\n",
      toolCalls: [],
      malformed: 0,
    });
  });

  it("makes the rest reasoning when <think> is never closed", () => {
    expectParse(think, "<think>I was cut off mid </thi", {
      content: "",
      reasoning: "I was cut off mid </thi",
      toolCalls: [],
      malformed: 0,
    });
  });

  it("keeps an empty section as empty reasoning, and text without tags as content", () => {
    expectParse(think, "<think></think>Hi", { content: "Hi", reasoning: "", toolCalls: [], malformed: 0 });
    expectParse(think, "No tags here, <thin", {
      content: "No tags here, <thin",
      toolCalls: [],
      malformed: 0,
    });
    expectParse(think, "", { content: "", toolCalls: [], malformed: 0 });
  });

  it("hands the rest to the tool parser", () => {
    expectParse(
      outputParser("qwen3_coder", "think"),
      "<think>Need the weather.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
      {
        content: "\n\n",
        reasoning: "Need the weather.",
        toolCalls: [{ name: "get_weather", arguments: args({ city: "Oslo" }) }],
        malformed: 0,
      },
    );
    expectParse(outputParser("mistral", "think"), '<think>x</think>[TOOL_CALLS]f[ARGS]{"a": 1}', {
      content: "",
      reasoning: "x",
      toolCalls: [{ name: "f", arguments: args({ a: 1 }) }],
      malformed: 0,
    });
  });
});
