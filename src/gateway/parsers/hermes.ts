/**
 * Hermes 2 Pro / Qwen2.5 / Qwen3 tool calls (vLLM's `hermes`):
 * `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`, JSON possibly wrapped in whitespace, any
 * number of blocks. Text around blocks is content; as vLLM reports it, text before a block is kept as written
 * and the whitespace right after a closing tag is dropped.
 */
import type { BlockFormat } from "./blocks.ts";
import { jsonToolCall, parseJson } from "./json-text.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

export const hermes: BlockFormat = {
  opens: [OPEN],
  trimAfter: true,
  blockEnd(block) {
    const at = block.indexOf(CLOSE, OPEN.length);
    return at < 0 ? -1 : at + CLOSE.length;
  },
  read(block) {
    const call = jsonToolCall(parseJson(block.slice(OPEN.length, -CLOSE.length)));
    return call && [call];
  },
};
