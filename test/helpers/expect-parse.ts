/**
 * Test support for the parser tests: checks a text's whole parse against the expected answer, then checks
 * that streaming the same text, cut at every position into pieces of 1, 3 and 7 chars (and into two pieces
 * at every position), folds to exactly the same answer.
 */
import assert from "node:assert/strict";
import { collectDeltas, type OutputParser, type ParsedOutput } from "../../src/gateway/parsers/parser.ts";

function pieces(text: string, size: number, first: number): string[] {
  const out = first > 0 ? [text.slice(0, first)] : [];
  for (let i = first; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function streamed(parser: OutputParser, parts: string[]): ParsedOutput {
  const s = parser.stream();
  return collectDeltas([...parts.flatMap((p) => s.push(p)), ...s.end()]);
}

export function expectParse(parser: OutputParser, text: string, expected: ParsedOutput): void {
  assert.deepEqual(parser.parse(text), expected);
  for (const size of [1, 3, 7])
    for (let first = 0; first < size; first++)
      assert.deepEqual(
        streamed(parser, pieces(text, size, first)),
        expected,
        `pieces of ${size} from ${first}`,
      );
  for (let cut = 0; cut <= text.length; cut++)
    assert.deepEqual(streamed(parser, [text.slice(0, cut), text.slice(cut)]), expected, `cut at ${cut}`);
}

/** Compact arguments text, as the parsers produce it. */
export const args = (value: Record<string, unknown>): string => JSON.stringify(value);
