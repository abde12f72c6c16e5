/**
 * The S3 client of the object-store outputs: the AWS SDK v3 client (credentials from the standard chain:
 * environment, shared profile, SSO, web identity, container and instance roles), its endpoint from the
 * config or `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, and the SDK's retries (exponential backoff with
 * jitter on 5xx, throttling and timeouts). Errors become coded TrajflowErrors naming the problem and never
 * carrying a credential.
 */
import { S3Client, S3ServiceException } from "@aws-sdk/client-s3";
import { TrajflowError, type ErrorCode } from "../../core/errors.ts";
import { redactor } from "../../core/redact.ts";
import { s3Endpoint, type S3Options } from "./s3-options.ts";

export type { S3Options };

export function createS3Client(options: S3Options): S3Client {
  const endpoint = s3Endpoint(options);
  const region =
    options.region ??
    (process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || (endpoint !== undefined ? "us-east-1" : ""));
  return new S3Client({
    ...(region === "" ? {} : { region }),
    ...(endpoint === undefined ? {} : { endpoint }),
    forcePathStyle: options.force_path_style ?? endpoint !== undefined,
    maxAttempts: options.max_attempts,
    retryMode: "standard",
  });
}

/** The secrets of the environment's credentials, removed from any text that leaves the process. */
const redact = redactor(
  [process.env.AWS_SECRET_ACCESS_KEY, process.env.AWS_SESSION_TOKEN].filter(
    (s): s is string => typeof s === "string",
  ),
);

/** The HTTP status of an SDK error, when the server answered. */
export function s3Status(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

export function isPreconditionFailed(err: unknown): boolean {
  return s3Status(err) === 412 || (err as Error).name === "PreconditionFailed";
}

export function isNotFound(err: unknown): boolean {
  const name = (err as Error).name;
  return s3Status(err) === 404 || name === "NotFound" || name === "NoSuchKey" || name === "NoSuchUpload";
}

const NETWORK = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
]);

/**
 * A coded error for a failed S3 request: what was attempted (`action`, e.g. "write s3://b/p/x.parquet"),
 * what the server or the network said, and what to check. Credentials never appear: the messages are
 * built here, and the server's text passes the redactor.
 */
export function s3Error(err: unknown, action: string, endpoint?: string): TrajflowError {
  const e = err as Error & { code?: string; Code?: string };
  const name = e.name;
  const status = s3Status(err);
  const where = endpoint === undefined ? "" : ` at ${endpoint.replace(/\/\/[^/@]*@/, "//")}`;
  let code: ErrorCode = "SINK_WRITE_FAILED";
  let why: string;
  if (name === "NoSuchBucket") {
    code = "S3_BUCKET_NOT_FOUND";
    why = "the bucket does not exist (create it, or check the name and the region/endpoint)";
  } else if (name === "InvalidAccessKeyId") {
    code = "S3_ACCESS_DENIED";
    why = "the server does not know the access key id (check AWS_ACCESS_KEY_ID or the profile)";
  } else if (name === "SignatureDoesNotMatch") {
    code = "S3_ACCESS_DENIED";
    why = "the secret key does not match the access key id (check AWS_SECRET_ACCESS_KEY or the profile)";
  } else if (name === "AccessDenied" || name === "Forbidden" || status === 403) {
    code = "S3_ACCESS_DENIED";
    why =
      "access denied: the credentials may not do this (the bucket policy or IAM role lacks the permission)";
  } else if (name === "NotImplemented" || name === "MethodNotAllowed" || status === 501 || status === 405) {
    code = "S3_WRITE_REFUSED";
    why = `the server refused the request (${name}${status === undefined ? "" : `, HTTP ${status}`}): it or the bucket is read-only, or it lacks this S3 operation`;
  } else if (name === "CredentialsProviderError") {
    code = "S3_ACCESS_DENIED";
    why =
      "no credentials found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance/pod role)";
  } else if (NETWORK.has(e.code ?? "") || NETWORK.has(name) || name === "TimeoutError") {
    code = "S3_UNREACHABLE";
    why = `the endpoint cannot be reached (${e.code ?? name}; check AWS_ENDPOINT_URL_S3 or the network)`;
  } else if (err instanceof S3ServiceException) {
    why = `${name}${status === undefined ? "" : ` (HTTP ${status})`}: ${redact(e.message)}`;
  } else {
    why = redact(`${name}: ${e.message}`);
  }
  return new TrajflowError(code, `cannot ${action}${where}: ${why}`, {
    details: { s3_error: name, ...(status === undefined ? {} : { http_status: status }) },
  });
}
