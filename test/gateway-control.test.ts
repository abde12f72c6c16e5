/**
 * The control plane, against the real gateway in front of a real engine (the trainer's loop once per engine
 * under test, helpers/engines.ts; the listener and header checks in front of llama.cpp): with a control token, the
 * routes that drive the training signal (start, read, reward, end, delete sessions; POST /weights) refuse
 * an agent (no credentials: 401; a session's own key or a wrong token: 403), while model calls work by path
 * and by session key as before; the trainer with the token (the Python package's GatewayControl) starts,
 * rewards and ends sessions and its rows are right; a separate control listener takes the control routes
 * off the agents' listener; the token is in no file the gateway wrote; hostile headers get a clean refusal.
 */
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, it } from "node:test";
import { killRunning, startCli, type RunningCli } from "./helpers/cli.ts";
import { freePort, waitUntil, type GatewayRow } from "./helpers/gateway.ts";
import { enginesUnderTest, TEST_ENGINES, type TestEngine } from "./helpers/engines.ts";
import { PYTHON, readWithPython } from "./helpers/python.ts";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "trajflow-control-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});

const TOKEN = `tf-control-${randomBytes(18).toString("base64url")}`;

async function gateway(
  extra: string[],
  env: Record<string, string> = {},
  engine: TestEngine = TEST_ENGINES.llamacpp,
) {
  const out = join(scratch, `rows-${randomBytes(4).toString("hex")}`);
  const port = await freePort();
  const args = ["gateway", ...engine.gatewayArgs(), "--out", out, ...extra];
  if (!extra.includes("--listen")) args.push("--listen", `127.0.0.1:${port}`);
  const gw = startCli(args, { TRAJFLOW_LOG_LEVEL: "info", ...env });
  const listen = extra.includes("--listen") ? extra[extra.indexOf("--listen") + 1]! : `127.0.0.1:${port}`;
  const base = `http://${listen.replace("0.0.0.0", "127.0.0.1")}`;
  await waitUntil(async () => (await fetch(`${base}/readyz`)).ok, 60_000);
  return { gw, out, base };
}

async function stop(gw: RunningCli): Promise<void> {
  gw.child.kill("SIGTERM");
  await gw.exited;
}

const chat = (url: string, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "m", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
  });

/** Every control route, as [method, path, body]. */
const CONTROL: Array<[string, string, unknown]> = [
  ["POST", "/sessions", {}],
  ["GET", "/sessions/p1", undefined],
  ["POST", "/sessions/p1/reward", { value: 100 }],
  ["POST", "/sessions/p1/end", {}],
  ["DELETE", "/sessions/p1", undefined],
  ["POST", "/weights", { version: 99 }],
];

const call = (
  base: string,
  [method, path, body]: [string, string, unknown],
  headers: Record<string, string>,
) =>
  fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

/** Every file under `dir`, recursively. */
function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

for (const engine of enginesUnderTest())
  it(`with a control token, the agent cannot drive the training signal; the trainer can, and its rows are right (${engine.name})`, async () => {
    const { gw, out, base } = await gateway([], { TRAJFLOW_CONTROL_TOKEN: TOKEN }, engine);
    try {
      // Model calls: by path, and by a session key the trainer got for the agent.
      assert.equal((await chat(`${base}/sessions/p1/v1/chat/completions`)).status, 200);
      const started = await call(base, CONTROL[0]!, { authorization: `Bearer ${TOKEN}` });
      assert.equal(started.status, 201);
      const key = ((await started.json()) as { api_key: string }).api_key;
      assert.equal(
        (await chat(`${base}/v1/chat/completions`, { authorization: `Bearer ${key}` })).status,
        200,
      );

      // Every control route refuses the agent: no credentials, its session key, a wrong token.
      for (const route of CONTROL) {
        const none = await call(base, route, {});
        assert.equal(none.status, 401, `${route[0]} ${route[1]}`);
        const body = (await none.json()) as { error: { type: string; code: string; message: string } };
        assert.equal(body.error.code, "control_token_required");
        assert.ok(!body.error.message.includes(TOKEN));
        for (const wrong of [key, `${TOKEN}x`, TOKEN.slice(0, -1)]) {
          const refused = await call(base, route, { authorization: `Bearer ${wrong}` });
          assert.equal(
            refused.status,
            403,
            `${route[0]} ${route[1]} with ${wrong === key ? "the session key" : "a wrong token"}`,
          );
          assert.equal(
            ((await refused.json()) as { error: { code: string } }).error.code,
            "control_token_wrong",
          );
        }
        // An Anthropic client's x-api-key is a session key, never the control token.
        assert.equal((await call(base, route, { "x-api-key": TOKEN })).status, 401);
      }
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /trajflow_gateway_control_refused_total\{route="reward"\} 5\b/);
      assert.match(metrics, /trajflow_gateway_control_refused_total\{route="weights"\} 5\b/);

      // The trainer, through the Python package, with the token from its environment.
      const trainer = [
        "from trajflow.control import GatewayControl",
        `gw = GatewayControl("${base}")`,
        "gw.set_weights(7)",
        's = gw.start_session(session_id="t1", uid="task-1", sample_index=0, group_size=1)',
        "import urllib.request, json",
        'req = urllib.request.Request(s["base_url"].replace("/sessions/t1/v1", "") + "/v1/chat/completions", method="POST",',
        '  data=json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode(),',
        '  headers={"content-type": "application/json", "authorization": "Bearer " + s["api_key"]})',
        "urllib.request.urlopen(req).read()",
        'gw.reward("t1", 0.75)',
        'gw.end("t1")',
        'print(json.dumps(gw.session("t1")))',
      ].join("\n");
      const { stdout } = await run(PYTHON, ["-c", trainer], {
        env: { ...process.env, TRAJFLOW_CONTROL_TOKEN: TOKEN },
      });
      const described = JSON.parse(stdout) as { state: string; calls: number };
      assert.deepEqual([described.state, described.calls], ["ended", 1]);
      const rows = await waitUntil(async () => {
        const view = await readWithPython<{ rows: GatewayRow[] }>("read_output.py", out);
        return view.rows.some((r) => r.session_id === "t1");
      }, 60_000).then(async () => (await readWithPython<{ rows: GatewayRow[] }>("read_output.py", out)).rows);
      const t1 = rows.filter((r) => r.session_id === "t1");
      assert.equal(t1.length, 1);
      assert.equal(t1[0]!.reward, 0.75);
      assert.equal(t1[0]!.weight_version_min, 7);
      assert.equal(t1[0]!.status, "ok");
      // Nothing the agent tried reached the events: no reward of 100, no version 99, p1 never ended.
      const events = files(join(out, "_events")).flatMap((f) => readFileSync(f, "utf8").split("\n"));
      assert.equal(
        events.filter((l) => l.includes('"value":100') || l.includes('"weight_version":99')).length,
        0,
      );
    } finally {
      await stop(gw);
    }
    // The token is in no file the gateway wrote, nor in its log.
    for (const f of files(out)) assert.ok(!readFileSync(f).includes(TOKEN), f);
    assert.ok(!gw.stderr().includes(TOKEN));
  });

it("with a control listener, the agents' listener has no control routes; the control listener has no model routes", async () => {
  const control = await freePort();
  const { gw, base } = await gateway(["--control-listen", `127.0.0.1:${control}`], {
    TRAJFLOW_CONTROL_TOKEN: TOKEN,
  });
  const controlBase = `http://127.0.0.1:${control}`;
  try {
    for (const route of CONTROL) {
      const res = await call(base, route, { authorization: `Bearer ${TOKEN}` });
      assert.equal(res.status, 404, `${route[0]} ${route[1]} on the agents' listener`);
    }
    assert.equal((await chat(`${base}/sessions/c1/v1/chat/completions`)).status, 200);
    assert.equal((await chat(`${controlBase}/sessions/c1/v1/chat/completions`)).status, 404);
    // A session the trainer starts on the control listener gets the agents' base URL, not the control one.
    const started = await call(controlBase, CONTROL[0]!, { authorization: `Bearer ${TOKEN}` });
    const { base_url: baseUrl } = (await started.json()) as { base_url: string };
    assert.equal(new URL(baseUrl).port, new URL(base).port);
    assert.equal((await chat(`${baseUrl}/chat/completions`)).status, 200);
    const reward = await call(controlBase, ["POST", "/sessions/c1/reward", { value: 1 }], {
      authorization: `Bearer ${TOKEN}`,
    });
    assert.equal(reward.status, 200);
    assert.equal((await call(controlBase, ["POST", "/weights", { version: 3 }], {})).status, 401);
    assert.equal((await fetch(`${controlBase}/readyz`)).status, 200);
  } finally {
    await stop(gw);
  }
});

it("warns at start when it listens beyond loopback with neither a token nor a control listener", async () => {
  const port = await freePort();
  const open = await gateway(["--listen", `0.0.0.0:${port}`]);
  await stop(open.gw);
  assert.match(open.gw.stderr(), /beyond loopback with neither a control token nor a control listener/);
  const port2 = await freePort();
  const closed = await gateway(["--listen", `0.0.0.0:${port2}`], { TRAJFLOW_CONTROL_TOKEN: TOKEN });
  await stop(closed.gw);
  assert.doesNotMatch(closed.gw.stderr(), /beyond loopback/);
});

/**
 * A raw HTTP request's status line. The server may answer and close before the whole request is written
 * (a refused 10 MB header): what it answered counts, the reset that follows does not.
 */
function rawStatus(port: number, head: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(head, () => {}));
    let text = "";
    const done = () => resolve(text.split("\r\n")[0]!);
    socket.on("data", (d) => {
      text += d.toString("latin1");
      if (text.includes("\r\n")) done();
    });
    socket.on("close", done);
    socket.on("error", () => {});
  });
}

it("refuses hostile credentials cleanly and serves on: a 10 MB Authorization header, a NUL byte in a token", async () => {
  const { gw, base } = await gateway([], { TRAJFLOW_CONTROL_TOKEN: TOKEN });
  const port = Number(new URL(base).port);
  try {
    const huge = await rawStatus(
      port,
      `POST /weights HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${"a".repeat(10 << 20)}\r\n` +
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    // Node's header limit (16 KiB) answers it before the gateway sees it.
    assert.match(huge, /^HTTP\/1\.1 431/);
    const nul = await rawStatus(
      port,
      `POST /weights HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN.slice(0, 8)}\u0000${TOKEN.slice(8)}\r\n` +
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert.match(nul, /^HTTP\/1\.1 400/);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    assert.equal((await chat(`${base}/sessions/h1/v1/chat/completions`)).status, 200);
  } finally {
    await stop(gw);
  }
});
