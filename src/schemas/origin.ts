/** Where a record came from: enough to find its raw bytes again. */
export type Origin =
  | { kind: "file"; file: string; line: number }
  | { kind: "kafka"; topic: string; partition: number; offset: string }
  /** A trajectory row that a later stage (a reward stage) rejected, by its key `uid_session_index`. */
  | { kind: "trajectory"; key: string };

/** `file:line` or `topic/partition@offset`, for messages and logs. */
export function formatOrigin(origin: Origin): string {
  if (origin.kind === "file") return `${origin.file}:${origin.line}`;
  if (origin.kind === "kafka") return `${origin.topic}/${origin.partition}@${origin.offset}`;
  return `trajectory ${origin.key}`;
}

/** The input offset an origin names, where it names one (a Kafka record's); null for other inputs. */
export function originOffset(origin: Origin): number | null {
  return origin.kind === "kafka" ? Number(origin.offset) : null;
}
