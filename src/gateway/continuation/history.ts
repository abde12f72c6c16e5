/**
 * A conversation as digests, so a call's messages can be matched to the branches the gateway served: the
 * digest of the first k messages chains the digest of the first k-1 with the k-th message's canonical text
 * (schemas/canonical-messages.ts: tool-call ids ignored, JSON arguments parsed, content parts joined,
 * whitespace around content trimmed). A branch remembers the digest of its call's messages plus the answer
 * it was given; a later call extends it when its first k messages have that digest.
 *
 * The chain starts from what the chat template renders before any message and the call does not repeat in
 * its messages: the tools offered. A call with other tools, or other template settings (settingsKey), does
 * not continue a branch (its prompt's head would render differently).
 */
import { hash } from "node:crypto";
import {
  canonicalMessage,
  extendDigest,
  messagePrefixDigests,
  stableStringify,
} from "../../schemas/canonical-messages.ts";
import type { ChatMessage } from "../../schemas/events.ts";

/** The digest the chain of a call's messages starts from: its tools (rendered before any message). */
export function seedDigest(body: Record<string, unknown>): string {
  return hash("sha1", stableStringify(body.tools ?? []));
}

/**
 * The template settings a call renders with (chat_template_kwargs, reasoning_effort), as a key: a branch
 * made with other settings is not continued. The events do not carry them, so a branch restored from the
 * events after a restart has none and matches any.
 */
export function settingsKey(body: Record<string, unknown>): string {
  return stableStringify({
    chat_template_kwargs: body.chat_template_kwargs ?? {},
    reasoning_effort: body.reasoning_effort ?? null,
  });
}

/** Digests of the first k messages for every k after `seed` (out[0] is the seed). */
export function historyDigests(seed: string, messages: readonly unknown[]): string[] {
  return messagePrefixDigests(
    messages.map((m) => canonicalMessage(asMessage(m))),
    seed,
  );
}

/** The digest of a history extended by the assistant turn the gateway answered with. */
export function withAnswer(
  digest: string,
  text: string | undefined,
  toolCalls: unknown[] | undefined,
): string {
  return extendDigest(
    digest,
    canonicalMessage({
      role: "assistant",
      content: text ?? "",
      ...(toolCalls !== undefined ? { tool_calls: toolCalls } : {}),
    }),
  );
}

function asMessage(m: unknown): ChatMessage {
  if (typeof m !== "object" || m === null) return { role: "unknown", content: stableStringify(m) };
  const o = m as Record<string, unknown>;
  return {
    role: typeof o.role === "string" ? o.role : "unknown",
    content: o.content,
    ...(Array.isArray(o.tool_calls) ? { tool_calls: o.tool_calls } : {}),
  };
}
