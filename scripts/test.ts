/**
 * `npm test`: prepares the independent readers (pyarrow, DuckDB, confluent-kafka from PyPI) and the
 * trajflow Python package, builds the librdkafka client's addon (scripts/librdkafka.sh), starts a Kafka
 * broker (unless KAFKA_BROKERS names one), an S3 server (unless TRAJFLOW_TEST_S3 names one), a llama.cpp
 * server (unless LLAMA_SERVER names one) and a vLLM server on the CPU (unless VLLM_SERVER names one, or
 * TRAJFLOW_TEST_ENGINES leaves vLLM out of a local run), and runs every test:
 * node's test runner for unit tests beside the code (src/**) and integration tests (test/**), then pytest
 * for the Python package (python/tests, against real trajflow output), and the trainer adapters' suites in
 * verl's and AReaL's own environments (scripts/trainers.sh). Patterns select node tests only.
 */
import { spawnSync } from "node:child_process";

const root = new URL("..", import.meta.url).pathname;
const setup = spawnSync("bash", ["scripts/python-env.sh"], { cwd: root, stdio: "inherit" });
if (setup.status !== 0) {
  console.error("test setup failed: could not prepare the Python readers (scripts/python-env.sh)");
  process.exit(setup.status ?? 1);
}
// The librdkafka client's addon (scripts/librdkafka.sh: built once, then restored from .cache): where it
// cannot be built here, its tests are skipped with the reason, the rest runs.
const rdkafka = spawnSync("bash", ["scripts/librdkafka.sh", "build"], { cwd: root, stdio: "inherit" });
if (rdkafka.status !== 0)
  console.error("test setup: the librdkafka addon could not be built; its tests will be skipped");
/**
 * A server the tests need: the one `variable` names, or one `script start` starts (stopped again at the
 * end); the variable is then set from the script's output (`take` picks what it needs). True when started.
 */
function server(variable: string, script: string, what: string, take: (stdout: string) => string): boolean {
  if (process.env[variable] !== undefined && process.env[variable] !== "") return false;
  const started = spawnSync("bash", [script, "start"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (started.status !== 0) {
    console.error(`test setup failed: could not start ${what} (${script} start)`);
    process.exit(started.status ?? 1);
  }
  process.env[variable] = take(started.stdout.trim());
  return true;
}
// A real Kafka broker (its bootstrap address, the script's last line), and a real S3 API server
// (s3proxy: endpoint, access key id and secret, one per line).
const startedKafka = server("KAFKA_BROKERS", "scripts/kafka.sh", "the Kafka broker", (out) =>
  out.split("\n").pop()!,
);
const startedS3 = server("TRAJFLOW_TEST_S3", "scripts/s3.sh", "the S3 server", (out) => out);
// A real llama-server (built once from the llama-cpp-python sdist, serving the tiny generated model): its
// base URL, the script's last line.
const startedLlama = server("LLAMA_SERVER", "scripts/llama.sh", "the llama.cpp server", (out) =>
  out.split("\n").pop()!,
);
// A real vLLM (vLLM's CPU build from PyPI, installed once into .cache/vllm, serving the tiny checkpoint
// scripts/tiny_llm.py writes): its base URL, the script's last line. It starts in about a minute.
const engines = process.env.TRAJFLOW_TEST_ENGINES;
const wantVllm = engines === undefined || engines.trim() === "" || engines.split(",").includes("vllm");
const startedVllm =
  wantVllm && server("VLLM_SERVER", "scripts/vllm.sh", "the vLLM server", (out) => out.split("\n").pop()!);
const patterns = process.argv.slice(2);
const result = spawnSync(
  process.execPath,
  [
    "--test",
    "--test-concurrency=2",
    // A deadline per test: a stuck consumer or server fails its test instead of hanging the run (the
    // longest test, the fleet's SIGKILL test, takes ~150 s idle and ~300 s on a loaded host).
    "--test-timeout=900000",
    ...(patterns.length > 0 ? patterns : ["src/**/*.test.ts", "test/**/*.test.ts", "examples/**/*.test.ts"]),
  ],
  { cwd: root, stdio: "inherit" },
);
// The Python package's tests run on a full run (no patterns); they call the CLI with this very Node.
const python =
  patterns.length > 0
    ? { status: 0 }
    : spawnSync(".cache/python/bin/python", ["-m", "pytest", "-q", "-rfEs", "python/tests"], {
        cwd: root,
        stdio: "inherit",
        env: { ...process.env, TRAJFLOW_NODE: process.execPath },
      });
// The trainer adapters' suites (python/tests/trainers), each in its trainer's own environment
// (scripts/trainers.sh: verl 0.9.1 with TransferQueue and Ray, AReaL 1.0.4; installed once, ~2.5 min each).
const trainers =
  patterns.length > 0
    ? []
    : ["verl", "areal"].map((name) => {
        const env = spawnSync("bash", ["scripts/trainers.sh", name], {
          cwd: root,
          encoding: "utf8",
          stdio: ["ignore", "pipe", "inherit"],
        });
        if (env.status !== 0) {
          console.error(
            `test setup failed: could not prepare ${name}'s environment (scripts/trainers.sh ${name})`,
          );
          return env.status ?? 1;
        }
        const run = spawnSync(
          env.stdout.trim().split("\n").pop()!,
          ["-m", "pytest", "-q", "-rfEs", `python/tests/trainers/test_${name}.py`],
          {
            cwd: root,
            stdio: "inherit",
            env: { ...process.env, TRAJFLOW_NODE: process.execPath, TRAJFLOW_TRAINER_TESTS: "1" },
          },
        );
        return run.status ?? 1;
      });
if (startedKafka) spawnSync("bash", ["scripts/kafka.sh", "stop"], { cwd: root, stdio: "inherit" });
if (startedS3) spawnSync("bash", ["scripts/s3.sh", "stop"], { cwd: root, stdio: "inherit" });
if (startedLlama) spawnSync("bash", ["scripts/llama.sh", "stop"], { cwd: root, stdio: "inherit" });
if (startedVllm) spawnSync("bash", ["scripts/vllm.sh", "stop"], { cwd: root, stdio: "inherit" });
const failed = [result.status ?? 1, python.status ?? 1, ...trainers].find((status) => status !== 0);
process.exit(failed ?? 0);
