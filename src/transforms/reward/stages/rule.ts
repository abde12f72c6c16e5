/**
 * `rule`: compares the final response (its text, or its last tool call's arguments) with a reference from
 * `session.start.metadata`, for math and QA style tasks: exact match, regex, or numeric comparison, with an
 * optional length penalty. Items without a reference are skipped, not scored.
 */
import { z } from "zod";
import type { RewardItem, RewardOutcome, RewardStage, RewardStageType } from "../contract.ts";

export const ruleStageOptionsSchema = z.strictObject({
  mode: z
    .enum(["exact", "regex", "numeric"])
    .describe(
      "exact: the answer equals the reference; regex: the reference is a pattern the answer must match; " +
        "numeric: both parse as numbers within `tolerance`.",
    ),
  reference_key: z
    .string()
    .default("answer")
    .describe("Key of the reference in session.start.metadata (dots reach nested keys: `task.answer`)."),
  source: z
    .enum(["text", "tool_call"])
    .default("text")
    .describe("Compare the final response text, or the JSON arguments of its last tool call."),
  extract: z
    .string()
    .optional()
    .describe(
      "Regex applied to the response first; its first capture group (or match) is the answer. It runs on " +
        "the last max_answer_chars characters only, so a hostile response cannot make it backtrack for long.",
    ),
  last_number: z
    .boolean()
    .default(false)
    .describe(
      "Take the last number in the response as the answer (a linear scan, no regex): the usual math " +
        "extraction, safe on any input. Applied before `extract` when both are given.",
    ),
  max_answer_chars: z
    .int()
    .positive()
    .default(4_096)
    .describe("Only the response's last this many characters are examined (final answers come last)."),
  case_sensitive: z.boolean().default(false).describe("exact mode: compare case-sensitively."),
  tolerance: z.number().nonnegative().default(1e-6).describe("numeric mode: largest accepted |a - b|."),
  score_match: z.number().default(1).describe("Score of a correct answer."),
  score_miss: z.number().default(0).describe("Score of a wrong or missing answer."),
  length_penalty: z
    .strictObject({
      target_tokens: z.int().nonnegative().describe("Trained tokens allowed before the penalty starts."),
      per_token: z.number().nonnegative().describe("Subtracted per trained token beyond the target."),
    })
    .optional()
    .describe("Subtracts per_token x max(0, trained tokens - target_tokens) from the score."),
});
export type RuleStageOptions = z.output<typeof ruleStageOptionsSchema>;

function lookup(metadata: Record<string, unknown> | null, path: string): unknown {
  let v: unknown = metadata;
  for (const part of path.split(".")) {
    if (typeof v !== "object" || v === null) return undefined;
    // Own keys only: metadata comes from events, and "constructor" must not reach Object.prototype.
    v = Object.hasOwn(v, part) ? (v as Record<string, unknown>)[part] : undefined;
  }
  return v;
}

/** The last number (`-12`, `3.5`, `1,234`) in `text`, found scanning back from its end; null if none. */
export function lastNumber(text: string): string | null {
  const isDigit = (c: number) => c >= 48 && c <= 57;
  let end = text.length;
  while (end > 0 && !isDigit(text.charCodeAt(end - 1))) end--;
  if (end === 0) return null;
  let start = end;
  for (;;) {
    while (start > 0 && isDigit(text.charCodeAt(start - 1))) start--;
    const sep = start > 1 ? text.charCodeAt(start - 1) : -1;
    // A decimal point or thousands separator between digits belongs to the number.
    if ((sep === 46 || sep === 44) && isDigit(text.charCodeAt(start - 2))) start--;
    else break;
  }
  if (start > 0 && text.charCodeAt(start - 1) === 45) start--;
  return text.slice(start, end);
}

function responseOf(item: RewardItem, source: RuleStageOptions["source"]): string | null {
  if (source === "text") return item.final_text;
  const calls = item.final_tool_calls;
  if (calls === null || calls.length === 0) return null;
  const last = calls[calls.length - 1] as { function?: { arguments?: unknown } } | undefined;
  const args = last?.function?.arguments;
  return typeof args === "string" ? args : args === undefined ? null : JSON.stringify(args);
}

const normalise = (s: string, caseSensitive: boolean) => {
  const t = s.trim().replace(/\s+/g, " ");
  return caseSensitive ? t : t.toLowerCase();
};

export function ruleStage(options: RuleStageOptions): RewardStage {
  const extract = options.extract === undefined ? null : new RegExp(options.extract, "s");
  const judge = (item: RewardItem): RewardOutcome => {
    const reference = lookup(item.metadata, options.reference_key);
    if (reference === undefined || reference === null) {
      return { kind: "skip", reason: `no ${options.reference_key} in session.start.metadata` };
    }
    let answer = responseOf(item, options.source);
    if (answer !== null && answer.length > options.max_answer_chars)
      answer = answer.slice(answer.length - options.max_answer_chars);
    if (answer !== null && options.last_number) answer = lastNumber(answer);
    if (answer !== null && extract !== null) {
      const m = extract.exec(answer);
      answer = m === null ? null : (m[1] ?? m[0]);
    }
    let correct = false;
    if (answer !== null) {
      if (options.mode === "exact") {
        correct =
          normalise(answer, options.case_sensitive) === normalise(String(reference), options.case_sensitive);
      } else if (options.mode === "regex") {
        correct = new RegExp(String(reference)).test(answer);
      } else {
        const a = Number(answer.trim().replaceAll(",", ""));
        const b = Number(reference);
        correct = Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= options.tolerance;
      }
    }
    const base = correct ? options.score_match : options.score_miss;
    let penalty = 0;
    if (options.length_penalty !== undefined) {
      const trained = item.rows.reduce((n, r) => n + r.num_trained_tokens, 0);
      penalty =
        options.length_penalty.per_token * Math.max(0, trained - options.length_penalty.target_tokens);
    }
    return {
      kind: "score",
      score: base - penalty,
      components: { correct: correct ? 1 : 0, length_penalty: penalty },
      info: { answer },
    };
  };
  return { score: async (items) => items.map(judge) };
}

export const ruleStageType = {
  description: "compares the final response with a reference from session.start.metadata",
  fields: { options: ruleStageOptionsSchema },
  scope: "session",
  build: (c: { options: RuleStageOptions }) => ruleStage(c.options),
} satisfies RewardStageType<{ options: RuleStageOptions }>;
