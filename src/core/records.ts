import type { DeadLetter } from "../schemas/dead-letter.ts";
import type { Origin } from "../schemas/origin.ts";
import type { ErrorCode } from "./errors.ts";

/** Bytes as a source read them, before decoding. */
export interface RawRecord {
  raw: string | Uint8Array;
  origin: Origin;
  /** The length of `raw`, where a record knows it without making `raw` (a Kafka record's value view). */
  readonly rawLength?: number;
  /**
   * The buffer `raw` lies in, and where in it (with rawLength), where a record knows them without making
   * `raw`: a Kafka record's decompressed batch. Packing records for a decode worker then copies spans of
   * that buffer and makes no view per record (decode/pool.ts).
   */
  readonly rawBuffer?: Uint8Array;
  readonly rawOffset?: number;
}

/** What a record's bytes count for the limits: its bytes, or a string's UTF-16 length. */
export function recordSize(record: RawRecord): number {
  const known = record.rawLength;
  if (known !== undefined) return known;
  const raw = record.raw;
  return typeof raw === "string" ? raw.length : raw.byteLength;
}

/** Where dead letters go. Sinks implement it; the runner hands one to every component. */
export interface DeadLetterOutput {
  write(letter: DeadLetter): void;
}

export interface DeadLetterExtras {
  uid?: string;
  session_id?: string;
  seq?: number;
  details?: Record<string, unknown>;
}

// ignoreBOM: a leading byte order mark stays in the letter: it keeps the bytes as they were received.
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Builds a dead letter, keeping the raw bytes as text when they are valid UTF-8 and as base64 otherwise. */
export function makeDeadLetter(
  code: ErrorCode,
  message: string,
  component: string,
  record: RawRecord,
  extras: DeadLetterExtras = {},
): DeadLetter {
  const letter: DeadLetter = {
    code,
    message,
    component,
    origin: record.origin,
    ...extras,
  };
  if (typeof record.raw === "string") {
    letter.raw = record.raw;
  } else {
    try {
      letter.raw = utf8.decode(record.raw);
    } catch {
      letter.raw_b64 = Buffer.from(record.raw).toString("base64");
    }
  }
  return letter;
}
