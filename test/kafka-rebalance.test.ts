/**
 * Rebalances and broker restarts while events flow: a second consumer joins the group and leaves again
 * mid-stream, and (on a broker of its own) the broker restarts mid-stream. Every row ends up in the files
 * exactly once, equal to a replay of the same events. The same with the consumers on librdkafka (skipped,
 * with the reason, where its addon is not built).
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { killRunning, parquetFiles, runCli, type RunningCli, startCli } from "./helpers/cli.ts";
import { rdkafkaSkip } from "./helpers/required.ts";
import { brokers, freshName, waitFor } from "./helpers/kafka.ts";
import { assertGroupsWhole, groupWorkload, rowsIn, twoPartWorkload } from "./helpers/workload.ts";
import { freePorts } from "./helpers/gateway.ts";

const KAFKA_SCRIPT = new URL("../scripts/kafka.sh", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-kafka-rebalance-"));
// A second broker for the restart test, so restarting it cannot disturb the other tests' broker.
const ownBroker = { KAFKA_PORT: String(await freePorts(3)), TRAJFLOW_KAFKA_DIR: join(scratch, "broker") };
after(() => {
  killRunning();
  execFileSync("bash", [KAFKA_SCRIPT, "reset"], { env: { ...process.env, ...ownBroker }, stdio: "ignore" });
  rmSync(scratch, { recursive: true, force: true });
});
let broker = "";
before(() => {
  broker = brokers();
});

/** The clients the tests run on: kafkajs, and librdkafka where its addon is built (else skipped). */
const CLIENTS = [
  { client: "kafkajs", suffix: "", skip: false },
  {
    client: "librdkafka",
    suffix: ", on librdkafka",
    skip: rdkafkaSkip(),
  },
] as const;

function consumeArgs(topic: string, group: string, out: string, client = "kafkajs"): string[] {
  return [
    "consume",
    ...["--topic", topic, "--group", group, "--out", out],
    ...["--rows-per-file", "3", "--reward-grace-ms", "0", "--session-timeout-ms", "3000"],
    ...(client === "kafkajs" ? [] : ["--kafka-client", client]),
  ];
}

/**
 * Waits until every expected row is in the files, reading only when files change; fails after `ms` with
 * what was there and the consumers' logs.
 */
async function waitForRows(out: string, count: number, consumers: RunningCli[], ms = 90_000) {
  let seen = -1;
  let rows = 0;
  try {
    await waitFor(
      `${count} rows in ${out}`,
      async () => {
        const n = parquetFiles(out);
        if (n !== seen) {
          seen = n;
          rows = (await rowsIn(out)).length;
        }
        return rows >= count;
      },
      ms,
    );
  } catch (err) {
    const logs = consumers.map((c, i) => `consumer ${i}:\n${c.stderr().slice(-6_000)}`).join("\n");
    throw new Error(`${(err as Error).message}; ${rows} rows in ${seen} files\n${logs}`, { cause: err });
  }
}

async function stopGracefully(consumer: RunningCli, name: string): Promise<void> {
  consumer.child.kill("SIGTERM");
  const code = await Promise.race([
    consumer.exited,
    new Promise<string>((r) => setTimeout(() => r("still running after 30 s"), 30_000).unref()),
  ]);
  assert.equal(code, 0, `${name} did not stop cleanly (${code}); its log:\n${consumer.stderr()}`);
}

async function assertExactlyOnce(out: string, expected: Array<Record<string, unknown>>): Promise<void> {
  const rows = await rowsIn(out);
  const keys = rows.map((r) => r.key);
  assert.equal(new Set(keys).size, keys.length, "a row was written twice");
  assert.deepEqual(rows, expected);
}

for (const { client, suffix, skip } of CLIENTS)
  for (const mode of ["sessions", "GRPO groups"] as const) {
    it(
      `writes every row exactly once while a second consumer joins and leaves mid-stream (${mode})${suffix}`,
      { skip },
      async () => {
        const dir = join(scratch, `rebalance-${mode.replace(" ", "-")}-${client}`);
        const out = join(dir, "out");
        const topic = freshName("rebalance");
        const group = freshName("rebalance-group");
        const env = { KAFKA_BROKERS: broker };
        const logs = { ...env, TRAJFLOW_LOG_LEVEL: "info", KAFKAJS_NO_PARTITIONER_WARNING: "1" };
        execFileSync("mkdir", ["-p", dir]);
        let first: string;
        let second: string;
        let expected: Array<Record<string, unknown>>;
        const extra: string[] = [];
        if (mode === "sessions") ({ first, second, expected } = twoPartWorkload(dir));
        else {
          // Complete groups of 4 over 40 uids, in group mode: a group's offsets are held until its file lands.
          const w = groupWorkload(dir, 40, 4, { complete: true });
          ({ first, second } = w);
          const reference = join(dir, "reference");
          const r = await runCli(["replay", w.all, "--out", reference, "--group", "--reward-grace-ms", "0"]);
          assert.equal(r.code, 0, r.stderr);
          expected = await rowsIn(reference);
          extra.push("--grpo");
        }
        assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);

        const a = startCli([...consumeArgs(topic, group, out, client), ...extra], logs);
        await waitFor("consumer A's first files", () => parquetFiles(out) >= 2);
        const b = startCli([...consumeArgs(topic, group, out, client), ...extra], logs);
        // B joins (the group rebalanced); A may have finished the first half already, so B may receive
        // nothing before the second half arrives.
        await waitFor(
          "consumer B to join the group",
          () => b.stderr().includes("Started a partition") || a.stderr().includes("The group rebalanced"),
        );
        const before = parquetFiles(out);
        assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
        await waitFor("consumer B to start a partition", () => b.stderr().includes("Started a partition"));
        await waitFor("files written after B joined", () => parquetFiles(out) >= before + 2);
        await stopGracefully(b, "consumer B");
        // A takes B's partitions back and finishes the stream.
        await waitForRows(out, expected.length, [a, b]);
        await stopGracefully(a, "consumer A");
        assert.match(a.stderr(), /Started a partition/);
        await assertExactlyOnce(out, expected);
        if (mode === "GRPO groups") await assertGroupsWhole(out);
      },
    );
  }

for (const { client, suffix, skip } of CLIENTS)
  it(`waits through a broker restart mid-stream and resumes, losing nothing${suffix}`, { skip }, async () => {
    const dir = join(scratch, `restart-${client}`);
    const out = join(dir, "out");
    const topic = freshName("restart");
    const group = freshName("restart-group");
    const kafka = (command: string) =>
      execFileSync("bash", [KAFKA_SCRIPT, command], {
        env: { ...process.env, ...ownBroker },
        encoding: "utf8",
      })
        .trim()
        .split("\n")
        .pop()!;
    const address = kafka("start");
    const env = { KAFKA_BROKERS: address };
    execFileSync("mkdir", ["-p", dir]);
    const { first, second, expected } = twoPartWorkload(dir);
    assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);

    const consumer = startCli(consumeArgs(topic, group, out, client), {
      ...env,
      TRAJFLOW_LOG_LEVEL: "info",
      KAFKAJS_NO_PARTITIONER_WARNING: "1",
    });
    await waitFor("the consumer's first files", () => parquetFiles(out) >= 2);
    kafka("restart");
    assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
    await waitForRows(out, expected.length, [consumer]);
    await stopGracefully(consumer, "the consumer");
    await assertExactlyOnce(out, expected);
  });
