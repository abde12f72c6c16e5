/**
 * A row's token columns, copied from its root-to-leaf path: prompt and response ids, the mask and
 * logprobs of the spans it trains, per-token policy versions, and the turns (calls) along the way.
 */
import type { CallState } from "./call-state.ts";
import type { RoutedTurn } from "./routing.ts";
import { copyIds, copyLogprobs } from "./span-copy.ts";
import type { TrieNode } from "./trie.ts";

/** Calls with an empty output whose prompt ends at `node`, in creation order; null when there are none. */
export function emptyTurnsAt(node: TrieNode): CallState[] | null {
  if (node.endOf === null) return null;
  let found: CallState[] | null = null;
  for (const handle of node.endOf) {
    const call = handle as CallState;
    if (call.outStart === null) (found ??= []).push(call);
  }
  return found;
}

export interface Turn extends RoutedTurn {
  /** Index in the row's response of this turn's last token; -1 when the turn lies in the prompt. */
  end: number;
}

/** A row's token columns and what they say about its turns. */
export interface RowTokens {
  prompt: Int32Array;
  response: Int32Array;
  mask: Int8Array;
  logprobs: Float32Array;
  missingLogprobs: boolean;
  /** Per response token, the policy version that sampled it; -1 where the model did not sample it. */
  versions: Int32Array;
  /** A sampled token's version is not known (no weight_version, no output_versions). */
  versionsUnknown: boolean;
  /** Oldest and newest version of the trained tokens; null when none is trained or one is unknown. */
  policyMin: number | null;
  policyMax: number | null;
  trained: number;
  lastTrained: number;
  /** The calls along the row in order, each with the response index of its last token (-1: none). */
  turns: Turn[];
  trainedCalls: Set<CallState>;
}

/**
 * Copies the path's first `length` tokens into the prompt (the first `promptKept`) and the response,
 * with the mask and logprobs of the spans this row trains (those past `firstUnowned`, not demoted).
 */
export function copyTokens(
  path: TrieNode[],
  firstUnowned: number,
  promptKept: number,
  length: number,
): RowTokens {
  const responseLen = length - promptKept;
  const { prompt, response, mask, logprobs, versions } = rowArrays(promptKept, responseLen);
  const t: RowTokens = {
    prompt,
    response,
    mask,
    logprobs,
    missingLogprobs: false,
    versions,
    versionsUnknown: false,
    policyMin: null,
    policyMax: null,
    trained: 0,
    lastTrained: -1,
    turns: [],
    trainedCalls: new Set<CallState>(),
  };
  let pos = 0; // position in the whole sequence
  // A call's output is one chain of nodes from its start, so along a path its nodes come in a run: the
  // run's turn, and how far into the call's output the run has come. A turn that sampled nothing and was
  // sent mid-run (a prompt ending inside an output) follows the run's turn without splitting it.
  let run: { turn: Turn; offset: number } | null = null;
  let trainedUnknown = false;
  for (let d = 0; d < path.length && pos < length; d++) {
    const node = path[d]!;
    const take = Math.min(node.len, length - pos);
    // Copy the span, which may straddle the prompt/response boundary only at a node boundary.
    if (pos < promptKept) copyIds(t.prompt, pos, node.tokens, node.start, take);
    else copyIds(t.response, pos - promptKept, node.tokens, node.start, take);
    const call = node.call as CallState | null;
    if (call !== null) {
      if (run === null || run.turn.call !== call) {
        run = { turn: { call, end: -1, start: pos, span: 0 }, offset: 0 };
        t.turns.push(run.turn);
      }
      if (pos + take > promptKept) run.turn.end = pos + take - 1 - promptKept;
      const at = pos - promptKept;
      const known = call.demoted || placeVersions(t.versions, at, take, call, run.offset);
      run.offset += take;
      run.turn.span = run.offset;
      if (!known) t.versionsUnknown = true;
      if (d >= firstUnowned && !call.demoted) {
        if (!known) trainedUnknown = true;
        else if (take > 0) trainedRange(t, call, at, take);
        t.mask.fill(1, at, at + take);
        t.trained += take;
        t.trainedCalls.add(call);
        if (take > 0) t.lastTrained = at + take - 1;
        if (call.hasLogprobs) {
          // A token the engine gave no logprob for (NaN) is never written as a number.
          if (copyLogprobs(t.logprobs, at, node.logprobs, node.start, take)) t.missingLogprobs = true;
        } else t.missingLogprobs = true;
      }
    } else {
      run = null;
    }
    pos += take;
    // Calls that sampled nothing after this node's tokens are turns too, unless the row was cut before.
    const empty = take === node.len ? emptyTurnsAt(node) : null;
    if (empty !== null) for (const c of empty) t.turns.push({ call: c, end: -1, start: pos, span: 0 });
  }
  if (trainedUnknown) t.policyMin = t.policyMax = null;
  return t;
}

/**
 * Rows up to this many bytes of token columns hold them in one buffer: five allocations a row were most of
 * the ingest thread's row building on the shared harness's short workload (12,000 rows of ~470 tokens).
 * Larger rows keep a buffer per array, which the file sink moves to its encoder instead of copying.
 */
const SHARED_ROW_BYTES = 64 * 1024;

/** A row's zeroed arrays (versions -1), in one buffer when small. */
function rowArrays(promptLen: number, responseLen: number) {
  const bytes = 4 * promptLen + 13 * responseLen;
  if (bytes > SHARED_ROW_BYTES) {
    return {
      prompt: new Int32Array(promptLen),
      response: new Int32Array(responseLen),
      mask: new Int8Array(responseLen),
      logprobs: new Float32Array(responseLen),
      versions: new Int32Array(responseLen).fill(-1),
    };
  }
  const buffer = new ArrayBuffer(bytes);
  const at = 4 * promptLen;
  return {
    prompt: new Int32Array(buffer, 0, promptLen),
    response: new Int32Array(buffer, at, responseLen),
    logprobs: new Float32Array(buffer, at + 4 * responseLen, responseLen),
    versions: new Int32Array(buffer, at + 8 * responseLen, responseLen).fill(-1),
    // Last: the only array whose elements are not 4 bytes.
    mask: new Int8Array(buffer, at + 12 * responseLen, responseLen),
  };
}

/**
 * Writes the versions of `take` tokens of `call`'s output, from `offset` in it, at `at` in `versions`;
 * false when they are not known (the response said neither weight_version nor output_versions).
 */
function placeVersions(
  versions: Int32Array,
  at: number,
  take: number,
  call: CallState,
  offset: number,
): boolean {
  if (call.outputVersions !== null) {
    versions.set(call.outputVersions.subarray(offset, offset + take), at);
    return true;
  }
  if (call.weightVersion === null) return false;
  versions.fill(call.weightVersion, at, at + take);
  return true;
}

/** Widens the row's trained-version range by `call`'s versions at [at, at + take) (placed already). */
function trainedRange(t: RowTokens, call: CallState, at: number, take: number): void {
  const widen = (v: number) => {
    if (t.policyMin === null || v < t.policyMin) t.policyMin = v;
    if (t.policyMax === null || v > t.policyMax) t.policyMax = v;
  };
  if (call.outputVersions === null) widen(call.weightVersion!);
  else for (let i = at; i < at + take; i++) widen(t.versions[i]!);
}
