/**
 * Flood inputs for the memory tests (test/memory.test.ts, test/kafka-memory.test.ts), written as JSON
 * lines with backpressure so building them costs no memory either.
 */
import { createWriteStream } from "node:fs";

/** A process heap small enough that a leak under a flood kills it. */
export const BOUNDED_HEAP = { NODE_OPTIONS: "--max-old-space-size=192" };

export async function writeLines(path: string, count: number, line: (i: number) => string): Promise<void> {
  const out = createWriteStream(path);
  for (let i = 0; i < count; i++)
    if (!out.write(`${line(i)}\n`)) await new Promise<void>((r) => out.once("drain", () => r()));
  await new Promise<void>((r) => out.end(() => r()));
}

/** `count` sessions of one request each that never end (uids u0, u1, ...). */
export function writeOpenSessions(path: string, count: number): Promise<void> {
  return writeLines(path, count, (i) =>
    JSON.stringify({
      v: 1,
      type: "request",
      uid: `u${i}`,
      session_id: "s",
      seq: 0,
      ts: 1_000 + i,
      call_id: "c1",
      prompt_ids: [1, 2, 3, 4, 5, 6, 7, 8],
    }),
  );
}

/** `count` lines that are not JSON. */
export function writeGarbage(path: string, count: number): Promise<void> {
  return writeLines(path, count, (i) => `{garbage ${i} ${"x".repeat(64)}`);
}
