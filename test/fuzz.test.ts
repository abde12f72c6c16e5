/**
 * A seeded fuzz test of the decoder and the assembler: thousands of mutated gateway events (fields
 * dropped, retyped, enlarged, nested, bytes flipped, lines duplicated and reordered) go through decode
 * and assembly as a replay would run them. Nothing may throw; every rejected event becomes a dead letter
 * with a known code, its origin and its raw bytes; every event is accounted for; and every row that comes
 * out is well formed (aligned masks and logprobs, finite values, a known finish reason).
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { it } from "node:test";
import { CountingDeadLetters, MemoryDeadLetters } from "../src/core/dead-letters.ts";
import { ErrorCodes } from "../src/core/errors.ts";
import { Metrics } from "../src/core/metrics.ts";
import { mulberry32 } from "../src/core/prng.ts";
import type { FinishReason } from "../src/schemas/trajectory.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import { decodeEvent } from "../src/transforms/decode/decode.ts";

const EXAMPLES = readFileSync(new URL("../examples/sessions.jsonl", import.meta.url), "utf8")
  .trimEnd()
  .split("\n");
const ROUNDS = 300;
const FINISH_REASONS: FinishReason[] = ["stop", "length", "tool_calls", "abort", "unknown"];

type Json = Record<string, unknown>;

/** One mutation of an event, chosen by the PRNG. */
function mutate(event: Json, random: () => number): string | Uint8Array {
  const keys = Object.keys(event);
  const key = keys[Math.floor(random() * keys.length)]!;
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  const e: Json = structuredClone(event);
  switch (Math.floor(random() * 12)) {
    case 0:
      delete e[key];
      break;
    case 1:
      e[key] = pick([null, true, "", "x", -1, 0.5, 2 ** 31, 2 ** 53, 1e308, -1e39, [], {}, "constructor"]);
      break;
    case 2:
      e[pick(["__proto__", "constructor", "toString", "extra"])] = pick([1, "__proto__", { a: 1 }]);
      break;
    case 3:
      e.finish_reason = pick(["constructor", "__proto__", " ABORT ", "length", "stop\u001b[31m", ""]);
      break;
    case 4: {
      let deep: unknown = "x";
      for (let i = 0; i < 100 + Math.floor(random() * 200); i++) deep = [deep];
      e[pick(["messages", "metadata", "tool_calls", "info"])] = deep;
      break;
    }
    case 5:
      e.seq = pick([0, 1, 3, 1000, -2, 1.5, "1"]);
      break;
    case 6:
      e.ts = pick([0, -1, 8.64e15 + 1, Number.MAX_VALUE, "now", 1.5]);
      break;
    case 7:
      if (Array.isArray(e.logprobs)) (e.logprobs as unknown[])[0] = pick([0.7, "x", null, 1e-7, -1e39]);
      else e.logprobs = pick([[0.5], "AAAA", { b64: "!!" }, { b64: "AAAA" }]);
      break;
    case 8:
      e.output_ids = pick([[-1], [2 ** 31], ["1"], { b64: "AQ" }, [], [1.5]]);
      break;
    case 9: {
      // A flipped byte somewhere in the line, possibly invalid UTF-8.
      const bytes = Buffer.from(JSON.stringify(e));
      bytes[Math.floor(random() * bytes.length)] = Math.floor(random() * 256);
      return new Uint8Array(bytes);
    }
    case 10:
      return JSON.stringify(e).slice(0, Math.floor(random() * JSON.stringify(e).length));
    default:
      e.group_size = pick([0, 1, 2, 100_000, 2 ** 40]);
      e.sample_index = pick([0, 1, -1, 5e9]);
  }
  return JSON.stringify(e);
}

it(`survives ${ROUNDS} rounds of mutated sessions, accounting for every event`, () => {
  const random = mulberry32(20261122);
  const known = new Set(Object.keys(ErrorCodes));
  let events = 0;
  let rejected = 0;
  let rows = 0;
  for (let round = 0; round < ROUNDS; round++) {
    // Each round: the example sessions with some events mutated, some duplicated, a few swapped.
    const lines: Array<string | Uint8Array> = [];
    for (const line of EXAMPLES) {
      const r = random();
      if (r < 0.15) lines.push(mutate(JSON.parse(line) as Json, random));
      else if (r < 0.18) lines.push(line, line);
      else lines.push(line);
    }
    for (let i = 0; i < 5; i++) {
      const a = Math.floor(random() * lines.length);
      const b = Math.floor(random() * lines.length);
      [lines[a], lines[b]] = [lines[b]!, lines[a]!];
    }
    const metrics = new Metrics();
    const memory = new MemoryDeadLetters();
    const deadLetters = new CountingDeadLetters(metrics, memory);
    const assembler = new Assembler({
      config: assembleConfigSchema.parse({ reward_grace_ms: 0 }),
      deadLetters,
      metrics,
    });
    const outputs = [];
    let decodeRejections = 0;
    let controls = 0;
    lines.forEach((raw, i) => {
      const decoded = decodeEvent({ raw, origin: { kind: "file", file: "fuzz.jsonl", line: i + 1 } });
      if (decoded.kind === "control") controls++;
      else if (decoded.kind === "rejected") {
        decodeRejections++;
        deadLetters.write(decoded.deadLetter);
        if (decoded.envelope !== undefined) outputs.push(...assembler.pushRejected(decoded.envelope));
      } else outputs.push(...assembler.push(decoded.value));
    });
    outputs.push(...assembler.flush());
    events += lines.length;
    rejected += decodeRejections;

    // Every event is decoded into an event, a control event, or a dead letter.
    assert.equal(
      metrics.total("events_received") + controls + decodeRejections,
      lines.length,
      `round ${round}: an event went unaccounted`,
    );
    for (const letter of memory.letters) {
      assert.ok(known.has(letter.code), `unknown code ${letter.code}`);
      assert.ok(letter.message.length > 0);
      assert.ok(letter.origin !== undefined);
      if (letter.origin.kind === "file") assert.ok(letter.raw !== undefined || letter.raw_b64 !== undefined);
    }
    for (const o of outputs) {
      for (const row of o.rows) {
        rows++;
        assert.equal(row.response_mask.length, row.response_ids.length);
        if (row.rollout_log_probs !== null) {
          assert.equal(row.rollout_log_probs.length, row.response_ids.length);
          for (const lp of row.rollout_log_probs)
            assert.ok(Number.isFinite(lp) && lp <= 1e-5, `logprob ${lp}`);
        }
        for (const f of row.finish_reasons) assert.ok(FINISH_REASONS.includes(f), `finish reason ${f}`);
        assert.ok(Number.isFinite(row.ended_at_ms) && row.ended_at_ms <= 8.64e15);
        for (const v of [row.weight_version_min, row.weight_version_max, row.sample_index, row.group_size])
          assert.ok(v === null || (Number.isInteger(v) && v >= 0 && v <= 2 ** 31 - 1), `int32 ${v}`);
      }
    }
  }
  // The mutations did reach both outcomes.
  assert.ok(rejected > 100, `only ${rejected} of ${events} events were rejected`);
  assert.ok(rows > ROUNDS, `only ${rows} rows came out`);
});
