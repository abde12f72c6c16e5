/**
 * The `event_log` source: the gateway's local event log (segments `events-NNNNNNNN.jsonl`, what `trajflow
 * replay` reads) followed live, as the JSONL source reads a file but never at an end: at the end of the last
 * segment it waits for more lines or the next segment.
 *
 * It behaves like a Kafka partition: one lane whose offsets number the log's lines from 0 across segments
 * (the log is append-only, so a line's offset never changes), with an input range (`range`) so files are
 * named after the offsets they cover and a restart recovers from them, and a committed position (the first
 * offset of the oldest session not yet durable, with its byte position) kept in the log directory under
 * `.trajflow-offsets/<group>.json`. A restart reads on from there; sessions already in files are skipped.
 */
import { promises as fs, watch, type FSWatcher } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { TrajflowError } from "../../core/errors.ts";
import { SEGMENT_PATTERN, segmentName } from "../../core/event-log-files.ts";
import type { Holdings } from "../../core/held-memory.ts";
import type { RawRecord } from "../../core/records.ts";
import type { Lane, LiveSource, Source, SourceHandler } from "../../contract/components.ts";
import { Ledger } from "../../contract/ledger.ts";

export const eventLogSourceConfigSchema = z.strictObject({
  dir: z
    .string()
    .min(1)
    .describe("The event log's directory (the gateway's --event-log, by default <out>/_events)."),
  group: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/)
    .default("pipeline")
    .describe(
      "Name of the committed position kept in <dir>/.trajflow-offsets/: one per pipeline reading the log.",
    ),
  range: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/)
    .default("events")
    .describe("The input range files are named after (<range>-<first offset>-<last offset>)."),
  poll_ms: z
    .int()
    .positive()
    .default(250)
    .describe(
      "How often the end of the log is checked for new lines when no change is signalled (the directory is " +
        "watched, so new lines are read at once where the OS reports changes).",
    ),
  idle_advance_ms: z
    .int()
    .nonnegative()
    .default(1000)
    .describe("A caught-up log quiet for this long moves the clock with the wall clock (docs/assembly.md)."),
  decode_workers: z
    .int()
    .nonnegative()
    .default(0)
    .describe("Worker threads decoding events; 0 decodes inline."),
});
export type EventLogSourceConfig = z.output<typeof eventLogSourceConfigSchema>;

const NEWLINE = 0x0a;
const BATCH_RECORDS = 1024;
const READ_BYTES = 1 << 20;

interface Position {
  /** The offset (line number across segments) of the next line. */
  offset: number;
  segment: number;
  byte: number;
}

export class EventLogSource implements Source {
  error: Error | null = null;
  readonly ended: Promise<void> = new Promise(() => {});
  readonly live: LiveSource;
  private readonly config: EventLogSourceConfig;
  private readonly offsetsFile: string;
  private readonly checkpoints: Position[] = [];
  private lane: Lane | null = null;
  private stopping = false;
  private count = 0;
  private atEnd = false;
  private handedBytes = 0;
  private running: Promise<void> = Promise.resolve();
  private commitTimer: NodeJS.Timeout | null = null;
  private watcher: FSWatcher | null = null;
  private wake: (() => void) | null = null;

  constructor(config: EventLogSourceConfig) {
    this.config = config;
    this.offsetsFile = join(config.dir, ".trajflow-offsets", `${config.group}.json`);
    this.live = {
      idleAdvanceMs: config.idle_advance_ms,
      cutFilesWhenQuiet: true,
      caughtUp: (lanes) => Promise.resolve(new Set(this.atEnd ? lanes : [])),
      drained: () => Promise.resolve(this.atEnd),
    };
  }

  get delivered(): number {
    return this.count;
  }

  async start(handler: SourceHandler): Promise<void> {
    const from = await this.committed();
    const lane: Lane = {
      id: this.config.range,
      ledger: new Ledger(from.offset),
      live: true,
      fence: () => Promise.resolve(true),
      files: {
        range: this.config.range,
        describe: () => ({
          "trajflow.source": "event_log",
          "trajflow.inputs": JSON.stringify([this.config.dir]),
        }),
      },
    };
    this.lane = lane;
    this.checkpoints.push(from);
    await handler.assigned(lane);
    // The position is saved every second, as a consumer commits its offsets; a failed save is retried.
    this.commitTimer = setInterval(() => void this.commit().catch(() => {}), 1000);
    this.running = this.follow(handler, lane, from).catch((err: unknown) => {
      this.error =
        err instanceof TrajflowError
          ? err
          : new TrajflowError(
              "SOURCE_READ_FAILED",
              `cannot read the event log in ${this.config.dir}: ${(err as Error).message}`,
              {
                cause: err,
              },
            );
    });
  }

  /** Waits for a change in the log's directory, or `poll_ms` at most (an idle log costs no CPU). */
  private async waitForMore(): Promise<void> {
    if (this.watcher === null) {
      try {
        this.watcher = watch(this.config.dir, () => this.wake?.());
        this.watcher.on("error", () => {});
      } catch {
        // No directory yet, or no watching here: the poll alone.
      }
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, this.config.poll_ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = null;
  }

  /** Reads the log from `from` on, forever (until paused). */
  private async follow(handler: SourceHandler, lane: Lane, from: Position): Promise<void> {
    const live = () => !this.stopping;
    let { segment, byte, offset } = from;
    let carry: Buffer | null = null;
    const buf = Buffer.allocUnsafe(READ_BYTES);
    while (!this.stopping) {
      const path = join(this.config.dir, segmentName(segment));
      const handle = await fs.open(path, "r").catch((err: NodeJS.ErrnoException) => {
        if (err.code === "ENOENT") return null;
        throw err;
      });
      if (handle === null) {
        // The gateway has not written this segment yet (a fresh log): wait for it.
        this.atEnd = true;
        await this.waitForMore();
        continue;
      }
      try {
        for (;;) {
          if (this.stopping) return;
          const { bytesRead } = await handle.read(buf, 0, READ_BYTES, byte);
          if (bytesRead === 0) {
            // The end of this segment: a later one means this one is complete (the gateway rotates only
            // between whole writes); otherwise wait for more lines.
            if (await exists(join(this.config.dir, segmentName(segment + 1)))) {
              const again = await handle.read(buf, 0, 1, byte);
              if (again.bytesRead === 0) break;
              continue;
            }
            this.atEnd = true;
            await this.waitForMore();
            continue;
          }
          this.atEnd = false;
          const chunk = Buffer.from(buf.subarray(0, bytesRead));
          const records: RawRecord[] = [];
          const offsets: number[] = [];
          let start = 0;
          let lineByte = byte;
          for (let nl = chunk.indexOf(NEWLINE); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
            let line = chunk.subarray(start, nl);
            if (carry !== null) {
              line = Buffer.concat([carry, line]);
              carry = null;
            }
            lineByte = byte + nl + 1;
            start = nl + 1;
            offset++;
            if (line.length === 0) continue;
            records.push({ raw: line, origin: { kind: "file", file: path, line: offset } });
            offsets.push(offset - 1);
            if (records.length >= BATCH_RECORDS) {
              await this.hand(handler, lane, records.splice(0), offsets.splice(0), live, {
                offset,
                segment,
                byte: lineByte,
              });
            }
          }
          // A line not finished yet (the gateway's write in progress) waits for the rest.
          if (start < chunk.length)
            carry = carry === null ? chunk.subarray(start) : Buffer.concat([carry, chunk.subarray(start)]);
          byte += bytesRead;
          if (records.length > 0)
            await this.hand(handler, lane, records, offsets, live, { offset, segment, byte: lineByte });
        }
      } finally {
        await handle.close();
      }
      segment++;
      byte = 0;
      carry = null;
    }
  }

  private async hand(
    handler: SourceHandler,
    lane: Lane,
    records: RawRecord[],
    offsets: number[],
    live: () => boolean,
    after: Position,
  ): Promise<void> {
    this.count += records.length;
    this.handedBytes = records.reduce((n, r) => n + r.raw.length, 0);
    await handler.records(lane, records, offsets, live);
    this.handedBytes = 0;
    this.checkpoints.push(after);
  }

  /** The committed position, or the log's start. */
  private async committed(): Promise<Position> {
    try {
      const saved = JSON.parse(await fs.readFile(this.offsetsFile, "utf8")) as Position;
      if (Number.isInteger(saved.offset) && Number.isInteger(saved.segment) && Number.isInteger(saved.byte))
        return saved;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    const first = (await fs.readdir(this.config.dir).catch(() => [] as string[]))
      .map((n) => SEGMENT_PATTERN.exec(n))
      .filter((m) => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b)[0];
    return { offset: 0, segment: first ?? 1, byte: 0 };
  }

  /**
   * Saves the position of the highest batch boundary at or below the lane's committable offset (a few
   * lines may be read again after a restart; their sessions are skipped when already in files).
   */
  async commit(): Promise<void> {
    const lane = this.lane;
    if (lane === null) return;
    const committable = lane.ledger.committable();
    let best: Position | null = null;
    let keep = 0;
    for (let i = 0; i < this.checkpoints.length; i++) {
      if (this.checkpoints[i]!.offset > committable) break;
      best = this.checkpoints[i]!;
      keep = i;
    }
    if (best === null || best.offset <= lane.ledger.committed) return;
    this.checkpoints.splice(0, keep);
    await fs.mkdir(join(this.config.dir, ".trajflow-offsets"), { recursive: true });
    const tmp = `${this.offsetsFile}.tmp`;
    await fs.writeFile(tmp, JSON.stringify(best));
    const h = await fs.open(tmp, "r+");
    await h.datasync();
    await h.close();
    await fs.rename(tmp, this.offsetsFile);
    lane.ledger.committed = best.offset;
  }

  heldBytes(): Holdings {
    return { "records being decoded and applied": this.handedBytes };
  }

  async pause(): Promise<void> {
    this.stopping = true;
    this.watcher?.close();
    this.wake?.();
    if (this.commitTimer !== null) clearInterval(this.commitTimer);
    await this.running;
  }

  close(): Promise<void> {
    this.stopping = true;
    this.watcher?.close();
    this.wake?.();
    if (this.commitTimer !== null) clearInterval(this.commitTimer);
    return this.running;
  }
}

async function exists(path: string): Promise<boolean> {
  return fs.access(path).then(
    () => true,
    () => false,
  );
}
