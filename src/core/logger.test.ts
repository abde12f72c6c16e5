import { strict as assert } from "node:assert";
import { it } from "node:test";
import { Writable } from "node:stream";
import { pino } from "pino";
import { RateLimitedWarning } from "./logger.ts";

// Regression: one warning line per cut session wrote 45 MB of log in a flood.
it("logs a flood of the same warning as one line per interval, with how many it held back", () => {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  const warning = new RateLimitedWarning(pino({}, sink), "Cut open sessions.", 10_000);
  for (let i = 0; i < 100_000; i++) warning.warn({ session_id: `s${i}` }, 1_000 + i / 100); // 1 s of floods
  warning.warn({ session_id: "late" }, 20_000);
  assert.deepEqual(
    lines.map((l) => [l.msg, l.session_id, l.suppressed_since_last]),
    [
      ["Cut open sessions.", "s0", undefined],
      ["Cut open sessions.", "late", 99_999],
    ],
  );
});
