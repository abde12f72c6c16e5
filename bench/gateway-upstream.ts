/**
 * The instant upstream of `npm run bench:gateway` in its own process: test/helpers/instant-engine.ts (vLLM's
 * shapes, streaming too, answers at once), so what the bench measures through a proxy is the proxy's cost.
 * Prints its base URL as one line and serves until SIGTERM.
 */
import { startInstantEngine } from "../test/helpers/instant-engine.ts";

// The engine keeps every body it received (for the tests' assertions): a long run would grow without end.
const engine = await startInstantEngine();
const keep = setInterval(() => (engine.bodies.length = 0), 1_000);
process.stdout.write(`${engine.url}\n`);
process.once("SIGTERM", () => {
  clearInterval(keep);
  void engine.close().then(() => process.exit(0));
});
