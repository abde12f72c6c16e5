/**
 * Where committed files go: a local directory or an S3 prefix, behind one interface, so the file sinks,
 * dead letters and recovery are written once. A store knows bytes only: it puts, lists, reads (whole or a
 * range) and publishes files; what the bytes mean (a Parquet footer) is the files sink's (files/read.ts). Names are relative to the store's root
 * (`date=2026-11-24/part-00000.parquet`); `url` gives what users see.
 *
 * Both stores commit without ever overwriting: a local file is linked into place from a durable
 * temporary (atomic-file.ts), an object is created with `If-None-Match: *` (s3-store.ts). A name that
 * exists already is compared with what was to be written: the same bytes mean the work was committed
 * before (`already-committed`), other bytes fail with FILE_CONFLICT.
 */

export type CommitOutcome = "written" | "already-committed";

/** A file written but not yet visible (a durable temporary, or an upload whose parts are all in). */
export interface Staged {
  name: string;
  bytes: number;
  /** Local: the temporary's path. */
  temp?: string;
  /** S3: the multipart upload, its parts, and the file's SHA-256 (to verify an existing object). */
  uploadId?: string;
  parts?: Array<{ PartNumber: number; ETag: string }>;
  sha256?: string;
}

/** A byte range of a file: `length` bytes at `offset`, or its `last` bytes. */
export type ByteRange = { offset: number; length: number } | { last: number };

export interface Store {
  /** The root as users write it: an absolute directory or `s3://bucket/prefix`. */
  readonly location: string;
  /** The full path or URL of a file. */
  url(name: string): string;
  /**
   * Fails (a coded error naming the problem) unless files can be written here: checked before any input
   * is read. `create`: make the directory now (local) rather than when something is written.
   */
  assertWritable(what: string, create?: boolean): Promise<void>;
  /** Removes what crashed writers left (temporaries, unfinished uploads) once older than this. */
  removeStale(olderThanMs?: number): Promise<number>;
  /** Writes and commits a file from its chunks, in order. */
  write(name: string, chunks: Iterable<Uint8Array>): Promise<{ outcome: CommitOutcome; bytes: number }>;
  /** Writes a file without making it visible; `publish` or `discard` it afterwards. */
  stage(name: string, chunks: Iterable<Uint8Array>): Promise<Staged>;
  /**
   * Makes a staged file visible without overwriting. Null: the staging was removed meanwhile (an S3
   * upload aborted by the range's next owner, docs/sinks.md), so nothing landed.
   */
  publish(staged: Staged): Promise<CommitOutcome | null>;
  discard(staged: Staged): Promise<void>;
  /**
   * Names of the data files (`.parquet`, `.arrow`) at the root and in its hive partition directories
   * (`key=value/`) whose base name starts with `startsWith`, in name order; hidden names are skipped.
   */
  list(startsWith?: string): Promise<string[]>;
  /** A file's bytes. */
  read(name: string): Promise<Uint8Array>;
  /**
   * Bytes of a file in `range` (fewer where the file ends first), and the file's size: a reader of a
   * footer asks for the last bytes and learns the size in one request.
   */
  readRange(name: string, range: ByteRange): Promise<{ bytes: Uint8Array; size: number }>;
  /** Removes a file this run created (and a partition directory it leaves empty). */
  remove(name: string): Promise<void>;
  /**
   * Removes unfinished writes of files whose base name `match`es, whoever made them: the
   * new owner of a Kafka partition calls this before it lists the partition's files (S3 uploads; a local
   * link is atomic and needs nothing). Returns how many.
   */
  abortPending(match: (baseName: string) => boolean): Promise<number>;
  close(): void;
}

export const DATA_FILE = /\.(parquet|arrow)$/;

/** Hidden names (`.x`, `_x`), which dataset readers skip: temporaries, dead letters, markers. */
export function hidden(name: string): boolean {
  return name.startsWith(".") || name.startsWith("_");
}
