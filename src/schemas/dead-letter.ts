import type { Origin } from "./origin.ts";

/**
 * A rejected event, as written to dead-letter outputs (one JSON object per line). docs/errors.md lists
 * every code. `raw` holds the event's bytes as text when they are valid UTF-8, `raw_b64` otherwise, so
 * a fixed event can be replayed from here. A dead letter is a pure function of its input (no wall-clock
 * time), so replaying the same input writes the same dead-letter files.
 */
export interface DeadLetter {
  /** Stable error code (docs/errors.md). */
  code: string;
  /** What happened and what to do, for a person. */
  message: string;
  /** The component that rejected it (e.g. `decode`, `assemble`). */
  component: string;
  origin: Origin;
  uid?: string;
  session_id?: string;
  seq?: number;
  /** Structured details: zod issue codes and paths, expected and actual lengths, ... */
  details?: Record<string, unknown>;
  raw?: string;
  raw_b64?: string;
}
