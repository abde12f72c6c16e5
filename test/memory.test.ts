/**
 * Memory under floods, in a process with a bounded heap (--max-old-space-size=192): open sessions that
 * never end, rejected events, and a group size claiming a huge group. Each run must finish, with the
 * limits doing their work (counted), instead of growing until the process dies.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { SessionScript } from "./helpers/sessions.ts";
import { rowsIn } from "./helpers/workload.ts";
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
  // Files are cut at 100,000 letters or 8 MiB, so letters waiting for their file stay bounded.
  const lines = result.dead_letter_files.map((f) => readFileSync(f, "utf8").trimEnd().split("\n").length);
  assert.equal(
    lines.reduce((a, b) => a + b, 0),
    150_000,
  );
  assert.ok(lines.length > 2, `${lines.length} files`);
  for (const f of result.dead_letter_files) assert.ok(statSync(f).size < 8 * 2 ** 20 + 4_096, f);
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

async function replayBounded(name: string, lines: string[]) {
  const input = join(scratch, `${name}.jsonl`);
  await writeLines(input, lines.length, (i) => lines[i]!);
  const out = join(scratch, name);
  const result = await runCli(["replay", input, "--out", out], BOUNDED_HEAP);
  assert.equal(result.code, 0, result.stderr.slice(-2_000));
  return { out, stdout: result.stdout };
}

// Issue 27 items 9 and 10: with the default limits, an idle session cost about 20 KB while the limits
// counted its events' few hundred bytes, and every rejected event with its own session id opened a
// session: both ran out of a 192 MB heap (exit 134) with nothing written.
describe("memory under a 192 MB heap", () => {
  it("writes every one of 50,000 sessions that never end, cutting the oldest at the default limits", async () => {
    const lines: string[] = [];
    for (let i = 0; i < 50_000; i++) {
      const ts = 1_000 + i;
      const envelope = { v: 1, uid: "u", session_id: `s${i}`, ts };
      lines.push(
        JSON.stringify({ ...envelope, type: "session.start", seq: 0 }),
        JSON.stringify({ ...envelope, type: "request", seq: 1, call_id: "c1", prompt_ids: [1, 2, 3] }),
        JSON.stringify({
          ...envelope,
          type: "response",
          seq: 2,
          call_id: "c1",
          output_ids: [4, 5],
          finish_reason: "stop",
        }),
      );
    }
    const { out, stdout } = await replayBounded("never-ending", lines);
    const rows = await rowsIn(out);
    assert.equal(rows.length, 50_000);
    assert.equal(new Set(rows.map((r) => r.key)).size, 50_000);
    const cut = rows.filter((r) => (r.flags as string[]).includes("session_cut")).length;
    // A quarter of the heap limit (384 MiB with NODE_OPTIONS' old space alone) holds about 28,000 such
    // sessions as counted; the rest are cut, oldest first.
    assert.ok(cut > 0 && cut < 50_000, `${cut} sessions cut`);
    assert.match(stdout, new RegExp(`${cut.toLocaleString("en-US")} cut by the open-session limits`));
    for (const r of rows)
      assert.deepEqual(
        [r.prompt_ids, r.response_ids],
        [
          [1, 2, 3],
          [4, 5],
        ],
      );
  });

  it("keeps no state for 100,000 rejected events that each name a new session", async () => {
    const garbage: string[] = [];
    for (let i = 0; i < 100_000; i++) {
      garbage.push(
        JSON.stringify({
          v: 1,
          type: "response",
          uid: `u${i}`,
          session_id: `g${i}`,
          seq: 0,
          ts: 1_000 + i,
          call_id: "c1",
          prompt_ids: [1],
          output_ids: "not tokens",
          finish_reason: "stop",
        }),
      );
    }
    const valid = (sessionId: string) =>
      new SessionScript("u", sessionId).call("c1", [1, 2], [3, 4]).reward(1).end().lines();
    const { out } = await replayBounded("garbage", [...valid("a"), ...garbage, ...valid("b")]);
    assert.deepEqual(
      (await rowsIn(out)).map((r) => [r.key, r.reward]),
      [
        ["u_a_0", 1],
        ["u_b_0", 1],
      ],
    );
    const letterDir = join(out, "_dead-letter");
    const letters = readdirSync(letterDir)
      .filter((f) => f.endsWith(".jsonl"))
      .sort()
      .flatMap((f) => readFileSync(join(letterDir, f), "utf8").trimEnd().split("\n"))
      .map((l) => JSON.parse(l) as { code: string; raw: string });
    assert.equal(letters.length, 100_000);
    assert.ok(letters.every((l, i) => l.code === "INVALID_TOKENS" && l.raw === garbage[i]));
  });
});
