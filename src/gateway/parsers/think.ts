/**
 * `think` reasoning (vLLM's qwen3 / deepseek_r1 reasoning parsers): `<think>...</think>` at the start is
 * reasoning and the rest goes to the tool parser. Qwen3 and DeepSeek-R1 templates put `<think>` in the
 * generation prompt, so text with a `</think>` and no opening tag is reasoning up to it; a `<think>` never
 * closed (a truncated answer) makes the rest reasoning. Text with neither tag is content, which means that
 * without an opening tag nothing can be passed on until a `</think>` or the end decides which side it is on.
 */
import { heldTail } from "./blocks.ts";
import type { ParsedDelta, StreamingParser } from "./types.ts";

const OPEN = "<think>";
const CLOSE = "</think>";

export function thinkStream(rest: StreamingParser): StreamingParser {
  let mode: "start" | "reasoning" | "implicit" | "rest" = "start";
  let buf = "";
  let sentReasoning = false;

  const reason = (out: ParsedDelta[], text: string): void => {
    if (text === "") return;
    out.push({ kind: "reasoning", text });
    sentReasoning = true;
  };
  // An empty section still says the answer had reasoning.
  const closeReasoning = (out: ParsedDelta[]): void => {
    if (!sentReasoning) out.push({ kind: "reasoning", text: "" });
  };

  const step = (out: ParsedDelta[], final: boolean): void => {
    if (mode === "start") {
      const head = buf.trimStart();
      if (head.startsWith(OPEN)) {
        mode = "reasoning";
        buf = head.slice(OPEN.length);
      } else if (OPEN.startsWith(head) && !final) return;
      else mode = "implicit";
    }
    if (mode === "reasoning" || mode === "implicit") {
      const at = buf.indexOf(CLOSE);
      if (at >= 0) {
        reason(out, buf.slice(0, at));
        closeReasoning(out);
        const after = buf.slice(at + CLOSE.length);
        buf = "";
        mode = "rest";
        out.push(...rest.push(after));
      } else if (mode === "reasoning") {
        const held = final ? 0 : heldTail(buf, [CLOSE]);
        reason(out, buf.slice(0, buf.length - held));
        buf = buf.slice(buf.length - held);
        if (final) closeReasoning(out);
      } else if (final) {
        mode = "rest";
        out.push(...rest.push(buf));
        buf = "";
      }
    }
  };

  return {
    push(text) {
      if (mode === "rest") return rest.push(text);
      buf += text;
      const out: ParsedDelta[] = [];
      step(out, false);
      return out;
    },
    end() {
      const out: ParsedDelta[] = [];
      if (mode !== "rest") step(out, true);
      out.push(...rest.end());
      return out;
    },
  };
}
