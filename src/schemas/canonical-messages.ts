/**
 * Canonical chat messages, used to tell retokenization drift from a genuinely different history.
 *
 * Two renderings of the same conversation should compare equal even when a harness re-serialises them:
 * tool-call ids are ignored, JSON tool arguments are parsed (key order and whitespace stop mattering),
 * null content is "", content parts are joined, and <think>…</think> blocks are removed from assistant
 * content (reasoning templates drop earlier thinking when re-rendering).
 */
import { hash } from "node:crypto";
import type { ChatMessage } from "./events.ts";

/** JSON with object keys sorted: equal values give equal text. */
export function stableStringify(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(",")}]`;
  const keys = Object.keys(value as Record<string, unknown>).sort();
  return `{${keys
    .map((k) => `${JSON.stringify(k)}:${stableStringify((value as Record<string, unknown>)[k])}`)
    .join(",")}}`;
}

function contentText(content: unknown): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (typeof part === "string") return part;
        if (
          typeof part === "object" &&
          part !== null &&
          typeof (part as { text?: unknown }).text === "string"
        ) {
          return (part as { text: string }).text;
        }
        return stableStringify(part);
      })
      .join("");
  }
  return stableStringify(content);
}

const THINK_BLOCK = /<think>[\s\S]*?<\/think>/g;

function canonicalToolCall(call: unknown): unknown {
  if (typeof call !== "object" || call === null) return call;
  const c = call as {
    function?: { name?: unknown; arguments?: unknown };
    name?: unknown;
    arguments?: unknown;
  };
  const fn = c.function ?? c;
  let args: unknown = fn.arguments;
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      // Not JSON: compare the string as it is.
    }
  }
  return { name: fn.name ?? null, arguments: args ?? null };
}

/** One message's canonical text. */
export function canonicalMessage(message: Pick<ChatMessage, "role" | "content" | "tool_calls">): string {
  let text = contentText(message.content);
  if (message.role === "assistant") text = text.replace(THINK_BLOCK, "");
  const toolCalls = (message.tool_calls ?? []).map(canonicalToolCall);
  return stableStringify({ role: message.role, content: text.trim(), tool_calls: toolCalls });
}

/**
 * Chained digests of a message list: `out[k]` identifies the first k messages after `start` (the empty
 * conversation's digest, or one the list continues: an earlier conversation's, tools rendered before it).
 * Chaining keeps this linear in the conversation's size.
 */
export function messagePrefixDigests(canonical: string[], start = hash("sha1", "")): string[] {
  const out: string[] = [start];
  for (const m of canonical) out.push(extendDigest(out[out.length - 1]!, m));
  return out;
}

/** Digest of `prefix` (a digest from messagePrefixDigests) extended by one more canonical message. */
export function extendDigest(prefix: string, canonical: string): string {
  return hash("sha1", `${prefix}\n${canonical}`);
}
