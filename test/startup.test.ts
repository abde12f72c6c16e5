/**
 * What a command loads before it starts: every module is start-up time of each run (the shared harness
 * times `trajflow consume` from process start to its last file). What only some runs need (the S3
 * client, onnxruntime, the gateway) is imported when they run, and no built-in is imported in a way that
 * loads more of Node than it uses.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { it } from "node:test";

const CONSUME = new URL("../src/cli/commands/consume.ts", import.meta.url).href;

/** Imports `url` in a fresh Node; the node_modules packages and Node internals it loaded. */
function loadedBy(url: string): { packages: string[]; internals: string[] } {
  const script = `
    import { registerHooks } from "node:module";
    const packages = new Set();
    registerHooks({ resolve(spec, ctx, next) {
      const r = next(spec, ctx);
      const m = /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(r.url);
      if (m) packages.add(m[1]);
      return r;
    } });
    await import(${JSON.stringify(url)});
    console.log(JSON.stringify({ packages: [...packages], internals: process.moduleLoadList }));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as { packages: string[]; internals: string[] };
}

it("loads the consume command without undici, the S3 client, onnxruntime or the Arrow library", () => {
  const { packages, internals } = loadedBy(CONSUME);
  // An ES import of node:http reads its lazy WebSocket exports, which load undici: ~30 ms a start.
  assert.deepEqual(
    internals.filter((m) => /undici/.test(m)),
    [],
  );
  for (const lazy of ["@aws-sdk/client-s3", "onnxruntime-node", "apache-arrow", "parquet-wasm"])
    assert.ok(!packages.includes(lazy), `${lazy} loaded at start: ${packages.join(", ")}`);
  // What it does need, so the hook above is known to see packages at all.
  assert.ok(packages.includes("kafkajs"), packages.join(", "));
});
