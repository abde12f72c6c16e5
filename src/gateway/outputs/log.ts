/**
 * The local event log: JSONL segments (`events-00000001.jsonl`, …) in one directory, appended with group
 * commit: the events of every call that arrives while a write is in progress go out together in the
 * next write and one fdatasync, so throughput grows with concurrency while each call still waits for its
 * own bytes to be on disk. The embedded pipeline follows these files (the jsonl source's follow mode), and
 * `trajflow replay` reads them as they are.
 *
 * A crash can leave a segment's last line cut short (a write that did not finish): at open, the tail
 * after the last newline is cut off, since no caller was told that line was durable.
 */
import { promises as fs } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { TrajflowError } from "../../core/errors.ts";
import { SEGMENT_PATTERN, segmentName } from "../../core/event-log-files.ts";
import { fsyncDir } from "../../core/fsync-dir.ts";
import type { Logger } from "../../core/logger.ts";
import type { EventOutput, EventRecord } from "./output.ts";

/** The log's segments in order: their numbers and paths. */
export async function listSegments(dir: string): Promise<Array<{ n: number; path: string }>> {
  const names = await fs.readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return [] as string[];
    throw err;
  });
  return names
    .flatMap((name) => {
      const m = SEGMENT_PATTERN.exec(name);
      return m === null ? [] : [{ n: Number(m[1]), path: join(dir, name) }];
    })
    .sort((a, b) => a.n - b.n);
}

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class EventLog implements EventOutput {
  readonly where: string;
  private readonly dir: string;
  private readonly segmentBytes: number;
  private readonly logger: Logger;
  private handle: FileHandle | null = null;
  private segment = 0;
  private size = 0;
  private queued: string[] = [];
  private waiters: Waiter[] = [];
  private writing = false;
  private failed: unknown = null;

  private constructor(dir: string, segmentBytes: number, logger: Logger) {
    this.dir = dir;
    this.where = `event log ${dir}`;
    this.segmentBytes = segmentBytes;
    this.logger = logger;
  }

  /** Opens the log (creating the directory), continuing its last segment. */
  static async open(dir: string, segmentBytes: number, logger: Logger): Promise<EventLog> {
    const log = new EventLog(dir, segmentBytes, logger);
    try {
      await fs.mkdir(dir, { recursive: true });
      const segments = await listSegments(dir);
      const last = segments.at(-1);
      await log.openSegment(last?.n ?? 1, last !== undefined);
    } catch (err) {
      throw new TrajflowError(
        "EVENT_OUTPUT_FAILED",
        `cannot open the event log in ${dir}: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    return log;
  }

  private async openSegment(n: number, existing: boolean): Promise<void> {
    const path = join(this.dir, segmentName(n));
    const handle = await fs.open(path, existing ? "r+" : "a+");
    let size = (await handle.stat()).size;
    if (existing && size > 0) size = await cutTornTail(handle, size, this.logger, path);
    this.handle = handle;
    this.segment = n;
    this.size = size;
    if (!existing) await fsyncDir(this.dir);
  }

  accepting(): boolean {
    return this.failed === null;
  }

  append(records: EventRecord[]): Promise<undefined> {
    if (this.failed !== null) return Promise.reject(this.failed);
    for (const r of records) this.queued.push(r.value);
    return new Promise<undefined>((resolve, reject) => {
      this.waiters.push({ resolve: () => resolve(undefined), reject });
      if (!this.writing) void this.flush();
    });
  }

  async broadcast(value: string): Promise<void> {
    await this.append([{ key: "", value }]);
  }

  /** Writes everything queued, one write and one fdatasync per round, until nothing is queued. */
  private async flush(): Promise<void> {
    this.writing = true;
    while (this.queued.length > 0) {
      const lines = this.queued;
      const waiters = this.waiters;
      this.queued = [];
      this.waiters = [];
      try {
        const bytes = Buffer.from(lines.join("\n") + "\n", "utf8");
        if (this.size > 0 && this.size + bytes.length > this.segmentBytes) await this.rotate();
        await this.handle!.write(bytes, 0, bytes.length, this.size);
        await this.handle!.datasync();
        this.size += bytes.length;
        for (const w of waiters) w.resolve();
      } catch (err) {
        this.failed = new TrajflowError(
          "EVENT_OUTPUT_FAILED",
          `cannot write the event log in ${this.dir}: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
        this.logger.error({ err }, "The event log cannot be written; calls are refused from now on.");
        for (const w of [...waiters, ...this.waiters]) w.reject(this.failed);
        this.waiters = [];
        this.queued = [];
      }
    }
    this.writing = false;
  }

  private async rotate(): Promise<void> {
    await this.handle!.close();
    await this.openSegment(this.segment + 1, false);
  }

  async *restore(): AsyncIterable<Uint8Array> {
    // The whole log: a log is read from its start by the pipeline too, and segments of ended sessions
    // are cheap to skip. (A retention of old segments is the operator's, docs/gateway.md.)
    for (const { path } of await listSegments(this.dir)) {
      const data = await fs.readFile(path);
      let start = 0;
      for (let i = 0; i < data.length; i++) {
        if (data[i] !== 0x0a) continue;
        if (i > start) yield data.subarray(start, i);
        start = i + 1;
      }
    }
  }

  async close(): Promise<void> {
    while (this.writing) await new Promise((r) => setImmediate(r));
    await this.handle?.close();
    this.handle = null;
  }
}

/** Cuts a segment after its last newline (a line a crash left half-written was never acknowledged). */
async function cutTornTail(handle: FileHandle, size: number, logger: Logger, path: string): Promise<number> {
  const window = Math.min(size, 1 << 20);
  let end = size;
  // Read backwards in windows until a newline is found (or the file's start).
  while (end > 0) {
    const from = Math.max(0, end - window);
    const buf = Buffer.alloc(end - from);
    await handle.read(buf, 0, buf.length, from);
    const nl = buf.lastIndexOf(0x0a);
    if (nl >= 0) {
      const keep = from + nl + 1;
      if (keep < size) {
        logger.warn(
          { path, bytes: size - keep },
          "The event log ended in a partly written line (a crash); it was cut off.",
        );
        await handle.truncate(keep);
        await handle.datasync();
      }
      return keep;
    }
    end = from;
  }
  logger.warn({ path, bytes: size }, "The event log's segment held no whole line (a crash); it was emptied.");
  await handle.truncate(0);
  await handle.datasync();
  return 0;
}
