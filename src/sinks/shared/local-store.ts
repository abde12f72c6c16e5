/** The local-directory store: atomic-file.ts's durable temporaries, linked into place. */
import { promises as fs } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { assertWritableDir, commitFile, publishTemp, removeStaleTemps, writeTemp } from "./atomic-file.ts";
import { DATA_FILE, hidden, type ByteRange, type CommitOutcome, type Staged, type Store } from "./store.ts";

/** Counts the bytes of chunks as they pass. */
function counted(chunks: Iterable<Uint8Array>): { chunks: Iterable<Uint8Array>; bytes: () => number } {
  let bytes = 0;
  return {
    chunks: (function* () {
      for (const c of chunks) {
        bytes += c.length;
        yield c;
      }
    })(),
    bytes: () => bytes,
  };
}

export class LocalStore implements Store {
  readonly location: string;

  constructor(path: string) {
    this.location = path;
  }

  url(name: string): string {
    return join(this.location, name);
  }

  assertWritable(what: string, create = true): Promise<void> {
    return assertWritableDir(this.location, what, create);
  }

  removeStale(olderThanMs?: number): Promise<number> {
    return removeStaleTemps(this.location, olderThanMs);
  }

  async write(
    name: string,
    chunks: Iterable<Uint8Array>,
  ): Promise<{ outcome: CommitOutcome; bytes: number }> {
    const c = counted(chunks);
    const outcome = await commitFile(this.url(name), c.chunks);
    return { outcome, bytes: c.bytes() };
  }

  async stage(name: string, chunks: Iterable<Uint8Array>): Promise<Staged> {
    const c = counted(chunks);
    const temp = await writeTemp(this.url(name), c.chunks);
    return { name, temp, bytes: c.bytes() };
  }

  publish(staged: Staged): Promise<CommitOutcome> {
    return publishTemp(staged.temp!, this.url(staged.name));
  }

  async discard(staged: Staged): Promise<void> {
    await fs.unlink(staged.temp!).catch(() => {});
  }

  async list(startsWith = ""): Promise<string[]> {
    const out: string[] = [];
    const walk = async (dir: string, depth: number) => {
      let entries;
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
        throw err;
      }
      for (const e of entries) {
        if (hidden(e.name)) continue;
        const path = join(dir, e.name);
        if (e.isFile() && DATA_FILE.test(e.name) && e.name.startsWith(startsWith)) {
          out.push(relative(this.location, path).split(sep).join("/"));
        } else if (e.isDirectory() && e.name.includes("=") && depth < 8) await walk(path, depth + 1);
      }
    };
    await walk(this.location, 0);
    return out.sort();
  }

  read(name: string): Promise<Uint8Array> {
    return fs.readFile(this.url(name));
  }

  async readRange(name: string, range: ByteRange): Promise<{ bytes: Uint8Array; size: number }> {
    const file = await fs.open(this.url(name), "r");
    try {
      const { size } = await file.stat();
      const offset = "last" in range ? Math.max(0, size - range.last) : Math.min(range.offset, size);
      const length = "last" in range ? size - offset : Math.min(range.length, size - offset);
      const bytes = Buffer.alloc(length);
      const { bytesRead } = await file.read(bytes, 0, length, offset);
      return { bytes: bytes.subarray(0, bytesRead), size };
    } finally {
      await file.close();
    }
  }

  async remove(name: string): Promise<void> {
    const path = this.url(name);
    await fs.unlink(path).catch(() => {});
    // A partition directory left empty goes too (rmdir fails on a non-empty one).
    if (dirname(path) !== this.location) await fs.rmdir(dirname(path)).catch(() => {});
  }

  abortPending(): Promise<number> {
    return Promise.resolve(0);
  }

  close(): void {}
}
