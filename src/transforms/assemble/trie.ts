/**
 * A per-session token prefix trie, stored as a radix tree over an arena of typed-array chunks.
 *
 * Tokens live in flat typed arrays; a node references a range of one chunk. No per-token objects: a node
 * is one span, and splitting a span is O(1) in tokens. Chunks are never reallocated (a full chunk is
 * followed by a bigger one), so no turn pays for copying the whole session: per-turn cost stays flat in
 * session length. Sampled spans (a call's output) and context spans (prompt tokens) are separate nodes,
 * so a call's output always starts at a node boundary.
 */
import { copyIds, copyLogprobs } from "./span-copy.ts";

/** What the trie needs to know about a call that owns sampled nodes or ends at a node. */
export interface CallHandle {
  /** Set when a later prompt walked into this call's output (the agent continued from it). */
  continued: boolean;
  /** The node whose end is the end of this call's output (or of its prompt, if the output was empty). */
  end: TrieNode | null;
}

// Frozen: a push to it would throw, not give every leaf a child. Read with index loops: a for...of over a
// frozen array is not optimized, and made an iterator and a result object per step (40 MiB of the ingest
// thread's garbage on the shared harness's short workload, issue 46).
const NO_CHILDREN = Object.freeze([]) as unknown as TrieNode[];

export class TrieNode {
  /** The chunk holding this node's tokens, and the matching logprobs (0 at context positions). */
  readonly tokens: Int32Array;
  readonly logprobs: Float32Array;
  /** First index of this node's span in its chunk. */
  start: number;
  len: number;
  /** The call whose output this span is; null for context (prompt) spans. */
  readonly call: CallHandle | null;
  parent: TrieNode | null;
  /**
   * In creation order: the first child is the oldest continuation, which fixes row order. A leaf shares
   * one empty array (never pushed to: a first child replaces it).
   */
  children: TrieNode[] = NO_CHILDREN;
  /** Calls whose `end` is this node. Kept so a split can move them to the tail. */
  endOf: CallHandle[] | null = null;
  /** Scratch for row extraction: the node lies on some emitted row. */
  live = false;

  constructor(
    tokens: Int32Array,
    logprobs: Float32Array,
    start: number,
    len: number,
    call: CallHandle | null,
    parent: TrieNode | null,
  ) {
    this.tokens = tokens;
    this.logprobs = logprobs;
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

/** The smallest chunk, and the size up to which chunks grow fourfold (then by GROWTH). */
const MIN_CHUNK = 64;
const SMALL_CHUNK = 1024;
const MAX_CHUNK = 1 << 20;
// Past SMALL_CHUNK each new chunk is 1.25x the last: the unused tail of the newest chunk (at most a fifth of
// the session) is all the arena wastes. Doubling wasted up to half: measured 17.4 bytes/token against 11.9
// (bench/memory.ts).
const GROWTH = 1.25;
const NO_TOKENS = new Int32Array(0);
const NO_LOGPROBS = new Float32Array(0);

/** Chunks up to this many tokens are a power of two in size and recycled through the chunk pool. */
const POOLED_MAX_TOKENS = SMALL_CHUNK;
/** Free chunks the pool keeps at most, in bytes (a few thousand sessions' worth). */
const POOL_SPARE_BYTES = 16 * 1024 * 1024;

/**
 * Free chunk buffers by size (tokens): a session hands its chunks back once its rows are copied out
 * (`TokenTrie.release`), and the next sessions take them. Allocating each chunk (two or three per session
 * of the shared harness's short workload) was 82 ms of the ingest thread, and the ~100 MiB of buffers a
 * run went through was memory the garbage collector and the allocator tracked and freed one by one.
 */
class ChunkPool {
  private readonly free = new Map<number, ArrayBuffer[]>();
  private spareBytes = 0;

  /** A buffer of `tokens` token slots and as many logprob slots; not zeroed. */
  take(tokens: number): ArrayBuffer {
    const spare = this.free.get(tokens)?.pop();
    if (spare !== undefined) {
      this.spareBytes -= spare.byteLength;
      return spare;
    }
    return Buffer.allocUnsafeSlow(tokens * 8).buffer;
  }

  /** A chunk nothing reads any more; kept for reuse while the pool has room. */
  give(buffer: ArrayBuffer): void {
    const tokens = buffer.byteLength / 8;
    if (tokens > POOLED_MAX_TOKENS || this.spareBytes + buffer.byteLength > POOL_SPARE_BYTES) return;
    let list = this.free.get(tokens);
    if (list === undefined) this.free.set(tokens, (list = []));
    list.push(buffer);
    this.spareBytes += buffer.byteLength;
  }
}

/** This thread's pool of free chunks (tries live on the thread that assembles). */
export const chunkPool = new ChunkPool();

/** The smallest power of two at least `n`. */
const powerOfTwo = (n: number) => 2 ** Math.ceil(Math.log2(n));

export class TokenTrie {
  // No chunk until the first span: a session that never makes a call holds no arena, and the first chunk
  // fits the first span (a fixed 8 KB first chunk made 50,000 tiny sessions cost 800 MB, issue 27 item 9).
  private chunkTokens = NO_TOKENS;
  private chunkLogprobs = NO_LOGPROBS;
  private used = 0;
  /** The chunks' buffers, handed back to the pool by `release`. */
  private chunks: ArrayBuffer[] = [];
  private released = false;
  /** Tokens stored, and token slots allocated across chunks. */
  length = 0;
  allocated = 0;
  readonly root: TrieNode = new TrieNode(NO_TOKENS, NO_LOGPROBS, 0, 0, null, null);
  nodeCount = 1;

  /** Bytes held by the arena's chunks: what a session's tokens cost in memory. */
  get arenaBytes(): number {
    return this.allocated * 8;
  }

  /**
   * The next chunk's size: the first fits the first span (64 to 1,024 tokens), the next ones grow fourfold
   * up to 1,024 tokens, then by GROWTH. Sizing later chunks to a long span's need instead cost 13% more
   * bytes per token (bench/memory.ts: 12.7 against 11.2).
   */
  private nextChunkSize(need: number): number {
    const last = this.chunkTokens.length;
    const size =
      last === 0
        ? Math.min(SMALL_CHUNK, Math.max(MIN_CHUNK, need))
        : Math.min(MAX_CHUNK, last < SMALL_CHUNK ? last * 4 : Math.ceil(last * GROWTH));
    // Pooled sizes are few, so a chunk a session hands back fits the next session's.
    return size <= POOLED_MAX_TOKENS ? powerOfTwo(size) : size;
  }

  /**
   * Hands the chunks back to the pool for other sessions: call only once nothing reads this trie's tokens
   * any more (its rows are copied out), and never use the trie again.
   */
  release(): void {
    this.released = true;
    for (const chunk of this.chunks) chunkPool.give(chunk);
    this.chunks = [];
    this.chunkTokens = NO_TOKENS;
    this.chunkLogprobs = NO_LOGPROBS;
    this.used = 0;
  }

  /**
   * Copies `ids` (and logprobs) into the arena as a chain of nodes under `parent`, one node per chunk the
   * span lands in; returns the first and last node of the chain.
   */
  private appendChain(
    parent: TrieNode,
    ids: Int32Array,
    logprobs: Float32Array | null,
    call: CallHandle | null,
  ): { first: TrieNode; last: TrieNode } {
    if (ids.length === 0) throw new Error("a trie span needs at least one token");
    if (this.released) throw new Error("a released trie takes no more tokens");
    let first: TrieNode | null = null;
    let at = parent;
    let i = 0;
    do {
      if (this.used === this.chunkTokens.length) {
        const size = this.nextChunkSize(ids.length - i);
        // One buffer for both: a chunk is one allocation, and one object fewer per chunk in the heap. Not
        // zeroed (every range is written before it is read): zeroing them was 86 ms of the ingest thread
        // on the shared harness's short workload.
        const buffer = chunkPool.take(size);
        this.chunks.push(buffer);
        this.chunkTokens = new Int32Array(buffer, 0, size);
        this.chunkLogprobs = new Float32Array(buffer, size * 4, size);
        this.used = 0;
        this.allocated += size;
      }
      const take = Math.min(ids.length - i, this.chunkTokens.length - this.used);
      // The whole span, most often: no view made for it.
      const whole = i === 0 && take === ids.length;
      if (whole) this.chunkTokens.set(ids, this.used);
      else copyIds(this.chunkTokens, this.used, ids, i, take);
      // Context positions hold logprob 0; they are never read as trained.
      if (logprobs === null) this.chunkLogprobs.fill(0, this.used, this.used + take);
      else if (whole) this.chunkLogprobs.set(logprobs, this.used);
      else copyLogprobs(this.chunkLogprobs, this.used, logprobs, i, take);
      const node = new TrieNode(this.chunkTokens, this.chunkLogprobs, this.used, take, call, at);
      // Most nodes have one child or none: an exact one-element array, not push's 16 slots.
      if (at.children.length === 0) at.children = [node];
      else at.children.push(node);
      this.nodeCount++;
      this.used += take;
      i += take;
      first ??= node;
      at = node;
    } while (i < ids.length);
    this.length += ids.length;
    return { first, last: at };
  }

  /** Length of the common prefix of `node`'s span from `off` and `seq` from `i`. */
  private matchLength(node: TrieNode, off: number, seq: Int32Array, i: number): number {
    const arena = node.tokens;
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
    const children = node.children;
    for (let c = 0; c < children.length; c++) {
      const child = children[c]!;
      if (child.tokens[child.start] !== first) continue;
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
    const tail = new TrieNode(node.tokens, node.logprobs, node.start + off, node.len - off, node.call, node);
    tail.children = node.children;
    for (let c = 0; c < tail.children.length; c++) tail.children[c]!.parent = tail;
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

  /**
   * Adds a new span under `parent` (a chain of nodes when it crosses chunks). Returns its first node (the
   * new child of `parent`) and its last node (where a continuation attaches).
   */
  addChild(
    parent: TrieNode,
    ids: Int32Array,
    logprobs: Float32Array | null,
    call: CallHandle | null,
  ): { first: TrieNode; last: TrieNode } {
    return this.appendChain(parent, ids, logprobs, call);
  }

  /** Records that `call` ends at the end of `node`. */
  setEnd(call: CallHandle, node: TrieNode): void {
    const previous = call.end;
    if (previous !== null && previous.endOf !== null) {
      previous.endOf = previous.endOf.filter((c) => c !== call);
    }
    call.end = node;
    if (node.endOf === null) node.endOf = [call];
    else node.endOf.push(call);
  }

  /** Detaches a subtree (used to drop a retry's orphan). Its tokens stay in the arena, unreferenced. */
  detach(node: TrieNode): void {
    const parent = node.parent;
    if (parent === null) return;
    parent.children = parent.children.filter((c) => c !== node);
    node.parent = null;
  }

  /** Tokens from the root to `at` (a walk up the path: O(nodes on it)). */
  static depth(at: Position): number {
    let n = at.off;
    for (let node = at.node.parent; node !== null; node = node.parent) n += node.len;
    return n;
  }

  /** True when `ancestor` is `node` or lies on the path from the root to `node`. */
  static isOnPath(ancestor: TrieNode, node: TrieNode): boolean {
    for (let n: TrieNode | null = node; n !== null; n = n.parent) if (n === ancestor) return true;
    return false;
  }
}
