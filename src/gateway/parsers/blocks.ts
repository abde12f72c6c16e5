/**
 * The stream machine for formats that are content with tool-call blocks in it (hermes, qwen3_coder,
 * mistral, llama3_json). A format says where a block opens, where it ends and how to read it; this module
 * does the rest: content flows as it arrives, a tail that could still become an opening marker is held
 * back until it is decided, a block is buffered whole and becomes one tool_call delta per call (or one
 * malformed delta carrying its raw text), and a block still open at the end is malformed.
 */
import type { ParsedDelta, ParsedToolCall, StreamingParser } from "./parser.ts";

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
  let buf = "";
  let inBlock = false;
  let trimming = false;
  // For anchored formats: whether the start has been decided (a block, or content from here on).
  let decided = false;

  const closeBlock = (out: ParsedDelta[], length: number): void => {
    const block = buf.slice(0, length);
    buf = buf.slice(length);
    inBlock = false;
    let calls: ParsedToolCall[] | undefined;
    try {
      calls = format.read(block);
    } catch {
      calls = undefined;
    }
    if (calls === undefined) out.push({ kind: "malformed", text: block });
    else {
      for (const call of calls) out.push({ kind: "tool_call", call });
      trimming = format.trimAfter === true;
    }
  };

  const content = (out: ParsedDelta[], text: string): void => {
    if (text !== "") out.push({ kind: "content", text });
  };

  const step = (out: ParsedDelta[], final: boolean): void => {
    while (true) {
      if (inBlock) {
        const length = format.blockEnd(buf, final);
        if (length >= 0) closeBlock(out, length);
        else if (final) {
          out.push({ kind: "malformed", text: buf });
          buf = "";
          inBlock = false;
        }
        if (inBlock || buf === "") return;
        continue;
      }
      if (trimming) {
        buf = buf.trimStart();
        if (buf === "") return;
        trimming = false;
      }
      if (format.anchored) {
        if (!decided) {
          const head = buf.trimStart();
          if (format.opens.some((m) => head.startsWith(m))) {
            decided = inBlock = true;
            continue;
          }
          if (!final && format.opens.some((m) => m.startsWith(head))) return;
          decided = true;
        }
        content(out, buf);
        buf = "";
        return;
      }
      let at = -1;
      for (const m of format.opens) {
        const i = buf.indexOf(m);
        if (i >= 0 && (at < 0 || i < at)) at = i;
      }
      if (at >= 0) {
        content(out, buf.slice(0, at));
        buf = buf.slice(at);
        inBlock = true;
        continue;
      }
      const held = final ? 0 : heldTail(buf, format.opens);
      content(out, buf.slice(0, buf.length - held));
      buf = buf.slice(buf.length - held);
      return;
    }
  };

  return {
    push(text) {
      buf += text;
      const out: ParsedDelta[] = [];
      step(out, false);
      return out;
    },
    end() {
      const out: ParsedDelta[] = [];
      step(out, true);
      return out;
    },
  };
}
