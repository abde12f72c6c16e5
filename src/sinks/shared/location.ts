/**
 * Where an output lives: a local directory, or an S3 bucket and key prefix (`s3://bucket/prefix`). Every
 * place that takes an output directory takes either; any other URL scheme is refused, so `gs://x` never
 * quietly becomes a local directory named `gs:`.
 */
import { posix, resolve } from "node:path";

export type Location =
  | { kind: "local"; path: string }
  | {
      kind: "s3";
      bucket: string;
      /** Key prefix without leading or trailing `/` ("" for the bucket's root). */
      prefix: string;
    };

const SCHEME = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//;
// S3's rules for bucket names (3-63 characters, lower case, digits, dots and hyphens).
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** Why `text` is not a usable output location, or null when it is. */
export function locationProblem(text: string): string | null {
  const scheme = SCHEME.exec(text)?.[1];
  if (scheme === undefined) return null;
  if (scheme.toLowerCase() !== "s3") {
    return `${scheme}:// outputs are not supported: give a local directory or s3://bucket/prefix (S3-compatible stores such as GCS's and Azure's S3 gateways, MinIO, Ceph RGW and R2 are reached through s3:// with AWS_ENDPOINT_URL_S3)`;
  }
  const rest = text.slice(SCHEME.exec(text)![0].length);
  const bucket = rest.split("/")[0]!;
  if (!BUCKET.test(bucket)) return `${JSON.stringify(bucket)} is not an S3 bucket name (in ${text})`;
  if (rest.includes("//") || rest.split("/").some((s) => s === "." || s === "..")) {
    return `${text} has an empty, "." or ".." path segment`;
  }
  return null;
}

/** Parses a location checked by `locationProblem`; throws on one it refuses. */
export function parseLocation(text: string): Location {
  const problem = locationProblem(text);
  if (problem !== null) throw new Error(problem);
  if (!SCHEME.test(text)) return { kind: "local", path: resolve(text) };
  const rest = text.replace(SCHEME, "");
  const slash = rest.indexOf("/");
  const bucket = slash < 0 ? rest : rest.slice(0, slash);
  const prefix = slash < 0 ? "" : rest.slice(slash + 1).replace(/\/+$/, "");
  return { kind: "s3", bucket, prefix };
}

export function isRemote(text: string): boolean {
  return SCHEME.test(text);
}

/** A location as users see it in logs and reports: an absolute directory, or `s3://bucket/prefix`. */
export function displayLocation(text: string): string {
  return isRemote(text) ? formatLocation(parseLocation(text)) : resolve(text);
}

/** The location as users write it: an absolute directory, or `s3://bucket/prefix`. */
export function formatLocation(loc: Location): string {
  if (loc.kind === "local") return loc.path;
  return `s3://${loc.bucket}${loc.prefix === "" ? "" : `/${loc.prefix}`}`;
}

/** A path below `base` (a directory or an `s3://` URL): `child("s3://b/p", "_dead-letter")`. */
export function childLocation(base: string, ...segments: string[]): string {
  if (!isRemote(base)) return resolve(base, ...segments);
  return posix.join(base.replace(/\/+$/, ""), ...segments).replace(/^s3:\/(?!\/)/, "s3://");
}

/** The object key of `segments` below an S3 location's prefix. */
export function keyOf(loc: Extract<Location, { kind: "s3" }>, ...segments: string[]): string {
  return posix.join(loc.prefix, ...segments.filter((s) => s !== ""));
}
