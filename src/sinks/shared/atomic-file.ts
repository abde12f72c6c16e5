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
import { linkSync, promises as fs } from "node:fs";
import { basename, dirname, join } from "node:path";
import { TrajflowError } from "../../core/errors.ts";

export type CommitOutcome = "written" | "already-committed";

/** Prefix of in-progress files: readers (pyarrow, DuckDB, Spark) skip names starting with `.` or `_`. */
export const TEMP_PREFIX = ".trajflow-tmp-";

async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Writes `bytes` under a temporary name beside `path` that readers ignore, and makes it durable. */
export async function writeTemp(path: string, bytes: Uint8Array): Promise<string> {
  const dir = dirname(path);
  await fs.mkdir(dir, { recursive: true });
  const temp = join(dir, `${TEMP_PREFIX}${randomBytes(6).toString("hex")}-${basename(path)}`);
  const handle = await fs.open(temp, "wx");
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return temp;
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
export async function commitFile(path: string, bytes: Uint8Array): Promise<CommitOutcome> {
  return publishTemp(await writeTemp(path, bytes), path);
}

/**
 * Removes temporary files a crashed writer left behind, in `dir` and its subdirectories (partitions).
 * With `olderThanMs`, only temporaries not modified for that long: when several live processes share a
 * directory (a consumer group), a younger one may be another writer's file in flight. Returns how many
 * were removed.
 */
export async function removeStaleTemps(dir: string, olderThanMs?: number): Promise<number> {
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
        if (olderThanMs !== undefined && Date.now() - (await fs.stat(path)).mtimeMs < olderThanMs) continue;
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
