/**
 * Memory per stored token of open sessions, measured alone in its own process (bench/assemble.ts runs
 * it). Sessions are decoded one at a time and fed without their end, so what stays in memory afterwards
 * is the open sessions' state. Prints one JSON result line.
 */
import { Metrics } from "../src/core/metrics.ts";
import { Assembler } from "../src/transforms/assemble/assembler.ts";
import { assembleConfigSchema } from "../src/transforms/assemble/config.ts";
import { decodeAll, gc, type Result } from "./harness.ts";
import { linearSession, type SessionShape } from "./workloads.ts";

const shape: SessionShape = { initialPrompt: 4096, turns: 16, outputTokens: 512, observationTokens: 256 };
const sessions = 400;
const a = new Assembler({
  config: assembleConfigSchema.parse({}),
  deadLetters: { write: () => {} },
  metrics: new Metrics(),
});
gc();
gc();
const before = process.memoryUsage();
for (let s = 0; s < sessions; s++) {
  const events = decodeAll(linearSession(shape, "delta", { uid: `u${s}`, sessionId: "s", seed: s + 1 }));
  for (const e of events) if (e.event.type !== "session.end" && e.event.type !== "reward") a.push(e);
}
gc();
gc();
const after = process.memoryUsage();
const bytes = after.heapUsed - before.heapUsed + (after.arrayBuffers - before.arrayBuffers);
const stored =
  sessions *
  (shape.initialPrompt + shape.turns * shape.outputTokens + (shape.turns - 1) * shape.observationTokens);
const result: Result = {
  bench: "assemble",
  case: "memory per stored token (open sessions)",
  value: bytes / stored,
  unit: "bytes/token",
  note: `${a.openSessions} open sessions, ${(stored / 1e6).toFixed(1)}M tokens; 8 bytes/token are the token id and logprob`,
};
console.log(JSON.stringify(result));
