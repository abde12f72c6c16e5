#!/usr/bin/env -S node --max-semi-space-size=4
// Runs the TypeScript sources directly: Node 24 strips types natively (the project's `node` devDependency
// supplies Node 24 to npm scripts).
//
// --max-semi-space-size=4: V8 lets the young generation grow to 64 MiB per semi-space on a large host, and
// JSON parsing fills it with short-lived garbage: capped at 4 MiB, peak RSS is 40-100 MiB lower at the same
// throughput (docs/operations.md, BENCHMARKS.md). The flag must be given when Node starts (V8 sizes the heap
// then): here for `npx trajflow` and `./bin/trajflow.js`, in package.json's scripts, and by hand as
// `node --max-semi-space-size=4 bin/trajflow.js` when Node is called directly.
//
// The Node version is checked first, in syntax any Node parses (no static import, no top-level await, no
// `?.`, no numeric separators): an older Node would otherwise fail on the first .ts import with
// ERR_UNKNOWN_FILE_EXTENSION and a stack trace.
var major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  process.stderr.write(
    "trajflow needs Node.js 24 or later (this is " +
      process.versions.node +
      "): run it through npm (npm start, npm run trajflow -- …) or install Node 24\n",
  );
  process.exit(2);
}

// Node's compile cache (module.enableCompileCache, in the OS's temporary directory unless
// NODE_COMPILE_CACHE names one): the type-stripped and compiled sources are kept between runs, so a start
// loads ~430 modules in ~40% of the time (stripping the types alone was a third of it; BENCHMARKS.md).
// Passed on to the worker threads through the environment. Where the cache cannot be written, nothing
// changes but the time.
import("node:module")
  .then(function (mod) {
    if (typeof mod.enableCompileCache !== "function") return;
    var cache = mod.enableCompileCache(process.env.NODE_COMPILE_CACHE);
    if (cache && cache.directory && process.env.NODE_COMPILE_CACHE === undefined)
      process.env.NODE_COMPILE_CACHE = cache.directory;
  })
  .catch(function () {})
  .then(function () {
    return import("../src/cli/main.ts");
  })
  .then(async ({ main }) => {
    const { setTimeout } = await import("node:timers");
    process.exitCode = await main(process.argv.slice(2));
    // Everything is settled when main returns. A handle a library left open (kafkajs has kept reconnect
    // timers after a broker restart) must not keep the process alive: say what it was, and exit.
    setTimeout(() => {
      const open = process.getActiveResourcesInfo().filter((r) => r !== "TTYWrap");
      process.stderr.write(`trajflow: exiting with handles still open: ${open.join(", ")}\n`);
      process.exit();
    }, 5000).unref();
  });
