/**
 * The `jsonl` source: recorded gateway events, one JSON object per line, from files (gzip detected by
 * its magic bytes, whatever the name). Lines are split on raw bytes, so an event's exact bytes reach the
 * dead letter if it is rejected, even when they are not valid UTF-8.
 */
import { createReadStream, promises as fs } from "node:fs";
import { resolve } from "node:path";
import { createGunzip } from "node:zlib";
import type { Readable } from "node:stream";
import { z } from "zod";
import { TrajflowError } from "../../core/errors.ts";
import type { Holdings } from "../../core/held-memory.ts";
import type { Lane, Source, SourceHandler } from "../../contract/components.ts";
import { Ledger } from "../../contract/ledger.ts";
import type { RawRecord } from "../../core/records.ts";
import { formatOrigin, type Origin } from "../../schemas/origin.ts";

export const jsonlSourceConfigSchema = z.strictObject({
  paths: z
    .array(z.string().min(1))
    .min(1)
    .describe("Files of recorded events, read in order; .gz is detected."),
  decode_workers: z
    .int()
    .nonnegative()
    .default(0)
    .describe("Worker threads that decode events while the main thread assembles; 0 decodes inline."),
});
export type JsonlSourceConfig = z.output<typeof jsonlSourceConfigSchema>;

const NEWLINE = 0x0a;

async function isGzip(path: string): Promise<boolean> {
  const handle = await fs.open(path, "r");
  try {
    const head = Buffer.alloc(2);
    const { bytesRead } = await handle.read(head, 0, 2, 0);
    return bytesRead === 2 && head[0] === 0x1f && head[1] === 0x8b;
  } finally {
    await handle.close();
  }
}

function isBlank(line: Uint8Array): boolean {
  for (const b of line) if (b !== 0x20 && b !== 0x09 && b !== 0x0d) return false;
  return true;
}

export interface JsonlProgress {
  /** Bytes of the files on disk consumed so far (compressed bytes for gzip files). */
  bytesRead: number;
}

/** Yields one record per non-blank line, with `file:line` as its origin. */
export async function* readJsonl(
  config: { paths: readonly string[] },
  progress: JsonlProgress = { bytesRead: 0 },
): AsyncGenerator<RawRecord> {
  for (const file of config.paths) {
    let stream: Readable;
    try {
      const gz = await isGzip(file);
      const raw = createReadStream(file, { highWaterMark: 1 << 20 });
      raw.on("data", (chunk) => (progress.bytesRead += chunk.length));
      stream = gz ? raw.pipe(createGunzip()) : raw;
    } catch (err) {
      throw new TrajflowError("SOURCE_READ_FAILED", `cannot read ${file}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    let line = 0;
    // The start of a line the previous chunks ended in (a long line may span several).
    let carry: Buffer[] = [];
    try {
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        let start = 0;
        for (let nl = chunk.indexOf(NEWLINE, start); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
          line++;
          // Lines are views of the chunk, not copies: fs and zlib streams hand out a fresh buffer (or a
          // region of one they never write again) for every chunk, and no record's bytes are kept past
          // the batch that decodes it. Copying every line (and the chunk with the carry) cost 8% of a
          // replay's main thread (BENCHMARKS.md, issue 24).
          let bytes = chunk.subarray(start, nl);
          if (carry.length > 0) {
            bytes = Buffer.concat([...carry, bytes]);
            carry = [];
          }
          start = nl + 1;
          if (isBlank(bytes)) continue;
          yield { raw: bytes, origin: { kind: "file", file, line } };
        }
        if (start < chunk.length) carry.push(chunk.subarray(start));
      }
    } catch (err) {
      throw new TrajflowError("SOURCE_READ_FAILED", `cannot read ${file}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const last = Buffer.concat(carry);
    if (last.length > 0 && !isBlank(last)) {
      line++;
      yield { raw: last, origin: { kind: "file", file, line } };
    }
  }
}

/** Records handed to the runtime at once. */
const BATCH_RECORDS = 1024;

/**
 * The `jsonl` source as a pipeline component: one lane (`replay`) whose offsets count records from 0 in
 * input order. Nothing is committed upstream (a replay is re-run whole; its files have deterministic
 * names), and nobody else can own the lane, so its fence always holds.
 */
export class JsonlSource implements Source {
  private readonly config: JsonlSourceConfig;
  readonly progress: JsonlProgress = { bytesRead: 0 };
  private position: Origin | null = null;
  private paused = false;
  private count = 0;
  /** Bytes of the lines of the batch being applied (one at a time: BATCH_RECORDS lines at most). */
  private handedBytes = 0;
  private resolveEnded!: () => void;
  private rejectEnded!: (err: Error) => void;
  readonly ended: Promise<void>;
  readonly error: Error | null = null;

  constructor(config: JsonlSourceConfig) {
    this.config = config;
    this.ended = new Promise((resolve, reject) => {
      this.resolveEnded = resolve;
      this.rejectEnded = reject;
    });
  }

  get delivered(): number {
    return this.count;
  }

  start(handler: SourceHandler): Promise<void> {
    const lane: Lane = {
      id: "replay",
      ledger: new Ledger(0),
      live: true,
      fence: () => Promise.resolve(true),
      files: {
        // Paths resolved: the same input spelled `./x` or `x` gives the same files (no FILE_CONFLICT).
        describe: () => ({
          "trajflow.source": "replay",
          "trajflow.inputs": JSON.stringify(this.config.paths.map((p) => resolve(p))),
          "trajflow.position":
            this.position === null || this.position.kind !== "file"
              ? ""
              : formatOrigin({ ...this.position, file: resolve(this.position.file) }),
        }),
      },
    };
    const live = () => !this.paused;
    const run = async () => {
      await handler.assigned(lane);
      let records: RawRecord[] = [];
      let offsets: number[] = [];
      let bytes = 0;
      const apply = async () => {
        this.position = records[records.length - 1]!.origin;
        this.handedBytes = bytes;
        await handler.records(lane, records, offsets, live);
        this.handedBytes = 0;
        records = [];
        offsets = [];
        bytes = 0;
      };
      for await (const record of readJsonl(this.config, this.progress)) {
        if (this.paused) break;
        records.push(record);
        offsets.push(this.count++);
        bytes += record.raw.length;
        if (records.length >= BATCH_RECORDS) await apply();
      }
      if (records.length > 0) await apply();
    };
    run().then(this.resolveEnded, this.rejectEnded);
    return Promise.resolve();
  }

  heldBytes(): Holdings {
    return { "records being decoded and applied": this.handedBytes };
  }

  pause(): Promise<void> {
    this.paused = true;
    return Promise.resolve();
  }

  commit(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
