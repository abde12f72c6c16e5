/** Where a record came from: enough to find its raw bytes again. */
export type Origin =
  | { kind: "file"; file: string; line: number }
  | { kind: "kafka"; topic: string; partition: number; offset: string };

/** `file:line` or `topic/partition@offset`, for messages and logs. */
export function formatOrigin(origin: Origin): string {
  return origin.kind === "file"
    ? `${origin.file}:${origin.line}`
    : `${origin.topic}/${origin.partition}@${origin.offset}`;
}
