/**
 * GRPO groups through Kafka on the one runtime: a pipeline file kafka → assemble → rewards → staleness →
 * group → Parquet (partitioned by policy) + trajectory topic writes exactly the rows `trajflow replay
 * --group` writes from the same events, each uid's group whole in one file, missing samples as
 * placeholders; and every row exactly once through SIGKILLs while groups are half collected.
 */
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { mulberry32 } from "./helpers/prng.ts";
import { killConsumeAt, runCli } from "./helpers/cli.ts";
import { freshName, kafkaTestScope, readTopic } from "./helpers/kafka.ts";
import { assertGroupsWhole, groupWorkload, rowsIn } from "./helpers/workload.ts";

const { scratch, broker: currentBroker } = kafkaTestScope("kafka-group");

const REWARDS = { stages: [{ name: "env", type: "env", required: false }] };

/** The reference: replay of the same events with the same transforms. */
async function replayed(input: string, out: string) {
  const rewards = join(scratch, "rewards.json");
  writeFileSync(rewards, JSON.stringify(REWARDS));
  const result = await runCli([
    "replay",
    input,
    "--out",
    out,
    "--group",
    "--rewards",
    rewards,
    "--max-policy-lag",
    "1",
    "--current-policy",
    "3",
    "--partition-by",
    "policy",
    "--reward-grace-ms",
    "0",
  ]);
  assert.equal(result.code, 0, result.stderr);
  return rowsIn(out);
}

describe("GRPO groups from Kafka", () => {
  it("runs kafka → assemble → rewards → staleness → group → Parquet + topic, equal to replay --group", async () => {
    const broker = currentBroker();
    const { all } = groupWorkload(scratch);
    const topic = freshName("groups");
    assert.equal((await runCli(["produce", all, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    const out = join(scratch, "kafka-out");
    const pipeline = join(scratch, "groups.yaml");
    writeFileSync(
      pipeline,
      `version: 1
sources:
  events:
    type: kafka
    connection: { brokers: ["${broker}"] }
    topic: ${topic}
    group_id: ${freshName("g")}
transforms:
  assemble: { type: assemble, inputs: [events], reward_grace_ms: 0 }
  rewards:
    type: rewards
    inputs: [assemble]
    stages: [{ name: env, type: env, required: false }]
  staleness: { type: staleness, inputs: [rewards], max_lag: 1, current_version: 3 }
  group: { type: group, inputs: [staleness] }
sinks:
  files: { type: parquet, inputs: [group], path: ${out}, partition_by: policy, max_file_age_ms: 1000 }
  trajectories: { type: kafka, inputs: [group], topic: ${topic}.trajectories }
`,
    );
    const valid = await runCli(["validate", pipeline]);
    assert.equal(valid.code, 0, valid.stderr);
    assert.match(
      valid.stdout,
      /kafka events → assemble → rewards → staleness → group → topic .* \+ parquet files/,
    );
    const run = await runCli(["run", pipeline, "--until-idle-ms", "3000", "--json"], {
      KAFKA_BROKERS: broker,
    });
    assert.equal(run.code, 0, run.stderr);

    const rows = await rowsIn(out);
    const expected = await replayed(all, join(scratch, "replay-out"));
    assert.deepEqual(rows, expected);
    // 24 uids x 4 rollouts; every third uid's missing rollout is a placeholder, and policy 1 is stale.
    assert.equal(rows.length, 96);
    assert.equal(rows.filter((r) => r.status === "missing").length, 8);
    assert.ok(rows.some((r) => (r.flags as string[]).includes("stale")));
    await assertGroupsWhole(out);
    const messages = await readTopic(broker, `${topic}.trajectories`, 96);
    assert.deepEqual(messages.map((m) => m.key).sort(), rows.map((r) => r.key as string).sort());
  });

  it("writes every group exactly once through SIGKILLs while groups are half collected", async () => {
    const broker = currentBroker();
    const { first, second, all } = groupWorkload(scratch, 32);
    const topic = freshName("groups-crash");
    const group = freshName("g");
    const out = join(scratch, "crash-out");
    const env = { KAFKA_BROKERS: broker };
    assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);
    const args = [
      "consume",
      ...["--topic", topic, "--group", group, "--out", out],
      ...["--grpo", "--rows-per-file", "4", "--reward-grace-ms", "0", "--session-timeout-ms", "3000"],
    ];
    const random = mulberry32(77);
    // Each run is killed at a named point of its commit path (killConsumeAt), or drains first: counted.
    let killed = 0;
    for (let run = 0; run < 4; run++) {
      const killing = killConsumeAt(args, env, run, random, 3).then((ended) => {
        if (ended === "killed") killed++;
      });
      if (run === 1) assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
      await killing;
    }
    assert.ok(killed >= 2, `only ${killed} runs were killed at their point`);
    const final = await runCli([...args, "--until-idle-ms", "3000"], env);
    assert.equal(final.code, 0, final.stderr);
    const rows = await rowsIn(out);
    const keys = rows.map((r) => r.key);
    assert.equal(new Set(keys).size, keys.length, "a row was written twice");
    const reference = await runCli([
      "replay",
      all,
      "--out",
      join(scratch, "crash-ref"),
      "--group",
      "--reward-grace-ms",
      "0",
    ]);
    assert.equal(reference.code, 0, reference.stderr);
    assert.deepEqual(rows, await rowsIn(join(scratch, "crash-ref")));
    await assertGroupsWhole(out);
  });
});
