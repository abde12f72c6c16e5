/**
 * Replay to S3 against replay to a local directory (issue 23 item 4): the same JSONL input, JSONL →
 * Parquet, once into a directory and once into a bucket of the S3 server scripts/s3.sh runs (s3proxy on
 * this machine, its filesystem backend: the server's CPU and disk share the host with trajflow, as a
 * local MinIO would). Runs alternate; the best of three each is reported, with the ratio.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
import { pino } from "pino";
import { replay } from "../src/cli/presets.ts";
import { record, tokensOfLines } from "./harness.ts";
import { linearSession, type SessionShape } from "./workloads.ts";

const SHAPE: SessionShape = { initialPrompt: 4096, turns: 8, outputTokens: 1024, observationTokens: 512 };
/**
 * Two lengths of the same workload: S3's fixed costs (loading the SDK, the start-up checks' round trips,
 * the last file's upload, which nothing overlaps) weigh on the short one.
 */
const SIZES = [
  { sessions: 384, runs: 3 },
  { sessions: 1152, runs: 2 },
];
const silent = pino({ level: "silent" });

/** The S3 server of scripts/s3.sh (started if it is not running); null when it cannot run here. */
function server(): { endpoint: string; key: string; secret: string } | null {
  try {
    const root = new URL("..", import.meta.url).pathname;
    const lines = execFileSync("bash", ["scripts/s3.sh", "start"], { cwd: root, encoding: "utf8" })
      .trim()
      .split("\n");
    const [endpoint, key, secret] = lines.slice(-3) as [string, string, string];
    return { endpoint, key, secret };
  } catch {
    return null;
  }
}

export async function run(): Promise<void> {
  const s3 = server();
  if (s3 === null) {
    console.log("s3: skipped (scripts/s3.sh could not start s3proxy: Java 17 and Maven are needed)");
    return;
  }
  Object.assign(process.env, {
    AWS_ENDPOINT_URL_S3: s3.endpoint,
    AWS_ACCESS_KEY_ID: s3.key,
    AWS_SECRET_ACCESS_KEY: s3.secret,
    AWS_REGION: "us-east-1",
  });
  const client = new S3Client({
    endpoint: s3.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: s3.key, secretAccessKey: s3.secret },
  });
  try {
    for (const size of SIZES) await compare(client, size.sessions, size.runs);
  } finally {
    client.destroy();
  }
}

async function compare(client: S3Client, sessions: number, runs: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "trajflow-bench-s3-"));
  try {
    const input = join(dir, "sessions.jsonl");
    const lines: string[] = [];
    for (let s = 0; s < sessions; s++) {
      for (const e of linearSession(SHAPE, "delta", { uid: `u${s}`, sessionId: "s", seed: s + 1 }))
        lines.push(JSON.stringify(e));
    }
    writeFileSync(input, `${lines.join("\n")}\n`);
    const tokens = tokensOfLines(lines);
    lines.length = 0;
    const inBytes = statSync(input).size;
    const best = { local: Infinity, s3: Infinity };
    let written = 0;
    for (let i = 0; i < runs; i++) {
      const local = join(dir, `out-${i}`);
      const a = await replay({ inputs: [input], out: local, logger: silent });
      best.local = Math.min(best.local, a.seconds);
      written = a.metrics.total("bytes_written");
      rmSync(local, { recursive: true, force: true });
      const bucket = `bench-${randomBytes(4).toString("hex")}`;
      await client.send(new CreateBucketCommand({ Bucket: bucket }));
      const b = await replay({ inputs: [input], out: `s3://${bucket}/rows`, logger: silent });
      best.s3 = Math.min(best.s3, b.seconds);
    }
    const note = (seconds: number) =>
      `${(inBytes / 2 ** 20).toFixed(0)} MiB of JSONL → ${(written / 2 ** 20).toFixed(0)} MiB of Parquet, ${(tokens / seconds / 1e6).toFixed(2)} M tokens/s, ${(seconds * 1000).toFixed(0)} ms`;
    record({
      bench: "s3",
      case: `replay → local directory, ${sessions} sessions`,
      value: inBytes / best.local / 2 ** 20,
      unit: "MiB/s",
      note: note(best.local),
    });
    record({
      bench: "s3",
      case: `replay → s3:// (s3proxy on this host), ${sessions} sessions`,
      value: inBytes / best.s3 / 2 ** 20,
      unit: "MiB/s",
      note: `${note(best.s3)}; ${(best.local / best.s3).toFixed(2)}x the local rate`,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await run();
