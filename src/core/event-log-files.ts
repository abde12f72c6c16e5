/**
 * The layout of the gateway's local event log, shared by the gateway that writes it and the `event_log`
 * source that follows it: segments `events-NNNNNNNN.jsonl` in one directory, numbered from 1.
 */
export const SEGMENT_PATTERN = /^events-(\d{8})\.jsonl$/;

/** The file name of segment `n`. */
export function segmentName(n: number): string {
  return `events-${String(n).padStart(8, "0")}.jsonl`;
}
