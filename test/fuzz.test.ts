/**
 * A seeded fuzz test of the decoder and the assembler: thousands of mutated gateway events (fields
 * dropped, retyped, enlarged, nested, bytes flipped, lines duplicated and reordered; token arrays cut,
 * grown, retyped and packed wrong; ids made ambiguous; reward values, targets and stages made hostile)
 * go through decode and assembly as a replay would run them. Nothing may throw; every rejected event becomes a dead letter
 * with a known code, its origin and its raw bytes; every event is accounted for; and every row that comes
 * out is well formed (aligned masks and logprobs, finite values, a known finish reason).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { MemoryDeadLetters } from "./helpers/dead-letters.ts";
import { ErrorCodes } from "../src/core/errors.ts";
import { Metrics } from "../src/core/metrics.ts";
import { mulberry32 } from "./helpers/prng.ts";
import type { FinishReason } from "../src/schemas/trajectory.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import { decodeEvent } from "../src/transforms/assemble/decode/decode.ts";
import { runCli } from "./helpers/cli.ts";

const EXAMPLES = readFileSync(new URL("../examples/sessions.jsonl", import.meta.url), "utf8")
  .trimEnd()
  .split("\n");
const ROUNDS = 300;
/** Dead letters about a whole session (or group) rather than one event: they carry no raw bytes. */
const SESSION_LEVEL = new Set(["SESSION_WITHOUT_ROWS", "REWARD_FAILED", "REWARD_TIMEOUT", "GROUP_TOO_LARGE"]);
const FINISH_REASONS: FinishReason[] = ["stop", "length", "tool_calls", "abort", "unknown"];

type Json = Record<string, unknown>;

/** One mutation of an event, chosen by the PRNG. */
function mutate(event: Json, random: () => number): string | Uint8Array {
  const keys = Object.keys(event);
  const key = keys[Math.floor(random() * keys.length)]!;
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  const e: Json = structuredClone(event);
  switch (Math.floor(random() * 15)) {
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
    case 11:
      e.group_size = pick([0, 1, 2, 100_000, 2 ** 40]);
      e.sample_index = pick([0, 1, -1, 5e9]);
      break;
    case 12:
      mutateTokens(e, random);
      break;
    case 13:
      // Ids that once merged sessions or collided with internal names.
      e[pick(["uid", "session_id", "call_id", "parent_call_id", "target"])] = pick([
        "a\u0000x",
        "x\u0000y",
        "",
        "missing-1",
        "missing-k~1",
        "__proto__",
        "constructor",
        "\ud800",
        "é".repeat(5_000),
        "rollout-0",
        "session",
        7,
      ]);
      break;
    default:
      // Reward fields: sums past float64's range, prototype names, duplicate keys, wrong types.
      if (e.type !== "reward") e.type = "reward";
      e.value = pick([1.7e308, -1.7e308, 0, -0, 1e-320, Number.MAX_VALUE, "1", null, NaN]);
      e.target = pick(["session", "c1", "missing", "__proto__", e.call_id ?? "session"]);
      e.stage = pick(["env", "constructor", "__proto__", "toString", "", "x".repeat(1_000)]);
      e.key = pick([undefined, "k", "__proto__", "constructor", 5]);
      e.finished = pick([true, false, "yes", null]);
      // A literal {"__proto__": ...} key, as a gateway's JSON would carry it (an object literal sets the prototype).
      e.info = pick<unknown>([
        JSON.parse('{"__proto__":{"polluted":1}}'),
        { constructor: "x" },
        "text",
        [1, 2],
        null,
      ]);
  }
  return JSON.stringify(e);
}

/** Token and logprob arrays cut short, grown, retyped, out of range, or packed with the wrong length. */
function mutateTokens(e: Json, random: () => number): void {
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  const field = pick(["prompt_ids", "output_ids", "prompt_delta_ids", "logprobs"]);
  const current = Array.isArray(e[field]) ? (e[field] as unknown[]) : [1, 2, 3];
  const at = Math.floor(random() * (current.length + 1));
  switch (Math.floor(random() * 8)) {
    case 0:
      e[field] = current.slice(0, at);
      break;
    case 1:
      e[field] = [...current, ...current.slice(0, at)];
      break;
    case 2:
      e[field] = current.map((v, i) =>
        i === at ? pick([2 ** 31, -(2 ** 31) - 1, 1.5, "7", null, [], 1e300]) : v,
      );
      break;
    case 3:
      e[field] = [[...current]];
      break;
    case 4:
      // Packed little-endian int32/float32 with a length that is not a multiple of 4.
      e[field] = {
        b64: Buffer.from(new Uint8Array(4 * current.length + pick([0, 1, 2, 3]))).toString("base64"),
      };
      break;
    case 5:
      e[field] = { b64: pick(["", "====", "AA==", "not base64!"]), extra: 1 };
      break;
    case 6:
      e[field] = new Array(pick([0, 1, 70_000])).fill(pick([0, 1, -1]));
      break;
    default:
      e[field] = pick(["", "1,2,3", {}, 42, true]);
  }
}

it(`survives ${ROUNDS} rounds of mutated sessions, accounting for every event`, () => {
  const random = mulberry32(20261122);
  const known = new Set(Object.keys(ErrorCodes));
  let events = 0;
  let rejected = 0;
  let rows = 0;
  const codes = new Set<string>();
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
    const deadLetters = new MemoryDeadLetters(metrics);
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
    for (const letter of deadLetters.letters) {
      assert.ok(known.has(letter.code), `unknown code ${letter.code}`);
      codes.add(letter.code);
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
        for (const ids of [row.prompt_ids, row.response_ids]) assert.ok(ids instanceof Int32Array);
        assert.ok(row.reward === null || Number.isFinite(row.reward), `reward ${row.reward}`);
        for (const v of [...(row.turn_rewards ?? []), ...row.reward_values])
          assert.ok(v === null || Number.isFinite(v), `a reward value ${v}`);
        if (row.reward_info !== null) assert.doesNotMatch(row.reward_info, /native code|\[object Object\]/);
        assert.ok(row.key.startsWith(`${row.uid}_${row.session_id}_`), row.key);
      }
    }
  }
  // The mutations did reach both outcomes.
  assert.ok(rejected > 100, `only ${rejected} of ${events} events were rejected`);
  assert.ok(codes.has("INVALID_TOKENS") && codes.has("UNKNOWN_REWARD_TARGET"), [...codes].join(", "));
  assert.ok(rows > ROUNDS, `only ${rows} rows came out`);
});

it("replays mutated sessions through the CLI: exit 0, every dead letter holding its line's exact bytes", async () => {
  const random = mulberry32(20261124);
  const lines: Buffer[] = [];
  for (let round = 0; round < 40; round++) {
    for (const line of EXAMPLES) {
      // Each round its own uids, so rounds do not collide (mutated ids still may).
      const own = line.replaceAll('"uid":"', `"uid":"r${round}-`);
      const out = random() < 0.2 ? mutate(JSON.parse(own) as Json, random) : own;
      // A line must stay one line: a mutation that made a newline byte is kept as the bytes before it.
      const bytes = Buffer.from(out);
      const nl = bytes.indexOf(10);
      lines.push(nl === -1 ? bytes : bytes.subarray(0, nl));
    }
  }
  const dir = mkdtempSync(join(tmpdir(), "trajflow-fuzz-"));
  try {
    const input = join(dir, "fuzz.jsonl");
    writeFileSync(input, Buffer.concat(lines.flatMap((l) => [l, Buffer.from("\n")])));
    const out = join(dir, "out");
    const r = await runCli(["replay", input, "--out", out, "--grpo", "--group-size", "2"]);
    assert.equal(r.code, 0, r.stderr.slice(-2_000));
    const letterDir = join(out, "_dead-letter");
    const letters = readdirSync(letterDir)
      .filter((f) => f.endsWith(".jsonl"))
      .flatMap((f) => readFileSync(join(letterDir, f), "utf8").trimEnd().split("\n"))
      .map(
        (l) => JSON.parse(l) as { code: string; origin: { line?: number }; raw?: string; raw_b64?: string },
      );
    assert.ok(letters.length > 50, `${letters.length} dead letters`);
    for (const letter of letters) {
      // A session's own letter points at its first line and carries no bytes: they are not what it is about.
      if (letter.raw === undefined && letter.raw_b64 === undefined) {
        assert.ok(SESSION_LEVEL.has(letter.code), `${letter.code} without its bytes`);
        continue;
      }
      const expected = lines[letter.origin.line! - 1]!;
      const got = letter.raw !== undefined ? Buffer.from(letter.raw) : Buffer.from(letter.raw_b64!, "base64");
      assert.ok(got.equals(expected), `${letter.code} at line ${letter.origin.line}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
