/**
 * Many hosts, one dataset: two members of one consumer group write to one S3 prefix. One is SIGKILLed
 * mid-stream and restarted, the other is stopped while the restarted one's join rebalances the group,
 * and a last member drains the rest: every row is in the bucket exactly once, none missing, and no
 * upload is left unfinished.
 */
import { strict as assert } from "node:assert";
import { it } from "node:test";
import { ListMultipartUploadsCommand } from "@aws-sdk/client-s3";
import { runCli, startCli } from "./helpers/cli.ts";
import { freshName, kafkaTestScope, waitFor } from "./helpers/kafka.ts";
import { s3Output } from "./helpers/outputs.ts";
import { s3Server } from "./helpers/s3.ts";
import { twoPartWorkload } from "./helpers/workload.ts";

const { scratch, broker: currentBroker } = kafkaTestScope("kafka-s3");

it("two members writing to one bucket: a SIGKILL, a restart and a stop during the rebalance lose and repeat nothing", async () => {
  const broker = currentBroker();
  const topic = freshName("s3-group");
  const group = freshName("g");
  const output = await s3Output("rows");
  const { first, second, expected } = twoPartWorkload(scratch, 160, 40);
  const env = { KAFKA_BROKERS: broker, KAFKAJS_NO_PARTITIONER_WARNING: "1", ...output.env };
  assert.equal((await runCli(["produce", first, "--topic", topic], env)).code, 0);
  const member = (extra: string[] = []) =>
    startCli(
      [
        ...["consume", "--topic", topic, "--group", group, "--out", output.arg],
        ...["--rows-per-file", "3", "--reward-grace-ms", "0", "--session-timeout-ms", "3000"],
        ...extra,
      ],
      { ...env, TRAJFLOW_LOG_LEVEL: "info" },
    );

  const a = member();
  const b = member();
  await waitFor("both members to own partitions", () =>
    [a, b].every((m) => m.stderr().includes("Started a partition.")),
  );
  const landed = await output.files();
  await waitFor("files from the group", async () => (await output.files()) >= landed + 4);
  a.child.kill("SIGKILL");
  assert.equal(await a.exited, "SIGKILL");

  // The second half arrives; A comes back, and B is told to stop as A's join rebalances the group.
  assert.equal((await runCli(["produce", second, "--topic", topic], env)).code, 0);
  const a2 = member();
  await waitFor("A's restart to reach the group", () => a2.stderr().includes("Connecting to Kafka."));
  b.child.kill("SIGTERM");
  assert.equal(await b.exited, 0, b.stderr());
  a2.child.kill("SIGTERM");
  assert.equal(await a2.exited, 0, a2.stderr());

  // A last member drains what is left.
  const last = await runCli(
    [
      ...["consume", "--topic", topic, "--group", group, "--out", output.arg],
      ...["--rows-per-file", "3", "--reward-grace-ms", "0", "--until-idle-ms", "3000", "--json"],
    ],
    env,
  );
  assert.equal(last.code, 0, last.stderr);
  const rows = await output.rows();
  const keys = rows.map((r) => r.key);
  assert.equal(new Set(keys).size, keys.length, "a row is in the bucket twice");
  assert.deepEqual(rows, expected);
  const bucket = new URL(output.arg).hostname;
  const uploads = await s3Server().client.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  assert.equal(uploads.Uploads?.length ?? 0, 0, "an upload was left unfinished");
});
