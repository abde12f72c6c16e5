/** Reading an engine's error answers: its message, and whether it says the prompt was too long. */

/**
 * Whether an engine's 400 says the prompt is longer than its context: llama.cpp's `exceed_context_size_error`,
 * vLLM's "maximum context length is", SGLang's "longer than the model's context length".
 */
export function contextOverflow(body: Buffer, message: string): boolean {
  return body.includes("exceed_context_size_error") || /context (length|size|window)/i.test(message);
}

/** The message of an engine's error body (vLLM's `message`, llama.cpp's and SGLang's `error.message`). */
export function engineMessage(body: Buffer): string {
  const text = body.toString("utf8");
  try {
    const v = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } | string };
    if (typeof v.error === "object" && typeof v.error?.message === "string") return v.error.message;
    if (typeof v.error === "string") return v.error;
    if (typeof v.message === "string") return v.message;
  } catch {
    // not JSON: the text as it is
  }
  return text.slice(0, 2000);
}
