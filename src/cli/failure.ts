/**
 * The one place a failure becomes what the user reads: a coded line, never a stack trace. Errors trajflow
 * raised carry their code; anything else is named by what it is (the Kafka client giving up, or a bug),
 * with its chain of causes. TRAJFLOW_DEBUG=1 adds the stack, for a bug report.
 */
import { isTrajflowError, type ErrorCode } from "../core/errors.ts";

/** The causes of an error, outermost first, as "Name: message" (bounded: a cycle or a deep chain ends). */
function chain(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    if (e instanceof Error) {
      const code = (e as { code?: unknown }).code;
      parts.push(`${e.name}${typeof code === "string" ? ` (${code})` : ""}: ${e.message}`);
      e = e.cause;
    } else {
      parts.push(String(e));
      break;
    }
  }
  return parts.join("; caused by ");
}

/** The code and message of a failure that reached the top of a command. */
export function describeFailure(err: unknown): { code: ErrorCode; message: string } {
  if (isTrajflowError(err)) return { code: err.code, message: err.message };
  let kafka = false;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (e.name.startsWith("KafkaJS")) kafka = true;
  }
  if (kafka) {
    return {
      code: "KAFKA_CLIENT_FAILED",
      message: `the Kafka client gave up: ${chain(err)}; check --brokers and that the cluster is up`,
    };
  }
  return {
    code: "INTERNAL_ERROR",
    message:
      `${chain(err)}. This is a bug in trajflow: please report it with the output of the same command ` +
      "run with TRAJFLOW_DEBUG=1 (which adds where it happened)",
  };
}

/** The line(s) a failure prints to stderr. */
export function failureText(err: unknown, env: NodeJS.ProcessEnv = process.env): string {
  const { code, message } = describeFailure(err);
  const stack = env.TRAJFLOW_DEBUG === "1" && err instanceof Error ? `\n${err.stack ?? ""}` : "";
  return `trajflow: [${code}] ${message}${stack}\n`;
}
