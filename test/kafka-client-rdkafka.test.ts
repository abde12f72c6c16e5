/**
 * The Kafka source on librdkafka (`--kafka-client librdkafka`, docs/kafka.md "Client") against the real
 * broker: the same rows as with kafkajs from the same topic, both equal to a replay of the events; every
 * row exactly once through SIGKILLs and restarts; nothing taken after a stop; SASL_SSL. Skipped, with the
 * reason, where the native addon is not built (scripts/librdkafka.sh build; CI builds it), except the
 * coded error a run asking for it then fails with.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { killConsumeAt, runCli } from "./helpers/cli.ts";
import { rdkafkaSkip } from "./helpers/required.ts";
import { consumeArgs, freshName, kafkaTestScope, sourceOverOneEvent, waitFor } from "./helpers/kafka.ts";
import { mulberry32 } from "./helpers/prng.ts";
import { assemble, plain } from "./helpers/sessions.ts";
import { byKey, rowsIn, twoPartWorkload } from "./helpers/workload.ts";

const skip = rdkafkaSkip();

const { scratch, broker } = kafkaTestScope("kafka-rdkafka");

/** A fresh directory under the scratch one. */
function dir(name: string): string {
  const path = join(scratch, name);
  mkdirSync(path, { recursive: true });
  return path;
}

/** `trajflow consume` of `topic` by `group` with `client`, drained; its report's metrics. */
async function consume(client: string, topic: string, group: string, out: string, ...extra: string[]) {
  const result = await runCli(
    [
      ...["consume", "--topic", topic, "--group", group, "--out", out, "--kafka-client", client],
      ...["--until-idle-ms", "2000", "--session-timeout-ms", "6000", "--json", ...extra],
    ],
    { KAFKA_BROKERS: broker() },
  );
  assert.equal(result.code, 0, result.stderr);
  return (JSON.parse(result.stdout) as { metrics: Record<string, number> }).metrics;
}

it("fails at once with KAFKA_CLIENT_UNAVAILABLE, saying how to build it, where the addon does not load", async () => {
  // Node without native addons stands for a machine where scripts/librdkafka.sh has not run.
  const topic = freshName("rdkafka-unavailable");
  const result = await runCli(
    consumeArgs(topic, dir("unavailable"), "--kafka-client", "librdkafka"),
    { KAFKA_BROKERS: broker() },
    ["--no-addons"],
  );
  assert.equal(result.code, 1, result.stderr);
  assert.match(result.stderr, /\[KAFKA_CLIENT_UNAVAILABLE\] .*run scripts\/librdkafka\.sh build/);
  assert.doesNotMatch(result.stderr, /Connecting to Kafka/);
});

it("gives the rows kafkajs gives from the same topic, both equal to a replay", { skip }, async () => {
  const topic = freshName("rdkafka-same");
  const { first, second, expected } = twoPartWorkload(dir("same"));
  for (const input of [first, second])
    assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker() })).code, 0);
  const runs = [];
  for (const client of ["kafkajs", "librdkafka"]) {
    const out = join(scratch, `same-${client}`);
    // Small fetches: many batches per partition, and librdkafka's prefetch queue bounded by them.
    const metrics = await consume(client, topic, freshName(`g-${client}`), out, "--fetch-max-bytes", "65536");
    runs.push({ client, metrics, rows: await rowsIn(out) });
  }
  const [kafkajs, librdkafka] = runs;
  assert.equal(librdkafka!.metrics.kafka_messages, kafkajs!.metrics.kafka_messages);
  assert.equal(librdkafka!.metrics.events_read, kafkajs!.metrics.events_read);
  assert.deepEqual(librdkafka!.rows, kafkajs!.rows);
  assert.deepEqual(librdkafka!.rows, expected);
});

it("writes every row exactly once through SIGKILLs and restarts while events flow", { skip }, async () => {
  const topic = freshName("rdkafka-crash");
  const group = freshName("rdkafka-crash-group");
  const out = join(scratch, "crash-out");
  const { first, second, expected } = twoPartWorkload(dir("crash"));
  const env = { KAFKA_BROKERS: broker() };
  assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);
  const args = [
    ...["consume", "--topic", topic, "--group", group, "--out", out, "--kafka-client", "librdkafka"],
    ...["--rows-per-file", "3", "--reward-grace-ms", "0", "--session-timeout-ms", "3000"],
  ];
  const random = mulberry32(4242);
  // Each run is killed at a named point of its commit path (killConsumeAt), or drains first: counted.
  let killed = 0;
  for (let run = 0; run < 4; run++) {
    const killing = killConsumeAt(args, env, run, random, 4).then((ended) => {
      if (ended === "killed") killed++;
    });
    // The second half arrives while consumers are being killed and restarted.
    if (run === 1) assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
    await killing;
  }
  assert.ok(killed >= 2, `only ${killed} runs were killed at their point`);
  const final = await runCli([...args, "--until-idle-ms", "3000", "--json"], env);
  assert.equal(final.code, 0, final.stderr);
  const finalRows =
    (JSON.parse(final.stdout) as { metrics: { rows_written?: number } }).metrics.rows_written ?? 0;
  assert.ok(finalRows < expected.length, `the final run wrote ${finalRows} of ${expected.length} rows`);
  const rows = await rowsIn(out);
  const keys = rows.map((r) => r.key);
  assert.equal(new Set(keys).size, keys.length, "a row was written twice");
  assert.deepEqual(rows, expected);
});

it(
  "takes nothing once stopped, not even a message librdkafka hands over after the stop",
  { skip },
  async () => {
    const { source, handler, calls } = await sourceOverOneEvent(broker(), "librdkafka");
    let handed = 0;
    const onBatch = source["onBatch"].bind(source);
    source["onBatch"] = (batch, control) => {
      handed++;
      return onBatch(batch, control);
    };
    await source.start(handler);
    await source.pause(); // the stop, before the first message came
    // The group still assigns the partition and librdkafka hands its message over: the source takes none.
    await waitFor("librdkafka to hand over the topic's message", () => handed > 0);
    await source.close();
    assert.deepEqual(calls, []);
    assert.equal(source.delivered, 0);
  },
);

const SCRIPT = new URL("../scripts/kafka.sh", import.meta.url).pathname;
const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;

/** The SASL_SSL listener of scripts/kafka.sh's broker (address, CA file, user, password), or null: another broker. */
function secure(): { address: string; ca: string; user: string; password: string } | null {
  const status = execFileSync("bash", [SCRIPT, "status"], { encoding: "utf8" }).trim();
  if (status !== broker()) return null;
  const [address, ca, user, password] = execFileSync("bash", [SCRIPT, "secure"], { encoding: "utf8" })
    .trim()
    .split("\n");
  return { address: address!, ca: ca!, user: user!, password: password! };
}

it("consumes through SASL_SSL, and fails with KAFKA_AUTH_FAILED on a wrong password", { skip }, async (t) => {
  const s = secure();
  if (s === null) return t.skip("KAFKA_BROKERS names a broker other than scripts/kafka.sh's");
  const flags = [
    ...["--brokers", s.address, "--ssl-ca", s.ca, "--sasl-mechanism", "scram-sha-512"],
    ...["--sasl-username", s.user, "--kafka-client", "librdkafka"],
  ];
  const topic = freshName("rdkafka-secure");
  const env = { KAFKA_SASL_PASSWORD: s.password };
  assert.equal((await runCli(["produce", EXAMPLES, "--topic", topic, ...flags.slice(0, -2)], env)).code, 0);
  const out = dir("secure-out");
  const consumed = await runCli(
    [
      ...["consume", "--topic", topic, "--group", freshName("g"), "--out", out, ...flags],
      ...["--until-idle-ms", "2000", "--log-level", "debug"],
    ],
    env,
  );
  assert.equal(consumed.code, 0, consumed.stderr);
  const expected = assemble(readFileSync(EXAMPLES, "utf8").trimEnd().split("\n")).rows.map(plain);
  assert.deepEqual(await rowsIn(out), expected.sort(byKey));
  // Dead letters as files: no kafkajs producer is there to meet the refusal first.
  const wrong = `wrong-${s.password}`;
  const refused = await runCli(
    [
      ...["consume", "--topic", topic, "--group", freshName("g"), "--out", dir("secure-x"), ...flags],
      ...["--dead-letter-dir", dir("secure-dl"), "--log-level", "debug"],
    ],
    { KAFKA_SASL_PASSWORD: wrong },
  );
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /\[KAFKA_AUTH_FAILED\] the broker refused the credentials of user "trajflow"/);
  for (const text of [consumed.stdout, consumed.stderr, refused.stdout, refused.stderr])
    assert.ok(!text.includes(s.password), "a password leaked");
});
