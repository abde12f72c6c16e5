/**
 * Mistral tool calls (vLLM's `mistral`): `[TOOL_CALLS]` then either a JSON array of
 * `{"name": ..., "arguments": {...}}` (v0.3 tokenizers) or, from the v11 tokenizers on,
 * `name[ARGS]{...}` with one `[TOOL_CALLS]` per call (`[CALL_ID]id` may sit between name and `[ARGS]`, and
 * some decoders drop `[ARGS]`, leaving `name{...}`). Text before a block is content as written; the
 * whitespace right after one is dropped.
 */
import type { BlockFormat } from "./blocks.ts";
import { jsonToolCall, jsonValueEnd, parseJson, toolCall } from "./json-text.ts";
import type { ParsedToolCall } from "./types.ts";

const OPEN = "[TOOL_CALLS]";
const ARGS = "[ARGS]";
const CALL_ID = "[CALL_ID]";

/** Where the v11 `name[CALL_ID]id[ARGS]` head ends (at the `{`), -1 while undecided, or where it broke. */
function v11HeadEnd(text: string, start: number): { at: number; open: boolean } {
  let i = start;
  while (i < text.length && !/[\s[{]/.test(text[i]!)) i++;
  if (i === text.length) return { at: -1, open: true };
  if (i === start) return { at: i, open: false };
  for (const marker of [CALL_ID, ARGS]) {
    const rest = text.slice(i, i + marker.length);
    if (rest.length < marker.length && marker.startsWith(rest)) return { at: -1, open: true };
    if (rest !== marker) continue;
    i += marker.length;
    if (marker === CALL_ID) while (i < text.length && /[A-Za-z0-9]/.test(text[i]!)) i++;
    if (i === text.length) return { at: -1, open: true };
  }
  return { at: i, open: text[i] === "{" };
}

function skipSpace(text: string, i: number): number {
  while (i < text.length && /\s/.test(text[i]!)) i++;
  return i;
}

export const mistral: BlockFormat = {
  opens: [OPEN],
  trimAfter: true,
  blockEnd(block) {
    const i = skipSpace(block, OPEN.length);
    if (i === block.length) return -1;
    if (block[i] === "[") return jsonValueEnd(block, i);
    const head = v11HeadEnd(block, i);
    if (!head.open) return head.at;
    return head.at < 0 ? -1 : jsonValueEnd(block, head.at);
  },
  read(block) {
    const i = skipSpace(block, OPEN.length);
    if (block[i] === "[") {
      const list = parseJson(block.slice(i));
      if (!Array.isArray(list) || list.length === 0) return undefined;
      const calls = list.map(jsonToolCall);
      return calls.every((c) => c !== undefined) ? (calls as ParsedToolCall[]) : undefined;
    }
    const brace = block.indexOf("{", i);
    if (brace < 0) return undefined;
    const name = block
      .slice(i, brace)
      .replace(ARGS, "")
      .replace(/\[CALL_ID\][A-Za-z0-9]*/, "");
    if (!/^[^\s[{]+$/.test(name)) return undefined;
    const args = parseJson(block.slice(brace));
    if (typeof args !== "object") return undefined;
    const call = toolCall(name, args);
    return call && [call];
  },
};
