/**
 * The file commit protocol (Kafka Connect's HDFS sink, Flink's FileSink): write under a name readers
 * ignore (leading `.`), fsync, then link it into place without overwriting, fsync the directory, and
 * remove the temporary name. A reader listing the directory never sees a partial file.
 *
 * Names are deterministic, so replaying the same input produces the same names: an existing file with
 * identical bytes means the work was already committed; different bytes means a second writer of the same
 * range, which fails rather than overwrite.
 */
import { randomBytes } from "node:crypto";
import { constants as fsConstants, linkSync, promises as fs } from "node:fs";
import { hostname } from "node:os";
import { basename, dirname, join } from "node:path";
import { TrajflowError } from "../../core/errors.ts";
import { fsyncDir } from "../../core/fsync-dir.ts";
import { killPoint } from "../../core/kill-points.ts";

export type CommitOutcome = "written" | "already-committed";

/** Prefix of in-progress files: readers (pyarrow, DuckDB, Spark) skip names starting with `.` or `_`. */
export const TEMP_PREFIX = ".trajflow-tmp-";
/** Who writes a temporary (pid and host), so a later start can tell a crashed writer's from a live one's. */
const WRITER = `${process.pid}~${hostname()}`;
const TEMP_WRITER = /^\.trajflow-tmp-[0-9a-f]+~(\d+)~([^~]+)~/;
/** Temporaries of writers that cannot be identified as crashed are removed only after this long. */
export const STALE_TEMP_AGE_MS = 10 * 60_000;

/** True when `name` is a temporary of a process of this host that no longer runs. */
function writtenByCrashedProcess(name: string): boolean {
  const m = TEMP_WRITER.exec(name);
  if (m === null || m[2] !== hostname()) return false;
  const pid = Number(m[1]);
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ESRCH";
  }
}

/**
 * Writes `bytes` (one buffer, or chunks as an encoder makes them: the whole file is never in memory at
 * once) under a temporary name beside `path` that readers ignore, and makes it durable.
 */
export async function writeTemp(path: string, bytes: Uint8Array | Iterable<Uint8Array>): Promise<string> {
  const dir = dirname(path);
  await fs.mkdir(dir, { recursive: true });
  const temp = join(dir, `${TEMP_PREFIX}${randomBytes(6).toString("hex")}~${WRITER}~${basename(path)}`);
  const handle = await fs.open(temp, "wx");
  try {
    // Chunks go out together, a few at a time: an encoder makes two per column page (~80 for a small
    // Parquet file), and a write each was 2.4 ms of the encoder thread per file (issue 46).
    let batch: Uint8Array[] = [];
    let batchBytes = 0;
    for (const chunk of bytes instanceof Uint8Array ? [bytes] : bytes) {
      batch.push(chunk);
      batchBytes += chunk.length;
      if (batchBytes >= WRITE_BATCH_BYTES || batch.length >= WRITE_BATCH_CHUNKS) {
        await writeAll(handle, batch, batchBytes);
        batch = [];
        batchBytes = 0;
      }
    }
    if (batch.length > 0) await writeAll(handle, batch, batchBytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  killPoint("file.temp-durable");
  return temp;
}

/** Bytes and chunks gathered into one write of a file's chunks (a writev; IOV_MAX is 1,024 on Linux). */
const WRITE_BATCH_BYTES = 1 << 20;
const WRITE_BATCH_CHUNKS = 256;

/** Appends `chunks` (`total` bytes) at the handle's position; a short write is finished byte by byte. */
async function writeAll(handle: fs.FileHandle, chunks: Uint8Array[], total: number): Promise<void> {
  const { bytesWritten } = await handle.writev(chunks);
  if (bytesWritten === total) return;
  // Rare (a full disk answers with an error instead): the rest, from where the write stopped.
  const rest = Buffer.concat(chunks).subarray(bytesWritten);
  await handle.writeFile(rest);
}

/**
 * Links a durable temporary into place without overwriting. The link happens synchronously, before this
 * function returns its promise: a caller that checked it may still publish (a fence) links in the same
 * turn of the event loop, with nothing of this process in between.
 */
export function publishTemp(temp: string, path: string): Promise<CommitOutcome> {
  let exists = false;
  try {
    linkSync(temp, path);
    killPoint("file.linked");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") {
      return fs.unlink(temp).then(() => {
        throw new TrajflowError("SINK_WRITE_FAILED", `could not commit ${path}: ${(err as Error).message}`, {
          cause: err,
        });
      });
    }
    exists = true;
  }
  return (async () => {
    if (exists) {
      const same = Buffer.compare(await fs.readFile(temp), await fs.readFile(path)) === 0;
      await fs.unlink(temp);
      if (same) return "already-committed";
      throw new TrajflowError(
        "FILE_CONFLICT",
        `${path} already exists with different content; another writer produced the same range, or the ` +
          `output directory holds a different run: use a fresh --out directory or remove the old files`,
        { details: { path } },
      );
    }
    await fs.unlink(temp);
    await fsyncDir(dirname(path));
    return "written";
  })();
}

/** Atomically creates `path` with `bytes`. */
export async function commitFile(
  path: string,
  bytes: Uint8Array | Iterable<Uint8Array>,
): Promise<CommitOutcome> {
  return publishTemp(await writeTemp(path, bytes), path);
}

/**
 * Removes temporary files crashed writers left behind, in `dir` and its subdirectories (partitions): a
 * temporary of a process of this host that no longer runs at once, any other only once untouched for
 * `olderThanMs`. Several live processes may share a directory (a consumer group, two replays), so a
 * young temporary of a live writer, or of another host, is never taken for a crashed one's. Returns how
 * many were removed.
 */
export async function removeStaleTemps(dir: string, olderThanMs = STALE_TEMP_AGE_MS): Promise<number> {
  let entries;
  try {
    entries = await fs.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
  let removed = 0;
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) removed += await removeStaleTemps(path, olderThanMs);
    else if (entry.name.startsWith(TEMP_PREFIX)) {
      try {
        const crashed = writtenByCrashedProcess(entry.name);
        if (!crashed && Date.now() - (await fs.stat(path)).mtimeMs < olderThanMs) continue;
        await fs.unlink(path);
        removed++;
      } catch (err) {
        // Another writer renamed or removed it meanwhile.
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
  }
  return removed;
}

/**
 * Fails with SINK_WRITE_FAILED unless `dir` can be created and written (a probe file, removed again):
 * checked before any input is read, so an unwritable output is found first, not after the work.
 */
export async function assertWritableDir(dir: string, what: string, create = true): Promise<void> {
  const probe = join(dir, `${TEMP_PREFIX}probe-${randomBytes(6).toString("hex")}`);
  try {
    if (!create) {
      // Created only when something is written to it: find the nearest existing ancestor instead.
      let at = dir;
      for (;;) {
        const stat = await fs.stat(at).catch((err: NodeJS.ErrnoException) => {
          if (err.code === "ENOENT") return null;
          throw err;
        });
        if (stat !== null) {
          if (!stat.isDirectory()) throw new Error(`${at} is not a directory`);
          await fs.access(at, fsConstants.W_OK);
          return;
        }
        at = dirname(at);
      }
    }
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(probe, "");
    await fs.unlink(probe);
  } catch (err) {
    throw new TrajflowError(
      "SINK_WRITE_FAILED",
      `cannot write ${what} to ${dir}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
}
