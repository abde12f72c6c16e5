/**
 * A consumer given less memory than the backlog it finds (issue 39): it reads the whole topic to the end
 * within the limit, every row exactly once and the same as a replay of the events. Where the test may make
 * a memory cgroup (root on cgroup v1 or v2) the consumer runs inside one, with no flag: trajflow reads the
 * cgroup's limit itself, and the kernel would kill it past the limit. Elsewhere it runs with
 * `--max-memory` and its own peak RSS is checked against the limit. The same with the consumer on
 * librdkafka (its prefetch queue bounded by the sized fetch; skipped where its addon is not built).
 */
import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  rmdirSync,
  statSync,
} from "node:fs";
import { writeSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { linearSession } from "../bench/workloads.ts";
import { rdkafkaSkip } from "./helpers/required.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { runCli } from "./helpers/cli.ts";
import { brokers, freshName } from "./helpers/kafka.ts";
import { plain } from "./helpers/sessions.ts";

const MiB = 2 ** 20;
const LIMIT = 384 * MiB;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-memory-"));
const cgroups: string[] = [];
after(() => {
  rmSync(scratch, { recursive: true, force: true });
  for (const dir of cgroups) rmdirSync(dir);
});
let broker = "";
before(() => {
  broker = brokers();
});

/** Sessions with long prompts sent whole: ~420 MB of events in ~3,500 sessions. */
function writeBacklog(file: string): { bytes: number; sessions: number } {
  const shape = { initialPrompt: 4_096, turns: 4, outputTokens: 256, observationTokens: 128 };
  const fd = openSync(file, "w");
  const sessions = 3_500;
  for (let s = 0; s < sessions; s++) {
    const lines = linearSession(shape, "full", { uid: `task-${s % 500}`, sessionId: `r${s}`, seed: s + 1 });
    writeSync(fd, `${lines.map((e) => JSON.stringify(e)).join("\n")}\n`);
  }
  closeSync(fd);
  return { bytes: statSync(file).size, sessions };
}

/** A memory cgroup of `bytes` under this process's own, or null where none can be made. */
function makeCgroup(bytes: number): { dir: string; v2: boolean } | null {
  const lines = readFileSync("/proc/self/cgroup", "utf8").split("\n");
  const v1 = lines.find((l) => l.split(":")[1]?.split(",").includes("memory"));
  const candidates: Array<{ dir: string; v2: boolean }> = [];
  if (v1 !== undefined) candidates.push({ dir: `/sys/fs/cgroup/memory${v1.split(":")[2]}`, v2: false });
  const v2 = lines.find((l) => l.startsWith("0::"));
  if (v2 !== undefined) candidates.push({ dir: `/sys/fs/cgroup${v2.slice(3)}`, v2: true });
  for (const parent of candidates) {
    const dir = join(parent.dir, freshName("trajflow-test"));
    try {
      mkdirSync(dir);
    } catch {
      continue;
    }
    try {
      if (parent.v2) writeFileSync(join(dir, "memory.max"), String(bytes));
      else {
        writeFileSync(join(dir, "memory.limit_in_bytes"), String(bytes));
        // No swap to hide in: past the limit the kernel kills.
        try {
          writeFileSync(join(dir, "memory.memsw.limit_in_bytes"), String(bytes));
        } catch {
          // Swap accounting off: nothing to limit.
        }
      }
      return { dir, v2: parent.v2 };
    } catch {
      rmdirSync(dir);
    }
  }
  return null;
}

/** Each row's key → a digest of its columns, read one file at a time; duplicates fail. */
async function rowDigests(dir: string): Promise<Map<string, string>> {
  const digests = new Map<string, string>();
  for (const file of await listDataFiles(dir))
    for (const row of await readRows(file)) {
      const p = plain(row) as Record<string, unknown>;
      assert.equal(digests.has(p.key as string), false, `row ${String(p.key)} twice`);
      digests.set(p.key as string, createHash("sha256").update(JSON.stringify(p)).digest("hex"));
    }
  return digests;
}

/** Runs the CLI, in `cgroupDir` when given (the process moves itself in before Node starts). */
function runIn(cgroupDir: string | null, args: string[]) {
  const launcher =
    cgroupDir === null ? [] : ["sh", "-c", `echo $$ > ${join(cgroupDir, "cgroup.procs")} && exec "$@"`, "sh"];
  const env = { TRAJFLOW_LOG_LEVEL: "info", KAFKA_BROKERS: broker };
  return runCli(args, env, ["--max-semi-space-size=4"], launcher);
}

/** The backlog, written and produced once for every client's run. */
let backlog: Promise<{ input: string; bytes: number; sessions: number; topic: string }> | null = null;
function producedBacklog() {
  backlog ??= (async () => {
    const input = join(scratch, "backlog.jsonl");
    const { bytes, sessions } = writeBacklog(input);
    const topic = freshName("memory");
    assert.equal((await runCli(["produce", input, "--topic", topic], { KAFKA_BROKERS: broker })).code, 0);
    return { input, bytes, sessions, topic };
  })();
  return backlog;
}

async function backlogWithinLimit(t: { diagnostic(message: string): void }, client: string) {
  const { input, bytes, sessions, topic } = await producedBacklog();
  assert.ok(bytes > LIMIT, `the backlog (${bytes} bytes) must be larger than the limit`);
  const made = makeCgroup(LIMIT);
  const cgroup = made?.dir ?? null;
  if (cgroup !== null) cgroups.push(cgroup);
  const out = join(scratch, `out-${client}`);
  const args = [
    ...["consume", "--topic", topic, "--group", freshName("memory-group"), "--out", out],
    ...(client === "kafkajs" ? [] : ["--kafka-client", client]),
  ];
  const run = await runIn(cgroup, [
    ...args,
    ...(cgroup === null ? ["--max-memory", String(LIMIT / MiB)] : []),
    "--until-idle-ms",
    "2000",
    "--json",
  ]);
  assert.equal(run.code, 0, `consume failed (${String(run.code)}):\n${run.stderr.slice(-3_000)}`);
  const report = JSON.parse(run.stdout) as { peak_rss_bytes: number; events: number };
  // It sized itself for the limit, from the cgroup when it ran in one.
  const sized = /"from":"(cgroup|--max-memory)".*Defaults sized for the memory limit/.exec(run.stderr);
  assert.notEqual(sized, null, run.stderr.slice(0, 2_000));
  assert.equal(sized![1], cgroup === null ? "--max-memory" : "cgroup");
  t.diagnostic(
    `backlog ${Math.round(bytes / MiB)} MiB, peak RSS ${Math.round(report.peak_rss_bytes / MiB)} MiB`,
  );
  assert.ok(report.peak_rss_bytes < LIMIT, `peak RSS ${report.peak_rss_bytes} over the limit ${LIMIT}`);
  if (made !== null && !made.v2) {
    const oom = readFileSync(join(made.dir, "memory.oom_control"), "utf8");
    assert.match(oom, /oom_kill 0|^(?![\s\S]*oom_kill)/, oom);
  }

  const reference = join(scratch, `replayed-${client}`);
  assert.equal((await runCli(["replay", input, "--out", reference])).code, 0);
  const [got, want] = [await rowDigests(out), await rowDigests(reference)];
  assert.equal(want.size, sessions);
  assert.equal(got.size, want.size);
  for (const [key, digest] of want) assert.equal(got.get(key), digest, `row ${key}`);
}

it("reads a backlog larger than its memory limit to the end: within the limit, exact rows", (t) =>
  backlogWithinLimit(t, "kafkajs"));

it(
  "reads a backlog larger than its memory limit to the end on librdkafka: within the limit, exact rows",
  { skip: rdkafkaSkip() },
  (t) => backlogWithinLimit(t, "librdkafka"),
);
