/**
 * Named points in the commit path where the crash tests kill this process, as a crash would: with
 * `TRAJFLOW_TEST_KILL_AT=<point>:<n>` in its environment, the process SIGKILLs itself the n-th time a
 * thread reaches `<point>` (counted per thread: the encoder workers count their own). The tests pick the
 * points and counts from a seed, so every kill lands exactly where the test says (before, inside or after
 * a commit) and a failure can be replayed, where a timer after some files landed somewhere different on
 * every host. Unset, as outside the tests, a point is one comparison.
 *
 * The points, in the order one file reaches them:
 *   sink.commit-begin   the sink hands a file's rows to an encoder (nothing of the file written yet)
 *   file.temp-durable   the file's temporary is written and fsynced, not yet linked into place
 *   file.linked         the file is linked into place; its temporary not yet removed, the directory not fsynced
 *   sink.committed      the file is committed; the rows' sources not yet told (offsets not committed)
 *   source.offsets-committed   a Kafka source committed offsets for what the sink made durable
 */
import { TrajflowError } from "./errors.ts";

export const KILL_POINTS = [
  "sink.commit-begin",
  "file.temp-durable",
  "file.linked",
  "sink.committed",
  "source.offsets-committed",
] as const;
export type KillPoint = (typeof KILL_POINTS)[number];

function parse(spec: string | undefined): { point: KillPoint; n: number } | null {
  if (spec === undefined || spec === "") return null;
  const m = /^([a-z.-]+):([1-9]\d*)$/.exec(spec);
  if (m === null || !(KILL_POINTS as readonly string[]).includes(m[1]!))
    throw new TrajflowError(
      "CONFIG_INVALID",
      `TRAJFLOW_TEST_KILL_AT must be <point>:<n> with a point among ${KILL_POINTS.join(", ")}; got ${JSON.stringify(spec)}`,
    );
  return { point: m[1] as KillPoint, n: Number(m[2]) };
}

const armed = parse(process.env.TRAJFLOW_TEST_KILL_AT);
let reached = 0;

/** Kills this process here when the environment names this point and this is its n-th time. */
export function killPoint(point: KillPoint): void {
  if (armed === null || armed.point !== point) return;
  if (++reached === armed.n) process.kill(process.pid, "SIGKILL");
}
