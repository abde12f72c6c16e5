/**
 * `npm test`: prepares the independent readers (pyarrow, DuckDB, confluent-kafka from PyPI) and the
 * trajflow Python package, starts a Kafka broker (unless KAFKA_BROKERS names one) and an S3 server
 * (unless TRAJFLOW_TEST_S3 names one), and runs every test:
 * node's test runner for unit tests beside the code (src/**) and integration tests (test/**), then pytest
 * for the Python package (python/tests, against real trajflow output). Patterns select node tests only.
 */
import { spawnSync } from "node:child_process";

const root = new URL("..", import.meta.url).pathname;
const setup = spawnSync("bash", ["scripts/python-env.sh"], { cwd: root, stdio: "inherit" });
if (setup.status !== 0) {
  console.error("test setup failed: could not prepare the Python readers (scripts/python-env.sh)");
  process.exit(setup.status ?? 1);
}
// A real Kafka broker for the Kafka tests: the one in KAFKA_BROKERS, or one scripts/kafka.sh starts (and
// stops afterwards).
let startedKafka = false;
if (process.env.KAFKA_BROKERS === undefined || process.env.KAFKA_BROKERS === "") {
  const kafka = spawnSync("bash", ["scripts/kafka.sh", "start"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (kafka.status !== 0) {
    console.error("test setup failed: could not start the Kafka broker (scripts/kafka.sh start)");
    process.exit(kafka.status ?? 1);
  }
  process.env.KAFKA_BROKERS = kafka.stdout.trim().split("\n").pop();
  startedKafka = true;
}
// A real S3 API server (s3proxy) for the object-store tests: the one in TRAJFLOW_TEST_S3 (endpoint, access
// key id and secret, one per line), or one scripts/s3.sh starts (and stops afterwards).
let startedS3 = false;
if (process.env.TRAJFLOW_TEST_S3 === undefined || process.env.TRAJFLOW_TEST_S3 === "") {
  const s3 = spawnSync("bash", ["scripts/s3.sh", "start"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (s3.status !== 0) {
    console.error("test setup failed: could not start the S3 server (scripts/s3.sh start)");
    process.exit(s3.status ?? 1);
  }
  process.env.TRAJFLOW_TEST_S3 = s3.stdout.trim();
  startedS3 = true;
}
const patterns = process.argv.slice(2);
const result = spawnSync(
  process.execPath,
  [
    "--test",
    "--test-concurrency=2",
    ...(patterns.length > 0 ? patterns : ["src/**/*.test.ts", "test/**/*.test.ts", "examples/**/*.test.ts"]),
  ],
  { cwd: root, stdio: "inherit" },
);
// The Python package's tests run on a full run (no patterns); they call the CLI with this very Node.
const python =
  patterns.length > 0
    ? { status: 0 }
    : spawnSync(".cache/python/bin/python", ["-m", "pytest", "-q", "python/tests"], {
        cwd: root,
        stdio: "inherit",
        env: { ...process.env, TRAJFLOW_NODE: process.execPath },
      });
if (startedKafka) spawnSync("bash", ["scripts/kafka.sh", "stop"], { cwd: root, stdio: "inherit" });
if (startedS3) spawnSync("bash", ["scripts/s3.sh", "stop"], { cwd: root, stdio: "inherit" });
process.exit(result.status !== 0 ? (result.status ?? 1) : (python.status ?? 1));
