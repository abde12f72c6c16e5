/**
 * `npm test`: prepares the independent readers (pyarrow, DuckDB from PyPI) and runs every test with
 * node's test runner: unit tests beside the code (src/**) and integration tests (test/**).
 */
import { spawnSync } from "node:child_process";

const root = new URL("..", import.meta.url).pathname;
const setup = spawnSync("bash", ["scripts/python-env.sh"], { cwd: root, stdio: "inherit" });
if (setup.status !== 0) {
  console.error("test setup failed: could not prepare the Python readers (scripts/python-env.sh)");
  process.exit(setup.status ?? 1);
}
const patterns = process.argv.slice(2);
const result = spawnSync(
  process.execPath,
  [
    "--test",
    "--test-concurrency=2",
    ...(patterns.length > 0 ? patterns : ["src/**/*.test.ts", "test/**/*.test.ts"]),
  ],
  { cwd: root, stdio: "inherit" },
);
process.exit(result.status ?? 1);
