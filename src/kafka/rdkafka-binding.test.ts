import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { kafkaConnectionSchema } from "./connection.ts";
import { connectionConfig, failureKind, fetchConfig, loadRdkafka, setupFailure } from "./rdkafka-binding.ts";

const dir = mkdtempSync(join(tmpdir(), "trajflow-rdkafka-binding-"));
after(() => rmSync(dir, { recursive: true, force: true }));

it("says how to build the addon when it does not load, with its own code", () => {
  assert.throws(
    () => loadRdkafka("@confluentinc/no-such-binding"),
    (err: Error & { code?: string }) =>
      err.code === "KAFKA_CLIENT_UNAVAILABLE" && /run scripts\/librdkafka\.sh build/.test(err.message),
  );
});

it("bounds fetches and librdkafka's prefetch queue by fetch_max_bytes, 256 KiB and 1 MiB without it", () => {
  assert.deepEqual(fetchConfig(undefined), {
    "max.partition.fetch.bytes": 262_144,
    "fetch.max.bytes": 1_048_576,
    "queued.max.messages.kbytes": 1_024,
    "fetch.queue.backoff.ms": 10,
  });
  // Below librdkafka's message.max.bytes, which it requires fetch.max.bytes to reach, both go down.
  assert.deepEqual(fetchConfig(65_536), {
    "max.partition.fetch.bytes": 65_536,
    "fetch.max.bytes": 65_536,
    "message.max.bytes": 65_536,
    "queued.max.messages.kbytes": 64,
    "fetch.queue.backoff.ms": 10,
  });
});

it("maps TLS and SASL settings to librdkafka's, reading the CA file, refusing what it cannot take", () => {
  writeFileSync(join(dir, "ca.pem"), "CA PEM");
  const connection = kafkaConnectionSchema.parse({
    brokers: ["a:9094", "b:9094"],
    ssl: { ca_file: join(dir, "ca.pem"), rejectUnauthorized: true },
    sasl: { mechanism: "scram-sha-512", username: "u", password: "p" },
    client: "librdkafka",
  });
  const config = connectionConfig(connection);
  assert.equal(config["bootstrap.servers"], "a:9094,b:9094");
  assert.equal(config["security.protocol"], "sasl_ssl");
  assert.equal(config["ssl.ca.pem"], "CA PEM");
  assert.equal(config["enable.ssl.certificate.verification"], true);
  assert.equal(config["sasl.mechanisms"], "SCRAM-SHA-512");
  assert.equal(
    connectionConfig({ ...connection, ssl: undefined, sasl: undefined })["security.protocol"],
    "plaintext",
  );
  assert.throws(
    () => connectionConfig({ ...connection, ssl: { ciphers: "x" } }),
    (err: Error & { code?: string }) =>
      err.code === "CONFIG_INVALID" && /ciphers not supported/.test(err.message),
  );
});

it("tells errors no retry fixes from those librdkafka retries, by code or by its words", () => {
  // Error events carry only librdkafka's text, lowercased by the binding; the log says more.
  assert.equal(failureKind({ message: "authentication failure", code: -1 }), "auth");
  assert.equal(
    failureKind({
      message:
        "[thrd:sasl_ssl://b:9094/bootstrap]: sasl_ssl://b:9094/bootstrap: SASL authentication error: " +
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
    }),
    "auth",
  );
  assert.equal(failureKind({ message: "SSL handshake failed: certificate verify failed" }), "tls");
  assert.equal(failureKind({ message: "x", code: 30 }), "fatal");
  assert.equal(failureKind({ message: "all broker connections are down", code: -1 }), null);
  assert.equal(failureKind({ message: "broker transport failure", code: -1 }), null);
  const connection = kafkaConnectionSchema.parse({
    brokers: ["b:9094"],
    sasl: { mechanism: "plain", username: "alice", password: "s3cret" },
  });
  const auth = setupFailure({ message: "authentication failure" }, connection)!;
  assert.equal(auth.code, "KAFKA_AUTH_FAILED");
  assert.match(auth.message, /user "alice" \(SASL plain\)/);
  assert.ok(!auth.message.includes("s3cret"));
  assert.equal(setupFailure({ message: "broker transport failure" }, connection), null);
});
