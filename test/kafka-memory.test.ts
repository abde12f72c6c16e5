/**
 * Memory of the Kafka path under floods, in a consumer with a bounded heap (--max-old-space-size=192):
 * garbage messages (dead letters) and sessions that never end. Each run must finish, with the dead-letter
 * backlog bound and the open-session limit doing their work, instead of growing until the process dies.
 */
import { strict as assert } from "node:assert";
import { join } from "node:path";
import { it } from "node:test";
import { runCli } from "./helpers/cli.ts";
import { BOUNDED_HEAP, writeGarbage, writeOpenSessions } from "./helpers/floods.ts";
import { freshName, kafkaTestScope } from "./helpers/kafka.ts";

const { scratch, broker } = kafkaTestScope("kafka-memory");

async function consumeBounded(topic: string, ...extra: string[]) {
  const r = await runCli(
    [
      "consume",
      ...["--topic", topic, "--group", freshName("g"), "--out", join(scratch, topic)],
      ...["--until-idle-ms", "3000", "--json", ...extra],
    ],
    { KAFKA_BROKERS: broker(), ...BOUNDED_HEAP },
  );
  assert.equal(r.code, 0, r.stderr.slice(-3_000));
  return (JSON.parse(r.stdout) as { metrics: Record<string, unknown> }).metrics;
}

// Regression: 150k garbage messages pushed RSS to 1.65 GB (dead letters produced one at a time).
it("dead-letters 150,000 garbage messages within a 192 MB heap", async () => {
  const topic = freshName("garbage");
  const input = join(scratch, "garbage.jsonl");
  await writeGarbage(input, 150_000);
  assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker() })).code, 0);
  const metrics = await consumeBounded(topic);
  assert.deepEqual(metrics.dead_letters, { MALFORMED_JSON: 150_000 });
});

// Regression: 200k sessions with --max-open-sessions 1000 reached 1.07 GB and died under a 192 MB heap.
it("keeps 200,000 never-ending sessions within a 192 MB heap, cutting the oldest", async () => {
  const topic = freshName("open");
  const input = join(scratch, "open.jsonl");
  await writeOpenSessions(input, 200_000);
  assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker() })).code, 0);
  const metrics = await consumeBounded(topic, "--max-open-sessions", "1000");
  assert.ok((metrics.sessions_cut as number) >= 199_000, `sessions_cut ${String(metrics.sessions_cut)}`);
});
