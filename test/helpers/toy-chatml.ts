/**
 * A toy ChatML template and tokenizer for the prompt-mode unit tests (src/gateway/continuation/*.test.ts):
 * messages rendered as `<|im_start|>role\ncontent<|im_end|>\n` with the generation prompt
 * `<|im_start|>assistant\n`, and one id per UTF-16 code unit, `<|im_start|>` and `<|im_end|>` being 1000 and
 * 1001. The units under test match and splice ids; a deterministic toy shows exactly which ids they chose.
 * The real tokenizer and template are checked against llama.cpp in test/gateway-continuation.test.ts.
 */
export const START = 1000;
export const END = 1001;
export const SPECIAL: Array<[string, number]> = [
  ["<|im_start|>", START],
  ["<|im_end|>", END],
];

/** The settings key (continuation/history.ts) of a call without chat_template_kwargs or reasoning_effort. */
export const NO_SETTINGS = '{"chat_template_kwargs":{},"reasoning_effort":null}';

export function toyTokenize(text: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < text.length;) {
    const special = SPECIAL.find(([s]) => text.startsWith(s, i));
    if (special !== undefined) {
      out.push(special[1]);
      i += special[0].length;
    } else out.push(text.charCodeAt(i++));
  }
  return out;
}

/** A token's text: a special token's, or its code unit. */
export const toyPiece = (id: number) => SPECIAL.find(([, i]) => i === id)?.[0] ?? String.fromCharCode(id);

function contentOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p as { text: string }).text).join("");
  return "";
}

export function chatml(body: Record<string, unknown>): string {
  const messages = (body.messages ?? []) as Array<{ role: string; content: unknown }>;
  return (
    messages.map((m) => `<|im_start|>${m.role}\n${contentOf(m.content)}<|im_end|>\n`).join("") +
    "<|im_start|>assistant\n"
  );
}
