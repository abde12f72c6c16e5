/**
 * Opening a store by its location. Apart from store.ts, which the two implementations import (the
 * contract, the names of data files), so no module imports its own importer.
 */
import { parseLocation } from "./location.ts";
import type { S3Options } from "./s3-options.ts";
import type { Store } from "./store.ts";

/** Opens the store of a location (a directory or `s3://bucket/prefix`). */
export async function openStore(location: string, s3: S3Options): Promise<Store> {
  const loc = parseLocation(location);
  if (loc.kind === "local") return new (await import("./local-store.ts")).LocalStore(loc.path);
  return new (await import("./s3-store.ts")).S3Store(loc, s3);
}
