/**
 * Memory under floods, in a process with a bounded heap (--max-old-space-size=192): open sessions that
 * never end, rejected events, and a group size claiming a huge group. Each run must finish, with the
 * limits doing their work (counted), instead of growing until the process dies.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { BOUNDED_HEAP, writeGarbage, writeLines, writeOpenSessions } from "./helpers/floods.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-memory-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

// Regression: 100k tiny open sessions (27 MB of input) peaked at 2.2 GB in a replay, which had no limit.
it("replays 100,000 sessions that never end within a 192 MB heap, cutting the oldest", async () => {
  const input = join(scratch, "open.jsonl");
  await writeOpenSessions(input, 100_000);
  const r = await runCli(
    ["replay", input, "--out", join(scratch, "open-out"), "--max-open-sessions", "1000", "--json"],
    BOUNDED_HEAP,
  );
  assert.equal(r.code, 0, r.stderr.slice(-2_000));
  const metrics = (JSON.parse(r.stdout) as { metrics: Record<string, number> }).metrics;
  assert.ok(metrics.sessions_cut! >= 99_000, `sessions_cut ${metrics.sessions_cut}`);
});

it("dead-letters 150,000 garbage lines within a 192 MB heap", async () => {
  const input = join(scratch, "garbage.jsonl");
  await writeGarbage(input, 150_000);
  const r = await runCli(["replay", input, "--out", join(scratch, "garbage-out"), "--json"], BOUNDED_HEAP);
  assert.equal(r.code, 0, r.stderr.slice(-2_000));
  const result = JSON.parse(r.stdout) as { metrics: { dead_letters: unknown }; dead_letter_files: string[] };
  assert.deepEqual(result.metrics.dead_letters, { MALFORMED_JSON: 150_000 });
  assert.equal(result.dead_letter_files.length, 2);
});

// Regression: one session.start with group_size 2,000,000 ran past 5 GB of placeholders.
it("does not pad a group to a size one event claims, within a 192 MB heap", async () => {
  const input = join(scratch, "group.jsonl");
  const e = { v: 1, uid: "u", session_id: "s" };
  await writeLines(input, 4, (i) =>
    JSON.stringify(
      [
        { ...e, seq: 0, ts: 1, type: "session.start", sample_index: 0, group_size: 2_000_000 },
        { ...e, seq: 1, ts: 2, type: "request", call_id: "c1", prompt_ids: [1, 2] },
        { ...e, seq: 2, ts: 3, type: "response", call_id: "c1", output_ids: [3], finish_reason: "stop" },
        { ...e, seq: 3, ts: 4, type: "session.end", status: "ok" },
      ][i],
    ),
  );
  const r = await runCli(
    ["replay", input, "--out", join(scratch, "group-out"), "--group", "--json"],
    BOUNDED_HEAP,
  );
  assert.equal(r.code, 0, r.stderr.slice(-2_000));
  const metrics = (JSON.parse(r.stdout) as { metrics: Record<string, unknown> }).metrics;
  assert.deepEqual(metrics.dead_letters, { GROUP_TOO_LARGE: 1 });
  assert.equal(metrics.rows_written, 1);
});
