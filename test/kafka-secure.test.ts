/**
 * Kafka over SASL_SSL (SCRAM-SHA-512, a broker certificate signed by a test CA): the listener
 * scripts/kafka.sh gives its broker. Events produced and consumed through it give the rows of a replay;
 * a wrong password or an untrusted certificate fails with its own code; no secret reaches the logs, the
 * dead letters or the files.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { runCli } from "./helpers/cli.ts";
import { freshName, kafkaTestScope } from "./helpers/kafka.ts";
import { assemble, plain } from "./helpers/sessions.ts";

const { scratch } = kafkaTestScope("kafka-secure");
const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const SCRIPT = new URL("../scripts/kafka.sh", import.meta.url).pathname;

/**
 * These tests need the SASL_SSL listener of the broker scripts/kafka.sh runs: skipped when KAFKA_BROKERS
 * names another broker (one of yours), whose security settings they cannot know.
 */
function ownBroker(): boolean {
  const named = process.env.KAFKA_BROKERS;
  if (named === undefined || named === "") return true; // the scope starts scripts/kafka.sh's broker
  try {
    return execFileSync("bash", [SCRIPT, "status"], { encoding: "utf8" }).trim() === named;
  } catch {
    return false;
  }
}

const SKIP = ownBroker() ? false : "KAFKA_BROKERS names a broker other than scripts/kafka.sh's";

/** The secure listener's settings (the broker is started by the scope's `before`). */
function secure(): { address: string; ca: string; user: string; password: string } {
  const [address, ca, user, password] = execFileSync("bash", [SCRIPT, "secure"], { encoding: "utf8" })
    .trim()
    .split("\n");
  return { address: address!, ca: ca!, user: user!, password: password! };
}

function flags(s: ReturnType<typeof secure>, ca = true): string[] {
  return [
    ...["--brokers", s.address],
    ...(ca ? ["--ssl-ca", s.ca] : ["--ssl"]),
    ...["--sasl-mechanism", "scram-sha-512", "--sasl-username", s.user],
  ];
}

const byKey = (a: Record<string, unknown>, b: Record<string, unknown>) =>
  (a.key as string) < (b.key as string) ? -1 : 1;

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

it(
  "produces and consumes through SASL_SSL (SCRAM-SHA-512), with no secret in logs, dead letters or files",
  { skip: SKIP },
  async () => {
    const s = secure();
    const topic = freshName("secure");
    const input = join(scratch, "events.jsonl");
    // One bad line, so a dead letter goes through the secure producer too.
    writeFileSync(input, `${readFileSync(EXAMPLES, "utf8")}{broken\n`);
    const env = { KAFKA_SASL_PASSWORD: s.password, TRAJFLOW_LOG_LEVEL: "debug" };
    const produced = await runCli(["produce", input, "--topic", topic, ...flags(s)], env);
    assert.equal(produced.code, 0, produced.stderr);
    const out = join(scratch, "out");
    const consumed = await runCli(
      [
        ...["consume", "--topic", topic, "--group", freshName("g"), "--out", out, ...flags(s)],
        ...["--until-idle-ms", "2000", "--json", "--log-level", "debug"],
      ],
      env,
    );
    assert.equal(consumed.code, 0, consumed.stderr);
    const metrics = (
      JSON.parse(consumed.stdout) as {
        metrics: Record<string, unknown>;
      }
    ).metrics;
    assert.deepEqual(metrics.dead_letters, { MALFORMED_JSON: 1 });
    const rows = [];
    for (const f of await listDataFiles(out)) rows.push(...(await readRows(f)));
    const expected = assemble(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n")).rows.map(plain);
    assert.deepEqual(rows.map(plain).sort(byKey), expected.sort(byKey));

    // The dead letter, read back through the secure listener by a second consume of the dead-letter topic.
    const letters = join(scratch, "letters");
    const reread = await runCli(
      [
        ...["consume", "--topic", `${topic}.dead-letter`, "--group", freshName("g"), "--out", letters],
        ...flags(s),
        ...["--dead-letter-dir", join(scratch, "letters-dead"), "--until-idle-ms", "2000", "--json"],
      ],
      env,
    );
    assert.equal(reread.code, 0, reread.stderr);
    const deadLetters = filesUnder(join(scratch, "letters-dead")).map((f) => readFileSync(f, "utf8"));
    assert.ok(deadLetters.join("").includes("{broken"), "the dead letter went through the secure producer");

    // No secret anywhere: logs (at debug), dead letters, output files.
    const everything = [
      produced.stdout,
      produced.stderr,
      consumed.stdout,
      consumed.stderr,
      reread.stdout,
      reread.stderr,
      ...deadLetters,
      ...filesUnder(out).map((f) => readFileSync(f).toString("latin1")),
    ];
    for (const text of everything) assert.ok(!text.includes(s.password), "the password leaked");
  },
);

it(
  "fails with KAFKA_AUTH_FAILED on a wrong password, naming the user and never the password",
  { skip: SKIP },
  async () => {
    const s = secure();
    const wrong = `wrong-${s.password}`;
    const r = await runCli(
      [
        ...[
          "consume",
          "--topic",
          freshName("secure"),
          "--group",
          freshName("g"),
          "--out",
          join(scratch, "x"),
        ],
        ...flags(s),
        ...["--log-level", "debug"],
      ],
      { KAFKA_SASL_PASSWORD: wrong },
    );
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /\[KAFKA_AUTH_FAILED\] the broker refused the credentials of user "trajflow"/);
    for (const text of [r.stdout, r.stderr]) {
      assert.ok(!text.includes(wrong) && !text.includes(s.password), "a password leaked");
    }
  },
);

it("fails with KAFKA_TLS_FAILED when the broker's certificate does not verify", { skip: SKIP }, async () => {
  const s = secure();
  // --ssl trusts only the system's CAs, which did not sign the test broker's certificate.
  const r = await runCli(["produce", EXAMPLES, "--topic", freshName("secure"), ...flags(s, false)], {
    KAFKA_SASL_PASSWORD: s.password,
  });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /\[KAFKA_TLS_FAILED\] TLS with 127\.0\.0\.1:\d+ failed: .*check connection\.ssl/);
  assert.ok(!r.stderr.includes(s.password));
});

// Regression (issue 27 item 13): a plaintext client at the SASL_SSL port retried for 40 s and ended with
// "unexpected error: KafkaJSNonRetriableError" and a stack trace.
it(
  "says at once that a listener expects TLS when the client has none, and the reverse",
  { skip: SKIP },
  async () => {
    const s = secure();
    const plain = ["--brokers", s.address, "--sasl-mechanism", "scram-sha-512", "--sasl-username", s.user];
    const toTls = await runCli(
      [
        "consume",
        "--topic",
        freshName("mismatch"),
        "--group",
        freshName("g"),
        ...plain,
        "--out",
        join(scratch, "mismatch"),
        "--until-idle-ms",
        "1000",
      ],
      { KAFKA_SASL_PASSWORD: s.password },
    );
    assert.equal(toTls.code, 1, toTls.stderr);
    assert.match(
      toTls.stderr,
      /\[KAFKA_TLS_MISMATCH\] 127\.0\.0\.1:\d+ answered a plaintext Kafka request with a TLS alert: this listener expects TLS .*add --ssl/,
    );
    assert.doesNotMatch(toTls.stderr, /\n\s+at |unexpected error|retryCount/);
    assert.ok(!toTls.stderr.includes(s.password));

    const plaintext = execFileSync("bash", [SCRIPT, "status"], { encoding: "utf8" }).trim();
    const toPlain = await runCli([
      "produce",
      EXAMPLES,
      "--topic",
      freshName("mismatch"),
      "--brokers",
      plaintext,
      "--ssl",
    ]);
    assert.equal(toPlain.code, 1, toPlain.stderr);
    assert.match(
      toPlain.stderr,
      /\[KAFKA_TLS_MISMATCH\] 127\.0\.0\.1:\d+ closed the connection during the TLS handshake and answers plaintext Kafka requests: this listener does not speak TLS .*drop --ssl/,
    );
    assert.doesNotMatch(toPlain.stderr, /\n\s+at |unexpected error/);
  },
);
