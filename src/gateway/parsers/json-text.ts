/**
 * The JSON pieces every tool format shares: where a JSON object or array embedded in model text ends, and
 * what counts as a readable call (a non-empty string name and an object of arguments).
 */
import { isObject } from "../apis/json.ts";
import type { ParsedToolCall } from "./types.ts";

/**
 * Index just past the object or array that opens at `start`, or -1 while it is still open. Brackets inside
 * strings do not count; `{` and `[` are counted alike, so a mismatched close only keeps the value open
 * (the parse that follows rejects it).
 */
export function jsonValueEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** JSON.parse that answers undefined instead of throwing: model text is never trusted to be JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A call from a name and its arguments, or undefined when either is unusable. Arguments given as a JSON
 * string of an object are unwrapped, as vLLM's hermes parser does; anything but an object is refused.
 */
export function toolCall(name: unknown, args: unknown): ParsedToolCall | undefined {
  if (typeof name !== "string" || name === "") return undefined;
  const value = typeof args === "string" ? parseJson(args) : args;
  if (!isObject(value)) return undefined;
  return { name, arguments: JSON.stringify(value) };
}

/** A `{"name": ..., "arguments" | "parameters": {...}}` object as a call (no arguments at all means `{}`). */
export function jsonToolCall(obj: unknown): ParsedToolCall | undefined {
  if (!isObject(obj)) return undefined;
  if ("arguments" in obj && "parameters" in obj) return undefined;
  return toolCall(obj.name, obj.arguments ?? obj.parameters ?? {});
}
