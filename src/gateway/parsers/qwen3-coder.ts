/**
 * Qwen3-Coder tool calls (vLLM's `qwen3_coder`): XML-ish blocks,
 * `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>`.
 * vLLM converts each value by the tool's schema; the gateway parses without the request's tools, so a value
 * that reads as JSON (`42`, `true`, `{"a": 1}`, `null`) is that JSON and anything else is the string as
 * written. One newline on each side of a value is the template's, not the value's, and is dropped.
 */
import type { BlockFormat } from "./blocks.ts";
import { parseJson } from "./json-text.ts";
import { hermes } from "./hermes.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";
const FUNCTION = /^\s*<function=([^>\n]+)>([\s\S]*)<\/function>\s*$/;
const PARAMETER = /<parameter=([^>\n]+)>([\s\S]*?)<\/parameter>/g;

function paramValue(raw: string): unknown {
  const text = raw.replace(/^\n/, "").replace(/\n$/, "");
  const json = parseJson(text);
  return json === undefined ? text : json;
}

export const qwen3Coder: BlockFormat = {
  opens: [OPEN],
  trimAfter: true,
  // The same framing as hermes; only the inside differs.
  blockEnd: hermes.blockEnd,
  read(block) {
    const fn = FUNCTION.exec(block.slice(OPEN.length, -CLOSE.length));
    const name = fn?.[1]?.trim();
    if (fn === null || !name) return undefined;
    const body = fn[2] ?? "";
    const args: Record<string, unknown> = {};
    for (const [, key, value] of body.matchAll(PARAMETER)) args[key!.trim()] = paramValue(value!);
    // Anything between the parameters but whitespace is a shape we do not know.
    if (body.replace(PARAMETER, "").trim() !== "") return undefined;
    return [{ name, arguments: JSON.stringify(args) }];
  },
};
