/**
 * The `jsonl` source: recorded gateway events, one JSON object per line, from files (gzip detected by
 * its magic bytes, whatever the name). Lines are split on raw bytes, so an event's exact bytes reach the
 * dead letter if it is rejected, even when they are not valid UTF-8.
 */
import { createReadStream, promises as fs } from "node:fs";
import { createGunzip } from "node:zlib";
import type { Readable } from "node:stream";
import { z } from "zod";
import { TrajflowError } from "../../core/errors.ts";
import type { RawRecord } from "../../core/records.ts";

export const jsonlSourceConfigSchema = z.strictObject({
  paths: z
    .array(z.string().min(1))
    .min(1)
    .describe("Files of recorded events, read in order; .gz is detected."),
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

/** Total bytes of the given files on disk (for progress reporting). */
export async function totalBytes(paths: string[]): Promise<number> {
  let total = 0;
  for (const p of paths) total += (await fs.stat(p)).size;
  return total;
}

export interface JsonlProgress {
  /** Bytes of the files on disk consumed so far (compressed bytes for gzip files). */
  bytesRead: number;
}

/** Yields one record per non-blank line, with `file:line` as its origin. */
export async function* readJsonl(
  config: JsonlSourceConfig,
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
    let carry: Buffer | null = null;
    try {
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        let buf: Buffer = carry === null ? chunk : Buffer.concat([carry, chunk]);
        carry = null;
        let start = 0;
        for (let nl = buf.indexOf(NEWLINE, start); nl !== -1; nl = buf.indexOf(NEWLINE, start)) {
          line++;
          const bytes = buf.subarray(start, nl);
          start = nl + 1;
          if (isBlank(bytes)) continue;
          // Copy: the chunk is reused, and a pending event may outlive it.
          yield { raw: Uint8Array.prototype.slice.call(bytes), origin: { kind: "file", file, line } };
        }
        if (start < buf.length) carry = buf.subarray(start);
        buf = Buffer.alloc(0);
      }
    } catch (err) {
      throw new TrajflowError("SOURCE_READ_FAILED", `cannot read ${file}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (carry !== null && !isBlank(carry)) {
      line++;
      yield { raw: Uint8Array.prototype.slice.call(carry), origin: { kind: "file", file, line } };
    }
  }
}
