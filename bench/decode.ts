/**
 * Decode benchmarks: raw JSON lines → typed events (JSON.parse + zod + typed token arrays + digest), for
 * token arrays sent as JSON numbers and packed as base64; and full prompts from bytes as a decode worker
 * reads them, parsed whole against continued from the session's last prompt (prompt-prefix.ts).
 */
import { decodeOutcome } from "../src/transforms/assemble/decode/decode-core.ts";
import { decodeEvent } from "../src/transforms/assemble/decode/decode.ts";
import { PromptPrefixes } from "../src/transforms/assemble/decode/prompt-prefix.ts";
import { bestOf, record } from "./harness.ts";
import { linearSession } from "./workloads.ts";

function lines(packed: boolean): { lines: string[]; tokens: number; bytes: number } {
  const shape = { initialPrompt: 4096, turns: 16, outputTokens: 512, observationTokens: 384 };
  const out: string[] = [];
  let tokens = 0;
  for (let s = 0; s < 8; s++) {
    for (const e of linearSession(shape, "full", { uid: `u${s}`, sessionId: "s", seed: s + 1, packed })) {
      out.push(JSON.stringify(e));
    }
  }
  for (const raw of out) {
    const r = decodeEvent({ raw, origin: { kind: "file", file: "bench", line: 0 } });
    if (r.kind !== "event") throw new Error(`unexpected ${r.kind} event in the workload`);
    const e = r.value.event;
    if (e.type === "request") tokens += e.prompt_ids!.length;
    if (e.type === "response") tokens += e.output_ids.length + (e.logprobs?.length ?? 0);
  }
  return { lines: out, tokens, bytes: out.reduce((n, l) => n + Buffer.byteLength(l), 0) };
}

export function run(): void {
  for (const packed of [false, true]) {
    const w = lines(packed);
    const seconds = bestOf(5, () => {
      for (let i = 0; i < w.lines.length; i++) {
        const r = decodeEvent({ raw: w.lines[i]!, origin: { kind: "file", file: "bench", line: i } });
        if (r.kind === "rejected") throw new Error(r.deadLetter.message);
      }
    });
    const form = packed ? "packed base64 arrays" : "JSON number arrays";
    record({
      bench: "decode",
      case: `full prompts, ${form}`,
      value: w.tokens / seconds / 1e6,
      unit: "M values/s",
      note: `${(w.bytes / seconds / 1e6).toFixed(0)} MB/s, ${(w.bytes / w.tokens).toFixed(2)} bytes/value on the wire`,
    });
  }
  prefixes();
}

/** A decode worker's loop over bytes, without and with the prompt prefix reader (a fresh one per pass). */
function prefixes(): void {
  const w = lines(false);
  const raws = w.lines.map((l) => Buffer.from(l));
  const origin = { kind: "file", file: "bench", line: 0 } as const;
  const pass = (reader: boolean) => () => {
    const prefixes = reader ? new PromptPrefixes() : null;
    for (const raw of raws) {
      const r = decodeOutcome({ raw, origin }, null, prefixes);
      if (r.kind !== "event") throw new Error(`unexpected ${r.kind} event in the workload`);
    }
  };
  const whole = bestOf(5, pass(false));
  const continued = bestOf(5, pass(true));
  for (const [name, seconds] of [
    ["parsed whole", whole],
    ["continued from the last prompt", continued],
  ] as const) {
    record({
      bench: "decode",
      case: `full prompts from bytes, ${name}`,
      value: w.tokens / seconds / 1e6,
      unit: "M values/s",
      note: name === "parsed whole" ? "as a decode worker reads them" : `${(whole / continued).toFixed(2)}x`,
    });
  }
}

if (import.meta.main) run();
