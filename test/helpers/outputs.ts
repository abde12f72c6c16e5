/**
 * An output of a test run, local directory or S3 prefix, behind one shape: the `--out` argument, the
 * committed data files, and the rows they hold. Tests of exactly-once delivery run against both.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parquetFiles } from "./cli.ts";
import { freshBucket, getObject, listKeys, s3Server } from "./s3.ts";
import { rowsIn } from "./workload.ts";

export interface TestOutput {
  /** What `--out` is given. */
  arg: string;
  /** Environment the CLI needs to write there. */
  env: Record<string, string>;
  /** Committed data files (hidden names skipped). */
  files(): Promise<number>;
  /** Every row of every committed data file, sorted by key, duplicates kept. */
  rows(): Promise<Array<Record<string, unknown>>>;
}

export function localOutput(dir: string): TestOutput {
  return { arg: dir, env: {}, files: () => Promise.resolve(parquetFiles(dir)), rows: () => rowsIn(dir) };
}

const visible = (key: string) => !key.split("/").some((s) => s.startsWith("_") || s.startsWith("."));

export async function s3Output(prefix = "out"): Promise<TestOutput> {
  const bucket = await freshBucket();
  const dataKeys = async () =>
    (await listKeys(bucket, `${prefix}/`)).filter((k) => visible(k) && /\.(parquet|arrow)$/.test(k));
  return {
    arg: `s3://${bucket}/${prefix}`,
    env: s3Server().env,
    files: async () => (await dataKeys()).length,
    rows: async () => {
      // A local copy of the committed objects, read by the same readers as a directory.
      const copy = mkdtempSync(join(tmpdir(), "trajflow-s3-copy-"));
      for (const key of await dataKeys()) {
        const path = join(copy, key.slice(prefix.length + 1));
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(path, await getObject(bucket, key));
      }
      return rowsIn(copy);
    },
  };
}
