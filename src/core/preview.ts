/**
 * A short description of a JSON value for an error message. Never recursive: a value nested 100,000 levels
 * deep (hostile input) must not overflow the stack, as `JSON.stringify` of it does.
 */
export function preview(value: unknown, maxChars = 40): string {
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (value !== null && typeof value === "object") return "an object";
  if (typeof value === "string" && value.length > maxChars)
    return `${JSON.stringify(value.slice(0, maxChars)).slice(0, -1)}…" (${value.length} characters)`;
  return JSON.stringify(value) ?? String(value);
}
