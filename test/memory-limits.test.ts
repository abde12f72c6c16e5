/**
 * Memory under hostile volume (issue 27 items 9 and 10): the real CLI in a process whose JavaScript heap is
 * capped at 192 MB. Before, both cases ended in "heap out of memory" (exit 134) with nothing written: an
 * idle session cost about 20 KB while the limits counted its events' few hundred bytes, and every rejected
 * event with its own session id opened a session.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { rowsIn } from "./helpers/workload.ts";
import { SessionScript } from "./helpers/sessions.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-memory-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const SMALL_HEAP = ["--max-semi-space-size=4", "--max-old-space-size=192"];

async function replaySmallHeap(name: string, lines: string[]) {
  const input = join(scratch, `${name}.jsonl`);
  writeFileSync(input, lines.join("\n") + "\n");
  const out = join(scratch, name);
  const result = await runCli(["replay", input, "--out", out], {}, SMALL_HEAP);
  assert.equal(result.code, 0, result.stderr.slice(-2_000));
  return { out, stdout: result.stdout };
}

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
    const { out, stdout } = await replaySmallHeap("never-ending", lines);
    const rows = await rowsIn(out);
    assert.equal(rows.length, 50_000);
    assert.equal(new Set(rows.map((r) => r.key)).size, 50_000);
    const cut = rows.filter((r) => (r.flags as string[]).includes("session_cut")).length;
    // Half of a 192 MB heap holds about 30,000 such sessions as counted; the rest are cut oldest first.
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
    const { out } = await replaySmallHeap("garbage", [...valid("a"), ...garbage, ...valid("b")]);
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
