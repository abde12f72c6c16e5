/**
 * The gateway as a fleet (docs/gateway.md#a-fleet-of-replicas): three `trajflow gateway --replica-id`
 * processes on one Kafka topic, behind HAProxy (scripts/haproxy.sh: Debian's package, the session hashed
 * consistently, /readyz checks, retries on connection failures and 503), in front of each engine under test
 * (helpers/engines.ts: llama.cpp's server, vLLM's).
 * Eight agents run six-turn sessions through the proxy, sending a call again only on a connection error, a
 * 5xx, or when the test has them give up on it (once HAProxy finds a paused replica down: the step a
 * client's timeout takes, decided by the test instead of a clock), while replicas are SIGKILLed and
 * restarted, one is paused (SIGSTOP) with a call in flight long enough for its sessions to move and then
 * resumed, or every replica is restarted in turn. `trajflow consume` then writes the rows.
 *
 * Checked: every answer an agent received is trained, with the engine's logprobs, in exactly one row;
 * none of them was fenced; the only dead letters are fenced stale writes (FENCED_WRITE), never a
 * DUPLICATE_CONFLICT or a missing parent; and sessions did move between replicas (events of several
 * owner generations).
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { connect } from "node:net";
import { join } from "node:path";
import { after, it } from "node:test";
import { decodeLogprobs, decodeTokenIds } from "../src/schemas/tokens.ts";
import { runCli, startCli, type RunningCli } from "./helpers/cli.ts";
import { freePort, waitUntil, type GatewayRow } from "./helpers/gateway.ts";
import { consumeArgs, freshName, kafkaTestScope, readTopic, topicMessages } from "./helpers/kafka.ts";
import { logprobAt, outputIds, renderPrompt, startInstantEngine } from "./helpers/instant-engine.ts";
import { enginesUnderTest, type TestEngine } from "./helpers/engines.ts";
import { startHoldProxy, type HoldProxy } from "./helpers/hold-proxy.ts";
import { readWithPython } from "./helpers/python.ts";

const HAPROXY = new URL("../scripts/haproxy.sh", import.meta.url).pathname;
/** Stops the HAProxy whose directory is `dir` (scripts/haproxy.sh stop; nothing when none runs there). */
const stopProxy = (dir: string) =>
  execFileSync("bash", [HAPROXY, "stop"], { env: { ...process.env, TRAJFLOW_HAPROXY_DIR: dir } });
/** HAProxy's directories, each stopped after the tests (a failed test leaves none running). */
const proxies: string[] = [];
after(() => {
  for (const dir of proxies) stopProxy(dir);
});
const { scratch, broker } = kafkaTestScope("gateway-fleet");
const AGENTS = 8;
const TURNS = 6;
/**
 * How long the agents and the chaos may take together before the test fails with its timeline (each step's
 * time and answers so far) and the calls then in flight: under the runner's 900 s deadline per test, which
 * would fail it with nothing to go on. Idle, a run takes ~110 s.
 */
const FLEET_DEADLINE_MS = 720_000;
/**
 * How long an agent keeps sending a call again (connection errors, 5xx) before the test fails. Time, not a
 * count of attempts: on a loaded CI host a replica's restart (Kafka, its readers' catch-up) took longer
 * than 200 attempts 50 ms apart, while HAProxy had every server marked down ("no server available").
 */
const CALL_PATIENCE_MS = 110_000;

interface Replica {
  port: number;
  args: string[];
  current: RunningCli;
}

/** A received answer: its session, call id (x-trajflow-call-id) and prompt length (usage.prompt_tokens). */
interface Received {
  session: string;
  callId: string;
  promptTokens: number;
}

async function ready(replica: Replica): Promise<void> {
  let exited: number | string | null = null;
  void replica.current.exited.then((code) => (exited = code));
  await waitUntil(
    async () =>
      exited !== null ||
      (await fetch(`http://127.0.0.1:${replica.port}/readyz`).catch(() => null))?.ok === true,
    120_000,
  ).catch((err: unknown) => {
    throw new Error(`replica on ${replica.port} not ready:\n${replica.current.stderr().slice(-3000)}`, {
      cause: err,
    });
  });
  if (exited !== null)
    throw new Error(
      `replica on ${replica.port} exited (${exited}):\n${replica.current.stderr().slice(-3000)}`,
    );
}

/** `n` replicas on `topic`, replica i in front of the engine `upstream(i)` names (its flags), each ready. */
async function startReplicas(
  topic: string,
  n: number,
  upstream: (index: number) => string[],
): Promise<Replica[]> {
  const replicas: Replica[] = [];
  for (let i = 0; i < n; i++) {
    const port = await freePort();
    const args = [
      "gateway",
      ...upstream(i),
      "--listen",
      `127.0.0.1:${port}`,
      "--topic",
      topic,
      "--replica-id",
      `r${i}`,
    ];
    replicas.push({ port, args, current: startCli(args, { KAFKA_BROKERS: broker() }) });
  }
  for (const r of replicas) await ready(r);
  return replicas;
}

/** HAProxy (scripts/haproxy.sh) in front of `servers` (host:port): its base URL and directory. */
function startProxy(port: number, servers: string[]): { proxy: string; haproxyDir: string } {
  const haproxyDir = join(scratch, freshName("haproxy"));
  proxies.push(haproxyDir);
  const proxy = execFileSync("bash", [HAPROXY, "start", String(port), ...servers], {
    encoding: "utf8",
    env: { ...process.env, TRAJFLOW_HAPROXY_DIR: haproxyDir },
  })
    .trim()
    .split("\n")
    .pop()!;
  return { proxy, haproxyDir };
}

/** HAProxy's own record of each server of the fleet's backend (`show stat` on its stats socket), by name. */
async function haproxyServers(haproxyDir: string): Promise<Map<string, Record<string, string>>> {
  const text = await new Promise<string>((resolve, reject) => {
    const socket = connect(join(haproxyDir, "admin.sock"));
    let data = "";
    socket.on("connect", () => socket.write("show stat\n"));
    socket.on("data", (d) => (data += d.toString("utf8")));
    socket.on("end", () => resolve(data));
    socket.on("error", reject);
  });
  const [header, ...lines] = text.trim().split("\n");
  const names = header!.replace(/^# /, "").split(",");
  const servers = new Map<string, Record<string, string>>();
  for (const line of lines) {
    const values = line.split(",");
    const row = Object.fromEntries(names.map((n, i) => [n, values[i] ?? ""]));
    if (row.pxname === "gateways" && row.svname !== "BACKEND") servers.set(row.svname!, row);
  }
  return servers;
}

/** The gateway flags `args` with the engine's URL replaced by `url` (a proxy in front of it). */
function throughProxy(args: string[], url: string): string[] {
  const at = args.indexOf("--upstream");
  return args.map((a, i) => (i === at + 1 ? url : a));
}

async function startFleet(
  topic: string,
  n: number,
  engine: TestEngine,
  upstreamOf: (index: number, args: string[]) => string[] = (_, args) => args,
): Promise<{ replicas: Replica[]; proxy: string; haproxyDir: string }> {
  const replicas = await startReplicas(topic, n, (i) => upstreamOf(i, engine.gatewayArgs()));
  const { proxy, haproxyDir } = startProxy(
    await freePort(),
    replicas.map((r) => `127.0.0.1:${r.port}`),
  );
  return { replicas, proxy, haproxyDir };
}

async function restart(r: Replica, signal: "SIGKILL" | "SIGTERM"): Promise<void> {
  r.current.child.kill(signal);
  await r.current.exited;
  r.current = startCli(r.args, { KAFKA_BROKERS: broker() });
  await ready(r);
}

/** A call an agent has in flight: its session, since when, and the controller that gives it up. */
interface InFlight {
  session: string;
  since: number;
  attempt: number;
  controller: AbortController;
}

/**
 * One call, sent again on a connection error or a 5xx (as agents' clients do), or after the test made the
 * agent give up on it (`inFlight`'s controller: the test does so once HAProxy has the paused replica down,
 * as a client's timeout would, without a clock deciding when); any other status fails the test. Seeded by
 * the session and turn, so a call sent twice samples the same tokens.
 */
async function call(
  proxy: string,
  session: string,
  body: Record<string, unknown>,
  inFlight: Set<InFlight>,
): Promise<Response> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const pending: InFlight = { session, since: Date.now(), attempt, controller: new AbortController() };
    inFlight.add(pending);
    const res = await fetch(`${proxy}/sessions/${session}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-trajflow-uid": "fleet" },
      body: JSON.stringify(body),
      signal: pending.controller.signal,
    })
      .catch((err: unknown) => err as Error)
      .finally(() => inFlight.delete(pending));
    if (!(res instanceof Error) && res.status < 500) return res;
    const last = res instanceof Error ? res.message : `${res.status} ${await res.text()}`;
    if (Date.now() - started > CALL_PATIENCE_MS)
      throw new Error(`session ${session}: no answer after ${attempt} attempts; the last: ${last}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function control(proxy: string, path: string, body: unknown): Promise<void> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const res = await fetch(`${proxy}${path}`, { method: "POST", body: JSON.stringify(body) }).catch(
      (err: unknown) => err as Error,
    );
    if (!(res instanceof Error) && res.status < 500) {
      const text = await res.text();
      // An end sent again (by the agent, or the proxy's retry) after a replica recorded it and died, or
      // withheld its answer: it was recorded, and the session's owner now says so.
      if (path.endsWith("/end") && res.status === 409 && text.includes("session_ended")) return;
      assert.equal(res.status, 200, `${path}: ${text}`);
      return;
    }
    const last = res instanceof Error ? res.message : `${res.status} ${await res.text()}`;
    if (Date.now() - started > CALL_PATIENCE_MS)
      throw new Error(`${path}: no answer after ${attempt} attempts; the last: ${last}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** An agent: six-turn sessions one after another until `stop` says so; every answer it received. */
async function agent(
  proxy: string,
  index: number,
  stop: () => boolean,
  received: Received[],
  inFlight: Set<InFlight>,
): Promise<void> {
  for (let k = 0; !stop() || k === 0; k++) {
    const session = `a${index}-s${k}`;
    const messages: Array<{ role: string; content: string }> = [
      { role: "user", content: `task ${index}.${k}: count to ten` },
    ];
    for (let turn = 0; turn < TURNS; turn++) {
      const res = await call(
        proxy,
        session,
        { model: "tiny", messages, max_tokens: 8, temperature: 1, seed: index * 1000 + k * 10 + turn },
        inFlight,
      );
      const text = await res.text();
      assert.equal(res.status, 200, `${session} turn ${turn}: ${text}`);
      const answer = JSON.parse(text) as {
        choices: Array<{ message: { content: string } }>;
        usage: { prompt_tokens: number };
      };
      const reply = answer.choices[0]!.message.content;
      received.push({
        session,
        callId: res.headers.get("x-trajflow-call-id")!,
        promptTokens: answer.usage.prompt_tokens,
      });
      messages.push({ role: "assistant", content: reply }, { role: "user", content: `go on (${turn})` });
    }
    // Keyed: a reward sent again after a replica died answering it is applied once.
    await control(proxy, `/sessions/${session}/reward`, { value: 1, key: "outcome" });
    await control(proxy, `/sessions/${session}/end`, {});
  }
}

type Row = GatewayRow;

/**
 * Whether `row` trains `ids`, sampled after a prompt of `promptTokens` tokens, at that place: the run of
 * masked positions there is exactly them, with the engine's `logprobs` (a row without logprobs only where
 * some call of it had one missing: it is flagged missing_logprobs then).
 */
function trains(
  row: Row,
  ids: Int32Array,
  logprobs: Array<number | null> | null,
  promptTokens: number,
): boolean {
  const at = promptTokens - row.prompt_ids.length;
  const r = row.response_ids;
  if (at < 0 || at + ids.length > r.length) return false;
  if (row.rollout_log_probs === null && !row.flags.includes("missing_logprobs")) return false;
  for (let j = 0; j < ids.length; j++) {
    if (r[at + j] !== ids[j] || row.response_mask[at + j] !== 1) return false;
    const want = logprobs?.[j] ?? null;
    const lp = row.rollout_log_probs?.[at + j] ?? null;
    if (
      row.rollout_log_probs !== null &&
      (want === null ? lp !== null : lp === null || Math.abs(lp - want) > 1e-5)
    )
      return false;
  }
  return at + ids.length === r.length || row.response_mask[at + ids.length] === 0;
}

/** `trajflow consume` of the whole topic into `out` (dead letters as files in `dlDir`); its --json report. */
async function consumeTopic(topic: string, out: string, dlDir: string): Promise<{ stdout: string }> {
  const args = consumeArgs(topic, out, "--dead-letter-dir", dlDir, "--until-idle-ms", "2000", "--json");
  const consume = await runCli(args, { KAFKA_BROKERS: broker() });
  assert.equal(consume.code, 0, consume.stderr);
  return consume;
}

/** What a chaos step has of the running fleet. */
interface FleetRun {
  replicas: Replica[];
  /** Resolves once every agent received `answers` more answers (chaos lands while sessions run). */
  progress: (answers: number) => Promise<void>;
  /** Marks a step in the run's timeline (printed with the run's figures, and with a failure). */
  step: (name: string) => void;
  /** Resolves once HAProxy's own health checks have replica `index` in `status` (its stats socket). */
  proxySees: (index: number, status: "UP" | "DOWN") => Promise<void>;
  /** The agents give up on every call they have in flight and send it again (a client's timeout). */
  giveUp: () => number;
  /** The hold proxy in front of the engine of replica `holdReplica`, when the run asked for one. */
  hold?: HoldProxy;
}

/** Runs the agents through `chaos`, then consumes the topic and checks every received answer. */
async function runFleet(
  engine: TestEngine,
  chaos: (fleet: FleetRun) => Promise<void>,
  options: { holdReplica?: number } = {},
): Promise<{ moved: number; fenced: number }> {
  const topic = freshName("fleet");
  const hold = options.holdReplica === undefined ? undefined : await startHoldProxy(engine.url());
  const { replicas, proxy, haproxyDir } = await startFleet(topic, 3, engine, (i, args) =>
    i === options.holdReplica ? throughProxy(args, hold!.url) : args,
  );
  const received: Received[] = [];
  const inFlight = new Set<InFlight>();
  const began = Date.now();
  const timeline: string[] = [];
  const step = (name: string) =>
    timeline.push(`${((Date.now() - began) / 1000).toFixed(1)} s ${name} (${received.length} answers)`);
  let stopping = false;
  // What the replicas said and why HAProxy took servers out, with the error that failed the run.
  const diagnosed = (err: unknown): Error => {
    const logs = replicas.map(
      (r, i) => `replica ${i} (exit ${r.current.child.exitCode}):\n${r.current.stderr().slice(-2000)}`,
    );
    const proxyLog = join(haproxyDir, "haproxy.log");
    const changes = existsSync(proxyLog)
      ? readFileSync(proxyLog, "utf8")
          .split("\n")
          .filter((l) => /Server gateways|backend/.test(l))
          .slice(-40)
      : [];
    const pending = [...inFlight].map(
      (c) => `${c.session} attempt ${c.attempt}, ${((Date.now() - c.since) / 1000).toFixed(1)} s`,
    );
    return new Error(
      `${(err as Error).message}\ntimeline:\n${timeline.join("\n")}\ncalls in flight: ${pending.join("; ")}\n` +
        `${logs.join("\n")}\nHAProxy's server changes:\n${changes.join("\n")}`,
      { cause: err },
    );
  };
  try {
    step("fleet ready");
    const agents = Array.from({ length: AGENTS }, (_, i) =>
      agent(proxy, i, () => stopping, received, inFlight),
    );
    // The first agent that fails fails the run at once (not later as an unhandled rejection), and so does
    // a run past its deadline.
    let expire: NodeJS.Timeout | undefined;
    const failed = new Promise<never>((_, reject) => {
      for (const a of agents) a.catch(reject);
      expire = setTimeout(
        () => reject(new Error(`the fleet's run took over ${FLEET_DEADLINE_MS / 1000} s`)),
        FLEET_DEADLINE_MS,
      );
    });
    failed.catch(() => {});
    // A wait left behind by a failed run must not reject unhandled later.
    const orFailed = <T>(p: Promise<T>): Promise<T> => {
      p.catch(() => {});
      return Promise.race([p, failed]);
    };
    try {
      // The chaos runs while the agents do: it begins once they have answers.
      await orFailed(waitUntil(() => received.length >= AGENTS * 2, 120_000));
      step("agents answered");
      // An agent whose call was stuck has given up on it and gone on, once it has more answers.
      const perAgent = () => {
        const n = new Array<number>(AGENTS).fill(0);
        for (const r of received) n[Number(/^a(\d+)-/.exec(r.session)![1])]!++;
        return n;
      };
      const progress = async (answers: number) => {
        const target = perAgent().map((n) => n + answers);
        await orFailed(waitUntil(() => perAgent().every((n, i) => n >= target[i]!), 120_000));
      };
      const proxySees = (index: number, status: "UP" | "DOWN") =>
        orFailed(
          waitUntil(
            async () => (await haproxyServers(haproxyDir)).get(`g${index + 1}`)?.status === status,
            120_000,
          ),
        );
      const giveUp = () => {
        const calls = [...inFlight];
        for (const c of calls) c.controller.abort();
        return calls.length;
      };
      try {
        await orFailed(
          chaos({ replicas, progress, step, proxySees, giveUp, ...(hold !== undefined ? { hold } : {}) }),
        );
      } finally {
        stopping = true;
      }
      step("chaos done");
      await orFailed(Promise.all(agents));
      step("agents done");
    } finally {
      clearTimeout(expire);
    }
  } catch (err) {
    throw diagnosed(err);
  } finally {
    stopping = true;
    for (const r of replicas) r.current.child.kill("SIGTERM");
    for (const r of replicas) await r.current.exited;
    stopProxy(haproxyDir);
    await hold?.close();
  }
  const out = join(scratch, freshName("rows"));
  const dlDir = join(scratch, freshName("dead"));
  const consume = await consumeTopic(topic, out, dlDir);
  step("topic consumed");
  const deadCodes = (JSON.parse(consume.stdout) as { metrics: { dead_letters?: Record<string, number> } })
    .metrics.dead_letters;
  assert.deepEqual(
    Object.keys(deadCodes ?? {}).filter((c) => c !== "FENCED_WRITE"),
    [],
    `dead letters other than fenced writes: ${JSON.stringify(deadCodes)}`,
  );
  const fencedCalls = new Set<string>();
  const dlFiles = existsSync(dlDir) ? (readdirSync(dlDir, { recursive: true }) as string[]) : [];
  for (const f of dlFiles)
    if (f.endsWith(".jsonl"))
      for (const line of readFileSync(join(dlDir, f), "utf8")
        .split("\n")
        .filter((l) => l !== "")) {
        const letter = JSON.parse(line) as { code: string; raw?: string };
        assert.equal(letter.code, "FENCED_WRITE", `a dead letter other than a fenced write: ${line}`);
        if (letter.raw !== undefined)
          fencedCalls.add((JSON.parse(letter.raw) as { call_id?: string }).call_id ?? "");
      }
  assert.deepEqual(Object.keys(deadCodes ?? {}), deadCodes === undefined ? [] : ["FENCED_WRITE"]);
  // The topic's responses by call id, and each session's generations.
  const all = (await readTopic(broker(), topic, await topicMessages(broker(), topic), 60_000)).map(
    (m) => JSON.parse(m.value.toString("utf8")) as Record<string, unknown>,
  );
  const responses = new Map<string, Record<string, unknown>>();
  const gens = new Map<string, Set<number>>();
  for (const e of all) {
    if (e.type === "response") responses.set(e.call_id as string, e);
    if (typeof e.session_id === "string") {
      const g = gens.get(e.session_id) ?? new Set<number>();
      g.add(typeof e.gen === "number" ? e.gen : 0);
      gens.set(e.session_id, g);
    }
  }
  const rows = (await readWithPython<{ rows: Row[] }>("read_output.py", out)).rows;
  const bySession = new Map<string, Row[]>();
  for (const r of rows) bySession.set(r.session_id, [...(bySession.get(r.session_id) ?? []), r]);
  for (const c of received) {
    assert.ok(!fencedCalls.has(c.callId), `call ${c.callId} of ${c.session} was answered, and fenced`);
    const ev = responses.get(c.callId);
    assert.ok(ev !== undefined, `call ${c.callId} of ${c.session} was answered, and is not on the topic`);
    const ids = decodeTokenIds(ev.output_ids) as Int32Array;
    const logprobs =
      ev.logprobs === undefined
        ? null
        : [...(decodeLogprobs(ev.logprobs) as Float32Array)].map((l) => (Number.isNaN(l) ? null : l));
    const holding = (bySession.get(c.session) ?? []).filter((r) => trains(r, ids, logprobs, c.promptTokens));
    assert.equal(
      holding.length,
      1,
      `call ${c.callId} of ${c.session} is trained in ${holding.length} rows: ${JSON.stringify({ ids: [...ids], logprobs: logprobs && [...logprobs], rows: bySession.get(c.session) })}`,
    );
  }
  const moved = [...gens.values()].filter((g) => g.size > 1).length;
  console.log(
    `fleet: ${received.length} answers received in ${bySession.size} sessions, ${moved} sessions moved, ` +
      `${fencedCalls.size} fenced calls, dead letters ${JSON.stringify(deadCodes ?? {})}\n  ` +
      timeline.join("\n  "),
  );
  return { moved, fenced: fencedCalls.size };
}

for (const engine of enginesUnderTest()) {
  it(`loses no answer through 10 SIGKILLs and a paused replica in front of ${engine.name}: every received answer trained exactly once`, async () => {
    const PAUSED = 1;
    const { moved } = await runFleet(
      engine,
      async ({ replicas, progress, step, proxySees, giveUp, hold }) => {
        for (let kill = 0; kill < 10; kill++) {
          await restart(replicas[kill % replicas.length]!, "SIGKILL");
          step(`replica ${kill % replicas.length} killed and ready again`);
          await progress(1);
        }
        // A paused replica, with a call of one of its sessions at the engine (held there until the pause):
        // the proxy finds it down, its agents give up on their calls and send them again, and its sessions
        // move; resumed, it answers nothing it cannot stand behind (the agent left), and what it then writes
        // of those sessions is fenced.
        const paused = replicas[PAUSED]!;
        const held = hold!.holdNext();
        await held.arrived;
        paused.current.child.kill("SIGSTOP");
        held.release();
        step("replica paused with a call in flight");
        await proxySees(PAUSED, "DOWN");
        step(`replica found down, ${giveUp()} calls given up`);
        await progress(2);
        paused.current.child.kill("SIGCONT");
        await ready(paused);
        await proxySees(PAUSED, "UP");
        step("replica resumed");
        await progress(1);
      },
      { holdReplica: PAUSED },
    );
    assert.ok(moved >= 3, `only ${moved} sessions moved between replicas`);
  });

  it(`loses nothing through a rolling restart of every replica in front of ${engine.name}`, async () => {
    await runFleet(engine, async ({ replicas, progress, step }) => {
      for (const [i, r] of replicas.entries()) {
        await restart(r, "SIGTERM");
        step(`replica ${i} restarted`);
        await progress(1);
      }
    });
  });
}

it("withholds a paused replica's answer once its session moved: 503 session_moved, its events fenced", async () => {
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const engine = await startInstantEngine({
    hold: (_, body) => {
      const messages = body.messages as Array<{ content: string }>;
      return messages.at(-1)!.content === "slow" ? held : undefined;
    },
  });
  const topic = freshName("fleet-pause");
  const [a, b] = await startReplicas(topic, 2, () => ["--upstream", engine.url]);
  const turn = (r: Replica, content: string) =>
    fetch(`http://127.0.0.1:${r.port}/sessions/p/v1/chat/completions`, {
      method: "POST",
      headers: { "x-trajflow-uid": "pause" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content }] }),
    });
  try {
    // The trainer's new policy version reaches A; B, which takes the session over, stamps it too.
    const weights = await fetch(`http://127.0.0.1:${a!.port}/weights`, {
      method: "POST",
      body: JSON.stringify({ version: 7 }),
    });
    assert.equal(weights.status, 200, await weights.text());
    assert.equal((await turn(a!, "first")).status, 200);
    // A's call is in flight (held by the engine) when A is paused.
    const slow = turn(a!, "slow");
    await waitUntil(() => engine.bodies.some((body) => JSON.stringify(body).includes("slow")));
    a!.current.child.kill("SIGSTOP");
    release();
    // Meanwhile the session's next call reaches B, which takes the session over.
    const onB = await turn(b!, "second");
    assert.equal(onB.status, 200, await onB.clone().text());
    a!.current.child.kill("SIGCONT");
    const answer = await slow;
    assert.equal(answer.status, 503);
    assert.equal(answer.headers.get("x-trajflow-session-moved"), "1");
    assert.equal(((await answer.json()) as { error: { code: string } }).error.code, "session_moved");
    // The session goes on, and comes back to A, which takes it over again.
    assert.equal((await turn(b!, "third")).status, 200);
    assert.equal((await turn(a!, "fourth")).status, 200);
  } finally {
    for (const r of [a!, b!]) r.current.child.kill("SIGTERM");
    for (const r of [a!, b!]) await r.current.exited;
    await engine.close();
  }
  const dlDir = join(scratch, freshName("dead"));
  const out = join(scratch, freshName("rows"));
  const consume = await consumeTopic(topic, out, dlDir);
  // A's request and response of the withheld call: fenced, each counted; nothing else rejected.
  const metrics = (JSON.parse(consume.stdout) as { metrics: Record<string, unknown> }).metrics;
  assert.deepEqual(metrics.dead_letters, { FENCED_WRITE: 2 });
  const rows = (await readWithPython<{ rows: Row[] }>("read_output.py", out)).rows;
  // Exactly the four answered calls, each its own row (one user turn each, so none continues another):
  // the engine's calls 1, 3, 4 and 5; the withheld call 2's answer is in no row.
  const answered: Array<[string, number]> = [
    ["first", 1],
    ["second", 3],
    ["third", 4],
    ["fourth", 5],
  ];
  const expected = answered.map(([content, call]) => {
    const response = outputIds(`ok ${call}`);
    return {
      prompt_ids: renderPrompt([{ role: "user", content }]),
      response_ids: response,
      response_mask: response.map(() => 1),
      rollout_log_probs: response.map((_, i) => logprobAt(i)),
      versions: [7, 7],
    };
  });
  const found = rows.map((r) => ({
    prompt_ids: r.prompt_ids,
    response_ids: r.response_ids,
    response_mask: r.response_mask,
    rollout_log_probs: r.rollout_log_probs,
    versions: [r.weight_version_min, r.weight_version_max],
  }));
  const order = (a: { prompt_ids: number[] }, b: { prompt_ids: number[] }) =>
    JSON.stringify(a.prompt_ids).localeCompare(JSON.stringify(b.prompt_ids));
  assert.deepEqual(found.sort(order), expected.sort(order));
});

it("keeps a replica whose /readyz answers slowly in rotation, and takes out one that says it is not ready", async () => {
  // A loaded replica's event loop can be slow to answer its health check: HAProxy allows 2 s (timeout
  // check), where by default it allows one check interval (500 ms) and would take every such replica out.
  // The replica answers after 750 ms; what the test believes is HAProxy's own record of each check (its
  // stats socket), so a stall on this host that delays an answer past 2 s makes the test wait, not fail.
  let ready = true;
  const replica = createServer((req, res) => {
    if (req.url !== "/readyz") return void res.end("answer");
    setTimeout(() => res.writeHead(ready ? 200 : 503).end(), 750);
  });
  await new Promise<void>((r) => replica.listen(0, "127.0.0.1", r));
  const { port } = replica.address() as { port: number };
  const { proxy, haproxyDir } = startProxy(await freePort(), [`127.0.0.1:${port}`]);
  try {
    // A check answered past the interval, taken as passed, and the server up: it is in rotation.
    await waitUntil(async () => {
      const g = (await haproxyServers(haproxyDir)).get("g1");
      return g?.status === "UP" && g.check_status === "L7OK" && Number(g.check_duration) >= 500;
    });
    const res = await fetch(`${proxy}/sessions/s/v1/models`);
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(await res.text(), "answer");
    // Not ready: taken out once its checks fail on the status (HAProxy then answers 503 itself).
    ready = false;
    await waitUntil(async () => {
      const g = (await haproxyServers(haproxyDir)).get("g1");
      return g?.status === "DOWN" && g.check_status === "L7STS";
    });
    const out = await fetch(`${proxy}/sessions/s/v1/models`);
    assert.equal(out.status, 503);
    assert.match(await out.text(), /No server is available/);
  } finally {
    stopProxy(haproxyDir);
    replica.closeAllConnections();
    await new Promise((r) => replica.close(r));
  }
});
