/**
 * The S3 store: files as objects under `s3://bucket/prefix/`, committed exactly once without a rename.
 *
 * - A file that fits one part is one PutObject; a larger one a multipart upload whose parts go up
 *   `upload_concurrency` at a time as the encoder makes them, so memory holds a few parts, never the
 *   file. Either way the request that makes the object visible (PutObject, CompleteMultipartUpload)
 *   carries `If-None-Match: *`: the server refuses to overwrite (412).
 * - A 412 means the name exists: the object is compared with what was written (size, then SHA-256 of
 *   its bytes): equal is `already-committed` (a retry whose first answer was lost, a rerun), different
 *   is FILE_CONFLICT.
 * - Staged files (Kafka lanes, fenced before they land) are uploads with every part in and no
 *   completion. The next owner of a partition aborts them before it lists the partition's files, which
 *   is why an expelled member cannot land a file its successor does not see (docs/sinks.md).
 * - Every upload this process started and did not complete is aborted; ones a killed process left are
 *   aborted by the next start after `removeStale`'s age, and a bucket lifecycle rule catches the rest.
 */
import { createHash, randomBytes } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { TrajflowError } from "../../core/errors.ts";
import { STALE_TEMP_AGE_MS } from "./atomic-file.ts";
import { formatLocation, keyOf, type Location } from "./location.ts";
import { createS3Client, isNotFound, isPreconditionFailed, s3Error } from "./s3-client.ts";
import { s3Endpoint, type S3Options } from "./s3-options.ts";
import { DATA_FILE, hidden, type ByteRange, type CommitOutcome, type Staged, type Store } from "./store.ts";

type S3Location = Extract<Location, { kind: "s3" }>;

const base = (key: string) => key.slice(key.lastIndexOf("/") + 1);

export class S3Store implements Store {
  readonly location: string;
  private readonly loc: S3Location;
  private readonly options: S3Options;
  private readonly endpoint: string | undefined;
  private clientInstance: S3Client | null = null;

  constructor(loc: S3Location, options: S3Options) {
    this.loc = loc;
    this.options = options;
    this.location = formatLocation(loc);
    this.endpoint = s3Endpoint(options);
  }

  private get client(): S3Client {
    return (this.clientInstance ??= createS3Client(this.options));
  }

  private key(name: string): string {
    return keyOf(this.loc, name);
  }

  /** The prefix every key of this store starts with ("" or `prefix/`). */
  private get root(): string {
    return this.loc.prefix === "" ? "" : `${this.loc.prefix}/`;
  }

  url(name: string): string {
    return `s3://${this.loc.bucket}/${this.key(name)}`;
  }

  private fail(err: unknown, action: string): TrajflowError {
    return s3Error(err, action, this.endpoint);
  }

  /**
   * The bucket exists, the credentials are accepted and may list it, and they may write here: an upload is
   * started and aborted under the prefix (it needs the same permission as a PutObject and leaves no
   * object behind, unlike a probe file a write-only policy could not delete).
   */
  async assertWritable(what: string): Promise<void> {
    const Bucket = this.loc.bucket;
    const Key = this.key(`.trajflow-probe-${randomBytes(6).toString("hex")}`);
    try {
      // A listing rather than HeadBucket: its error answers have a body naming the problem (an unknown
      // key, a wrong secret, a missing bucket), where HEAD's 403 and 404 say nothing. Recovery lists anyway.
      await this.client.send(new ListObjectsV2Command({ Bucket, Prefix: this.root, MaxKeys: 1 }));
      const { UploadId } = await this.client.send(new CreateMultipartUploadCommand({ Bucket, Key }));
      await this.client.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId }));
    } catch (err) {
      throw this.fail(err, `write ${what} to ${this.location}`);
    }
  }

  /** Aborts uploads under the prefix started longer ago than `olderThanMs` (a crashed writer's). */
  async removeStale(olderThanMs = STALE_TEMP_AGE_MS): Promise<number> {
    const now = Date.now();
    return this.abortWhere((u) => now - (u.Initiated?.getTime() ?? now) >= olderThanMs);
  }

  abortPending(match: (baseName: string) => boolean): Promise<number> {
    return this.abortWhere((u) => match(base(u.Key ?? "")));
  }

  private async abortWhere(
    pick: (u: { Key?: string; UploadId?: string; Initiated?: Date }) => boolean,
  ): Promise<number> {
    const Bucket = this.loc.bucket;
    let aborted = 0;
    let KeyMarker: string | undefined;
    let UploadIdMarker: string | undefined;
    try {
      for (;;) {
        const page = await this.client.send(
          new ListMultipartUploadsCommand({ Bucket, Prefix: this.root, KeyMarker, UploadIdMarker }),
        );
        for (const u of page.Uploads ?? []) {
          if (!pick(u)) continue;
          await this.client
            .send(new AbortMultipartUploadCommand({ Bucket, Key: u.Key, UploadId: u.UploadId }))
            .catch((err: unknown) => {
              if (!isNotFound(err)) throw err;
            });
          aborted++;
        }
        if (page.IsTruncated !== true) return aborted;
        KeyMarker = page.NextKeyMarker;
        UploadIdMarker = page.NextUploadIdMarker;
      }
    } catch (err) {
      throw this.fail(err, `clean up unfinished uploads under ${this.location}`);
    }
  }

  write(name: string, chunks: Iterable<Uint8Array>): Promise<{ outcome: CommitOutcome; bytes: number }> {
    return this.upload(name, chunks, true) as Promise<{ outcome: CommitOutcome; bytes: number }>;
  }

  stage(name: string, chunks: Iterable<Uint8Array>): Promise<Staged> {
    return this.upload(name, chunks, false) as Promise<Staged>;
  }

  /**
   * Uploads a file's chunks: one PutObject when it fits a part and `commit`, else a multipart upload,
   * completed when `commit` and left staged otherwise.
   */
  private async upload(
    name: string,
    chunks: Iterable<Uint8Array>,
    commit: boolean,
  ): Promise<{ outcome: CommitOutcome; bytes: number } | Staged> {
    const Bucket = this.loc.bucket;
    const Key = this.key(name);
    const { part_size: partSize, upload_concurrency: concurrency } = this.options;
    const hash = createHash("sha256");
    let bytes = 0;
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    let uploadId: string | undefined;
    const parts: Array<{ PartNumber: number; ETag: string }> = [];
    const inFlight = new Set<Promise<void>>();
    let failure: unknown = null;

    const sendPart = async (): Promise<void> => {
      const body = Buffer.concat(pending, pendingBytes);
      pending = [];
      pendingBytes = 0;
      uploadId ??= (await this.client.send(new CreateMultipartUploadCommand({ Bucket, Key }))).UploadId!;
      const PartNumber = parts.length + 1;
      const entry = { PartNumber, ETag: "" };
      parts.push(entry);
      const sent: Promise<void> = this.client
        .send(new UploadPartCommand({ Bucket, Key, UploadId: uploadId, PartNumber, Body: body }))
        .then(
          (r) => void (entry.ETag = r.ETag!),
          (err: unknown) => void (failure ??= err),
        )
        .finally(() => inFlight.delete(sent));
      inFlight.add(sent);
      while (inFlight.size >= concurrency) await Promise.race(inFlight);
    };

    try {
      for (const chunk of chunks) {
        hash.update(chunk);
        bytes += chunk.length;
        for (let at = 0; at < chunk.length;) {
          const take = Math.min(partSize - pendingBytes, chunk.length - at);
          pending.push(chunk.subarray(at, at + take));
          pendingBytes += take;
          at += take;
          if (pendingBytes === partSize) await sendPart();
          if (failure !== null) throw failure;
        }
      }
      const sha256 = hash.digest("hex");
      if (uploadId === undefined && commit) {
        const body = Buffer.concat(pending, pendingBytes);
        try {
          await this.client.send(new PutObjectCommand({ Bucket, Key, Body: body, IfNoneMatch: "*" }));
          return { outcome: "written", bytes };
        } catch (err) {
          if (!isPreconditionFailed(err)) throw err;
          return { outcome: await this.verifyExisting(name, bytes, sha256), bytes };
        }
      }
      if (pendingBytes > 0 || parts.length === 0) await sendPart();
      await Promise.all(inFlight);
      if (failure !== null) throw failure;
      const staged: Staged = { name, bytes, uploadId, parts, sha256 };
      if (!commit) return staged;
      const outcome = await this.publish(staged);
      if (outcome === null) {
        throw new TrajflowError(
          "SINK_WRITE_FAILED",
          `the upload of ${this.url(name)} was aborted by another writer`,
        );
      }
      return { outcome, bytes };
    } catch (err) {
      await Promise.allSettled(inFlight);
      if (uploadId !== undefined) await this.abort(Key, uploadId);
      if (err instanceof TrajflowError) throw err;
      throw this.fail(err, `write ${this.url(name)}`);
    }
  }

  private async abort(Key: string, UploadId: string): Promise<void> {
    await this.client
      .send(new AbortMultipartUploadCommand({ Bucket: this.loc.bucket, Key, UploadId }))
      .catch(() => {});
  }

  async publish(staged: Staged): Promise<CommitOutcome | null> {
    const Bucket = this.loc.bucket;
    const Key = this.key(staged.name);
    try {
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket,
          Key,
          UploadId: staged.uploadId,
          IfNoneMatch: "*",
          MultipartUpload: { Parts: staged.parts },
        }),
      );
      return "written";
    } catch (err) {
      if (isPreconditionFailed(err)) {
        await this.abort(Key, staged.uploadId!);
        return this.verifyExisting(staged.name, staged.bytes, staged.sha256!);
      }
      if ((err as Error).name === "NoSuchUpload") return null;
      await this.abort(Key, staged.uploadId!);
      throw this.fail(err, `write ${this.url(staged.name)}`);
    }
  }

  async discard(staged: Staged): Promise<void> {
    await this.abort(this.key(staged.name), staged.uploadId!);
  }

  /** An object exists where a file was to be written: ours (same size and bytes) or a conflict. */
  private async verifyExisting(name: string, bytes: number, sha256: string): Promise<CommitOutcome> {
    const Bucket = this.loc.bucket;
    const Key = this.key(name);
    const conflict = () =>
      new TrajflowError(
        "FILE_CONFLICT",
        `${this.url(name)} already exists with different content; another writer produced the same range, ` +
          `or the prefix holds a different run: use a fresh prefix or remove the old objects`,
        { details: { path: this.url(name) } },
      );
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket, Key }));
      if (head.ContentLength !== bytes) throw conflict();
      const got = await this.client.send(new GetObjectCommand({ Bucket, Key }));
      const theirs = createHash("sha256");
      for await (const chunk of got.Body as AsyncIterable<Uint8Array>) theirs.update(chunk);
      if (theirs.digest("hex") !== sha256) throw conflict();
      return "already-committed";
    } catch (err) {
      if (err instanceof TrajflowError) throw err;
      throw this.fail(err, `compare ${this.url(name)} with the object already there`);
    }
  }

  async list(startsWith = ""): Promise<string[]> {
    const Bucket = this.loc.bucket;
    const root = this.root;
    const out: string[] = [];
    // One listing per directory, narrowed to the base names asked for: recovery of a partition reads
    // only that partition's files, not a bucket's weeks of output.
    const listDir = async (dir: string, depth: number) => {
      let ContinuationToken: string | undefined;
      const subdirs: string[] = [];
      do {
        const page = await this.client.send(
          new ListObjectsV2Command({ Bucket, Prefix: dir, Delimiter: "/", ContinuationToken }),
        );
        for (const o of page.Contents ?? []) {
          const name = base(o.Key!);
          if (!hidden(name) && DATA_FILE.test(name) && name.startsWith(startsWith)) {
            out.push(o.Key!.slice(root.length));
          }
        }
        for (const p of page.CommonPrefixes ?? []) {
          const sub = p.Prefix!.slice(dir.length, -1);
          if (sub.includes("=") && !hidden(sub)) subdirs.push(p.Prefix!);
        }
        ContinuationToken = page.IsTruncated === true ? page.NextContinuationToken : undefined;
      } while (ContinuationToken !== undefined);
      if (depth < 8) for (const sub of subdirs) await listDir(sub, depth + 1);
    };
    try {
      await listDir(root, 0);
    } catch (err) {
      throw this.fail(err, `list ${this.location}`);
    }
    return out.sort();
  }

  async read(name: string): Promise<Uint8Array> {
    return (await this.get(name)).bytes;
  }

  readRange(name: string, range: ByteRange): Promise<{ bytes: Uint8Array; size: number }> {
    const { offset, length } = "last" in range ? { offset: -1, length: range.last } : range;
    if (length <= 0) return this.size(name);
    return this.get(name, offset < 0 ? `bytes=-${length}` : `bytes=${offset}-${offset + length - 1}`);
  }

  /** An empty range: the size alone (a HEAD request; S3 refuses an empty Range). */
  private async size(name: string): Promise<{ bytes: Uint8Array; size: number }> {
    try {
      const head = await this.client.send(
        new HeadObjectCommand({ Bucket: this.loc.bucket, Key: this.key(name) }),
      );
      return { bytes: new Uint8Array(0), size: head.ContentLength ?? 0 };
    } catch (err) {
      throw this.fail(err, `read ${this.url(name)}`);
    }
  }

  private async get(name: string, range?: string): Promise<{ bytes: Uint8Array; size: number }> {
    try {
      const got = await this.client.send(
        new GetObjectCommand({ Bucket: this.loc.bucket, Key: this.key(name), Range: range }),
      );
      const bytes = await got.Body!.transformToByteArray();
      // `bytes */1234` or `bytes 0-7/1234`: the object's size.
      const size = Number(/\/(\d+)$/.exec(got.ContentRange ?? "")?.[1] ?? bytes.length);
      return { bytes, size };
    } catch (err) {
      throw this.fail(err, `read ${this.url(name)}`);
    }
  }

  async remove(name: string): Promise<void> {
    await this.client
      .send(new DeleteObjectCommand({ Bucket: this.loc.bucket, Key: this.key(name) }))
      .catch(() => {});
  }

  close(): void {
    this.clientInstance?.destroy();
    this.clientInstance = null;
  }
}
