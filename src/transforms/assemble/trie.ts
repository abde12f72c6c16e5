/**
 * A per-session token prefix trie, stored as a radix tree over one growable token arena.
 *
 * Tokens live in flat typed arrays (the arena); a node references a range of it. No per-token objects:
 * a node is one span, and splitting a span is O(1) in tokens. Sampled spans (a call's output) and context
 * spans (prompt tokens) are separate nodes, so a call's output always starts at a node boundary.
 */

/** What the trie needs to know about a call that owns sampled nodes or ends at a node. */
export interface CallHandle {
  /** Set when a later prompt walked into this call's output (the agent continued from it). */
  continued: boolean;
  /** The node whose end is the end of this call's output (or of its prompt, if the output was empty). */
  end: TrieNode | null;
}

export class TrieNode {
  /** First arena index of this node's span. */
  start: number;
  len: number;
  /** The call whose output this span is; null for context (prompt) spans. */
  readonly call: CallHandle | null;
  parent: TrieNode | null;
  /** In creation order: the first child is the oldest continuation, which fixes row order. */
  children: TrieNode[] = [];
  /** Calls whose `end` is this node. Kept so a split can move them to the tail. */
  endOf: CallHandle[] | null = null;
  /** Scratch for row extraction: the node lies on some emitted row. */
  live = false;

  constructor(start: number, len: number, call: CallHandle | null, parent: TrieNode | null) {
    this.start = start;
    this.len = len;
    this.call = call;
    this.parent = parent;
  }

  get sampled(): boolean {
    return this.call !== null;
  }
}

/** A place in the trie: `off` tokens into `node` (off === node.len is the node's end). */
export interface Position {
  node: TrieNode;
  off: number;
}

/** Result of walking a token sequence from a position. */
export interface WalkResult extends Position {
  /** How many of the walked tokens matched. */
  matched: number;
}

const INITIAL_CAPACITY = 1024;

export class TokenTrie {
  tokens: Int32Array = new Int32Array(INITIAL_CAPACITY);
  logprobs: Float32Array = new Float32Array(INITIAL_CAPACITY);
  length = 0;
  readonly root = new TrieNode(0, 0, null, null);
  nodeCount = 1;

  /** Bytes held by the arena (capacity, not length): what a session costs in memory. */
  get arenaBytes(): number {
    return this.tokens.byteLength + this.logprobs.byteLength;
  }

  private reserve(extra: number): void {
    const need = this.length + extra;
    if (need <= this.tokens.length) return;
    let cap = this.tokens.length * 2;
    while (cap < need) cap *= 2;
    const tokens = new Int32Array(cap);
    tokens.set(this.tokens.subarray(0, this.length));
    const logprobs = new Float32Array(cap);
    logprobs.set(this.logprobs.subarray(0, this.length));
    this.tokens = tokens;
    this.logprobs = logprobs;
  }

  private append(ids: Int32Array, logprobs: Float32Array | null): number {
    this.reserve(ids.length);
    const start = this.length;
    this.tokens.set(ids, start);
    if (logprobs !== null) this.logprobs.set(logprobs, start);
    // Context positions keep logprob 0 from the zero-filled arena; they are never read as trained.
    this.length += ids.length;
    return start;
  }

  /** Length of the common prefix of `node`'s span from `off` and `seq` from `i`. */
  private matchLength(node: TrieNode, off: number, seq: Int32Array, i: number): number {
    const arena = this.tokens;
    const base = node.start + off;
    const max = Math.min(node.len - off, seq.length - i);
    let k = 0;
    while (k < max && arena[base + k] === seq[i + k]) k++;
    return k;
  }

  /**
   * The child of `node` to follow for `seq[i..]`: the one with the longest match. Several children can
   * start with the same token (independent samples of one prompt); usually there is one candidate.
   */
  private pickChild(node: TrieNode, seq: Int32Array, i: number): TrieNode | null {
    const first = seq[i];
    let best: TrieNode | null = null;
    let bestLen = 0;
    let candidates = 0;
    for (const child of node.children) {
      if (this.tokens[child.start] !== first) continue;
      candidates++;
      if (candidates === 1) {
        best = child;
        continue;
      }
      // Only compute full match lengths when there is a real choice to make.
      if (candidates === 2) bestLen = this.matchLength(best!, 0, seq, i);
      const len = this.matchLength(child, 0, seq, i);
      if (len > bestLen) {
        best = child;
        bestLen = len;
      }
    }
    return best;
  }

  /**
   * Walks `seq` from `from` as far as it matches. Marks every call whose output the walk entered as
   * continued. Never modifies the tree.
   */
  walk(seq: Int32Array, from: Position = { node: this.root, off: this.root.len }): WalkResult {
    let node = from.node;
    let off = from.off;
    let i = 0;
    const n = seq.length;
    while (i < n) {
      if (off === node.len) {
        const child = this.pickChild(node, seq, i);
        if (child === null) break;
        node = child;
        off = 0;
      }
      const k = this.matchLength(node, off, seq, i);
      if (node.call !== null && k > 0) node.call.continued = true;
      i += k;
      off += k;
      if (off < node.len) break;
    }
    return { node, off, matched: i };
  }

  /**
   * Splits `node` at `off` (0 < off < len): the node keeps the head, a new node takes the tail with the
   * children and the call ends. Returns the head, whose end is now the boundary at `off`.
   */
  split(node: TrieNode, off: number): TrieNode {
    const tail = new TrieNode(node.start + off, node.len - off, node.call, node);
    tail.children = node.children;
    for (const child of tail.children) child.parent = tail;
    tail.endOf = node.endOf;
    if (tail.endOf !== null) for (const call of tail.endOf) call.end = tail;
    node.endOf = null;
    node.children = [tail];
    node.len = off;
    this.nodeCount++;
    return node;
  }

  /** Makes `pos` a node boundary and returns the node ending there. */
  boundary(pos: Position): TrieNode {
    if (pos.off === pos.node.len) return pos.node;
    if (pos.off === 0) return pos.node.parent!;
    return this.split(pos.node, pos.off);
  }

  /** Adds a new child span under `parent`. */
  addChild(
    parent: TrieNode,
    ids: Int32Array,
    logprobs: Float32Array | null,
    call: CallHandle | null,
  ): TrieNode {
    const start = this.append(ids, logprobs);
    const node = new TrieNode(start, ids.length, call, parent);
    parent.children.push(node);
    this.nodeCount++;
    return node;
  }

  /** Records that `call` ends at the end of `node`. */
  setEnd(call: CallHandle, node: TrieNode): void {
    const previous = call.end;
    if (previous !== null && previous.endOf !== null) {
      previous.endOf = previous.endOf.filter((c) => c !== call);
    }
    call.end = node;
    (node.endOf ??= []).push(call);
  }

  /** Detaches a subtree (used to drop a retry's orphan). Its tokens stay in the arena, unreferenced. */
  detach(node: TrieNode): void {
    const parent = node.parent;
    if (parent === null) return;
    parent.children = parent.children.filter((c) => c !== node);
    node.parent = null;
  }

  /** True when `ancestor` is `node` or lies on the path from the root to `node`. */
  static isOnPath(ancestor: TrieNode, node: TrieNode): boolean {
    for (let n: TrieNode | null = node; n !== null; n = n.parent) if (n === ancestor) return true;
    return false;
  }
}
