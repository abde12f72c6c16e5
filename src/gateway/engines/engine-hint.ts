/**
 * The wrong engine named: an answer that lacks the ids the chosen adapter reads but has another engine's
 * own marks (llama.cpp's `timings`, SGLang's `meta_info`) was most likely served by that engine, and the
 * fix is a flag, not the engine's setup.
 */
import type { Logger } from "../../core/logger.ts";
import type { EngineName } from "./engine.ts";

const MARKS: { engine: EngineName; what: string; has: (answer: Record<string, unknown>) => boolean }[] = [
  { engine: "llamacpp", what: "llama.cpp", has: (a) => typeof a.timings === "object" && a.timings !== null },
  {
    engine: "sglang",
    what: "SGLang",
    has: (a) =>
      typeof a.meta_info === "object" ||
      (Array.isArray(a.choices) &&
        a.choices.some((c) => typeof (c as Record<string, unknown> | null)?.meta_info === "object")),
  },
];

/** "this looks like llama.cpp's answer: use --engine llamacpp", or null when nothing points elsewhere. */
export function engineHint(chosen: EngineName, answer: unknown): string | null {
  if (typeof answer !== "object" || answer === null) return null;
  const mark = MARKS.find((m) => m.engine !== chosen && m.has(answer as Record<string, unknown>));
  return mark === undefined ? null : `this looks like ${mark.what}'s answer: use --engine ${mark.engine}`;
}

let hinted = false;

/**
 * What a call whose answer had no prompt ids is told: the engine to use where the answer looks like
 * another's (logged once per process: every call would say the same), else to check the engine's flags.
 */
export function unrecordedMessage(chosen: EngineName, answer: unknown, logger: Logger): string {
  const hint = engineHint(chosen, answer);
  if (hint !== null && !hinted) {
    hinted = true;
    logger.warn({ engine: chosen }, `The engine's answers have no prompt token ids, and ${hint}.`);
  }
  return (
    "the engine's answer had no prompt token ids, so the call cannot be recorded; " +
    (hint !== null ? `${hint} (docs/engines.md)` : "check the engine and its flags (docs/engines.md)")
  );
}
