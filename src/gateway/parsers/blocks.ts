/**
 * The stream machine for formats that are content with tool-call blocks in it (hermes, qwen3_coder,
 * mistral, llama3_json). A format says where a block opens, where it ends and how to read it; this module
 * does the rest: content flows as it arrives, a tail that could still become an opening marker is held
 * back until it is decided, a block is buffered whole and becomes one tool_call delta per call (or one
 * malformed delta carrying its raw text), and a block still open at the end is malformed.
 */
import type { ParsedDelta, ParsedToolCall, StreamingParser } from "./types.ts";

export interface BlockFormat {
  /** Markers that open a block; the block's text starts with the marker. */
  readonly opens: readonly string[];
  /**
   * Only a block at the very start of the text (after whitespace, which then belongs to the block) counts,
   * and it runs to the end: the output is all calls or all content (llama3_json).
   */
  readonly anchored?: boolean;
  /**
   * Length of the block at the start of `block`, or -1 while more text could change it. A length that
   * stops short of a well-formed call is fine: read() refuses the block and the rest is content again.
   */
  blockEnd(block: string, final: boolean): number;
  /** The calls a closed block holds, or undefined when it cannot be read. */
  read(block: string): ParsedToolCall[] | undefined;
  /** Drop the whitespace right after a block that was read, as vLLM's hermes parser reports content. */
  readonly trimAfter?: boolean;
}

/** How many trailing chars of `text` could be the start of one of `markers` (a proper prefix of it). */
export function heldTail(text: string, markers: readonly string[]): number {
  let held = 0;
  for (const m of markers)
    for (let k = Math.min(m.length - 1, text.length); k > held; k--)
      if (text.endsWith(m.slice(0, k))) {
        held = k;
        break;
      }
  return held;
}

export function blockStream(format: BlockFormat): StreamingParser {
  return new BlockStream(format);
}

/** One output's stream: `buf` holds what is not given out yet (a held tail, or the block being read). */
class BlockStream implements StreamingParser {
  private readonly format: BlockFormat;
  private buf = "";
  private inBlock = false;
  private trimming = false;
  /** For anchored formats: whether the start has been decided (a block, or content from here on). */
  private decided = false;

  constructor(format: BlockFormat) {
    this.format = format;
  }

  push(text: string): ParsedDelta[] {
    this.buf += text;
    const out: ParsedDelta[] = [];
    this.step(out, false);
    return out;
  }

  end(): ParsedDelta[] {
    const out: ParsedDelta[] = [];
    this.step(out, true);
    return out;
  }

  private step(out: ParsedDelta[], final: boolean): void {
    for (;;) {
      if (this.inBlock) {
        if (!this.stepInBlock(out, final)) return;
        continue;
      }
      if (this.trimming) {
        this.buf = this.buf.trimStart();
        if (this.buf === "") return;
        this.trimming = false;
      }
      if (this.format.anchored ? !this.stepAnchored(out, final) : !this.stepContent(out, final)) return;
    }
  }

  /** Reads the block once it ends (or gives it as malformed at the end); true: go on with what follows. */
  private stepInBlock(out: ParsedDelta[], final: boolean): boolean {
    const length = this.format.blockEnd(this.buf, final);
    if (length >= 0) this.closeBlock(out, length);
    else if (final) {
      out.push({ kind: "malformed", text: this.buf });
      this.buf = "";
      this.inBlock = false;
    }
    return !this.inBlock && this.buf !== "";
  }

  /** An anchored format: a block only at the very start; true: a block begins, go on. */
  private stepAnchored(out: ParsedDelta[], final: boolean): boolean {
    if (!this.decided) {
      const head = this.buf.trimStart();
      if (this.format.opens.some((m) => head.startsWith(m))) {
        this.decided = this.inBlock = true;
        return true;
      }
      if (!final && this.format.opens.some((m) => m.startsWith(head))) return false;
      this.decided = true;
    }
    content(out, this.buf);
    this.buf = "";
    return false;
  }

  /** Content up to the next opening marker (a possible marker's start held back); true: a block begins. */
  private stepContent(out: ParsedDelta[], final: boolean): boolean {
    let at = -1;
    for (const m of this.format.opens) {
      const i = this.buf.indexOf(m);
      if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    if (at >= 0) {
      content(out, this.buf.slice(0, at));
      this.buf = this.buf.slice(at);
      this.inBlock = true;
      return true;
    }
    const held = final ? 0 : heldTail(this.buf, this.format.opens);
    content(out, this.buf.slice(0, this.buf.length - held));
    this.buf = this.buf.slice(this.buf.length - held);
    return false;
  }

  private closeBlock(out: ParsedDelta[], length: number): void {
    const block = this.buf.slice(0, length);
    this.buf = this.buf.slice(length);
    this.inBlock = false;
    let calls: ParsedToolCall[] | undefined;
    try {
      calls = this.format.read(block);
    } catch {
      calls = undefined;
    }
    if (calls === undefined) out.push({ kind: "malformed", text: block });
    else {
      for (const call of calls) out.push({ kind: "tool_call", call });
      this.trimming = this.format.trimAfter === true;
    }
  }
}

function content(out: ParsedDelta[], text: string): void {
  if (text !== "") out.push({ kind: "content", text });
}
