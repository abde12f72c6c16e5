/** What every output parser gives (parser.ts): the answer read from a model's sampled text. */

/** `arguments` is the compact JSON text of an object (`JSON.stringify` of the parsed value). */
export interface ParsedToolCall {
  name: string;
  arguments: string;
}

export interface ParsedOutput {
  /** What the agent sees: text outside calls, and unreadable blocks as written ("" when none). */
  content: string;
  /** Present only when the text had a reasoning section (possibly empty). */
  reasoning?: string;
  toolCalls: ParsedToolCall[];
  /** Tool-call blocks that could not be read (bad JSON, truncated, unknown shape); their text is in content. */
  malformed: number;
}

export type ParsedDelta =
  | { kind: "content"; text: string }
  | { kind: "reasoning"; text: string }
  | { kind: "tool_call"; call: ParsedToolCall }
  /** A block that failed to parse: its raw text, shown as content. */
  | { kind: "malformed"; text: string };

export interface StreamingParser {
  push(text: string): ParsedDelta[];
  end(): ParsedDelta[];
}

export interface OutputParser {
  readonly name: string;
  parse(text: string): ParsedOutput;
  stream(): StreamingParser;
}
