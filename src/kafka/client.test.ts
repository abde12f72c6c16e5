import { strict as assert } from "node:assert";
import { it } from "node:test";
import kafkajs from "kafkajs";
import { isBrokerAway, kafkajsLogLevel, setupError, tlsOptions } from "./client.ts";

// kafkajs's typings leave out these constructors' arguments; at run time they take (message, { cause }).
const errors = kafkajs as unknown as Record<
  string,
  new (message: string, options?: { cause: Error }) => Error
>;

it("tells a broker that is away from a setup that is wrong, through the error's causes", () => {
  // Regression: a restarting single broker made kafkajs crash the consumer with this non-retriable error,
  // and the pipeline ended instead of waiting for the broker.
  assert.equal(
    isBrokerAway(new errors.KafkaJSGroupCoordinatorNotFound!("Failed to find group coordinator")),
    true,
  );
  const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9092"), { code: "ECONNREFUSED" });
  assert.equal(isBrokerAway(new errors.KafkaJSNonRetriableError!("gave up", { cause: refused })), true);
  assert.equal(isBrokerAway(new errors.KafkaJSConnectionError!("Connection error")), true);

  assert.equal(
    isBrokerAway(new errors.KafkaJSSASLAuthenticationError!("SASL PLAIN authentication failed")),
    false,
  );
  assert.equal(isBrokerAway(new errors.KafkaJSNonRetriableError!("Topic authorization failed")), false);
  assert.equal(isBrokerAway(new Error("a sink could not write")), false);
});

it("reads ssl ca_file, cert_file and key_file into ca, cert and key, listing files it cannot read", async () => {
  const { mkdtempSync, writeFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(join(tmpdir(), "trajflow-tls-"));
  writeFileSync(join(dir, "ca.pem"), "CA");
  const options = tlsOptions({ ca_file: join(dir, "ca.pem"), servername: "kafka" }) as Record<
    string,
    unknown
  >;
  assert.deepEqual(options, { ca: Buffer.from("CA"), servername: "kafka" });
  assert.equal(tlsOptions(true), true);
  assert.throws(
    () => tlsOptions({ cert_file: join(dir, "missing.pem"), key_file: join(dir, "missing.key") }),
    (err: Error & { code?: string }) =>
      err.code === "CONFIG_INVALID" &&
      /connection\.ssl\.cert_file: cannot read .*missing\.pem/.test(err.message) &&
      /connection\.ssl\.key_file: cannot read .*missing\.key/.test(err.message),
  );
});

it("gives refused credentials and unverified certificates their own codes, never the password", () => {
  const connection = {
    brokers: ["127.0.0.1:9093"],
    client_id: "t",
    connection_timeout_ms: 1_000,
    client: "kafkajs" as const,
    sasl: { mechanism: "scram-sha-512" as const, username: "alice", password: "s3cret" },
  };
  const sasl = new errors.KafkaJSSASLAuthenticationError!(
    "SASL SCRAM SHA512 authentication failed: invalid credentials",
  );
  const auth = setupError(
    new errors.KafkaJSNonRetriableError!("gave up", { cause: sasl }),
    connection,
  ) as Error & {
    code?: string;
  };
  assert.equal(auth.code, "KAFKA_AUTH_FAILED");
  assert.match(auth.message, /user "alice" \(SASL scram-sha-512\).*invalid credentials/);
  assert.ok(!auth.message.includes("s3cret"));
  const cert = Object.assign(new Error("self-signed certificate"), { code: "SELF_SIGNED_CERT_IN_CHAIN" });
  assert.equal((setupError(cert, connection) as { code?: string }).code, "KAFKA_TLS_FAILED");
  const away = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
  assert.equal(setupError(away, connection), away);
});

// Regression: producing to a fresh topic and starting against a loading broker logged ERROR lines (with
// stacks) for responses kafkajs retries by design.
it("logs the errors kafkajs retries as warnings, and keeps the ones it cannot as errors", () => {
  const { ERROR, WARN, INFO, DEBUG } = kafkajs.logLevel;
  const response = "Response Metadata(key: 3, version: 6)";
  assert.equal(
    kafkajsLogLevel(ERROR, response, { error: "This server does not host this topic-partition" }),
    WARN,
  );
  const loading = "The coordinator is loading and hence can't process requests for this group";
  assert.equal(kafkajsLogLevel(ERROR, `Crash: KafkaJSProtocolError: ${loading}`, {}), WARN);
  assert.equal(kafkajsLogLevel(ERROR, "Restarting the consumer in 200ms", {}), WARN);
  assert.equal(
    kafkajsLogLevel(WARN, "Limiting retries for the idempotent producer may invalidate EoS guarantees", {}),
    DEBUG,
  );

  assert.equal(kafkajsLogLevel(ERROR, response, { error: "Topic authorization failed" }), ERROR);
  assert.equal(kafkajsLogLevel(ERROR, "Crash: KafkaJSProtocolError: Topic authorization failed", {}), ERROR);
  assert.equal(kafkajsLogLevel(ERROR, "Connection error: connect ECONNREFUSED 127.0.0.1:9092", {}), ERROR);
  assert.equal(kafkajsLogLevel(WARN, "something kafkajs warns about", {}), WARN);
  assert.equal(kafkajsLogLevel(INFO, "Consumer has joined the group", {}), INFO);
});
