/**
 * gpt-oss harmony output (vLLM's `openai`): a run of messages, each a header, `<|message|>`, a body and an
 * end token. The generation prompt ends with `<|start|>assistant`, so the text opens inside a header:
 *   `<|channel|>analysis<|message|>...<|end|>`                                        reasoning
 *   `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`
 *                                                      a call (`to=` may also come before `<|channel|>`)
 *   `<|start|>assistant<|channel|>final<|message|>...<|return|>`                      content
 * A commentary message without a recipient (a preamble) is content too. Reasoning and content flow as they
 * arrive; a call's body is buffered until its end token. `<|call|>` and `<|return|>` are stop tokens that an
 * engine may leave out, so a call whose body is already a whole JSON object at the end of the text counts.
 */
import { isObject } from "../apis/json.ts";
import { heldTail } from "./blocks.ts";
import { parseJson } from "./json-text.ts";
import type { ParsedDelta, StreamingParser } from "./types.ts";

const MESSAGE = "<|message|>";
const OPENS = ["<|start|>", "<|channel|>"];
const ENDS = ["<|end|>", "<|call|>", "<|return|>"];
const FUNCTIONS = "functions.";

type Body = { kind: "reasoning" | "content" } | { kind: "call"; header: string; recipient: string };

function bodyKind(header: string): Body {
  const recipient = /\bto=([^\s<]+)/.exec(header)?.[1];
  if (recipient !== undefined) return { kind: "call", header, recipient };
  const channel = /<\|channel\|>\s*([^\s<]+)/.exec(header)?.[1];
  return { kind: channel === "analysis" ? "reasoning" : "content" };
}

function firstOf(text: string, markers: readonly string[]): { at: number; marker: string } | undefined {
  let found: { at: number; marker: string } | undefined;
  for (const marker of markers) {
    const at = text.indexOf(marker);
    if (at >= 0 && (found === undefined || at < found.at)) found = { at, marker };
  }
  return found;
}

function readCall(recipient: string, body: string): ParsedDelta | undefined {
  if (!recipient.startsWith(FUNCTIONS)) return undefined;
  const args = parseJson(body);
  const name = recipient.slice(FUNCTIONS.length);
  if (name === "" || !isObject(args)) return undefined;
  return { kind: "tool_call", call: { name, arguments: JSON.stringify(args) } };
}

export function harmonyStream(): StreamingParser {
  let state: "header" | "outside" | Body = "header";
  let buf = "";

  const emit = (out: ParsedDelta[], kind: "reasoning" | "content", text: string): void => {
    if (text !== "") out.push({ kind, text });
  };

  const step = (out: ParsedDelta[], final: boolean): void => {
    while (true) {
      if (state === "outside") {
        const open = firstOf(buf, OPENS);
        const keep = open ? buf.length - open.at : final ? 0 : heldTail(buf, OPENS);
        emit(out, "content", buf.slice(0, buf.length - keep));
        buf = buf.slice(buf.length - keep);
        if (!open) return;
        state = "header";
      }
      if (state === "header") {
        const at = buf.indexOf(MESSAGE);
        if (at < 0) {
          if (final && buf !== "") out.push({ kind: "malformed", text: buf });
          if (final) buf = "";
          return;
        }
        state = bodyKind(buf.slice(0, at + MESSAGE.length));
        buf = buf.slice(at + MESSAGE.length);
        // An empty analysis message is still reasoning.
        if (state.kind === "reasoning") out.push({ kind: "reasoning", text: "" });
        continue;
      }
      const end = firstOf(buf, ENDS);
      if (state.kind === "call") {
        if (end === undefined && !final) return;
        const body = end ? buf.slice(0, end.at) : buf;
        const raw = state.header + buf.slice(0, end ? end.at + end.marker.length : buf.length);
        out.push(readCall(state.recipient, body) ?? { kind: "malformed", text: raw });
      } else {
        const keep = end ? buf.length - end.at : final ? 0 : heldTail(buf, ENDS);
        emit(out, state.kind, buf.slice(0, buf.length - keep));
        if (!end) {
          buf = buf.slice(buf.length - keep);
          return;
        }
      }
      buf = end ? buf.slice(end.at + end.marker.length) : "";
      state = "outside";
      if (buf === "") return;
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
