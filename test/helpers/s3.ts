/**
 * The S3 API server of the tests: the s3proxy scripts/s3.sh runs (started by `npm test`, which passes it
 * in TRAJFLOW_TEST_S3; started here when a test file runs alone). Each test writes to a bucket of its own.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";

export interface S3Server {
  endpoint: string;
  /** The same buckets through a read-only server (writes refused). */
  readonlyEndpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** Environment of a trajflow process (or a Python reader) using this server. */
  env: Record<string, string>;
  client: S3Client;
}

let server: S3Server | null = null;

export function s3Server(): S3Server {
  if (server !== null) return server;
  let lines = process.env.TRAJFLOW_TEST_S3?.split("\n");
  if (lines === undefined || lines.length < 3) {
    const root = new URL("../..", import.meta.url).pathname;
    lines = execFileSync("bash", ["scripts/s3.sh", "start"], { cwd: root, encoding: "utf8" })
      .trim()
      .split("\n");
  }
  const [endpoint, accessKeyId, secretAccessKey] = lines.slice(-3) as [string, string, string];
  const port = Number(new URL(endpoint).port);
  const env = {
    AWS_ENDPOINT_URL_S3: endpoint,
    AWS_ACCESS_KEY_ID: accessKeyId,
    AWS_SECRET_ACCESS_KEY: secretAccessKey,
    AWS_REGION: "us-east-1",
  };
  server = {
    endpoint,
    readonlyEndpoint: `http://127.0.0.1:${port + 1}`,
    accessKeyId,
    secretAccessKey,
    env,
    client: new S3Client({
      endpoint,
      region: "us-east-1",
      forcePathStyle: true,
      credentials: { accessKeyId, secretAccessKey },
    }),
  };
  return server;
}

/** A new, empty bucket. */
export async function freshBucket(prefix = "t"): Promise<string> {
  const bucket = `${prefix}-${randomBytes(5).toString("hex")}`;
  await s3Server().client.send(new CreateBucketCommand({ Bucket: bucket }));
  return bucket;
}

/** Every object key under `prefix` of `bucket`, in order. */
export async function listKeys(bucket: string, prefix = ""): Promise<string[]> {
  const keys: string[] = [];
  let ContinuationToken: string | undefined;
  do {
    const page = await s3Server().client.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken }),
    );
    for (const o of page.Contents ?? []) keys.push(o.Key!);
    ContinuationToken = page.NextContinuationToken;
  } while (ContinuationToken !== undefined);
  return keys.sort();
}

export async function getObject(bucket: string, key: string): Promise<Buffer> {
  const got = await s3Server().client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await got.Body!.transformToByteArray());
}
