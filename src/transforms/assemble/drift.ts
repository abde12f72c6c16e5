/**
 * Drift: a full prompt that re-rendered an earlier sampled turn differently (retokenization) rather than
 * changing the history. The tracker remembers each call's message history (digests, see messages.ts),
 * classifies every full prompt that left the trie, and at the session's close resolves each drift by the
 * `drift_policy`: flagged (`fork`) or realigned.
 */
import type { ChatMessage, ResponseEvent } from "../../schemas/events.ts";
import { RowFlags } from "../../schemas/trajectory.ts";
import { addFlag, type CallState } from "./call-state.ts";
import { canonicalMessage, extendDigest } from "../../schemas/canonical-messages.ts";
import type { Metrics } from "../../core/metrics.ts";
import type { AssembleConfig } from "./config.ts";
import { TokenTrie, type TrieNode } from "./trie.ts";

interface DriftRecord {
  /** The earlier call whose sampled turn the new prompt re-rendered differently. */
  reference: CallState;
  /** The call whose prompt drifted. */
  call: CallState;
}

export class DriftTracker {
  private drifts: DriftRecord[] | null = null;
  /** Message-history digests → the call they lead to (see messages.ts). */
  private byFullHistory: Map<string, CallState> | null = null;
  private byPromptOnly: Map<string, CallState> | null = null;
  /** Each remembered call's conversation digest (its messages and answer). */
  private conversations: Map<CallState, string> | null = null;
  private readonly metrics: Metrics;
  private readonly policy: AssembleConfig["drift_policy"];

  constructor(metrics: Metrics, policy: AssembleConfig["drift_policy"]) {
    this.metrics = metrics;
    this.policy = policy;
  }

  /**
   * Decides whether a full prompt that left the trie re-rendered an earlier sampled turn (drift) or
   * genuinely changed the history. Messages, when both calls have them, decide; tokens alone cannot tell,
   * so a divergence inside (or right where there should be) a sampled turn counts as drift.
   */
  classify(
    call: CallState,
    walked: Int32Array,
    walk: ReturnType<TokenTrie["walk"]>,
    messages: ChatMessage[] | undefined,
    history: string[] | null,
  ): void {
    const expected =
      messages !== undefined && history !== null ? this.historyParent(messages, history) : null;
    if (expected !== null && expected.end !== null) {
      const end = expected.end;
      const covered =
        walk.node === end ? walk.off === end.len : TokenTrie.isOnPath(end, walk.node) && walk.node !== end;
      if (!covered) this.recordDrift(expected, call);
      return;
    }
    if (walk.matched === walked.length) return; // the prompt ends inside known tokens: a retry or a prefix
    let suspect: CallState | null = null;
    if (walk.off < walk.node.len) {
      suspect = walk.node.call as CallState | null;
    } else {
      const children = walk.node.children; // index loop: possibly the frozen empty array (trie.ts)
      for (let c = 0; c < children.length; c++)
        if (children[c]!.call !== null) suspect = children[c]!.call as CallState;
    }
    if (suspect === null) return; // diverged in context: a genuine branch (e.g. a different tool result)
    if (call.hasMessages && suspect.hasMessages) {
      addFlag(call.flags, RowFlags.HISTORY_EDITED);
      this.metrics.inc("history_edited");
      return;
    }
    this.recordDrift(suspect, call);
  }

  private recordDrift(reference: CallState, call: CallState): void {
    (this.drifts ??= []).push({ reference, call });
    this.metrics.inc("drift_detected", this.policy);
  }

  /** The latest call whose messages plus assistant reply are a prefix of `messages`. */
  private historyParent(messages: ChatMessage[], history: string[]): CallState | null {
    for (let k = messages.length; k >= 1; k--) {
      const full = this.byFullHistory?.get(history[k]!);
      if (full !== undefined) return full;
      if (messages[k - 1]!.role === "assistant") {
        const promptOnly = this.byPromptOnly?.get(history[k - 1]!);
        if (promptOnly !== undefined) return promptOnly;
      }
    }
    return null;
  }

  /** The digest of a call's messages and its answer (what a continuation's messages follow), if known. */
  conversationOf(call: CallState): string | undefined {
    return this.conversations?.get(call);
  }

  remember(call: CallState, history: string[], ev: ResponseEvent): void {
    const promptDigest = history[history.length - 1]!;
    if (ev.text !== undefined || ev.tool_calls !== undefined) {
      const reply = canonicalMessage({
        role: "assistant",
        content: ev.text ?? "",
        tool_calls: ev.tool_calls,
      });
      const full = extendDigest(promptDigest, reply);
      (this.byFullHistory ??= new Map()).set(full, call);
      (this.conversations ??= new Map()).set(call, full);
    } else {
      (this.byPromptOnly ??= new Map()).set(promptDigest, call);
    }
  }

  /**
   * `fork`: the drifting call's row is flagged; nothing else changes. `realign`: when the drifted turn's
   * output is still a leaf (nothing continued from its exact tokens), its row is suppressed and the turn is
   * demoted to context, so the continuation is the one row. Otherwise realigning would lose a trained row,
   * so it stays a fork. Returns the leaves whose rows are suppressed (null: none).
   */
  resolve(calls: ReadonlyMap<string, CallState>): Set<TrieNode> | null {
    let suppressed: Set<TrieNode> | null = null;
    for (const { reference, call } of this.drifts ?? []) {
      const end = reference.end;
      const canRealign =
        this.policy === "realign" &&
        reference.outStart !== null &&
        end !== null &&
        end.children.length === 0 &&
        calls.has(reference.id);
      if (canRealign) {
        reference.demoted = true;
        (suppressed ??= new Set()).add(end);
        addFlag(call.flags, RowFlags.DRIFT_REALIGNED);
      } else {
        addFlag(call.flags, RowFlags.DRIFT);
      }
    }
    return suppressed;
  }
}
