/**
 * The object-store sink against a real S3 API server (s3proxy, scripts/s3.sh): the server's conditional
 * writes, replay to s3:// byte for byte equal to replay to a directory (read back by pyarrow's S3
 * filesystem), multipart uploads, reruns and conflicts, and every way the output can be refused.
 */
import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { pino } from "pino";
import { linearSession } from "../bench/workloads.ts";
import { replay } from "../src/cli/presets.ts";
import { fileKeyValues, listDataFiles, readFileMetadata } from "../src/sinks/files/read.ts";
import { openStore } from "../src/sinks/shared/open-store.ts";
import { s3OptionsSchema } from "../src/sinks/shared/s3-options.ts";
import { runCli } from "./helpers/cli.ts";
import { pythonReady, readWithPython, readWithPythonIn } from "./helpers/python.ts";
import { freshBucket, getObject, listKeys, s3Server } from "./helpers/s3.ts";
import { requiredOrSkip } from "./helpers/required.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-s3-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const s3 = s3Server();
const EXAMPLE = new URL("../examples/sessions.jsonl", import.meta.url).pathname;

/** Files under a local output directory, relative, with their bytes. */
function localFiles(dir: string, names: string[]): Map<string, Buffer> {
  return new Map(names.map((n) => [n, readFileSync(join(dir, n))]));
}

/** The example sessions plus lines every reader rejects, so dead letters are written too. */
function inputWithDeadLetters(): string {
  const path = join(scratch, "with-bad-lines.jsonl");
  writeFileSync(
    path,
    `${readFileSync(EXAMPLE, "utf8")}{"not json\n{"v":1,"type":"response","session_id":"x","uid":"u","call_id":"c","ts":1,"output_ids":"nope"}\n`,
  );
  return path;
}

describe("the S3 server of the tests", () => {
  it("refuses a second PutObject and a second multipart completion with If-None-Match: * (412)", async () => {
    const Bucket = await freshBucket();
    const put = () =>
      s3.client.send(new PutObjectCommand({ Bucket, Key: "k", Body: Buffer.from("a"), IfNoneMatch: "*" }));
    await put();
    await assert.rejects(put(), (err: Error & { $metadata: { httpStatusCode: number } }) => {
      assert.equal(err.$metadata.httpStatusCode, 412);
      return true;
    });
    const complete = async () => {
      const { UploadId } = await s3.client.send(new CreateMultipartUploadCommand({ Bucket, Key: "m" }));
      const { ETag } = await s3.client.send(
        new UploadPartCommand({ Bucket, Key: "m", UploadId, PartNumber: 1, Body: Buffer.from("b") }),
      );
      return s3.client.send(
        new CompleteMultipartUploadCommand({
          Bucket,
          Key: "m",
          UploadId,
          IfNoneMatch: "*",
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
        }),
      );
    };
    await complete();
    await assert.rejects(complete(), (err: Error & { $metadata: { httpStatusCode: number } }) => {
      assert.equal(err.$metadata.httpStatusCode, 412);
      return true;
    });
    assert.deepEqual((await getObject(Bucket, "m")).toString(), "b");
  });
});

describe("replay to s3://", () => {
  it("writes the same files, byte for byte, as replay to a directory, dead letters included", async () => {
    const input = inputWithDeadLetters();
    const dir = join(scratch, "local");
    const args = ["--partition-by", "date", "--rows-per-file", "3"];
    const local = await runCli(["replay", input, "--out", dir, ...args]);
    assert.equal(local.code, 0, local.stderr);
    const Bucket = await freshBucket();
    const remote = await runCli(["replay", input, "--out", `s3://${Bucket}/runs/a`, ...args], s3.env);
    assert.equal(remote.code, 0, remote.stderr);

    const names = (await listDataFiles(dir)).map((f) => f.slice(dir.length + 1));
    const letters = ["_dead-letter/dead-letters-00000.jsonl"];
    assert.ok(names.length >= 3, `several files: ${names.join(", ")}`);
    assert.ok(names.every((n) => n.startsWith("date=")));
    const keys = await listKeys(Bucket);
    assert.deepEqual(keys, [...letters, ...names].map((n) => `runs/a/${n}`).sort());
    for (const [name, bytes] of localFiles(dir, [...names, ...letters])) {
      assert.ok(bytes.equals(await getObject(Bucket, `runs/a/${name}`)), `${name} differs`);
    }
    // Nothing left behind: no probe object, no unfinished upload.
    const uploads = await s3.client.send(new ListMultipartUploadsCommand({ Bucket }));
    assert.equal(uploads.Uploads?.length ?? 0, 0);
  });

  it("is read back by pyarrow's S3 filesystem as the same rows as the directory", async (t) => {
    const missing = requiredOrSkip(pythonReady(), "no Python readers (run npm test)");
    if (missing !== false) return t.skip(missing);
    const dir = join(scratch, "local-py");
    assert.equal((await runCli(["replay", EXAMPLE, "--out", dir])).code, 0);
    const Bucket = await freshBucket();
    const out = await runCli(["replay", EXAMPLE, "--out", `s3://${Bucket}/x`], s3.env);
    assert.equal(out.code, 0, out.stderr);
    const fromDisk = await readWithPython<{ rows: unknown[]; files: string[] }>("read_output.py", dir);
    const fromS3 = await readWithPythonIn<{ rows: unknown[]; files: string[] }>(
      s3.env,
      "read_output.py",
      `s3://${Bucket}/x`,
    );
    assert.equal(fromS3.rows.length, 9);
    assert.deepEqual(fromS3.rows, fromDisk.rows);
    // trajflow inspect reads the prefix as it reads the directory.
    const inspected = await runCli(["inspect", `s3://${Bucket}/x`, "--uid", "swe-0007"], s3.env);
    assert.equal(inspected.code, 0, inspected.stderr);
    assert.equal(inspected.stdout, (await runCli(["inspect", dir, "--uid", "swe-0007"])).stdout);
    assert.match(inspected.stdout, /swe-0007/);
  });

  it("uploads a file larger than a part in parts, equal to the local file", async () => {
    const input = join(scratch, "big.jsonl");
    const shape = { initialPrompt: 24_000, turns: 3, outputTokens: 2_000, observationTokens: 500 };
    const lines: string[] = [];
    for (let s = 0; s < 60; s++) {
      for (const e of linearSession(shape, "delta", {
        uid: `u${s}`,
        sessionId: "s",
        seed: s + 1,
        t0: s * 1000,
      }))
        lines.push(JSON.stringify(e));
    }
    writeFileSync(input, `${lines.join("\n")}\n`);
    // One file of all 60 sessions (their 5.5M tokens past the default cut of 1M tokens).
    const files = {
      compression: "none",
      max_tokens_per_file: 8_000_000,
      s3: { part_size: 5 * 1024 * 1024, upload_concurrency: 2 },
    };
    const logger = pino({ level: "silent" });
    const dir = join(scratch, "big");
    await replay({ inputs: [input], out: dir, files, logger });
    const Bucket = await freshBucket();
    Object.assign(process.env, s3.env);
    await replay({ inputs: [input], out: `s3://${Bucket}/big`, files, logger });
    const bytes = readFileSync(join(dir, "part-00000.parquet"));
    assert.ok(bytes.length > 10 * 1024 * 1024, `a file of ${bytes.length} bytes needs three parts`);
    assert.deepEqual(await listKeys(Bucket), ["big/part-00000.parquet"]);
    assert.ok(bytes.equals(await getObject(Bucket, "big/part-00000.parquet")));
    // A multipart object's ETag ends with its part count.
    const head = await s3.client.send(new HeadObjectCommand({ Bucket, Key: "big/part-00000.parquet" }));
    assert.match(head.ETag!, new RegExp(`-${Math.ceil(bytes.length / (5 * 1024 * 1024))}"$`));
  });

  it("counts a rerun's files as already committed and refuses a different run's files", async () => {
    const Bucket = await freshBucket();
    const out = `s3://${Bucket}/p`;
    const first = await runCli(["replay", EXAMPLE, "--out", out, "--json"], s3.env);
    assert.equal(first.code, 0, first.stderr);
    const before = await listKeys(Bucket);
    const again = await runCli(["replay", EXAMPLE, "--out", out, "--json"], s3.env);
    assert.equal(again.code, 0, again.stderr);
    const summary = JSON.parse(again.stdout) as { metrics: { files_committed: Record<string, number> } };
    assert.deepEqual(summary.metrics.files_committed, {
      "already-committed": before.filter((k) => k.endsWith(".parquet")).length,
    });
    assert.deepEqual(await listKeys(Bucket), before);
    const bytesBefore = await getObject(Bucket, before[0]!);
    // Other bytes under the same name: another codec.
    const other = await runCli(["replay", EXAMPLE, "--out", out, "--compression", "gzip"], s3.env);
    assert.equal(other.code, 1);
    assert.match(
      other.stderr,
      /\[FILE_CONFLICT\] s3:\/\/.*part-00000\.parquet already exists with different content/,
    );
    assert.deepEqual(await listKeys(Bucket), before);
    assert.ok(bytesBefore.equals(await getObject(Bucket, before[0]!)));
  });
});

describe("a store's bytes", () => {
  it("reads the same ranges from a directory and from S3, and the files sink the same footer from both", async () => {
    Object.assign(process.env, s3.env);
    const dir = join(scratch, "ranges");
    assert.equal((await runCli(["replay", EXAMPLE, "--out", dir])).code, 0);
    const [file] = await listDataFiles(dir);
    const name = file!.slice(dir.length + 1);
    const local = await openStore(dir, s3OptionsSchema.parse({}));
    const remote = await openStore(`s3://${await freshBucket()}/r`, s3OptionsSchema.parse({}));
    try {
      await remote.write(name, [readFileSync(file!)]);
      const size = readFileSync(file!).length;
      const ranges = [
        { last: 8 },
        { offset: 0, length: 4 },
        { offset: size - 10, length: 50 },
        { last: 2 * size },
      ];
      for (const range of ranges) {
        const [a, b] = [await local.readRange(name, range), await remote.readRange(name, range)];
        assert.equal(a.size, size);
        assert.equal(b.size, size);
        assert.ok(Buffer.from(a.bytes).equals(Buffer.from(b.bytes)), JSON.stringify(range));
      }
      assert.deepEqual(await fileKeyValues(remote, name), await readFileMetadata(file!));
    } finally {
      remote.close();
    }
  });
});

describe("a refused S3 output", () => {
  const refused = async (out: string, env: Record<string, string>) => {
    const r = await runCli(["replay", EXAMPLE, "--out", out], env);
    assert.equal(r.code, 2, `exit 2 at start: ${r.stderr}`);
    assert.doesNotMatch(r.stderr, new RegExp(s3.secretAccessKey));
    return r.stderr;
  };

  it("names a missing bucket", async () => {
    assert.match(
      await refused("s3://no-such-bucket-here/x", s3.env),
      /\[S3_BUCKET_NOT_FOUND\].*bucket does not exist/,
    );
  });

  it("names a wrong secret key and an unknown access key, never printing either", async () => {
    const Bucket = await freshBucket();
    const wrongSecret = { ...s3.env, AWS_SECRET_ACCESS_KEY: `${s3.secretAccessKey}x` };
    assert.match(
      await refused(`s3://${Bucket}/x`, wrongSecret),
      /\[S3_ACCESS_DENIED\].*secret key does not match/,
    );
    const unknownKey = { ...s3.env, AWS_ACCESS_KEY_ID: "nobody" };
    assert.match(await refused(`s3://${Bucket}/x`, unknownKey), /\[S3_ACCESS_DENIED\]/);
    assert.deepEqual(await listKeys(Bucket), []);
  });

  it("names an endpoint nobody listens on", async () => {
    const env = { ...s3.env, AWS_ENDPOINT_URL_S3: "http://127.0.0.1:9" };
    assert.match(await refused("s3://some-bucket/x", env), /\[S3_UNREACHABLE\].*cannot be reached/);
  });

  it("names a server that refuses writes, and leaves the bucket untouched", async () => {
    const Bucket = await freshBucket();
    const env = { ...s3.env, AWS_ENDPOINT_URL_S3: s3.readonlyEndpoint };
    assert.match(await refused(`s3://${Bucket}/x`, env), /\[S3_WRITE_REFUSED\].*read-only/);
    assert.deepEqual(await listKeys(Bucket), []);
  });

  it("refuses other URL schemes instead of making a local directory named after them", async () => {
    const r = await runCli(["replay", EXAMPLE, "--out", "gs://bucket/x"]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /gs:\/\/ outputs are not supported/);
    assert.ok(!existsSync("gs:"), "no directory named gs: in the working directory");
  });
});

describe("throttling", () => {
  let proxy: Server;
  let throttled = 0;
  before(async () => {
    // Between trajflow and the server: every third request answered 503 SlowDown, as S3 does under load.
    const upstream = new URL(s3.endpoint);
    let n = 0;
    proxy = createServer((req, res) => {
      if (++n % 3 === 0) {
        throttled++;
        req.resume();
        res.writeHead(503, { "content-type": "application/xml" });
        res.end(
          '<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>',
        );
        return;
      }
      const forward = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          path: req.url,
          method: req.method,
          headers: req.headers,
        },
        (up) => {
          res.writeHead(up.statusCode!, up.headers);
          up.pipe(res);
        },
      );
      req.pipe(forward);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  });
  after(() => proxy.close());

  it("retries 503 SlowDown and lands every file once", async () => {
    const dir = join(scratch, "throttle-local");
    assert.equal((await runCli(["replay", EXAMPLE, "--out", dir, "--rows-per-file", "2"])).code, 0);
    const Bucket = await freshBucket();
    const port = (proxy.address() as { port: number }).port;
    const env = { ...s3.env, AWS_ENDPOINT_URL_S3: `http://127.0.0.1:${port}` };
    const r = await runCli(["replay", EXAMPLE, "--out", `s3://${Bucket}/t`, "--rows-per-file", "2"], env);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(throttled >= 3, `the proxy throttled ${throttled} requests`);
    const names = (await listDataFiles(dir)).map((f) => f.slice(dir.length + 1));
    assert.deepEqual(
      await listKeys(Bucket, "t/"),
      names.map((n) => `t/${n}`),
    );
    for (const [name, bytes] of localFiles(dir, names))
      assert.ok(bytes.equals(await getObject(Bucket, `t/${name}`)));
  });
});
