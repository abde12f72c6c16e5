import { consumeTopicProcess } from "./bench/kafka-harness.ts";
import { rmSync } from "node:fs";
const [topic, n, ...variants] = process.argv.slice(2);
for (let r = 0; r < 3; r++)
  for (const v of variants) {
    const out = `/tmp/ab-${v}`;
    rmSync(out, { recursive: true, force: true });
    if (v === "default") delete process.env.NODE_OPTIONS; else process.env.NODE_OPTIONS = `--max-semi-space-size=${v}`;
    const run = await consumeTopicProcess("127.0.0.1:39092", topic!, out, Number(n));
    console.log(v, "steady", run.seconds.toFixed(2), "first file", run.firstFileSeconds.toFixed(2), "rss", run.peakRss >> 20, "cpu", run.cpuSeconds.toFixed(2));
  }
