/**
 * What a test needs from its setup (a service, an addon, the Python environment) and does not find: a skip,
 * saying why, on a developer's machine; a failure where everything must be there (CI, TRAJFLOW_REQUIRE_ALL),
 * so that a missing part of the setup never passes for a green run.
 */
import { rdkafkaAvailable } from "../../src/kafka/rdkafka-binding.ts";

const requireAll = () => process.env.CI === "true" || (process.env.TRAJFLOW_REQUIRE_ALL ?? "") !== "";

/** `false` when `present`; else the reason to skip with, or a thrown error under CI. */
export function requiredOrSkip(present: boolean, reason: string): false | string {
  if (present) return false;
  if (requireAll()) throw new Error(`${reason}: required here (CI or TRAJFLOW_REQUIRE_ALL is set)`);
  return reason;
}

/** A test's `skip` option for a test on librdkafka: false where its addon is built. */
export const rdkafkaSkip = (): false | string =>
  requiredOrSkip(rdkafkaAvailable(), "librdkafka's addon is not built (scripts/librdkafka.sh build)");
