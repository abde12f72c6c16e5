/**
 * The protocol's constants, apart from the zod schemas of events.ts: decode workers validate the events
 * gateways send all day with fast-events.ts and these alone, and hand anything else to the ingest
 * thread, so they never load zod (~100 ms of CPU and ~19 MiB per thread, measured).
 */

export const PROTOCOL_VERSION = 1;

/** Columns holding these are int32: a larger value is rejected, never wrapped. */
export const INT32_MAX = 2_147_483_647;
/** The latest time a Date can hold (ms since the epoch): partitions by date need one. */
export const MAX_TIME_MS = 8_640_000_000_000_000;

/** The session event types, in the order of events.ts's `eventSchemas` (a test compares them). */
export const EVENT_TYPES = ["session.start", "request", "response", "reward", "session.end"] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const CONTROL_EVENT_TYPES = ["policy.update"] as const;

/** Issue params marking which stable error code a custom issue maps to. */
export interface CodedIssueParams {
  trajflowCode:
    "INVALID_TOKENS" | "INVALID_LOGPROBS" | "INVALID_ROUTED_EXPERTS" | "ROUTED_EXPERTS_OUT_OF_RANGE";
}

/** `logprobs_mode` of the sampling settings. */
export const LOGPROBS_MODES = ["raw", "processed"] as const;
