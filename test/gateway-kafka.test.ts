/**
 * The gateway's Kafka mode against a real broker: the same sessions through gateway → topic → `trajflow
 * consume` give the same rows as the embedded mode, a gateway killed mid-session and restarted continues
 * its sessions (rebuilt from the topic), and while the broker is down calls are refused with 503 before
 * they are forwarded, every answered call is on the topic, and calls succeed again once it is back.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { it } from "node:test";
import { runCli, startCli, type RunningCli } from "./helpers/cli.ts";
import { freePort, freePorts, waitUntil, type GatewayRow } from "./helpers/gateway.ts";
import { startInstantEngine } from "./helpers/instant-engine.ts";
import { consumeArgs, freshName, kafkaTestScope, readTopic } from "./helpers/kafka.ts";
import { readWithPython } from "./helpers/python.ts";

const { scratch, broker } = kafkaTestScope("gateway-kafka");
const KAFKA_SCRIPT = new URL("../scripts/kafka.sh", import.meta.url).pathname;

type Row = GatewayRow;

const rowsOf = async (out: string) =>
  (await readWithPython<{ rows: Row[] }>("read_output.py", out)).rows.map((r) => ({
    key: r.key,
    prompt_ids: r.prompt_ids,
    response_ids: r.response_ids,
    response_mask: r.response_mask,
    rollout_log_probs: r.rollout_log_probs,
    reward: r.reward,
  }));

/** Waits until the gateway answers /readyz; fails with its log (and whether it exited) when it does not. */
async function ready(base: string, gw?: RunningCli): Promise<void> {
  let exited: number | string | null = null;
  void gw?.exited.then((code) => (exited = code));
  try {
    // A restarted gateway first reads its sessions back from the topic (a consumer group's join).
    await waitUntil(
      async () => exited !== null || (await fetch(`${base}/readyz`).catch(() => null))?.ok === true,
      120_000,
    );
  } catch (err) {
    throw new Error(`the gateway at ${base} is not ready; its log:\n${gw?.stderr().slice(-4000) ?? ""}`, {
      cause: err,
    });
  }
  if (exited !== null)
    throw new Error(
      `the gateway exited (${exited}) before it was ready; its log:\n${gw!.stderr().slice(-4000)}`,
    );
}

type Message = { role: string; content: string };

async function chat(base: string, session: string, messages: Message[]): Promise<Response> {
  return fetch(`${base}/sessions/${session}/v1/chat/completions`, {
    method: "POST",
    headers: { "x-trajflow-uid": "task" },
    body: JSON.stringify({ model: "m", messages }),
  });
}

async function turn(base: string, session: string, history: Message[], next: string): Promise<void> {
  const res = await chat(base, session, history);
  assert.equal(res.status, 200, await res.clone().text());
  const reply = ((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!
    .message.content;
  history.push({ role: "assistant", content: reply }, { role: "user", content: next });
}

const post = (url: string, body: unknown) => fetch(url, { method: "POST", body: JSON.stringify(body) });

/**
 * The same agent work against any gateway: three sessions, one of them continued after the gateway was
 * killed and started again (`restart`).
 */
async function drive(base: string, restart: () => Promise<void>): Promise<void> {
  const h1: Message[] = [{ role: "user", content: "first" }];
  await turn(base, "a", h1, "second");
  await turn(base, "a", h1, "third");
  await post(`${base}/sessions/a/reward`, { value: 1 });
  await post(`${base}/sessions/a/end`, {});
  const h2: Message[] = [{ role: "user", content: "b one" }];
  await turn(base, "b", h2, "b two");
  await restart();
  await turn(base, "b", h2, "b three");
  await post(`${base}/sessions/b/reward`, { value: 0.5 });
  await post(`${base}/sessions/b/end`, {});
  const h3: Message[] = [{ role: "user", content: "c" }];
  await turn(base, "c", h3, "done");
  await post(`${base}/sessions/c/end`, { status: "failed" });
  await post(`${base}/sessions/c/reward`, { value: 0 });
}

async function killAndRestart(
  gw: { current: RunningCli },
  args: string[],
  base: string,
  env: NodeJS.ProcessEnv = {},
): Promise<void> {
  gw.current.child.kill("SIGKILL");
  await gw.current.exited;
  gw.current = startCli(args, env);
  await ready(base, gw.current);
}

it("gives the embedded mode's rows through the topic and consume, across a gateway killed mid-session", async () => {
  // Replies depend on the conversation only, so both modes sample the same tokens.
  const engine = await startInstantEngine({
    reply: (_, body) => `ok ${(body.messages as unknown[]).length}`,
  });
  const topic = freshName("gw-events");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const kafkaArgs = ["gateway", "--upstream", engine.url, "--listen", `127.0.0.1:${port}`, "--topic", topic];
  const env = { KAFKA_BROKERS: broker() };
  const gw = { current: startCli(kafkaArgs, env) };
  const embeddedOut = join(scratch, "embedded");
  const embeddedArgs = [
    "gateway",
    "--upstream",
    engine.url,
    "--listen",
    `127.0.0.1:${port}`,
    "--out",
    embeddedOut,
  ];
  try {
    await ready(base, gw.current);
    await drive(base, () => killAndRestart(gw, kafkaArgs, base, env));
    gw.current.child.kill("SIGTERM");
    assert.equal(await gw.current.exited, 0, gw.current.stderr());
    const out = join(scratch, "from-topic");
    const consume = await runCli(consumeArgs(topic, out, "--until-idle-ms", "1500", "--json"), env);
    assert.equal(consume.code, 0, consume.stderr);
    assert.equal(
      (JSON.parse(consume.stdout) as { metrics: { dead_letters?: unknown } }).metrics.dead_letters,
      undefined,
    );
    // The same agent work through the embedded mode.
    gw.current = startCli(embeddedArgs);
    await ready(base, gw.current);
    await drive(base, () => killAndRestart(gw, embeddedArgs, base));
    await waitUntil(async () => (await rowsOf(embeddedOut).catch(() => [])).length === 3, 60_000);
    const viaTopic = await rowsOf(out);
    assert.deepEqual(
      viaTopic.map((r) => r.key),
      ["task_a_0", "task_b_0", "task_c_0"],
    );
    assert.deepEqual(viaTopic, await rowsOf(embeddedOut));
    // Session b's row holds both turns, the one before the kill and the one after.
    assert.equal(viaTopic[1]!.response_mask.filter((m) => m === 1).length, 2 * "ok 1".length + 2);
  } finally {
    gw.current.child.kill("SIGTERM");
    await gw.current.exited;
    await engine.close();
  }
});

it("refuses calls with 503 while the broker is down, loses no answered call, and goes on when it is back", async () => {
  // A broker of its own: stopping it must not disturb the other tests' broker.
  const own = {
    ...process.env,
    KAFKA_PORT: String(await freePorts(3)),
    TRAJFLOW_KAFKA_DIR: join(scratch, "broker"),
  };
  const kafka = (command: string) =>
    execFileSync("bash", [KAFKA_SCRIPT, command], { env: own, encoding: "utf8" }).trim().split("\n").pop()!;
  const address = kafka("start");
  const engine = await startInstantEngine();
  const topic = freshName("gw-down");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const gw = startCli([
    "gateway",
    "--upstream",
    engine.url,
    "--listen",
    `127.0.0.1:${port}`,
    "--topic",
    topic,
    "--brokers",
    address,
  ]);
  const answered: string[] = [];
  const history: Message[] = [{ role: "user", content: "go" }];
  const step = async (): Promise<number> => {
    const res = await chat(base, "d", history);
    if (res.status === 200) {
      answered.push(res.headers.get("x-trajflow-call-id")!);
      const reply = ((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!
        .message.content;
      history.push(
        { role: "assistant", content: reply },
        { role: "user", content: `next ${answered.length}` },
      );
    } else {
      assert.equal(res.status, 503, await res.text());
      assert.equal(res.headers.get("retry-after"), "1");
    }
    return res.status;
  };
  try {
    await ready(base, gw);
    assert.equal(await step(), 200);
    assert.equal(await step(), 200);
    kafka("stop");
    const callsBefore = engine.calls;
    // The first call may wait for the client's retries before it is refused; then refusals come at once,
    // before the call reaches the engine.
    await waitUntil(async () => (await step()) === 503, 60_000);
    const refusedAt = engine.calls;
    assert.equal(await step(), 503);
    assert.equal(engine.calls, refusedAt, "a refused call was forwarded");
    assert.ok(
      refusedAt - callsBefore <= 1,
      `${refusedAt - callsBefore} calls reached the engine while the broker was down`,
    );
    kafka("start");
    await waitUntil(async () => (await step()) === 200, 90_000);
    assert.equal(await step(), 200);
    await post(`${base}/sessions/d/end`, {});
    const responses = (await readTopic(address, topic, 1 + 2 * answered.length + 1))
      .map((m) => JSON.parse(m.value.toString()) as { type: string; call_id?: string })
      .filter((e) => e.type === "response")
      .map((e) => e.call_id!);
    for (const id of answered) assert.ok(responses.includes(id), `answered call ${id} is not on the topic`);
  } finally {
    gw.child.kill("SIGTERM");
    await gw.exited;
    await engine.close();
    kafka("reset");
  }
});
