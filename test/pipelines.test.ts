/**
 * Pipeline files: validation lists every problem with file:line; each shipped pipeline runs end to end;
 * SIGTERM mid-stream and a restart give every row exactly once.
 */
import { strict as assert } from "node:assert";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { killRunning, parquetFiles, runCli, startCli } from "./helpers/cli.ts";
import { brokers, freshName, readTopic, waitFor } from "./helpers/kafka.ts";
import { rowsIn, twoPartWorkload } from "./helpers/workload.ts";

const root = new URL("..", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-pipelines-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

function file(name: string, text: string): string {
  const path = join(scratch, name);
  writeFileSync(path, text);
  return path;
}

describe("pipeline validation", () => {
  it("checks a gateway section with the gateway's schema, every problem with file:line, beside the pipeline's", async () => {
    const path = file(
      "gateway.yaml",
      [
        "version: 1",
        "gateway:",
        '  upstreams: ["ftp://engine"]',
        "  engine: vlm",
        "  output: { type: log }",
        "  bogus: 1",
        "sources:",
        "  events: { type: event_log, dir: /tmp/x, pol_ms: 5 }",
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "sinks:",
        "  files: { type: parquet, inputs: [assemble], path: out }",
        "",
      ].join("\n"),
    );
    const r = await runCli(["validate", path]);
    assert.equal(r.code, 2);
    assert.deepEqual(
      r.stderr
        .trim()
        .split("\n")
        .slice(1)
        .map((l) => l.trim())
        .sort(),
      [
        `${path}:3: gateway.upstreams.0: an upstream is an http:// or https:// URL`,
        `${path}:4: gateway.engine: Invalid option: expected one of "vllm"|"sglang"|"llamacpp"`,
        `${path}:5: gateway.output.dir: Invalid input: expected string, received undefined`,
        `${path}:6: gateway.bogus: unknown key`,
        `${path}:8: sources.events.pol_ms: unknown key`,
      ],
    );
    const shipped = await runCli(["validate", join(root, "pipelines", "gateway.yaml")]);
    assert.equal(shipped.code, 0, shipped.stderr);
    assert.match(
      shipped.stdout,
      /event_log events → assemble → parquet files in rows; .*fed by a gateway on 127\.0\.0\.1:8000/,
    );
  });

  it("lists every problem at once, each with file:line and path", async () => {
    const path = file(
      "bad.yaml",
      [
        "sources:",
        '  events: { type: jsonl, paths: ["${TRAJFLOW_TEST_UNSET}"] }',
        "  spare: { type: jsonl, paths: [x] }",
        "transforms:",
        "  assemble: { type: assemble, inputs: [events], drift_polcy: fork }",
        "  a: { type: group, inputs: [b] }",
        "  b: { type: staleness, inputs: [a], max_lag: two }",
        "sinks:",
        "  files: { type: parquet, inputs: [assembl], path: out, engine: parquetjs-lite, compression: zstd }",
        "  extra: { type: parquett, inputs: [assemble] }",
        "colour: red",
        "",
      ].join("\n"),
    );
    const r = await runCli(["validate", path]);
    assert.equal(r.code, 2);
    const lines = r.stderr
      .trim()
      .split("\n")
      .slice(1)
      .map((l) => l.trim());
    assert.deepEqual(lines, [
      `${path}:2: sources.events.paths.0: environment variable TRAJFLOW_TEST_UNSET is not set (write \${TRAJFLOW_TEST_UNSET:-default} for a default)`,
      `${path}:11: colour: unknown section; a pipeline has version, sources, transforms, sinks, dead_letters, gateway`,
      `${path}:5: transforms.assemble.drift_polcy: unknown key`,
      `${path}:7: transforms.b.max_lag: Invalid input: expected number, received string`,
      `${path}:9: sinks.files.compression: parquetjs-lite cannot write zstd; choose one of snappy, gzip, none`,
      `${path}:10: sinks.extra.type: must be one of parquet, arrow, kafka (got "parquett")`,
      `${path}:9: sinks.files.inputs.0: no component named assembl`,
      `${path}:6: transforms.a.inputs: cycle: a → b → a`,
      `${path}:3: sources.spare: nothing reads from it`,
      `${path}:5: transforms.assemble: nothing reads from it`,
    ]);
  });

  it("reports YAML syntax errors with their line, and nothing else", async () => {
    const path = file("syntax.yaml", "sources:\n  events: { type: jsonl, paths: [x]\nsinks: {}\n");
    const r = await runCli(["validate", path]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, new RegExp(`${path}:\\d+: `));
    assert.doesNotMatch(r.stderr, /missing: a pipeline needs/);
  });

  // Regression (issue 27, item 11): an alias bomb ended `validate` with exit 1 and a ReferenceError's stack.
  it("refuses a YAML alias bomb as a problem at its line, exit 2", async () => {
    const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 0; i < 8; i++)
      bomb.push(
        `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(97 + i)}`)
          .join(", ")}]`,
      );
    const path = file("bomb.yaml", `${bomb.join("\n")}\nsources: {}\n`);
    for (const command of ["validate", "run"]) {
      const r = await runCli([command, path]);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`${path}:2: .*alias`, "i"));
      assert.doesNotMatch(r.stderr, /\n\s+at /);
    }
  });

  it("checks the shape the runtime runs", async () => {
    const path = file(
      "shape.yaml",
      [
        "sources:",
        "  events: { type: jsonl, paths: [x] }",
        "transforms:",
        "  rewards: { type: rewards, inputs: [events], stages: [{ name: env, type: env }] }",
        "  assemble: { type: assemble, inputs: [rewards] }",
        "sinks:",
        "  files: { type: arrow, inputs: [assemble], path: out }",
        "  topic: { type: kafka, inputs: [assemble], topic: t }",
        "dead_letters: { type: kafka, topic: t.dl }",
        "",
      ].join("\n"),
    );
    const r = await runCli(["validate", path]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /transforms: the source must feed an assemble transform first/);
    assert.match(r.stderr, /transforms.assemble: assemble runs once, first/);
    assert.match(
      r.stderr,
      /sinks.topic.connection: a kafka sink needs a connection when the source has none/,
    );
    assert.match(
      r.stderr,
      /dead_letters.connection: dead letters to a topic need a connection when the source has none/,
    );
    const order = file(
      "order.yaml",
      [
        "sources:",
        "  events: { type: kafka, connection: { brokers: [b:9092] }, topic: t, group_id: g }",
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "  group: { type: group, inputs: [assemble] }",
        "  staleness: { type: staleness, inputs: [group], max_lag: 1 }",
        "sinks:",
        "  files: { type: parquet, inputs: [staleness], path: out }",
        "  more: { type: arrow, inputs: [staleness], path: out2 }",
        "",
      ].join("\n"),
    );
    const o = await runCli(["validate", order]);
    assert.equal(o.code, 2);
    assert.match(o.stderr, /:5: transforms.group: group must be the last transform/);
    assert.match(
      o.stderr,
      /sinks: exactly one parquet or arrow sink is needed \(recovery trusts it\), found 2/,
    );
  });

  it("accepts every transform and sink on every source", async () => {
    const path = file(
      "any.yaml",
      [
        "sources:",
        "  events: { type: kafka, connection: { brokers: [b:9092] }, topic: t, group_id: g }",
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "  staleness: { type: staleness, inputs: [assemble], max_lag: 1 }",
        "  rewards: { type: rewards, inputs: [staleness], stages: [{ name: env, type: env }] }",
        "  group: { type: group, inputs: [rewards] }",
        "sinks:",
        "  files: { type: parquet, inputs: [group], path: out, partition_by: policy }",
        "  topic: { type: kafka, inputs: [group], topic: t.rows }",
        "dead_letters: { type: files, path: dl }",
        "",
      ].join("\n"),
    );
    const r = await runCli(["validate", path]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /kafka events → assemble → staleness → rewards → group → topic t.rows \+ parquet files in out; dead letters in dl/,
    );
  });

  // Regression: `--set __proto__.x=1` polluted every object, and `type: toString` exited 1, not 2.
  it("refuses prototype keys in --set and component types named like Object members", async () => {
    const path = file(
      "proto.yaml",
      [
        "sources:",
        "  events: { type: toString, paths: [x] }",
        "transforms:",
        "  assemble: { type: constructor, inputs: [events] }",
        "sinks:",
        "  files: { type: parquet, inputs: [assemble], path: out }",
        "",
      ].join("\n"),
    );
    const r = await runCli(["validate", path, "--set", "__proto__.polluted=1", "--set", "a.constructor.b=2"]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /--set __proto__.polluted=1: "__proto__" is not a pipeline key/);
    assert.match(r.stderr, /--set a.constructor.b=2: "constructor" is not a pipeline key/);
    assert.match(r.stderr, /sources.events.type: must be one of jsonl, event_log, kafka \(got "toString"\)/);
    assert.match(r.stderr, /transforms.assemble.type: must be one of/);
  });

  // Regression: ${VAR} values were parsed as YAML: a password 123456 or true was rejected, and
  // "pa ss #word" silently became "pa ss".
  it("inserts environment variables as strings, read as numbers only where a number is expected", async () => {
    const path = file(
      "secrets.yaml",
      [
        "sources:",
        '  events: { type: kafka, connection: { brokers: [b:9092], sasl: { mechanism: plain, username: u, password: "${PW}" } }, topic: t, group_id: g }',
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "sinks:",
        '  files: { type: parquet, inputs: [assemble], path: out, max_rows_per_file: "${ROWS}" }',
        '  rows: { type: kafka, inputs: [assemble], topic: "${ROWS_TOPIC}" }',
        "",
      ].join("\n"),
    );
    for (const pw of ["123456", "true", "pa ss #word"]) {
      const r = await runCli(["validate", path], { PW: pw, ROWS: "7", ROWS_TOPIC: "pa ss #word" });
      assert.equal(r.code, 0, `${pw}: ${r.stderr}`);
      assert.match(r.stdout, /topic pa ss #word \+ parquet files in out/);
    }
  });

  it("takes --set overrides and typed environment values", async () => {
    const path = file(
      "env.yaml",
      [
        "sources:",
        "  events: { type: jsonl, paths: [x] }",
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "sinks:",
        // Quoted: inside YAML's { } a bare ${...} would be read as a nested mapping.
        '  files: { type: parquet, inputs: [assemble], path: "${TRAJFLOW_TEST_OUT:-out}", max_rows_per_file: "${ROWS}" }',
        "",
      ].join("\n"),
    );
    // A value that is one variable alone keeps its YAML type: ROWS=7 is the integer 7.
    const ok = await runCli(["validate", path], { ROWS: "7" });
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /parquet files in out/);
    const bad = await runCli(["validate", path], { ROWS: "seven" });
    assert.equal(bad.code, 2);
    assert.match(
      bad.stderr,
      /:6: sinks.files.max_rows_per_file: Invalid input: expected number, received string/,
    );
    const set = await runCli(["validate", path, "--set", "sinks.files.path=/tmp/elsewhere"], { ROWS: "7" });
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /parquet files in \/tmp\/elsewhere/);
    for (const p of ["replay", "kafka", "rescore"]) {
      const v = await runCli(["validate", join(root, `pipelines/${p}.yaml`)]);
      assert.equal(v.code, 0, `${p}: ${v.stderr}`);
    }
  });
});

describe("shipped pipelines", () => {
  const EXAMPLES = join(root, "examples/sessions.jsonl");
  let broker = "";
  before(() => {
    broker = brokers();
  });

  it("replay.yaml: recorded sessions → assemble → rewards → Parquet", async () => {
    const out = join(scratch, "replay-out");
    const r = await runCli(["run", join(root, "pipelines/replay.yaml"), "--json"], { TRAJFLOW_OUT: out });
    assert.equal(r.code, 0, r.stderr);
    const rows = await rowsIn(out);
    assert.equal(rows.length, 9);
    assert.ok(rows.every((row) => JSON.stringify(row.reward_names) === '["env","correct"]'));
    const viaReplay = join(scratch, "replay-cli");
    assert.equal((await runCli(["replay", EXAMPLES, "--out", viaReplay])).code, 0);
    const tokens = (rs: Array<Record<string, unknown>>) =>
      rs.map((x) => [x.key, x.prompt_ids, x.response_ids, x.response_mask]);
    assert.deepEqual(tokens(rows), tokens(await rowsIn(viaReplay)));
  });

  it("rescore.yaml: the same token columns with the new stage's rewards", async () => {
    const out = join(scratch, "rescored");
    const r = await runCli(["run", join(root, "pipelines/rescore.yaml")], { TRAJFLOW_OUT: out });
    assert.equal(r.code, 0, r.stderr);
    const rows = await rowsIn(out);
    assert.equal(rows.length, 9);
    assert.ok(
      rows.every((row) => JSON.stringify(row.reward_names) === '["rm","brevity"]' && row.reward !== null),
    );
  });

  it("kafka.yaml: topic → Parquet + trajectory topic + dead-letter topic; SIGTERM and restart: exactly once", async () => {
    const topic = freshName("pipeline");
    const out = join(scratch, "kafka-out");
    const env = {
      KAFKA_BROKERS: broker,
      TRAJFLOW_TOPIC: topic,
      TRAJFLOW_GROUP: freshName("pipeline-group"),
      TRAJFLOW_OUT: out,
      KAFKAJS_NO_PARTITIONER_WARNING: "1",
    };
    const { first, second, expected } = twoPartWorkload(scratch, 80, 20);
    assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);
    const pipeline = join(root, "pipelines/kafka.yaml");
    const overrides = [
      "--set",
      "sinks.files.max_rows_per_file=3",
      "--set",
      "transforms.assemble.reward_grace_ms=0",
    ];
    const running = startCli(["run", pipeline, ...overrides], env);
    await waitFor("the first files", () => parquetFiles(out) >= 3, 60_000);
    running.child.kill("SIGTERM");
    assert.equal(await running.exited, 0, running.stderr());
    assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
    const rest = await runCli(["run", pipeline, ...overrides, "--until-idle-ms", "3000", "--json"], env);
    assert.equal(rest.code, 0, rest.stderr);
    const rows = await rowsIn(out);
    const keys = rows.map((r) => r.key);
    assert.equal(new Set(keys).size, keys.length, "a row was written twice");
    const tokens = (rs: Array<Record<string, unknown>>) =>
      rs.map((x) => [x.key, x.prompt_ids, x.response_ids, x.response_mask]);
    assert.deepEqual(tokens(rows), tokens(expected));
    assert.ok(rows.every((row) => JSON.stringify(row.reward_names) === '["env","rm"]'));
    // Every row also reached the trajectory topic (at least once).
    const messages = await readTopic(broker, `${topic}.trajectories`, expected.length, 30_000);
    assert.deepEqual(new Set(messages.map((m) => m.key)), new Set(keys));
  });
});

describe("a live pipeline's dead letters", () => {
  // Regression (issue 66): an event_log source's dead letters were written only when their file was full or
  // the process stopped, so an embedded gateway's rejected events could not be read while it ran.
  it("reach their file while the process runs, with their code and raw bytes", async () => {
    const log = join(scratch, "live-log");
    const deadDir = join(scratch, "live-dead");
    mkdirSync(log);
    const garbage = "this line is not an event";
    const events = readFileSync(join(root, "examples/sessions.jsonl"), "utf8");
    writeFileSync(join(log, "events-00000000.jsonl"), `${events}${garbage}\n`);
    const pipeline = file(
      "live.yaml",
      [
        "sources:",
        `  events: { type: event_log, dir: ${JSON.stringify(log)} }`,
        "transforms:",
        "  assemble: { type: assemble, inputs: [events] }",
        "sinks:",
        `  files: { type: parquet, inputs: [assemble], path: ${JSON.stringify(join(scratch, "live-out"))} }`,
        "dead_letters:",
        "  type: files",
        `  path: ${JSON.stringify(deadDir)}`,
        "",
      ].join("\n"),
    );
    const running = startCli(["run", pipeline]);
    const letters = () => {
      try {
        return readdirSync(deadDir).filter((n) => /^dead-letters-.*\.jsonl$/.test(n));
      } catch {
        return [];
      }
    };
    await waitFor(
      "a dead-letter file while the pipeline runs",
      () => letters().length > 0 || running.child.exitCode !== null,
      60_000,
    );
    assert.equal(running.child.exitCode, null, `the pipeline stopped: ${running.stderr()}`);
    const lines = readFileSync(join(deadDir, letters()[0]!), "utf8").trim().split("\n");
    assert.equal(lines.length, 1);
    const letter = JSON.parse(lines[0]!) as { code: string; raw: string };
    assert.equal(letter.code, "MALFORMED_JSON");
    assert.equal(letter.raw, garbage);
    running.child.kill("SIGTERM");
    assert.equal(await running.exited, 0, running.stderr());
  });
});
