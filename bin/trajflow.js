#!/usr/bin/env node
// Runs the TypeScript sources directly: Node 24 strips types natively (the project's `node` devDependency
// supplies Node 24 to npm scripts).
import { setTimeout } from "node:timers";

const { main } = await import("../src/cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
// Everything is settled when main returns. A handle a library left open (kafkajs has kept reconnect
// timers after a broker restart) must not keep the process alive: say what it was, and exit.
setTimeout(() => {
  const open = process.getActiveResourcesInfo().filter((r) => r !== "TTYWrap");
  process.stderr.write(`trajflow: exiting with handles still open: ${open.join(", ")}\n`);
  process.exit();
}, 5_000).unref();
