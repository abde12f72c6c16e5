import { isTrajflowError, TrajflowError } from "../core/errors.ts";

/** A source's error: trajflow's own (a file that cannot be written) keep their code; the client's become SOURCE_READ_FAILED. */
export function sourceFailure(error: Error): Error {
  if (isTrajflowError(error)) return error;
  return new TrajflowError("SOURCE_READ_FAILED", `the source failed: ${error.message}`, { cause: error });
}
