/**
 * Stable error codes. Codes are part of the public contract: dead letters, logs and metrics carry them,
 * and docs/errors.md explains each one with how to fix it. Never rename or reuse a code.
 */
export const ErrorCodes = {
  // Event decoding (the source edge).
  MALFORMED_JSON: { retryable: false, summary: "the event is not valid JSON" },
  NOT_AN_OBJECT: { retryable: false, summary: "the event is valid JSON but not an object" },
  EVENT_TOO_LARGE: {
    retryable: false,
    summary: "an event is larger than a Kafka message may be (trajflow produce)",
  },
  INVALID_UTF8: { retryable: false, summary: "the event's bytes are not valid UTF-8" },
  NESTING_TOO_DEEP: {
    retryable: false,
    summary: "a free-form field (messages, tools, tool_calls, metadata, info) is nested too deeply",
  },
  UNSUPPORTED_VERSION: { retryable: false, summary: "the event's protocol version `v` is not 1" },
  UNKNOWN_EVENT_TYPE: { retryable: false, summary: "the event's `type` is not one of the protocol's types" },
  INVALID_EVENT: { retryable: false, summary: "a field is missing or has the wrong type" },
  INVALID_TOKENS: { retryable: false, summary: "a token array is malformed (not int32 ids, or bad packing)" },
  INVALID_LOGPROBS: {
    retryable: false,
    summary: "a logprob array is malformed (not numbers, or bad packing)",
  },
  LOGPROBS_LENGTH_MISMATCH: {
    retryable: false,
    summary: "a response has a different number of logprobs than output ids",
  },
  OUTPUT_VERSIONS_LENGTH_MISMATCH: {
    retryable: false,
    summary: "a response has a different number of output_versions than output ids",
  },
  INVALID_ROUTED_EXPERTS: {
    retryable: false,
    summary: "routed experts are malformed (dtype, shape, byte length or packing)",
  },
  ROUTED_EXPERTS_OUT_OF_RANGE: {
    retryable: false,
    summary: "routed experts hold an expert id outside the dtype's range or num_experts",
  },
  ROUTED_EXPERTS_LENGTH_MISMATCH: {
    retryable: false,
    summary: "routed experts cover more positions than the call's prompt or output has",
  },
  ROUTED_EXPERTS_LAYOUT_MISMATCH: {
    retryable: false,
    summary: "a call's routed experts have another dtype, layer count or top_k than the session's",
  },
  LOGPROBS_NOT_FINITE: { retryable: false, summary: "a response's logprobs contain an infinity" },
  GROUP_TOO_LARGE: {
    retryable: false,
    summary: "a session's group_size is above the group transform's max_group_size",
  },
  // Session assembly.
  DUPLICATE_CONFLICT: { retryable: false, summary: "a seq number was reused with different content" },
  FENCED_WRITE: {
    retryable: false,
    summary: "a gateway replica wrote a session after another replica took it over (a stale owner)",
  },
  SEQ_GAP: { retryable: false, summary: "the event waited for an earlier seq that never arrived" },
  UNKNOWN_CALL: {
    retryable: false,
    summary: "a response names a call with no request and carries no prompt",
  },
  UNKNOWN_PARENT: { retryable: false, summary: "parent_call_id names a call that has no response yet" },
  DUPLICATE_CALL: { retryable: false, summary: "a call_id was used by a second request or response" },
  UNKNOWN_REWARD_TARGET: {
    retryable: false,
    summary: "a reward targets a call_id the session does not have",
  },
  EVENT_AFTER_END: { retryable: false, summary: "a non-reward event arrived after the session's end" },
  LATE_EVENT: { retryable: false, summary: "an event arrived after its session was finalized and written" },
  REWARD_OVERFLOW: {
    retryable: false,
    summary: "a reward would make its target's sum of rewards overflow to infinity",
  },
  SESSION_WITHOUT_ROWS: {
    retryable: false,
    summary: "a session ended with nothing to train (no answered model call): where its events went",
  },
  // Reward stages.
  REWARD_FAILED: {
    retryable: false,
    summary: "a reward stage could not score a trajectory (after retries and isolating it in its batch)",
  },
  REWARD_TIMEOUT: {
    retryable: false,
    summary: "a required reward stage did not report before the session's reward timeout",
  },
  REWARD_STAGE_UNAVAILABLE: {
    retryable: false,
    summary: "a reward stage could not start (model file, execution provider, module)",
  },
  // Configuration, usage and I/O.
  CONFIG_INVALID: { retryable: false, summary: "the configuration has one or more problems" },
  USAGE: { retryable: false, summary: "the command line is wrong" },
  SOURCE_READ_FAILED: { retryable: true, summary: "an input could not be read" },
  NOT_A_DATA_FILE: {
    retryable: false,
    summary: "a file given to read trajectory rows from is not Parquet or Arrow IPC (trajflow inspect)",
  },
  NO_ROWS_MATCH: {
    retryable: false,
    summary: "trajflow inspect's --uid or --key matched no row (the closest keys are named)",
  },
  ADDRESS_IN_USE: { retryable: false, summary: "the address to listen on is taken by another process" },
  KAFKA_AUTH_FAILED: { retryable: false, summary: "the Kafka broker refused the client's SASL credentials" },
  KAFKA_TLS_FAILED: {
    retryable: false,
    summary: "TLS with the Kafka broker failed (its certificate did not verify)",
  },
  KAFKA_TLS_MISMATCH: {
    retryable: false,
    summary: "the Kafka broker's listener and the client disagree about TLS",
  },
  KAFKA_CLIENT_FAILED: {
    retryable: true,
    summary:
      "the Kafka client gave up (brokers unreachable past its retries, or a request the cluster refused)",
  },
  KAFKA_CLIENT_UNAVAILABLE: {
    retryable: false,
    summary: "the librdkafka client was asked for, but its native addon is not built on this machine",
  },
  SINK_WRITE_FAILED: { retryable: true, summary: "an output could not be written" },
  S3_BUCKET_NOT_FOUND: {
    retryable: false,
    summary: "the S3 bucket of an output does not exist",
  },
  S3_ACCESS_DENIED: {
    retryable: false,
    summary: "the S3 server refused the credentials, or they may not write the output",
  },
  S3_WRITE_REFUSED: {
    retryable: false,
    summary: "the S3 server refused to write the output (a read-only server or bucket, object lock)",
  },
  S3_UNREACHABLE: {
    retryable: true,
    summary: "the S3 endpoint of an output could not be reached",
  },
  SESSION_MOVED: {
    retryable: true,
    summary:
      "another gateway replica of the fleet took the session over while this one answered a call: the answer was withheld (503 session_moved); retry it",
  },
  EVENT_OUTPUT_FAILED: {
    retryable: true,
    summary:
      "the gateway could not record a call's events (the event log could not be written, or Kafka refused them)",
  },
  FILE_CONFLICT: {
    retryable: false,
    summary: "an output file already exists with different content (a second writer of the same range)",
  },
  INTERNAL_ERROR: { retryable: false, summary: "an error trajflow has no code for: a bug in trajflow" },
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export interface TrajflowErrorOptions {
  details?: Record<string, unknown>;
  cause?: unknown;
}

/** The one error class of the project: a stable code, a retryable flag, structured details and a cause. */
export class TrajflowError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: TrajflowErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TrajflowError";
    this.code = code;
    this.retryable = ErrorCodes[code].retryable;
    this.details = options.details ?? {};
  }
}

export function isTrajflowError(err: unknown): err is TrajflowError {
  return err instanceof TrajflowError;
}
