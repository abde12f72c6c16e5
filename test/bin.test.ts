/**
 * bin/trajflow.js under a Node too old for the sources: one sentence saying what to do, exit 2, before
 * any .ts is imported (an old Node fails on the first one with ERR_UNKNOWN_FILE_EXTENSION and a stack).
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { it } from "node:test";

const BIN = new URL("../bin/trajflow.js", import.meta.url).pathname;
const SAYS =
  /^trajflow needs Node\.js 24 or later \(this is (\d+)\.[\d.]+\): run it through npm \(npm start, npm run trajflow -- …\) or install Node 24\n$/;

it("says which Node it needs, and exits 2, when Node is older than 24", () => {
  // This Node, reporting itself as 20.11.1 before the script runs.
  const fake = `data:text/javascript,Object.defineProperty(process,"versions",{value:{...process.versions,node:"20.11.1"}})`;
  const r = spawnSync(process.execPath, ["--import", fake, BIN, "--help"], { encoding: "utf8" });
  assert.equal(r.status, 2);
  assert.match(r.stderr, SAYS);
  assert.equal(r.stdout, "");
});

it("parses under the system's own older Node, if it has one", (t) => {
  const version = spawnSync("node", ["--version"], { encoding: "utf8", env: { PATH: "/usr/bin:/bin" } });
  const major = Number(/^v(\d+)/.exec(version.stdout ?? "")?.[1]);
  if (version.status !== 0 || !(major < 24)) return t.skip("no Node older than 24 in /usr/bin or /bin");
  const r = spawnSync("node", [BIN, "--help"], { encoding: "utf8", env: { PATH: "/usr/bin:/bin" } });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, SAYS);
  assert.equal(SAYS.exec(r.stderr)?.[1], String(major));
});
