/**
 * The Kafka path against a real broker: the files equal those of `trajflow replay` for the same events,
 * for every compression codec, from kafkajs and from librdkafka producers; bad messages reach the
 * dead-letter topic.
 */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { tableFromIPC } from "apache-arrow";
import { linearSession } from "../bench/workloads.ts";
import { tableToRows } from "../src/schemas/trajectory-arrow.ts";
import type { TrajectoryRow } from "../src/schemas/trajectory.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { killRunning, runCli, startCli } from "./helpers/cli.ts";
import { brokers, consumeArgs, freshName, readTopic, waitFor } from "./helpers/kafka.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";
import { assemble, plain, plainWithTimes } from "./helpers/sessions.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-kafka-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});
let broker = "";
before(() => {
  broker = brokers();
});

/** The first 8 example events with a broken line after the third; returns the path and the good lines. */
function badInput(name: string): { input: string; good: string[] } {
  const input = join(scratch, `${name}.jsonl`);
  const good = readFileSync(EXAMPLES, "utf8").trimEnd().split("\n").slice(0, 8);
  writeFileSync(input, `${[...good.slice(0, 3), "{broken", ...good.slice(3)].join("\n")}\n`);
  return { input, good };
}

const byKey = (a: Record<string, unknown>, b: Record<string, unknown>) =>
  (a.key as string) < (b.key as string) ? -1 : 1;
const expected = assemble(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n")).rows.map(plain).sort(byKey);

async function rowsIn(dir: string) {
  const rows = [];
  for (const f of await listDataFiles(dir)) rows.push(...(await readRows(f)));
  return rows.map(plain).sort(byKey);
}

async function consumeAll(topic: string, out: string, ...extra: string[]) {
  const result = await runCli(consumeArgs(topic, out, "--until-idle-ms", "2000", "--json", ...extra), {
    KAFKA_BROKERS: broker,
  });
  assert.equal(result.code, 0, result.stderr);
  // Regression: every run warned about its idempotent producers' bounded retries (noise: docs/kafka.md
  // promises at least once), and Node 24 about kafkajs's negative timer.
  assert.doesNotMatch(result.stderr, /Limiting retries|TimeoutNegativeWarning/);
  return (JSON.parse(result.stdout) as { metrics: Record<string, unknown> }).metrics;
}

describe("kafka", () => {
  for (const codec of ["none", "gzip", "snappy", "lz4", "zstd"]) {
    it(`gives the rows of replay for events produced by trajflow produce with ${codec}`, async () => {
      const topic = freshName(`events-${codec}`);
      const produced = await runCli(["produce", EXAMPLES, "--topic", topic, "--compression", codec], {
        KAFKA_BROKERS: broker,
      });
      assert.equal(produced.code, 0, produced.stderr);
      assert.match(produced.stdout, /54 messages/);
      const out = join(scratch, topic);
      const metrics = await consumeAll(topic, out);
      assert.equal(metrics.kafka_messages, 54);
      assert.deepEqual(await rowsIn(out), expected);
    });
  }

  for (const codec of ["gzip", "snappy", "lz4", "zstd"]) {
    it(`consumes ${codec} batches from a librdkafka producer`, async () => {
      const topic = freshName(`rdkafka-${codec}`);
      const { stdout } = await promisify(execFile)(PYTHON, [
        new URL("./readers/produce_librdkafka.py", import.meta.url).pathname,
        broker,
        topic,
        EXAMPLES,
        codec,
      ]);
      assert.equal(stdout.trim(), "54");
      const out = join(scratch, topic);
      await consumeAll(topic, out);
      assert.deepEqual(await rowsIn(out), expected);
    });
  }

  it("lands a drained backlog's rows as soon as it is caught up, not a file age or the idle stop later", async () => {
    const topic = freshName("drain-cut");
    const produced = await runCli(["produce", EXAMPLES, "--topic", topic], { KAFKA_BROKERS: broker });
    assert.equal(produced.code, 0, produced.stderr);
    const out = join(scratch, topic);
    // The idle stop and the file age ten minutes away, and the quiet lanes' wall clock off (which would
    // cut the files a second after the input went quiet): only the drain being caught up can cut them.
    const run = startCli(
      [
        ...["consume", "--topic", topic, "--group", freshName("g"), "--out", out],
        ...["--until-idle-ms", "600000", "--file-age-ms", "600000", "--idle-advance-ms", "0"],
      ],
      { KAFKA_BROKERS: broker },
    );
    try {
      await waitFor(
        "every row in files",
        async () => existsSync(out) && (await rowsIn(out)).length === expected.length,
        60_000,
      );
      assert.equal(run.child.exitCode, null, "the run is still waiting for its idle stop");
      assert.deepEqual(await rowsIn(out), expected);
    } finally {
      run.child.kill("SIGTERM");
      await run.exited;
    }
  });

  it("cuts the oldest open sessions past max-open-sessions, counting them", async () => {
    const topic = freshName("limits");
    assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const out = join(scratch, topic);
    // Sessions wait for a reward that never comes, so each is still open when the next one opens.
    const metrics = await consumeAll(topic, out, "--max-open-sessions", "1", "--await-rewards", "never");
    // Every session had ended and was only waiting for late rewards when the next one opened, so cutting
    // it early changes none of its rows.
    assert.ok((metrics.sessions_cut as number) >= 1);
    assert.deepEqual(await rowsIn(out), expected);
  });

  for (const workers of ["0", "1", "2"]) {
    it(`sends bad messages to the dead-letter topic with code, origin and raw bytes (decode workers: ${workers})`, async () => {
      const topic = freshName("bad");
      const { input, good } = badInput("bad");
      assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
      const out = join(scratch, topic);
      const metrics = await consumeAll(topic, out, "--decode-workers", workers);
      // The input's last session is cut after its start: it ends (timeout) with no row, and says so.
      assert.deepEqual(metrics.dead_letters, { MALFORMED_JSON: 1, SESSION_WITHOUT_ROWS: 1 });
      assert.deepEqual(await rowsIn(out), assemble(good).rows.map(plain).sort(byKey));
      const letters = (await readTopic(broker, `${topic}.dead-letter`, 2))
        .map((m) => JSON.parse(m.value.toString()) as Record<string, unknown>)
        .sort((a, b) => String(a.code).localeCompare(String(b.code)));
      assert.equal(letters.length, 2);
      assert.equal(letters[1]!.code, "SESSION_WITHOUT_ROWS");
      assert.equal(letters[1]!.session_id, "rollout-1");
      assert.equal(letters[0]!.code, "MALFORMED_JSON");
      assert.equal(letters[0]!.raw, "{broken");
      assert.deepEqual(Object.keys(letters[0]!.origin as object), ["kind", "topic", "partition", "offset"]);
      assert.equal((letters[0]!.origin as { topic: string }).topic, topic);
      assert.match((letters[0]!.origin as { offset: string }).offset, /^\d+$/);
    });
  }

  // Regression: --until-idle-ms exited 0 after delivering a third of 150,000 dead letters, committing no
  // offsets (reruns sent them again).
  it("delivers a flood of dead letters before it exits, and commits past them", async () => {
    const topic = freshName("flood");
    const input = join(scratch, "flood.jsonl");
    const count = 20_000;
    writeFileSync(input, `${Array.from({ length: count }, (_, i) => `{garbage ${i}`).join("\n")}\n`);
    assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const group = freshName("g");
    const args = ["consume", "--topic", topic, "--group", group, "--out", join(scratch, topic)];
    const run = await runCli([...args, "--until-idle-ms", "2000", "--json"], { KAFKA_BROKERS: broker });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(
      (JSON.parse(run.stdout) as { metrics: { dead_letters: unknown } }).metrics.dead_letters,
      {
        MALFORMED_JSON: count,
      },
    );
    const letters = await readTopic(broker, `${topic}.dead-letter`, count, 60_000);
    assert.equal(
      new Set(letters.map((m) => (JSON.parse(m.value.toString()) as { raw: string }).raw)).size,
      count,
    );
    const again = await runCli([...args, "--until-idle-ms", "2000", "--json"], { KAFKA_BROKERS: broker });
    assert.equal(again.code, 0, again.stderr);
    assert.equal((JSON.parse(again.stdout) as { events: number }).events, 0, "every offset was committed");
  });

  it("writes dead letters as files from Kafka, then commits past them", async () => {
    const topic = freshName("bad-files");
    const { input, good } = badInput("bad-files");
    assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const out = join(scratch, topic);
    const letters = join(scratch, `${topic}-letters`);
    const group = freshName("g");
    const first = await runCli(
      [
        ...["consume", "--topic", topic, "--group", group, "--out", out, "--dead-letter-dir", letters],
        ...["--until-idle-ms", "2000", "--json"],
      ],
      { KAFKA_BROKERS: broker },
    );
    assert.equal(first.code, 0, first.stderr);
    const files = readdirSync(letters).filter((f) => f.endsWith(".jsonl"));
    assert.equal(files.length, 1);
    assert.match(files[0]!, /^dead-letters-.+-00000\.jsonl$/);
    const [letter, rowless] = readFileSync(join(letters, files[0]!), "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .sort((a, b) => String(a.code).localeCompare(String(b.code)));
    assert.equal(rowless!.code, "SESSION_WITHOUT_ROWS");
    assert.equal(letter!.code, "MALFORMED_JSON");
    assert.equal(letter!.raw, "{broken");
    assert.equal((letter!.origin as { topic: string }).topic, topic);
    assert.deepEqual(await rowsIn(out), assemble(good).rows.map(plain).sort(byKey));
    // Everything, the dead letters included, was committed: a second member of the group reads nothing.
    const again = await runCli(
      [
        ...["consume", "--topic", topic, "--group", group, "--out", out, "--dead-letter-dir", letters],
        ...["--until-idle-ms", "2000", "--json"],
      ],
      { KAFKA_BROKERS: broker },
    );
    assert.equal(again.code, 0, again.stderr);
    assert.equal((JSON.parse(again.stdout) as { events: number }).events, 0);
  });

  it("sends a replay's dead letters to a topic and its rows to a trajectory topic", async () => {
    const topic = freshName("replay-topics");
    const { input, good } = badInput("replay-bad");
    const out = join(scratch, `${topic}-out`);
    const pipeline = join(scratch, `${topic}.yaml`);
    writeFileSync(
      pipeline,
      [
        "sources:",
        `  events: { type: jsonl, paths: ["${input}"] }`,
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "sinks:",
        `  files: { type: parquet, inputs: [assemble], path: "${out}" }`,
        `  rows: { type: kafka, inputs: [assemble], topic: ${topic}.rows, connection: { brokers: ["${broker}"] } }`,
        `dead_letters: { type: kafka, topic: ${topic}.dl, connection: { brokers: ["${broker}"] } }`,
        "",
      ].join("\n"),
    );
    const run = await runCli(["run", pipeline, "--json"]);
    assert.equal(run.code, 0, run.stderr);
    const expected = assemble(good).rows.map(plain).sort(byKey);
    assert.deepEqual(await rowsIn(out), expected);
    const rows = await readTopic(broker, `${topic}.rows`, expected.length);
    assert.deepEqual(rows.map((m) => m.key).sort(), expected.map((r) => r.key as string).sort());
    // The broken line, and rollout-1 (its start is the input's last line) without rows. They can sit on
    // different partitions, so their order on the topic is not fixed.
    const letters = (await readTopic(broker, `${topic}.dl`, 2))
      .map((m) => JSON.parse(m.value.toString()) as Record<string, unknown>)
      .sort((a, b) => String(a.code).localeCompare(String(b.code)));
    assert.deepEqual(
      letters.map((l) => [l.code, l.origin]),
      [
        ["MALFORMED_JSON", { kind: "file", file: input, line: 4 }],
        ["SESSION_WITHOUT_ROWS", { kind: "file", file: input, line: 9 }],
      ],
    );
  });

  for (const format of ["json", "arrow"] as const) {
    it(`produces every row to the trajectory topic as ${format}, keyed uid_session_index`, async () => {
      const topic = freshName(`traj-${format}`);
      const env = { KAFKA_BROKERS: broker };
      assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic], env)).code, 0);
      const out = join(scratch, topic);
      const metrics = await consumeAll(
        topic,
        out,
        "--trajectory-topic",
        `${topic}.rows`,
        "--trajectory-format",
        format,
      );
      assert.equal(metrics.topic_rows_produced, expected.length);
      const messages = await readTopic(broker, `${topic}.rows`, expected.length);
      const rows = messages.map((m) => {
        assert.equal(m.headers["trajflow.format"], format);
        const row =
          format === "json"
            ? (JSON.parse(m.value.toString()) as TrajectoryRow)
            : tableToRows(tableFromIPC(m.value))[0]!;
        assert.equal(m.key, row.key);
        return plain(row);
      });
      assert.deepEqual(rows.sort(byKey), expected);
      // The files hold the same rows.
      assert.deepEqual(await rowsIn(out), expected);
    });
  }

  // Regression: a sink error was thrown into kafkajs, which retried and restarted the consumer forever.
  it("fails with the sink's error code when files cannot be written, instead of retrying forever", async () => {
    const topic = freshName("unwritable");
    assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const notADirectory = join(scratch, "a-file");
    writeFileSync(notADirectory, "");
    const consumer = startCli(
      ["consume", "--topic", topic, "--group", freshName("g"), "--out", join(notADirectory, "out")],
      { KAFKA_BROKERS: broker },
    );
    const code = await Promise.race([
      consumer.exited,
      new Promise<string>((r) => setTimeout(() => r("still running after 60 s"), 60_000).unref()),
    ]);
    assert.equal(code, 1, consumer.stderr());
    assert.match(consumer.stderr(), /SINK_WRITE_FAILED|ENOTDIR/);
    // The dead-letter producer and the consumer connected while the outputs opened: both hung up again.
    assert.doesNotMatch(consumer.stderr(), /handles still open/);
  });

  it("scores sessions with reward stages on the way, equal to a replay with the same stages", async () => {
    const topic = freshName("rewards");
    const rewards = new URL("../examples/rewards/rewards.json", import.meta.url).pathname;
    assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const out = join(scratch, topic);
    const replayed = join(scratch, `${topic}-replay`);
    await consumeAll(topic, out, "--rewards", rewards);
    assert.equal((await runCli(["replay", EXAMPLES, "--out", replayed, "--rewards", rewards])).code, 0);
    const scored = await rowsIn(out);
    assert.deepEqual(scored, await rowsIn(replayed));
    assert.ok(scored.every((r) => (r.reward_names as string[]).length === 4));
  });

  it("serves /metrics, /healthz and /readyz while consuming, and stops cleanly on SIGTERM", async () => {
    const topic = freshName("ops");
    assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const running = startCli(
      [
        "consume",
        ...["--topic", topic, "--group", freshName("g"), "--out", join(scratch, topic)],
        ...["--metrics-address", "127.0.0.1:0", "--status-interval-ms", "500"],
        ...["--reward-grace-ms", "0", "--file-age-ms", "500"],
      ],
      { KAFKA_BROKERS: broker, TRAJFLOW_LOG_LEVEL: "info" },
    );
    let address = "";
    await waitFor("the endpoint's address in the log", () => {
      const m = /"address":"([^"]+)".*Serving \/metrics/.exec(running.stderr());
      if (m !== null) address = m[1]!;
      return address !== "";
    });
    await waitFor("ready", async () => (await fetch(`http://${address}/readyz`)).status === 200);
    await waitFor("rows written", async () =>
      /trajflow_rows_written_total 9/.test(await (await fetch(`http://${address}/metrics`)).text()),
    );
    const text = await (await fetch(`http://${address}/metrics`)).text();
    assert.match(text, /trajflow_kafka_messages_total 54/);
    assert.match(text, /# TYPE trajflow_open_sessions gauge/);
    assert.match(text, /trajflow_offsets_held\{partition="\d"\} 0/);
    assert.equal((await fetch(`http://${address}/healthz`)).status, 200);
    await waitFor("a status line", () => /"msg":"status"/.test(running.stderr()));
    running.child.kill("SIGTERM");
    assert.equal(await running.exited, 0, running.stderr());
  });

  // Regression: producing an event over 1 MB failed with an uncoded error.
  it("refuses an event larger than a Kafka message with a coded error naming its line", async () => {
    const input = join(scratch, "huge-event.jsonl");
    const big = JSON.stringify({
      ...JSON.parse(readFileSync(EXAMPLES, "utf8").split("\n")[0]!),
      pad: "x".repeat(1_100_000),
    });
    writeFileSync(input, `${readFileSync(EXAMPLES, "utf8").split("\n")[1]}\n${big}\n`);
    const r = await runCli(["produce", input, "--topic", freshName("huge")], { KAFKA_BROKERS: broker });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /\[EVENT_TOO_LARGE\] .*huge-event.jsonl:2: the event is \d+ bytes/);
  });

  // Regression: 500 large events of one uid made a record batch over the broker's 1 MiB limit
  // (MESSAGE_TOO_LARGE) and the whole produce failed.
  it("keeps routed experts byte for byte through Kafka, as replay writes them and pyarrow reads them", async () => {
    const topic = freshName("routed");
    const shape = { initialPrompt: 64, turns: 3, outputTokens: 16, observationTokens: 8 };
    const routing = { layers: 4, topK: 2, experts: 16 };
    const lines = [0, 1].flatMap((s) =>
      linearSession(shape, "delta", {
        uid: "moe",
        sessionId: `r${s}`,
        seed: s + 5,
        packed: true,
        routing,
      }).map((e) => JSON.stringify(e)),
    );
    const input = join(scratch, "routed.jsonl");
    writeFileSync(input, `${lines.join("\n")}\n`);
    const produced = await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker });
    assert.equal(produced.code, 0, produced.stderr);
    const out = join(scratch, topic);
    await consumeAll(topic, out);
    const replayed = join(scratch, "routed-replay");
    assert.equal((await runCli(["replay", input, "--out", replayed])).code, 0);

    const want = assemble(lines).rows.map(plainWithTimes).sort(byKey);
    assert.equal(want.length, 2);
    for (const r of want) {
      // Every position covered but the last (never an input): the delta prompts' routing covers the
      // previous output's last token.
      assert.equal(r.routed_experts_missing, 0);
      const blob = Uint8Array.from(r.routed_experts as number[]);
      assert.ok(
        blob.subarray(0, -16).every((_, i) => i % 2 === 1 || blob[i] !== 0xff),
        "covered positions",
      );
      assert.ok(
        blob.subarray(-16).every((b) => b === 0xff),
        "the last position is left at -1",
      );
      const positions = (r.prompt_ids as number[]).length + (r.response_ids as number[]).length;
      assert.equal((r.routed_experts as number[]).length, positions * 4 * 2 * 2);
    }
    for (const dir of [out, replayed]) {
      const view = await readWithPython<{ rows: Array<Record<string, unknown>> }>("read_output.py", dir);
      assert.deepEqual(
        view.rows.map((r) => [r.key, r.routed_experts, r.routed_experts_dtype]),
        want.map((r) => [r.key, r.routed_experts, "int16"]),
      );
    }
  });

  it("produces large events in batches the broker accepts", async () => {
    const topic = freshName("large");
    const shape = { initialPrompt: 60_000, turns: 8, outputTokens: 256, observationTokens: 64 };
    const lines = linearSession(shape, "full", { uid: "one-uid", sessionId: "big", seed: 3 }).map((e) =>
      JSON.stringify(e),
    );
    assert.ok(lines.reduce((n, l) => n + l.length, 0) > 2 * 2 ** 20, "the events must exceed 2 MiB together");
    const input = join(scratch, "large.jsonl");
    writeFileSync(input, `${lines.join("\n")}\n`);
    const produced = await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker });
    assert.equal(produced.code, 0, produced.stderr);
    const out = join(scratch, topic);
    await consumeAll(topic, out);
    assert.deepEqual(await rowsIn(out), assemble(lines).rows.map(plain).sort(byKey));
  });
});
