import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { after, describe, it } from "node:test";
import { readJsonl } from "./jsonl.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-jsonl-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

async function lines(path: string): Promise<Array<[number, string]>> {
  const out: Array<[number, string]> = [];
  for await (const r of readJsonl({ paths: [path] })) {
    out.push([(r.origin as { line: number }).line, Buffer.from(r.raw as Uint8Array).toString()]);
  }
  return out;
}

describe("readJsonl", () => {
  // Lines longer than a read (1 MiB) span chunks; short ones share them; blank lines count but are
  // skipped; the last line may lack its newline. Plain and gzip alike.
  const long = (n: number, c: string) => `{"x":"${c.repeat(n)}"}`;
  const text = ["{}", "", long(3 << 20, "a"), "  ", long(10, "b"), long((1 << 20) - 3, "c"), '{"end":1}'];
  const expected = text.map((t, i) => [i + 1, t] as [number, string]).filter(([, t]) => t.trim() !== "");

  it("yields every line with its number, across chunk boundaries, from a plain file", async () => {
    const path = join(scratch, "plain.jsonl");
    writeFileSync(path, text.join("\n"));
    assert.deepEqual(await lines(path), expected);
  });

  it("does the same from a gzip file", async () => {
    const path = join(scratch, "packed.jsonl.gz");
    writeFileSync(path, gzipSync(`${text.join("\n")}\n`));
    assert.deepEqual(await lines(path), expected);
  });

  it("keeps every record's bytes intact after later chunks were read", async () => {
    const path = join(scratch, "many.jsonl");
    const many = Array.from({ length: 5_000 }, (_, i) => JSON.stringify({ i, pad: "p".repeat(i % 700) }));
    writeFileSync(path, `${many.join("\n")}\n`);
    const records = [];
    for await (const r of readJsonl({ paths: [path] })) records.push(r);
    assert.deepEqual(
      records.map((r) => Buffer.from(r.raw as Uint8Array).toString()),
      many,
    );
  });
});
