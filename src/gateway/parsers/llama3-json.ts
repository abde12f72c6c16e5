/**
 * Llama 3.x JSON tool calls (vLLM's `llama3_json`): an optional `<|python_tag|>`, then
 * `{"name": "f", "parameters": {...}}` (or `"arguments"`), several joined by `;`. The whole output must be
 * calls for any to count; otherwise it is content (and, when it began like a call, one malformed block).
 * vLLM also fishes a call out of surrounding prose; the gateway does not, so an answer that merely quotes
 * JSON is not turned into a call.
 */
import type { BlockFormat } from "./blocks.ts";
import { jsonToolCall, jsonValueEnd, parseJson } from "./json-text.ts";
import type { ParsedToolCall } from "./types.ts";

const PYTHON_TAG = "<|python_tag|>";

export const llama3Json: BlockFormat = {
  opens: [PYTHON_TAG, "{"],
  anchored: true,
  // Only the end of the output can say whether it was all calls.
  blockEnd: (block, final) => (final ? block.length : -1),
  read(block) {
    let text = block.trimStart();
    if (text.startsWith(PYTHON_TAG)) text = text.slice(PYTHON_TAG.length);
    const calls: ParsedToolCall[] = [];
    let i = 0;
    while (true) {
      while (/\s/.test(text[i] ?? "")) i++;
      if (text[i] !== "{") return undefined;
      const end = jsonValueEnd(text, i);
      if (end < 0) return undefined;
      const call = jsonToolCall(parseJson(text.slice(i, end)));
      if (call === undefined) return undefined;
      calls.push(call);
      i = end;
      while (/\s/.test(text[i] ?? "")) i++;
      if (i === text.length) return calls;
      if (text[i] !== ";") return undefined;
      i++;
    }
  },
};
