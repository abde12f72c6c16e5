/**
 * The prompt ids of one call in prompt mode tokens. The call's messages are matched to the session's
 * branches (history.ts): when they extend one (its messages, the answer the gateway gave, then new
 * messages), the prompt is that branch's tokens exactly as they were sampled, end-of-turn token included,
 * followed by the new messages alone rendered the way the chat template renders a continuation (the turn
 * separator, the new messages, the generation prompt). Nothing sampled is re-rendered. The same messages
 * as an earlier call (a retry, another sample) reuse that call's prompt ids. Anything else (a first call,
 * an agent that edited, compacted or rewrote its history) is rendered whole by the engine.
 *
 * The continuation is rendered with a stand-in conversation: a one-character user turn, then an assistant
 * turn holding a marker, then the new messages. What the template writes after the marker is the
 * continuation's text, tokenized; its first token closes the turn, and the branch holds that token already
 * when the model sampled it. When the branch did not end on it (a length cut, a stop string), it stays:
 * the model's history then holds the closing token it never sampled, as it would in any re-rendering.
 */
import type { PromptRenderer, UpstreamJson } from "../engines/engine.ts";
import type { GatewaySession, Tip } from "../sessions.ts";
import { historyDigests, seedDigest, settingsKey } from "./history.ts";

/** Why a call's prompt was rendered whole. */
export type RenderReason = "first_call" | "no_branch" | "answer_last" | "template_marker";

export interface PromptPlan {
  ids: Int32Array;
  form: "continued" | "rendered";
  reason?: RenderReason;
  /** continued: the branch's call and how many of the call's messages it covers. */
  parent?: string;
  messagesOffset?: number;
  promptDigest: string;
  messageCount: number;
  settings: string;
}

/** A text no real conversation holds: where the stand-in assistant turn is found again. */
const MARKER = "\u2063trajflow-turn-7f3a9c\u2063";

/** Makes the prompt ids of a gateway's calls in prompt mode tokens. */
export class Continuations {
  private readonly renderer: PromptRenderer;

  constructor(renderer: PromptRenderer) {
    this.renderer = renderer;
  }

  async plan(
    s: GatewaySession,
    body: Record<string, unknown>,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<PromptPlan> {
    const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
    const digests = historyDigests(seedDigest(body), messages);
    const n = messages.length;
    const settings = settingsKey(body);
    const base = { promptDigest: digests[n]!, messageCount: n, settings };
    let branch: Tip | undefined;
    let again: Tip | undefined;
    for (const tip of s.branches()) {
      const h = tip.history;
      if (h === undefined || (h.settings !== undefined && h.settings !== settings)) continue;
      if (
        h.count <= n &&
        digests[h.count] === h.digest &&
        (branch === undefined || h.count > branch.history!.count)
      )
        branch = tip;
      if (h.count === n + 1 && h.promptDigest === digests[n]) again = tip;
    }
    // The same conversation again (a retry, another sample): exactly the prompt that call had.
    if (again !== undefined)
      return { ...base, ids: again.tokens.subarray(0, again.promptLength), form: "continued" };
    const whole = async (reason: RenderReason): Promise<PromptPlan> => ({
      ...base,
      ids: await this.renderer.renderIds(body, upstream, signal),
      form: "rendered",
      reason,
    });
    if (branch === undefined) return whole(s.branches().length === 0 ? "first_call" : "no_branch");
    const covered = branch.history!.count;
    // The call ends with the branch's own answer: nothing new to render a continuation of.
    if (covered === n) return whole("answer_last");
    const delta = await this.continuation(body, messages.slice(covered), branch.tokens, upstream, signal);
    if (delta === null) return whole("template_marker");
    const ids = new Int32Array(branch.tokens.length + delta.length);
    ids.set(branch.tokens, 0);
    ids.set(delta, branch.tokens.length);
    return { ...base, ids, form: "continued", parent: branch.callId, messagesOffset: covered };
  }

  /** The ids of the new messages rendered as a continuation of `tokens`; null when the marker is lost. */
  private async continuation(
    body: Record<string, unknown>,
    added: unknown[],
    tokens: Int32Array,
    upstream: UpstreamJson,
    signal?: AbortSignal,
  ): Promise<Int32Array | null> {
    const standIn: Record<string, unknown> = {
      messages: [{ role: "user", content: "." }, { role: "assistant", content: MARKER }, ...added],
    };
    for (const k of ["chat_template_kwargs", "reasoning_effort", "model"])
      if (body[k] !== undefined) standIn[k] = body[k];
    const text = await this.renderer.renderText(standIn, upstream, signal);
    const at = text.indexOf(MARKER);
    if (at < 0) return null;
    const ids = await this.renderer.tokenize(text.slice(at + MARKER.length), upstream, signal);
    // The text after the stand-in turn begins with the token the template closes a turn with: the branch
    // already holds it when it ended on it (compared as ids: a text prefix is not the same token).
    return tokens.length > 0 && ids.length > 0 && ids[0] === tokens[tokens.length - 1]
      ? ids.subarray(1)
      : ids;
  }
}
