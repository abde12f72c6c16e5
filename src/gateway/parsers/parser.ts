/**
 * Output parsers: the raw text an engine sampled, turned back into what the agent asked for (reasoning,
 * content, tool calls) in the model family's own format. The gateway renders prompts to token ids and reads
 * back text, so it must do what vLLM's and SGLang's `--tool-call-parser` and `--reasoning-parser` do; the
 * format names follow vLLM's. One module per format, as vLLM and SGLang keep theirs.
 *
 * Every parser is a stream; `parse()` is that stream fed the whole text at once and folded, so the streaming
 * and the whole-text answers cannot disagree. Nothing the model wrote is dropped: a tool-call block that
 * cannot be read stays in the content as the model wrote it, and is counted.
 */
import { blockStream } from "./blocks.ts";
import { harmonyStream } from "./harmony.ts";
import { hermes } from "./hermes.ts";
import { llama3Json } from "./llama3-json.ts";
import { mistral } from "./mistral.ts";
import { qwen3Coder } from "./qwen3-coder.ts";
import { thinkStream } from "./think.ts";
import type { OutputParser, ParsedDelta, ParsedOutput, ParsedToolCall, StreamingParser } from "./types.ts";

export type { OutputParser, ParsedDelta, ParsedOutput, ParsedToolCall, StreamingParser } from "./types.ts";

export const TOOL_PARSERS = ["none", "hermes", "qwen3_coder", "llama3_json", "mistral", "openai"] as const;
export type ToolParserName = (typeof TOOL_PARSERS)[number];

export const REASONING_PARSERS = ["none", "think"] as const;
export type ReasoningParserName = (typeof REASONING_PARSERS)[number];

/** Plain text: everything is content, passed on as it comes. */
function contentStream(): StreamingParser {
  return {
    push: (text) => (text === "" ? [] : [{ kind: "content", text }]),
    end: () => [],
  };
}

const toolStreams: Record<ToolParserName, () => StreamingParser> = {
  none: contentStream,
  hermes: () => blockStream(hermes),
  qwen3_coder: () => blockStream(qwen3Coder),
  llama3_json: () => blockStream(llama3Json),
  mistral: () => blockStream(mistral),
  openai: harmonyStream,
};

/** Folds a parser's deltas into the whole answer; `parse()` is exactly this over one push and the end. */
export function collectDeltas(deltas: Iterable<ParsedDelta>): ParsedOutput {
  let content = "";
  let reasoning: string | undefined;
  const toolCalls: ParsedToolCall[] = [];
  let malformed = 0;
  for (const d of deltas) {
    if (d.kind === "content") content += d.text;
    else if (d.kind === "reasoning") reasoning = (reasoning ?? "") + d.text;
    else if (d.kind === "tool_call") toolCalls.push(d.call);
    else {
      content += d.text;
      malformed++;
    }
  }
  return reasoning === undefined
    ? { content, toolCalls, malformed }
    : { content, reasoning, toolCalls, malformed };
}

export function outputParser(tool: ToolParserName, reasoning: ReasoningParserName): OutputParser {
  const toolStream = toolStreams[tool];
  // Harmony carries its own analysis channel, so a reasoning setting has nothing to add there.
  const stream =
    reasoning === "think" && tool !== "openai" ? () => thinkStream(toolStream()) : () => toolStream();
  return {
    name: reasoning === "none" || tool === "openai" ? tool : `${tool}+${reasoning}`,
    stream,
    parse(text) {
      const s = stream();
      return collectDeltas([...s.push(text), ...s.end()]);
    },
  };
}
