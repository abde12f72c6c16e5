/**
 * Row extraction: every live root-to-leaf path of a closed session's trie becomes one trajectory row.
 *
 * Rows are ordered by a depth-first walk that visits children in creation order, so row order and
 * `index` are deterministic. A node belongs to the first row that passes through it: its sampled tokens
 * are trained (mask 1) there and are context (mask 0) in every later row, so a shared turn is trained once.
 */
import type { Metrics } from "../../core/metrics.ts";
import {
  RowFlags,
  rowKey,
  type FinishReason,
  type RowFlag,
  type SessionStatus,
  type TrajectoryRow,
  type TurnSampling,
  TURN_SAMPLING_FIELDS,
} from "../../schemas/trajectory.ts";
import type { AssembleConfig } from "./config.ts";
import type { CallState } from "./call-state.ts";
import type { SessionState } from "./session.ts";
import { copyTokens, emptyTurnsAt, type RowTokens, type Turn } from "./row-tokens.ts";
import { rowRouting, type RowRouting } from "./routing.ts";
import type { TrieNode } from "./trie.ts";

/**
 * Marks live nodes: a sampled node with no live child is a row's leaf (unless suppressed or its call
 * demoted to context); a node with a
 * live child is live. A context-only tail produces no row (it holds nothing to train) unless a call with
 * an empty output ends there: that call is a turn (a `length` cut at the context limit, an `abort`), and
 * its prompt proves the tail was sent.
 */
function markLive(root: TrieNode, suppressed: Set<TrieNode> | null): void {
  const order: TrieNode[] = [];
  const stack: TrieNode[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    order.push(node);
    // Index loops: children may be the frozen empty array, which for...of iterates slowly (trie.ts).
    for (let c = 0; c < node.children.length; c++) stack.push(node.children[c]!);
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const node = order[i]!;
    let liveChild = false;
    for (let c = 0; c < node.children.length; c++) if (node.children[c]!.live) liveChild = true;
    node.live =
      liveChild ||
      // A demoted call's tokens (train: false, realigned drift) are context: they end no row of their own.
      (node.call !== null && !(node.call as CallState).demoted && suppressed?.has(node) !== true) ||
      (node.parent !== null && emptyTurnsAt(node) !== null);
  }
}

/** A turn of a row as reward stages see it (placement.ts, stages reading the final text). */
import type { RowTurn } from "../../schemas/session.ts";
export type { RowTurn };

export function extractRows(
  session: SessionState,
  config: AssembleConfig,
  metrics: Metrics,
  /** Receives each row's turns, in row order. */
  turnsOut?: RowTurn[][],
): TrajectoryRow[] {
  const { trie } = session;
  markLive(trie.root, session.suppressed);
  const rows: TrajectoryRow[] = [];
  const rowTurns: RowTurn[][] = [];
  if (!trie.root.live) return rows;

  const status: SessionStatus = session.end?.status ?? "timeout";
  const { reward, finished } = session.sessionReward();
  const sampleIndex = session.start?.sample_index ?? null;
  const groupSize = session.start?.group_size ?? null;
  const endedAt = session.end?.ts ?? session.lastTs;

  // Iterative DFS over live nodes. `path[d]` is the node at depth d (the root excluded); `owner[d]` the
  // row that trains it. Nodes at depth >= firstUnowned have not been claimed by an earlier row.
  const path: TrieNode[] = [];
  const owner: number[] = [];
  let firstUnowned = 0;
  const frames: TrieNode[] = [trie.root];
  const frameChild: number[] = [0];

  while (frames.length > 0) {
    const top = frames.length - 1;
    const node = frames[top]!;
    const children = node.children;
    let i = frameChild[top]!;
    while (i < children.length && !children[i]!.live) i++;
    if (i < children.length) {
      frameChild[top] = i + 1;
      const child = children[i]!;
      frames.push(child);
      frameChild.push(0);
      path.push(child);
      owner.push(-1);
      if (path.length - 1 < firstUnowned) firstUnowned = path.length - 1;
      continue;
    }
    // No more live children: if this node had none at all, it is a leaf and yields a row.
    let hasLiveChild = false;
    for (let c = 0; c < children.length; c++) if (children[c]!.live) hasLiveChild = true;
    if (!hasLiveChild && node !== trie.root) {
      const index = rows.length;
      const row = buildRow(session, path, firstUnowned, index, owner, config, metrics, rowTurns);
      row.status = status;
      row.reward = reward;
      row.episode_finished = finished;
      row.sample_index = sampleIndex;
      row.group_size = groupSize;
      row.ended_at_ms = endedAt;
      if (finished === false) row.flags.push(RowFlags.UNFINISHED);
      rows.push(row);
      for (let d = firstUnowned; d < path.length; d++) owner[d] = index;
      firstUnowned = path.length;
    }
    frames.pop();
    frameChild.pop();
    if (node !== trie.root) {
      path.pop();
      owner.pop();
      if (firstUnowned > path.length) firstUnowned = path.length;
    }
  }
  for (const row of rows) row.flags.sort();
  placeTurnRewards(session, rows, rowTurns, config.turn_reward_discount);
  turnsOut?.push(...rowTurns);
  return rows;
}

/**
 * Per-turn rewards: each trained turn of a row gets its call's reward, discounted along the call tree when
 * `gamma` is set (value(c) = reward(c) + gamma * mean(value(child)) over children that have a value). A
 * turn with no value is null; rows of a session without per-call rewards keep `turn_rewards` null.
 */
function placeTurnRewards(
  session: SessionState,
  rows: TrajectoryRow[],
  rowTurns: RowTurn[][],
  gamma: number | undefined,
): void {
  const own = session.callRewards();
  if (own.size === 0) return;
  const children = new Map<string, Set<string>>();
  for (const turns of rowTurns) {
    for (let i = 1; i < turns.length; i++) {
      const parent = turns[i - 1]!.callId;
      let set = children.get(parent);
      if (set === undefined) children.set(parent, (set = new Set()));
      set.add(turns[i]!.callId);
    }
  }
  const memo = new Map<string, number | null>();
  const overflowed = new Set<string>();
  // Iterative post-order, since a long agent session can be thousands of turns deep.
  const value = (root: string): number | null => {
    const stack: Array<[string, boolean]> = [[root, false]];
    while (stack.length > 0) {
      const [id, expanded] = stack.pop()!;
      if (memo.has(id)) continue;
      const kids = gamma === undefined ? [] : [...(children.get(id) ?? [])];
      if (!expanded) {
        stack.push([id, true]);
        for (const k of kids) if (!memo.has(k)) stack.push([k, false]);
        continue;
      }
      let sum = 0;
      let n = 0;
      for (const k of kids) {
        const v = memo.get(k);
        if (v !== null && v !== undefined) {
          sum += v;
          n++;
        }
      }
      const mine = own.get(id);
      const v = mine === undefined && n === 0 ? null : (mine ?? 0) + (n > 0 ? gamma! * (sum / n) : 0);
      // Each call's own sum is finite (REWARD_OVERFLOW dead letters); a discounted sum of huge ones can
      // still overflow: null, never infinity, and its rows are flagged.
      if (v !== null && !Number.isFinite(v)) overflowed.add(id);
      memo.set(id, v === null || Number.isFinite(v) ? v : null);
    }
    return memo.get(root) ?? null;
  };
  rows.forEach((row, i) => {
    const turns = rowTurns[i]!.filter((t) => t.trained && t.end >= 0);
    row.turn_rewards = turns.map((t) => value(t.callId));
    if (turns.some((t) => overflowed.has(t.callId)))
      row.flags = [...row.flags, RowFlags.REWARD_OVERFLOW].sort() as TrajectoryRow["flags"];
  });
}

/** Lengths along a root-to-leaf path: the whole sequence, the prompt, and the prefix shared with `owner`. */
function pathLengths(
  path: TrieNode[],
  firstUnowned: number,
): { total: number; promptLen: number; sharedLen: number } {
  let total = 0;
  let promptLen = -1;
  let sharedLen = 0;
  for (let d = 0; d < path.length; d++) {
    const node = path[d]!;
    if (promptLen < 0 && node.call !== null) promptLen = total;
    if (d < firstUnowned) sharedLen += node.len;
    total += node.len;
  }
  return { total, promptLen: promptLen < 0 ? total : promptLen, sharedLen };
}

/** A call's sampling settings as a row holds them: every field, null where the gateway did not say. */
function turnSampling(call: CallState): TurnSampling | null {
  const s = call.sampling;
  if (s === null) return null;
  return {
    temperature: s.temperature ?? null,
    top_p: s.top_p ?? null,
    top_k: s.top_k ?? null,
    min_p: s.min_p ?? null,
    repetition_penalty: s.repetition_penalty ?? null,
    logprobs_mode: s.logprobs_mode ?? null,
    engine: s.engine ?? null,
  };
}

/**
 * Per trained turn (aligned with turn_end_indices), its sampling settings; flags the row when they differ.
 * Settings sent and settings not sent differ too: a correction cannot assume either.
 */
function trainedSampling(turns: readonly Turn[], flags: Set<RowFlag>): Array<TurnSampling | null> {
  const sampling = turns.map((t) => turnSampling(t.call));
  for (let i = 1; i < sampling.length; i++) {
    if (!sameSampling(sampling[0]!, sampling[i]!)) {
      flags.add(RowFlags.MIXED_SAMPLING);
      break;
    }
  }
  return sampling;
}

function sameSampling(a: TurnSampling | null, b: TurnSampling | null): boolean {
  if (a === null || b === null) return a === b;
  for (const { name } of TURN_SAMPLING_FIELDS) if (a[name] !== b[name]) return false;
  return true;
}

/** Per-turn columns (finish reasons, policy versions), adding the turns' flags to `flags`. */
function turnColumns(
  turns: Turn[],
  flags: Set<RowFlag>,
): { finishReasons: FinishReason[]; finishRaw: string[]; wvMin: number | null; wvMax: number | null } {
  const finishReasons: FinishReason[] = [];
  const finishRaw: string[] = [];
  let wvMin: number | null = null;
  let wvMax: number | null = null;
  for (const { call } of turns) {
    finishReasons.push(call.finish);
    finishRaw.push(call.finishRaw);
    if (call.finish === "abort") flags.add(RowFlags.ABORTED_TURN);
    if (call.finish === "length") flags.add(RowFlags.LENGTH_TURN);
    for (const f of call.flags) flags.add(f);
    if (call.weightVersion !== null) {
      wvMin = wvMin === null ? call.weightVersion : Math.min(wvMin, call.weightVersion);
      wvMax = wvMax === null ? call.weightVersion : Math.max(wvMax, call.weightVersion);
    }
  }
  return { finishReasons, finishRaw, wvMin, wvMax };
}

function buildRow(
  session: SessionState,
  path: TrieNode[],
  firstUnowned: number,
  index: number,
  owner: number[],
  config: AssembleConfig,
  metrics: Metrics,
  turnsOut: RowTurn[][],
): TrajectoryRow {
  const { total, promptLen, sharedLen } = pathLengths(path, firstUnowned);
  const flags = new Set<RowFlag>(session.flags);
  let length = total;
  if (config.max_tokens !== undefined && total > config.max_tokens) {
    length = config.max_tokens;
    flags.add(RowFlags.TRUNCATED);
    metrics.inc("rows_truncated");
  }
  const tokens = copyTokens(path, firstUnowned, Math.min(promptLen, length), length);
  const { finishReasons, finishRaw, wvMin, wvMax } = turnColumns(tokens.turns, flags);
  turnsOut.push(rowTurnsOf(tokens));
  const trainedTurns = tokens.turns.filter((t) => tokens.trainedCalls.has(t.call) && t.end >= 0);
  const sampling = trainedSampling(trainedTurns, flags);
  if (tokens.missingLogprobs) {
    flags.add(RowFlags.MISSING_LOGPROBS);
    metrics.inc("rows_missing_logprobs");
  }
  const routing = rowRouting(tokens.turns, length);
  countRow(metrics, tokens, routing, length);

  return {
    key: rowKey(session.uid, session.sessionId, index),
    uid: session.uid,
    session_id: session.sessionId,
    index,
    sample_index: null,
    group_size: null,
    prompt_ids: tokens.prompt,
    response_ids: tokens.response,
    response_mask: tokens.mask,
    // Never 0.0 at a trained position: a row with any trained span lacking logprobs has none at all.
    rollout_log_probs: tokens.missingLogprobs ? null : tokens.logprobs,
    reward: null,
    episode_finished: null,
    finish_reasons: finishReasons,
    finish_reasons_raw: finishRaw,
    weight_version_min: wvMin,
    weight_version_max: wvMax,
    num_turns: tokens.turns.length,
    num_trained_tokens: tokens.trained,
    status: "timeout",
    flags: [...flags],
    parent_index: firstUnowned > 0 ? owner[firstUnowned - 1]! : null,
    shared_prefix_len: Math.min(sharedLen, length),
    sample_mask: 1,
    ended_at_ms: 0,
    last_trained_index: tokens.lastTrained < 0 ? null : tokens.lastTrained,
    reward_names: [],
    reward_values: [],
    reward_info: null,
    turn_end_indices: turnEnds(trainedTurns),
    turn_rewards: null,
    token_policy_versions: tokens.versionsUnknown ? null : tokens.versions,
    policy_version_min: tokens.policyMin,
    policy_version_max: tokens.policyMax,
    ...routingColumns(routing),
    sampling,
  };
}

/**
 * The trained turns' last indices. A loop, not Int32Array.from(turns, f): that walks the array through the
 * iterator protocol, two objects per turn (~8 MB of the ingest thread's garbage on the shared harness's
 * short workload).
 */
function turnEnds(turns: readonly Turn[]): Int32Array {
  const ends = new Int32Array(turns.length);
  for (let i = 0; i < turns.length; i++) ends[i] = turns[i]!.end;
  return ends;
}

/** The row's turns as reward stages read them: each call's id, last token, text and tool calls. */
function rowTurnsOf(tokens: RowTokens): RowTurn[] {
  return tokens.turns.map(({ call, end }) => ({
    callId: call.id,
    end,
    trained: tokens.trainedCalls.has(call),
    text: call.text,
    toolCalls: call.toolCalls,
  }));
}

function countRow(metrics: Metrics, tokens: RowTokens, routing: RowRouting | null, length: number): void {
  if (routing !== null && routing.missing > 0) metrics.inc("routed_experts_missing", "", routing.missing);
  metrics.inc("rows_emitted");
  metrics.inc("tokens_emitted", "", length);
  metrics.inc("tokens_trained", "", tokens.trained);
}

function routingColumns(routing: RowRouting | null) {
  return {
    routed_experts: routing?.bytes ?? null,
    routed_experts_dtype: routing?.layout.dtype ?? "",
    routed_experts_layers: routing?.layout.layers ?? 0,
    routed_experts_top_k: routing?.layout.top_k ?? 0,
    routed_experts_missing: routing?.missing ?? 0,
  };
}
