/**
 * Assembly benchmarks on already-decoded events:
 * - throughput in tokens/s (prompt tokens as sent + output tokens), full-prompt and delta form;
 * - per-turn cost against session length in delta form (should be flat: turn 64 within 1.3x of turn 1);
 * - bytes of memory per stored token for open sessions.
 */
import { Metrics } from "../src/core/metrics.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import type { DecodedEvent } from "../src/transforms/assemble/decode/decode.ts";
import { execFileSync } from "node:child_process";
import { bestOf, decodeAll, record, tokensOf, type Result } from "./harness.ts";
import { linearSession, type PromptForm, type SessionShape } from "./workloads.ts";

const config = assembleConfigSchema.parse({});
const noDeadLetters = {
  write: (l: { code: string; message: string }) => {
    throw new Error(`unexpected dead letter ${l.code}: ${l.message}`);
  },
};
const newAssembler = () => new Assembler({ config, deadLetters: noDeadLetters, metrics: new Metrics() });

function workload(shape: SessionShape, form: PromptForm, sessions: number): DecodedEvent[] {
  const out: DecodedEvent[] = [];
  for (let s = 0; s < sessions; s++) {
    out.push(...decodeAll(linearSession(shape, form, { uid: `u${s}`, sessionId: "s", seed: s + 1 })));
  }
  return out;
}

function throughput(name: string, shape: SessionShape, form: PromptForm, sessions: number): void {
  const events = workload(shape, form, sessions);
  const tokens = tokensOf(events);
  let rows = 0;
  const seconds = bestOf(7, () => {
    const a = newAssembler();
    rows = 0;
    for (const e of events) for (const o of a.push(e)) rows += o.rows.length;
    for (const o of a.flush()) rows += o.rows.length;
  });
  record({
    bench: "assemble",
    case: `${name}, ${form} form`,
    value: tokens / seconds / 1e6,
    unit: "M tokens/s",
    note: `${sessions} sessions x ${shape.turns} turns, ${(tokens / 1e6).toFixed(1)}M tokens, ${rows} rows, ${(seconds * 1000).toFixed(1)} ms`,
  });
}

function perTurn(): void {
  // Many sessions advanced in lockstep: the cost of turn k is averaged over all of them.
  const shape: SessionShape = { initialPrompt: 2048, turns: 64, outputTokens: 400, observationTokens: 200 };
  const sessions = 200;
  const perSession = Array.from({ length: sessions }, (_, s) =>
    decodeAll(linearSession(shape, "delta", { uid: `u${s}`, sessionId: "s", seed: s + 1 })),
  );
  const turnTimes = new Float64Array(shape.turns);
  const repeats = 5;
  for (let r = 0; r < repeats; r++) {
    const a = newAssembler();
    for (const events of perSession) a.push(events[0]!); // session.start
    for (let turn = 0; turn < shape.turns; turn++) {
      const t = performance.now();
      for (const events of perSession) {
        a.push(events[1 + 2 * turn]!);
        a.push(events[2 + 2 * turn]!);
      }
      const dt = performance.now() - t;
      if (r > 0) turnTimes[turn] = r === 1 ? dt : Math.min(turnTimes[turn]!, dt);
    }
  }
  const us = (turn: number) => (turnTimes[turn - 1]! * 1000) / sessions;
  const sorted = [...turnTimes].sort((x, y) => x - y);
  const median = (sorted[sorted.length >> 1]! * 1000) / sessions;
  const worst = (sorted[sorted.length - 1]! * 1000) / sessions;
  record({ bench: "assemble", case: "delta form: cost of turn 1", value: us(1), unit: "us/turn" });
  record({ bench: "assemble", case: "delta form: cost of turn 64", value: us(64), unit: "us/turn" });
  record({
    bench: "assemble",
    case: "delta form: turn 64 / turn 1",
    value: us(64) / us(1),
    unit: "x",
    note: "target <= 1.3",
  });
  record({
    bench: "assemble",
    case: "delta form: median / worst turn (1..64)",
    value: median,
    unit: "us/turn",
    note: `worst ${worst.toFixed(1)} us`,
  });
}

export function run(): void {
  const long: SessionShape = { initialPrompt: 4096, turns: 32, outputTokens: 512, observationTokens: 384 };
  throughput("long sessions (4k prompt, 32 turns, to 32k tokens)", long, "full", 48);
  throughput("long sessions (4k prompt, 32 turns, to 32k tokens)", long, "delta", 48);
  const short: SessionShape = { initialPrompt: 1024, turns: 3, outputTokens: 256, observationTokens: 128 };
  throughput("short sessions (1k prompt, 3 turns)", short, "full", 500);
  perTurn();
  memory();
}

/**
 * Memory is measured in a fresh process: in this one, garbage left by the other benchmarks would be
 * collected between the two readings and make the difference meaningless.
 */
function memory(): void {
  const out = execFileSync(
    process.execPath,
    ["--expose-gc", new URL("./memory.ts", import.meta.url).pathname],
    {
      encoding: "utf8",
    },
  );
  record(JSON.parse(out.trim().split("\n").pop()!) as Result);
}

if (import.meta.main) run();
