/**
 * Classes inside the kafkajs the project resolves, and the fixes applied to their prototypes
 * (request-queue-fix.ts, seek-offsets-fix.ts). kafkajs 2.2 is unmaintained since 2023: its internals
 * (CommonJS, under kafkajs/src) do not change under us.
 */
import { createRequire } from "node:module";

export function kafkajsClass<T>(path: string): { prototype: T } {
  return createRequire(import.meta.url)(`kafkajs/src/${path}`) as { prototype: T };
}

const patched = new Set<string>();

/** Runs `patch` on the prototype of the class at `path` once per process (`name` tells the patches apart). */
export function patchKafkajsOnce<T>(path: string, name: string, patch: (prototype: T) => void): void {
  const key = `${path}#${name}`;
  if (patched.has(key)) return;
  patched.add(key);
  patch(kafkajsClass<T>(path).prototype);
}
