/**
 * Decode benchmarks: raw JSON lines → typed events (JSON.parse + zod + typed token arrays + digest), for
 * token arrays sent as JSON numbers and packed as base64; and full prompts from bytes as a decode worker
 * reads them, parsed whole against continued from the session's last prompt (prompt-prefix.ts); and a
 * decode worker's reply to the ingest thread, by postMessage's structured clone against packed by shape
 * (reply-codec.ts).
 */
import { decodeOutcome } from "../src/transforms/assemble/decode/decode-core.ts";
import { decodeEvent } from "../src/transforms/assemble/decode/decode.ts";
import { PromptPrefixes } from "../src/transforms/assemble/decode/prompt-prefix.ts";
import { EventPacker, EventUnpacker, packedArrays } from "../src/transforms/assemble/decode/reply-codec.ts";
import { ArrayArena, useArrayArena } from "../src/schemas/tokens.ts";
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
  replies();
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

/**
 * What a decode worker's reply costs to send, both ends on one thread (structuredClone is postMessage's
 * serializer and deserializer): short sessions' events in chunks of 256, their token arrays in the
 * arena's blocks, which move. Cloned as objects (before), and packed by shape, cloned, unpacked (now).
 */
function replies(): void {
  const shape = { initialPrompt: 180, turns: 4, outputTokens: 76, observationTokens: 64 };
  const raws: Buffer[] = [];
  for (let s = 0; s < 2_000; s++) {
    for (const e of linearSession(shape, "full", { uid: `u${s}`, sessionId: "s", seed: s + 1 })) {
      raws.push(Buffer.from(JSON.stringify(e)));
    }
  }
  const origin = { kind: "file", file: "bench", line: 0 } as const;
  const arena = new ArrayArena();
  useArrayArena(arena);
  const chunks: Array<{ events: object[]; digests: number[]; blocks: () => ArrayBuffer[] }> = [];
  const decodeAll = () => {
    chunks.length = 0;
    for (let c = 0; c < raws.length; c += 256) {
      const events: object[] = [];
      const digests: number[] = [];
      for (const raw of raws.slice(c, c + 256)) {
        const r = decodeOutcome({ raw, origin }, null, null);
        if (r.kind !== "event") throw new Error(`unexpected ${r.kind} event in the workload`);
        events.push(r.value.event);
        digests.push(r.value.digest);
      }
      const blocks = arena.take();
      chunks.push({ events, digests, blocks: () => blocks });
    }
  };
  const timed = (send: (chunk: (typeof chunks)[number]) => number) => {
    let best = Infinity;
    for (let i = 0; i < 6; i++) {
      decodeAll(); // the blocks move: each pass decodes afresh, untimed
      const t = performance.now();
      let n = 0;
      for (const chunk of chunks) n += send(chunk);
      if (n !== raws.length) throw new Error(`${n} events came back of ${raws.length}`);
      if (i > 0) best = Math.min(best, (performance.now() - t) / 1000);
    }
    return best;
  };
  const cloned = timed(({ events, digests, blocks }) => {
    const items = events.map((event, i) => ({ event, digest: digests[i] }));
    return structuredClone({ items }, { transfer: blocks() }).items.length;
  });
  const packer = new EventPacker();
  const unpacker = new EventUnpacker();
  const packed = timed(({ events, digests, blocks }) => {
    packer.begin(blocks());
    for (const e of events) if (!packer.add(e)) throw new Error("an event could not be packed");
    const p = packer.take();
    // As the worker sends them: in one transferred array.
    const d = Float64Array.from(digests);
    const got = structuredClone(
      { p, digests: d },
      { transfer: [...p.buffers, ...packedArrays(p), d.buffer as ArrayBuffer] },
    );
    unpacker.begin(got.p);
    for (let i = 0; i < got.digests.length; i++) unpacker.next();
    return got.digests.length;
  });
  useArrayArena(null); // the benches after this one decode as the ingest thread does
  for (const [name, seconds] of [
    ["structured clone", cloned],
    ["packed by shape", packed],
  ] as const) {
    record({
      bench: "decode",
      case: `worker reply, short sessions, ${name}`,
      value: raws.length / seconds / 1e6,
      unit: "M events/s",
      note: name === "packed by shape" ? `${(cloned / packed).toFixed(2)}x` : "send and receive, one thread",
    });
  }
}

if (import.meta.main) run();
