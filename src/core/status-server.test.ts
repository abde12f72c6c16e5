import { strict as assert } from "node:assert";
import { it } from "node:test";
import { pino } from "pino";
import { watchdogShouldRestart } from "../sources/kafka/source.ts";
import { Metrics } from "./metrics.ts";
import { parseListenAddress, prometheusText, StatusServer, type Gauge } from "./status-server.ts";

it("exposes counters with their label names and help, and gauges, in the Prometheus text format", () => {
  const m = new Metrics();
  m.inc("rows_written", "", 12);
  m.inc("dead_letters", "MALFORMED_JSON", 2);
  m.inc("dead_letters", 'we"ird');
  m.observe("session_durable_seconds", 0.2, [0.1, 1]);
  m.observe("session_durable_seconds", 0.5, [0.1, 1]);
  m.observe("session_durable_seconds", 3, [0.1, 1]);
  const gauges = new Map<string, Gauge>([
    ["open_sessions", () => 3],
    ["consumer_lag", () => [{ labels: { partition: "0" }, value: 7 }]],
  ]);
  assert.equal(
    prometheusText(m, gauges),
    [
      "# HELP trajflow_dead_letters_total Rejected events and failed rewards, by error code.",
      "# TYPE trajflow_dead_letters_total counter",
      'trajflow_dead_letters_total{code="MALFORMED_JSON"} 2',
      'trajflow_dead_letters_total{code="we\\"ird"} 1',
      "# HELP trajflow_rows_written_total Rows in committed files.",
      "# TYPE trajflow_rows_written_total counter",
      "trajflow_rows_written_total 12",
      "# HELP trajflow_session_durable_seconds From a session's end (finalized) to its rows durable in a renamed file.",
      "# TYPE trajflow_session_durable_seconds histogram",
      'trajflow_session_durable_seconds_bucket{le="0.1"} 0',
      'trajflow_session_durable_seconds_bucket{le="1"} 2',
      'trajflow_session_durable_seconds_bucket{le="+Inf"} 3',
      "trajflow_session_durable_seconds_sum 3.7",
      "trajflow_session_durable_seconds_count 3",
      "# HELP trajflow_open_sessions Sessions being assembled.",
      "# TYPE trajflow_open_sessions gauge",
      "trajflow_open_sessions 3",
      "# HELP trajflow_consumer_lag Messages behind the partition's high watermark.",
      "# TYPE trajflow_consumer_lag gauge",
      'trajflow_consumer_lag{partition="0"} 7',
      "",
    ].join("\n"),
  );
});

it("gives exact quantiles of the latest observations", () => {
  const m = new Metrics();
  assert.equal(m.quantile("session_durable_seconds", 0.5), null);
  for (let i = 100; i >= 1; i--) m.observe("session_durable_seconds", i / 1000);
  assert.equal(m.quantile("session_durable_seconds", 0.5), 0.05);
  assert.equal(m.quantile("session_durable_seconds", 0.99), 0.099);
  assert.equal(m.quantile("session_durable_seconds", 1), 0.1);
  // Only the latest 10,000 observations count: older ones drop out of the quantiles, not the buckets.
  for (let i = 0; i < 10_000; i++) m.observe("session_durable_seconds", 7);
  assert.equal(m.quantile("session_durable_seconds", 0.01), 7);
  assert.equal(m.histogramEntries()[0]![1].count, 10_100);
});

it("answers /healthz always and /readyz only while ready", async () => {
  const server = new StatusServer(new Metrics(), pino({ level: "silent" }));
  const address = await server.listen("127.0.0.1:0");
  try {
    assert.equal((await fetch(`http://${address}/healthz`)).status, 200);
    assert.equal((await fetch(`http://${address}/readyz`)).status, 503);
    server.ready = true;
    assert.equal((await fetch(`http://${address}/readyz`)).status, 200);
    assert.equal(await (await fetch(`http://${address}/metrics`)).text(), "");
    assert.equal((await fetch(`http://${address}/nope`)).status, 404);
  } finally {
    await server.close();
  }
});

it("the watchdog restarts only a consumer that receives nothing while messages wait", () => {
  assert.equal(watchdogShouldRestart({ behind: 10, stalledMs: 120_000, watchdogMs: 120_000 }), true);
  assert.equal(
    watchdogShouldRestart({ behind: 0, stalledMs: 600_000, watchdogMs: 120_000 }),
    false,
    "idle topic",
  );
  assert.equal(
    watchdogShouldRestart({ behind: 10, stalledMs: 5_000, watchdogMs: 120_000 }),
    false,
    "slow, not stalled",
  );
  assert.equal(watchdogShouldRestart({ behind: 10, stalledMs: 600_000, watchdogMs: 0 }), false, "turned off");
});

// Regression: ":9464" bound every interface, "[::1]:9464" failed, and a bad port exited 1, not 2.
it("listens on the loopback interface unless a host is given, and takes IPv6 in brackets", () => {
  assert.deepEqual(parseListenAddress(":9464"), { host: "127.0.0.1", port: 9464 });
  assert.deepEqual(parseListenAddress("9464"), { host: "127.0.0.1", port: 9464 });
  assert.deepEqual(parseListenAddress("0.0.0.0:0"), { host: "0.0.0.0", port: 0 });
  assert.deepEqual(parseListenAddress("[::1]:9464"), { host: "::1", port: 9464 });
  for (const bad of ["localhost:99999", "localhost:http", "::1:9464", ""])
    assert.throws(() => parseListenAddress(bad), { code: "CONFIG_INVALID" });
});

it("serves on [::1] and reports the address in brackets", async () => {
  const server = new StatusServer(new Metrics(), pino({ level: "silent" }));
  const address = await server.listen("[::1]:0");
  try {
    assert.match(address, /^\[::1\]:\d+$/);
    assert.equal((await fetch(`http://${address}/healthz`)).status, 200);
  } finally {
    await server.close();
  }
});
