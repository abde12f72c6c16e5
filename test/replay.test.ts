/**
 * End to end: recorded events → `trajflow replay` → Parquet files read back by pyarrow and DuckDB, and
 * dead letters for bad input.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative as relativePath } from "node:path";
import { gzipSync } from "node:zlib";
import { after, describe, it } from "node:test";
import { assemble, plain, plainWithTimes, SessionScript } from "./helpers/sessions.ts";
import { runCli } from "./helpers/cli.ts";
import { writeLines } from "./helpers/floods.ts";
import { pythonReady, readWithPython } from "./helpers/python.ts";
import type { HeldPart } from "../src/core/held-memory.ts";
import type { ThreadUsage } from "../src/core/thread-usage.ts";
import type { TrajectoryRow } from "../src/schemas/trajectory.ts";
import { readFileMetadata, readRows } from "../src/sinks/files/read.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-replay-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
let n = 0;
const freshDir = () => join(scratch, `run-${n++}`);

interface PythonView {
  files: string[];
  schema: Record<string, string>;
  nullable: Record<string, boolean>;
  rows: Array<Record<string, unknown>>;
  duckdb: { types: Record<string, string>; rows: Array<[string, number, number]> };
  keys: string[][];
}

function expectedRows(lines: string[]): TrajectoryRow[] {
  return assemble(lines).rows;
}

describe("replay", () => {
  it("writes Parquet that pyarrow and DuckDB read with the documented schema and the exact rows", async () => {
    assert.ok(pythonReady(), "the test setup installs pyarrow and DuckDB (scripts/python-env.sh)");
    const out = freshDir();
    const result = await runCli(["replay", EXAMPLES, "--out", out, "--rows-per-file", "4"]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /6 finalized \(ok 6\)/);
    // A session's rows never straddle two files: cuts come after 4 rows (1+1+2) and at the end (2+1+2).
    assert.match(result.stdout, /9 in 2 file\(s\)/);

    const view = await readWithPython<PythonView>("read_output.py", out);
    assert.deepEqual(
      view.files.map((f) => f.slice(out.length + 1)),
      ["part-00000.parquet", "part-00001.parquet"],
    );
    assert.deepEqual(view.schema, {
      key: "string",
      uid: "string",
      session_id: "string",
      index: "int32",
      sample_index: "int32",
      group_size: "int32",
      prompt_ids: "list<element: int32 not null>",
      response_ids: "list<element: int32 not null>",
      response_mask: "list<element: int8 not null>",
      rollout_log_probs: "list<element: float not null>",
      reward: "double",
      episode_finished: "bool",
      finish_reasons: "list<element: string not null>",
      finish_reasons_raw: "list<element: string not null>",
      weight_version_min: "int32",
      weight_version_max: "int32",
      num_turns: "int32",
      num_trained_tokens: "int32",
      status: "string",
      flags: "list<element: string not null>",
      parent_index: "int32",
      shared_prefix_len: "int32",
      sample_mask: "int8",
      ended_at_ms: "double",
      last_trained_index: "int32",
      reward_names: "list<element: string not null>",
      reward_values: "list<element: double>",
      reward_info: "string",
      turn_end_indices: "list<element: int32 not null>",
      turn_rewards: "list<element: double>",
      token_policy_versions: "list<element: int32 not null>",
      policy_version_min: "int32",
      policy_version_max: "int32",
      routed_experts: "binary",
      routed_experts_dtype: "string",
      routed_experts_layers: "int32",
      routed_experts_top_k: "int32",
      routed_experts_missing: "int32",
      sampling:
        "list<element: struct<temperature: double, top_p: double, top_k: int32, min_p: double, " +
        "repetition_penalty: double, logprobs_mode: string, engine: string>>",
    });
    assert.equal(view.nullable.rollout_log_probs, true);
    assert.equal(view.nullable.prompt_ids, false);
    assert.equal(view.duckdb.types.prompt_ids, "INTEGER[]");

    // Every value pyarrow reads equals what the assembler produced in process.
    const expected = expectedRows(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n"))
      .map(plainWithTimes)
      .sort((a, b) => ((a.key as string) < (b.key as string) ? -1 : 1));
    assert.equal(view.rows.length, 9);
    assert.deepEqual(view.rows, expected);
    assert.deepEqual(
      view.duckdb.rows,
      expected.map((r) => [
        r.key,
        (r.prompt_ids as number[]).length + (r.response_ids as number[]).length,
        (r.response_mask as number[]).reduce((a, b) => a + b, 0),
      ]),
    );
    // Keys split back into uid, session_id and index with rsplit("_", 2).
    assert.deepEqual(
      view.keys,
      expected.map((r) => [r.uid, r.session_id, String(r.index)]),
    );
    const meta = await readFileMetadata(join(out, "part-00001.parquet"));
    assert.equal(meta["trajflow.schema_version"], "4");
    assert.equal(meta["trajflow.first_row"], "4");
  });

  it("dead-letters bad lines with code, origin and raw bytes, and keeps the good sessions", async () => {
    const out = freshDir();
    const good = new SessionScript("u9", "ok").call("c1", [1, 2], [3, 4]).end().lines();
    const input = join(scratch, "mixed.jsonl");
    const lines = [
      good[0]!,
      "{not json",
      '{"v":1,"type":"noise","uid":"u","session_id":"s","seq":0,"ts":1}',
      "",
      good[1]!,
      good[2]!,
    ];
    writeFileSync(input, `${lines.join("\n")}\n`);
    const result = await runCli(["replay", input, "--out", out, "--json", "--decode-workers", "1"]);
    assert.equal(result.code, 0, result.stderr);
    const summary = JSON.parse(result.stdout) as {
      metrics: Record<string, unknown>;
      timeline: Record<string, number>;
      peak_rss_bytes: number;
      cpu_seconds: { user: number; system: number };
      threads: Array<{ thread: string } & ThreadUsage>;
      held_memory: HeldPart[];
    };
    assert.deepEqual(summary.metrics.dead_letters, { MALFORMED_JSON: 1, UNKNOWN_EVENT_TYPE: 1 });
    // The timeline is in order: process start, first record, first file, last file (one file here).
    const t = summary.timeline;
    assert.ok(t.process_started_at_ms! <= t.first_record_at_ms!, JSON.stringify(t));
    assert.ok(t.first_record_at_ms! <= t.first_file_at_ms!, JSON.stringify(t));
    assert.equal(t.first_file_at_ms, t.last_file_at_ms);
    assert.ok(Date.now() - t.process_started_at_ms! < 120_000, JSON.stringify(t));
    assert.ok(summary.peak_rss_bytes > 10 * 2 ** 20);
    assert.ok(summary.cpu_seconds.user > 0);
    // CPU and memory by thread: every thread that did work, none counting more than the process spent.
    assert.deepEqual(
      summary.threads.map((t) => t.thread),
      ["main", "decode 1", "encoder 1"],
    );
    for (const t of summary.threads) {
      assert.ok(
        t.cpu_seconds > 0 && t.heap_peak_bytes > 2 ** 20 && t.external_peak_bytes > 0,
        JSON.stringify(t),
      );
    }
    const threadCpu = summary.threads.reduce((sum, t) => sum + t.cpu_seconds, 0);
    assert.ok(threadCpu <= summary.cpu_seconds.user + summary.cpu_seconds.system, JSON.stringify(summary));
    // What each part held: every part of this pipeline listed, none at the RSS peak above its own peak.
    assert.deepEqual(
      summary.held_memory.map((p) => p.part),
      [
        "records being decoded and applied",
        "open sessions",
        "rows waiting for a file",
        "rows being written",
        "dead letters waiting",
      ],
    );
    for (const p of summary.held_memory) assert.ok(p.at_peak_rss_bytes <= p.peak_bytes, JSON.stringify(p));
    const letters = readFileSync(join(out, "_dead-letter", "dead-letters-00000.jsonl"), "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(
      letters.map((l) => [l.code, l.origin, l.raw]),
      [
        ["MALFORMED_JSON", { kind: "file", file: input, line: 2 }, "{not json"],
        ["UNKNOWN_EVENT_TYPE", { kind: "file", file: input, line: 3 }, lines[2]],
      ],
    );
    const rows = await readRows(join(out, "part-00000.parquet"));
    assert.deepEqual(rows.map(plain), assemble(good).rows.map(plain));
  });

  it("says where the valid events of a session without rows went (SESSION_WITHOUT_ROWS)", async () => {
    const out = freshDir();
    const input = join(scratch, "rowless.jsonl");
    const noCall = new SessionScript("u", "no-call").start().reward(1).end().lines();
    const unanswered = new SessionScript("u", "unanswered").start().request("c1", [1, 2, 3]).end().lines();
    const fine = new SessionScript("u", "fine")
      .start()
      .request("c1", [1, 2])
      .response("c1", [3])
      .end()
      .lines();
    writeFileSync(input, `${[...noCall, ...unanswered, ...fine].join("\n")}\n`);
    const result = await runCli(["replay", input, "--out", out, "--json"]);
    assert.equal(result.code, 0, result.stderr);
    const metrics = (JSON.parse(result.stdout) as { metrics: Record<string, unknown> }).metrics;
    assert.deepEqual(metrics.dead_letters, { SESSION_WITHOUT_ROWS: 2 });
    assert.equal(metrics.sessions_without_rows, 2);
    const letters = readFileSync(join(out, "_dead-letter", "dead-letters-00000.jsonl"), "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(
      letters.map(({ message: _, ...rest }) => rest),
      [
        {
          code: "SESSION_WITHOUT_ROWS",
          component: "assemble",
          origin: { kind: "file", file: input, line: 1 },
          uid: "u",
          session_id: "no-call",
          details: { status: "ok", reason: "it made no model call", first_offset: 0, last_offset: 2 },
        },
        {
          code: "SESSION_WITHOUT_ROWS",
          component: "assemble",
          origin: { kind: "file", file: input, line: 4 },
          uid: "u",
          session_id: "unanswered",
          details: {
            status: "ok",
            reason: "none of its 1 request(s) got a response",
            first_offset: 3,
            last_offset: 5,
          },
        },
      ],
    );
    assert.match(
      String(letters[0]!.message),
      /no-call of uid u ended \(ok\) with no row: it made no model call/,
    );
    assert.deepEqual(
      (await readRows(join(out, "part-00000.parquet"))).map((r) => r.key),
      ["u_fine_0"],
    );
  });

  // Regression: only the last 100,000 finalized sessions were remembered, so a redelivered event of an
  // older one opened it again and wrote a second row with the same key, silently.
  it("dead-letters a redelivered event of a session finalized 100,000 sessions earlier (LATE_EVENT)", async () => {
    const out = freshDir();
    const input = join(scratch, "redelivered.jsonl");
    const first = new SessionScript("u0", "s")
      .start()
      .request("c1", [1, 2])
      .response("c1", [3])
      .end()
      .lines();
    const sessions = 100_100;
    // Sessions u1.. of three events each (as SessionScript writes them), after u0, then u0's request again.
    const template = new SessionScript("UID", "s").request("c1", [1]).response("c1", [2]).end().lines();
    await writeLines(input, first.length + (sessions - 1) * 3 + 1, (i) => {
      if (i < first.length) return first[i]!;
      const at = i - first.length;
      if (at === (sessions - 1) * 3) return first[1]!;
      return template[at % 3]!.replace('"UID"', `"u${Math.floor(at / 3) + 1}"`);
    });
    const result = await runCli(["replay", input, "--out", out, "--json"]);
    assert.equal(result.code, 0, result.stderr);
    const metrics = (JSON.parse(result.stdout) as { metrics: Record<string, unknown> }).metrics;
    assert.deepEqual(metrics.dead_letters, { LATE_EVENT: 1 });
    assert.equal(metrics.rows_written, sessions);
  });

  // Regression: the same input spelled ./x and x gave different file metadata, so a re-run failed with
  // FILE_CONFLICT.
  it("reproduces the same files when the input path is spelled differently", async () => {
    const out = freshDir();
    const relative = relativePath(process.cwd(), EXAMPLES);
    assert.equal((await runCli(["replay", relative, "--out", out])).code, 0);
    const again = await runCli(["replay", `./${relative}`, "--out", out, "--json"]);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(
      (JSON.parse(again.stdout) as { metrics: { files_committed: unknown } }).metrics.files_committed,
      {
        "already-committed": 1,
      },
    );
  });

  it("reads gzip input and reproduces the same files on a second run (idempotent)", async () => {
    const out = freshDir();
    const gz = join(scratch, "sessions.jsonl.gz");
    writeFileSync(gz, gzipSync(readFileSync(EXAMPLES)));
    const first = await runCli(["replay", gz, "--out", out, "--json"]);
    assert.equal(first.code, 0, first.stderr);
    const bytes = readFileSync(join(out, "part-00000.parquet"));
    const second = await runCli(["replay", gz, "--out", out, "--json"]);
    assert.equal(second.code, 0, second.stderr);
    const metrics = (JSON.parse(second.stdout) as { metrics: Record<string, unknown> }).metrics;
    assert.deepEqual(metrics.files_committed, { "already-committed": 1 });
    assert.deepEqual(readFileSync(join(out, "part-00000.parquet")), bytes);
    assert.deepEqual(readdirSync(out).sort(), ["part-00000.parquet"]);
    const plainOut = freshDir();
    assert.equal((await runCli(["replay", EXAMPLES, "--out", plainOut])).code, 0);
    assert.deepEqual(
      (await readRows(join(plainOut, "part-00000.parquet"))).map(plain),
      (await readRows(join(out, "part-00000.parquet"))).map(plain),
      "gzip and plain input give the same rows",
    );
  });

  it("refuses to overwrite a file from a different run", async () => {
    const out = freshDir();
    assert.equal((await runCli(["replay", EXAMPLES, "--out", out])).code, 0);
    const other = join(scratch, "other.jsonl");
    writeFileSync(other, `${new SessionScript().call("c1", [1], [2]).end().lines().join("\n")}\n`);
    const result = await runCli(["replay", other, "--out", out]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /\[FILE_CONFLICT\]/);
  });

  // Regression: a run failing with FILE_CONFLICT left some of its files in the other run's dataset.
  it("takes its own files back out after a FILE_CONFLICT", async () => {
    const session = (uid: string, id: string, out: number, version: number, ts = 1_000) =>
      new SessionScript(uid, id, ts).call("c1", [1], [out], { weight_version: version }).end().lines();
    const write = (name: string, lines: string[]) => {
      const path = join(scratch, name);
      writeFileSync(path, `${lines.join("\n")}\n`);
      return path;
    };
    const out = freshDir();
    const flags = ["--out", out, "--partition-by", "policy", "--rows-per-file", "1"];
    // policy=1/part-00000 and policy=1/part-00001.
    const first = write("conflict-a.jsonl", [...session("u", "a", 2, 1), ...session("u", "b", 3, 1, 2_000)]);
    assert.equal((await runCli(["replay", first, ...flags])).code, 0);
    // Cut 0 lands policy=2/part-00000 (new); cut 1 meets policy=1/part-00001 with other rows.
    const second = write("conflict-b.jsonl", [...session("v", "c", 4, 2), ...session("u", "d", 5, 1, 2_000)]);
    const r = await runCli(["replay", second, ...flags]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /\[FILE_CONFLICT\]/);
    assert.deepEqual(
      readdirSync(out)
        .filter((d) => !d.startsWith("_"))
        .sort(),
      ["policy=1"],
    );
    assert.deepEqual(readdirSync(join(out, "policy=1")).sort(), ["part-00000.parquet", "part-00001.parquet"]);
  });

  // Regression: an output path that is a file gave an uncoded stack trace, and an unwritable dead-letter
  // directory was found only after the data files were committed (the dead letters lost).
  it("fails with SINK_WRITE_FAILED before reading when an output cannot be written", async () => {
    const file = join(scratch, "a-file");
    writeFileSync(file, "not a directory");
    const data = await runCli(["replay", EXAMPLES, "--out", file]);
    assert.equal(data.code, 1);
    assert.match(data.stderr, /\[SINK_WRITE_FAILED\] cannot write trajectory files to .*a-file/);
    const out = freshDir();
    const letters = await runCli(["replay", EXAMPLES, "--out", out, "--dead-letter-dir", join(file, "dl")]);
    assert.equal(letters.code, 1);
    assert.match(
      letters.stderr,
      /\[SINK_WRITE_FAILED\] cannot write dead letters to .*a-file.dl: .*not a directory/,
    );
    assert.deepEqual(readdirSync(out), [], "nothing was written");
    // The outputs open side by side; with both unwritable the error is the same whichever fails first.
    const both = await runCli(["replay", EXAMPLES, "--out", file, "--dead-letter-dir", join(file, "dl")]);
    assert.equal(both.code, 1);
    assert.match(both.stderr, /\[SINK_WRITE_FAILED\] cannot write trajectory files to .*a-file/);
  });

  // Regression: the CLI stopped at the first bad integer, before the other problems were checked.
  it("lists bad integer flags together with every other problem", async () => {
    const bad = await runCli([
      "replay",
      EXAMPLES,
      "--out",
      freshDir(),
      ...["--rows-per-file", "ten", "--status-interval-ms", "1.5", "--drift-policy", "merge"],
    ]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--rows-per-file must be an integer, got "ten"/);
    assert.match(bad.stderr, /--status-interval-ms must be an integer, got "1.5"/);
    assert.match(bad.stderr, /transforms\.assemble\.drift_policy/);
  });

  it("sizes its defaults for --max-memory, and lists a bad or too small size with the other problems", async () => {
    const out = freshDir();
    const sized = await runCli(["replay", EXAMPLES, "--out", out, "--max-memory", "1GiB", "--json"], {
      TRAJFLOW_LOG_LEVEL: "info",
    });
    assert.equal(sized.code, 0, sized.stderr);
    assert.match(
      sized.stderr,
      /"limit_mib":1024,"from":"--max-memory","sized":\[[^\]]*"files\.max_tokens_per_file = 500000"/,
    );
    const bad = await runCli([
      "replay",
      EXAMPLES,
      "--out",
      freshDir(),
      "--max-memory",
      "2TB",
      "--rows-per-file",
      "x",
    ]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--max-memory must be a size \(MiB, or with a unit: 768MiB, 2GiB\), got "2TB"/);
    assert.match(bad.stderr, /--rows-per-file must be an integer/);
    const small = await runCli(["replay", EXAMPLES, "--out", freshDir(), "--max-memory", "256"]);
    assert.equal(small.code, 2);
    assert.match(small.stderr, /--max-memory must be at least 384 MiB/);
  });

  it("exits 2 on usage and configuration errors, listing every problem", async () => {
    const noOut = await runCli(["replay", EXAMPLES]);
    assert.equal(noOut.code, 2);
    assert.match(noOut.stderr, /--out/);
    const unknown = await runCli(["replay", EXAMPLES, "--out", freshDir(), "--frobnicate"]);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /frobnicate/);
    const bad = await runCli([
      "replay",
      EXAMPLES,
      "--out",
      freshDir(),
      "--drift-policy",
      "merge",
      "--compression",
      "brotli",
    ]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /assemble\.drift_policy/);
    assert.match(bad.stderr, /sinks\.files\.compression/);
    const missing = await runCli(["replay", join(scratch, "nope.jsonl"), "--out", freshDir()]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /SOURCE_READ_FAILED/);
  });

  // Regression: inspect printed terminal escape sequences from ids raw.
  it("inspect escapes control characters of ids and finish reasons", async () => {
    const input = join(scratch, "escapes.jsonl");
    const lines = new SessionScript("u\u001b[31mred", "s\u0007")
      .call("c1", [1, 2], [3], { finish_reason: "stop\u001b]0;title\u0007" })
      .end()
      .lines();
    writeFileSync(input, `${lines.join("\n")}\n`);
    const out = freshDir();
    assert.equal((await runCli(["replay", input, "--out", out])).code, 0);
    const shown = await runCli(["inspect", out]);
    assert.equal(shown.code, 0, shown.stderr);
    const controls = [...shown.stdout].filter((ch) => ch !== "\n" && (ch < " " || ch === "\u007f"));
    assert.deepEqual(controls, []);
    assert.match(shown.stdout, /u\\u001b\[31mred_s\\u0007_0/);
    assert.match(shown.stdout, /\[stop\\u001b\]0;title\\u0007\]/);
  });

  it("inspect prints rows a person can read, filtered by uid", async () => {
    const out = freshDir();
    assert.equal((await runCli(["replay", EXAMPLES, "--out", out])).code, 0);
    const result = await runCli(["inspect", out, "--uid", "gsm8k-0099"]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(
      result.stdout,
      /^gsm8k-0099_s0_0 {2}status=ok {2}reward=1 {2}turns=2 \[stop, stop\] {2}policy=13 {2}flags=orphan_dropped$/m,
    );
    assert.match(result.stdout, /mask: {3}prompt 22 · gen 11 · ctx 27 · gen 11/);
    assert.equal(result.stdout.split("\n").filter((l) => /^\S/.test(l)).length, 1);
  });
});

describe("examples", () => {
  it("examples/sessions.jsonl is what examples/generate.ts writes", async () => {
    const { spawnSync } = await import("node:child_process");
    const res = spawnSync(
      process.execPath,
      [new URL("../examples/generate.ts", import.meta.url).pathname, "--check"],
      {
        encoding: "utf8",
      },
    );
    assert.equal(res.status, 0, res.stderr);
  });
});
