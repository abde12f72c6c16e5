/**
 * The `s3` options of an output, apart from the client (s3-client.ts), so that reading a configuration
 * does not load the AWS SDK: a run writing to a local directory never does.
 */
import { z } from "zod";

const MiB = 1024 * 1024;

/** The `s3` block of an output (files sink, dead letters); every key optional. */
export const s3OptionsSchema = z.strictObject({
  region: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Region of the bucket; default AWS_REGION / AWS_DEFAULT_REGION or the profile's, us-east-1 with a custom endpoint.",
    ),
  endpoint: z
    .url()
    .optional()
    .describe(
      "Endpoint of an S3-compatible server (MinIO, Ceph RGW, R2, s3proxy); default AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL, else AWS's.",
    ),
  force_path_style: z
    .boolean()
    .optional()
    .describe(
      "Path-style addressing (endpoint/bucket/key) instead of virtual-hosted (bucket.endpoint/key); default on when an endpoint is set.",
    ),
  part_size: z
    .int()
    .min(5 * MiB)
    .max(5 * 1024 * MiB)
    .default(16 * MiB)
    .describe(
      "Bytes per multipart-upload part (S3's minimum is 5 MiB): what an upload holds in memory per part in flight; larger files are uploaded in parts.",
    ),
  upload_concurrency: z
    .int()
    .min(1)
    .max(64)
    .default(4)
    .describe("Parts of one file uploaded at once (memory: part_size times this, per encoder worker)."),
  max_attempts: z
    .int()
    .min(1)
    .max(20)
    .default(8)
    .describe(
      "Attempts per request, with exponential backoff, on 5xx, throttling (503 SlowDown) and network errors.",
    ),
});
export type S3Options = z.output<typeof s3OptionsSchema>;
export type S3OptionsInput = z.input<typeof s3OptionsSchema>;

export const DEFAULT_S3_OPTIONS: S3Options = s3OptionsSchema.parse({});

/** The endpoint the client uses: the config's, else the standard environment variables. */
export function s3Endpoint(options: S3Options): string | undefined {
  const env = process.env.AWS_ENDPOINT_URL_S3 || process.env.AWS_ENDPOINT_URL;
  return options.endpoint ?? (env === undefined || env === "" ? undefined : env);
}
