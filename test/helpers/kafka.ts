/**
 * The real broker for integration tests: KAFKA_BROKERS when set, otherwise the one scripts/kafka.sh
 * starts (and `npm test` starts before the tests run). Every test uses fresh, random topics and groups.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";

const SCRIPT = new URL("../../scripts/kafka.sh", import.meta.url).pathname;

export function brokers(): string {
  const fromEnv = process.env.KAFKA_BROKERS;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const address = execFileSync("bash", [SCRIPT, "start"], { encoding: "utf8" }).trim().split("\n").pop()!;
  process.env.KAFKA_BROKERS = address;
  return address;
}

export function freshName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** Waits for `check` to be true, polling; fails after `ms` (no bare sleeps in tests). */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  ms = 30_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}
