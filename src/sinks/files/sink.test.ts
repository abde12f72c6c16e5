import { strict as assert } from "node:assert";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { pino } from "pino";
import { Metrics } from "../../core/metrics.ts";
import { resetThreads, threadUsages } from "../../core/thread-usage.ts";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";
import { fileSinkConfigSchema, type FileSinkConfigInput } from "./config.ts";
import { DEFAULT_S3_OPTIONS } from "../shared/s3-options.ts";
import { EncoderPool } from "./pool.ts";
import { readRows } from "./read.ts";
import { FileSink, rowBytes } from "./sink.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-sink-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
let n = 0;
const silent = pino({ level: "silent" });

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "0"]);
  return child.pid!;
}

function session(id: string) {
  return assemble(new SessionScript("u", id).call("c1", [1, 2], [3]).end().lines()).rows;
}

function sink(config: Partial<FileSinkConfigInput> = {}) {
  const path = join(scratch, `s${n++}`);
  const metrics = new Metrics();
  return {
    path,
    metrics,
    sink: new FileSink(fileSinkConfigSchema.parse({ path, ...config }), { metrics, logger: silent }),
  };
}

describe("file sink", () => {
  it("drops a file its fence refuses: nothing lands, nothing is acknowledged, no temporary is left", async () => {
    const path = join(scratch, `s${n++}`);
    const metrics = new Metrics();
    let owner = true;
    const s = new FileSink(fileSinkConfigSchema.parse({ path }), {
      metrics,
      logger: silent,
      fence: () => Promise.resolve(owner),
    });
    await s.open();
    const acked: string[] = [];
    await s.write(session("a"), () => acked.push("a"));
    await s.cut();
    await s.drain();
    owner = false; // expelled from the group meanwhile
    await s.write(session("b"), () => acked.push("b"));
    await s.close();
    assert.deepEqual(acked, ["a"]);
    assert.deepEqual(readdirSync(path), ["part-00000.parquet"]);
    assert.equal(metrics.get("files_fenced"), 1);
  });

  it("puts a write in the partition of its newest row, never splitting it", async () => {
    const { path, sink: s } = sink({ partition_by: "policy" });
    await s.open();
    const rows = session("a");
    const older = { ...rows[0]!, key: "u_old_0", session_id: "old", weight_version_max: 1 };
    const newer = { ...rows[0]!, key: "u_new_0", session_id: "new", weight_version_max: 2 };
    await s.write([older, newer]);
    await s.close();
    assert.deepEqual(readdirSync(path), ["policy=2"]);
    assert.deepEqual(
      (await readRows(join(path, "policy=2", "part-00000.parquet"))).map((r) => r.key),
      ["u_old_0", "u_new_0"],
    );
  });

  it("acknowledges rows only once their file is in place, and keeps a write's rows together", async () => {
    const { path, sink: s } = sink({ max_rows_per_file: 2 });
    await s.open();
    const acked: string[] = [];
    await s.write(session("a"), () => acked.push("a"));
    await s.write([...session("b"), ...session("c")], () => {
      assert.ok(existsSync(join(path, "part-00000.parquet")), "acknowledged before the file existed");
      acked.push("bc");
    });
    await s.write(session("d"), () => acked.push("d"));
    assert.equal(acked.includes("d"), false, "d is still buffered");
    await s.close();
    assert.deepEqual(acked, ["a", "bc", "d"]);
    assert.deepEqual(readdirSync(path).sort(), ["part-00000.parquet", "part-00001.parquet"]);
    assert.deepEqual(
      (await readRows(join(path, "part-00000.parquet"))).map((r) => r.session_id),
      ["a", "b", "c"],
    );
  });

  it("cuts a file by bytes when rows are heavy (routed experts), long before the token limit", async () => {
    const { path, sink: s } = sink({ max_bytes_per_file: 64 * 1024 });
    await s.open();
    const heavy = (id: string) =>
      session(id).map((r) => ({ ...r, routed_experts: new Uint8Array(40 * 1024).fill(3) }));
    const cuts: string[] = [];
    await s.write(heavy("a"), () => cuts.push("a"));
    await s.write(heavy("b"), () => cuts.push("b")); // 80 KiB: cut
    await s.write(heavy("c"), () => cuts.push("c"));
    await s.close();
    assert.deepEqual(cuts, ["a", "b", "c"]);
    assert.deepEqual(readdirSync(path).sort(), ["part-00000.parquet", "part-00001.parquet"]);
    const first = await readRows(join(path, "part-00000.parquet"));
    assert.deepEqual(
      first.map((r) => [r.session_id, r.routed_experts?.length]),
      [
        ["a", 40 * 1024],
        ["b", 40 * 1024],
      ],
    );
  });

  it("says what it holds: rows buffered for the next file, then being written, then nothing", async () => {
    const { sink: s } = sink();
    await s.open();
    const rows = session("a");
    const bytes = rows.reduce((sum, r) => sum + rowBytes(r), 0);
    assert.ok(bytes > 0);
    await s.write(rows);
    assert.deepEqual(s.held, { buffered: bytes, writing: 0 });
    await s.cut();
    assert.deepEqual(s.held, { buffered: 0, writing: bytes });
    await s.drain();
    assert.deepEqual(s.held, { buffered: 0, writing: 0 });
    await s.close();
  });

  it("acknowledges an empty write after the files before it, without an empty file", async () => {
    const { path, sink: s } = sink();
    await s.open();
    const acked: string[] = [];
    await s.write(session("a"), () => acked.push("a"));
    await s.cut();
    await s.write([], () => acked.push("empty"));
    await s.close();
    assert.deepEqual(acked, ["a", "empty"]);
    assert.deepEqual(readdirSync(path), ["part-00000.parquet"]);
  });

  it("cuts a file by age on its own timer when the stream goes quiet", async () => {
    const { path, sink: s } = sink({ max_file_age_ms: 100 });
    await s.open();
    await s.write(session("a"));
    const deadline = Date.now() + 5_000;
    while (!existsSync(join(path, "part-00000.parquet")) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    assert.ok(existsSync(join(path, "part-00000.parquet")), "no file after the age limit");
    await s.close();
  });

  it("fails instead of overwriting a different file of the same name", async () => {
    const { path, sink: s } = sink();
    await s.open();
    await s.write(session("a"));
    mkdirSync(path, { recursive: true });
    writeFileSync(join(path, "part-00000.parquet"), "someone else's bytes");
    await assert.rejects(s.close(), { code: "FILE_CONFLICT" });
    assert.deepEqual(readdirSync(path), ["part-00000.parquet"], "no temporary file is left behind");
  });

  it("removes temporary files left by a crash when it opens", async () => {
    const { path, sink: s, metrics } = sink({ partition_by: "policy" });
    mkdirSync(join(path, "policy=3"), { recursive: true });
    // Written by a process of this host that no longer runs.
    writeFileSync(
      join(path, "policy=3", `.trajflow-tmp-abc~${deadPid()}~${hostname()}~part-00000.parquet`),
      "half",
    );
    await s.open();
    await s.close();
    assert.equal(metrics.get("stale_temp_files_removed"), 1);
    assert.deepEqual(readdirSync(join(path, "policy=3")), []);
  });
});

describe("stale temporaries", () => {
  // Regression: a consumer starting a partition deleted another group member's file in flight.
  // Regression (also: replay deleted every .trajflow-tmp-* under --out, other live writers' included).
  it("leaves young temporaries of live writers and other hosts alone", async () => {
    const { removeStaleTemps } = await import("../shared/atomic-file.ts");
    const { utimesSync } = await import("node:fs");
    const dir = join(scratch, "shared");
    mkdirSync(dir, { recursive: true });
    const live = `.trajflow-tmp-aa~${process.ppid}~${hostname()}~a.parquet`;
    const elsewhere = `.trajflow-tmp-bb~${deadPid()}~another-host~b.parquet`;
    const crashed = `.trajflow-tmp-cc~${deadPid()}~${hostname()}~c.parquet`;
    const old = ".trajflow-tmp-dd-d.parquet";
    for (const name of [live, elsewhere, crashed, old]) writeFileSync(join(dir, name), "bytes");
    const hourAgo = new Date(Date.now() - 3_600_000);
    utimesSync(join(dir, old), hourAgo, hourAgo);
    assert.equal(await removeStaleTemps(dir), 2);
    assert.deepEqual(readdirSync(dir).sort(), [live, elsewhere].sort());
  });
});

describe("encoder pool", () => {
  it("replaces a worker whose WASM memory grew past the limit and keeps committing", async () => {
    const options = {
      format: "parquet",
      engine: "parquet-wasm",
      compression: "zstd",
      rowGroupSize: 16,
      metadata: {},
    } as const;
    const dir = join(scratch, "pool");
    resetThreads();
    const pool = new EncoderPool(1, { warmUp: options, location: dir, s3: DEFAULT_S3_OPTIONS }, 1);
    let cpu = 0;
    for (const id of ["a", "b", "c"]) {
      const done = await pool.run(`${id}.parquet`, session(id), options);
      assert.equal(done.outcome, "written");
      cpu += done.usage.cpu_seconds;
    }
    assert.equal(pool.recycled, 3);
    // The slot's figures are those of its three workers together.
    const [usage] = threadUsages();
    assert.equal(usage?.thread, "encoder 1");
    assert.ok(Math.abs(usage.cpu_seconds - cpu) < 1e-9, `${usage.cpu_seconds} vs ${cpu}`);
    await pool.close();
    assert.deepEqual(
      (await readRows(join(dir, "c.parquet"))).map((r) => r.session_id),
      ["c"],
    );
  });
});
