#!/usr/bin/env node
// Runs the TypeScript sources directly: Node 24 strips types natively (the project's `node` devDependency
// supplies Node 24 to npm scripts).
const { main } = await import("../src/cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
