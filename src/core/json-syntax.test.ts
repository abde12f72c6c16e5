import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { jsonSyntaxError } from "./json-syntax.ts";

describe("jsonSyntaxError", () => {
  it("says where a hand-written file breaks, in words", () => {
    const cases: Array<[string, string]> = [
      ['{\n  "a": [1, 2,]\n}', "2:13 a trailing comma before ']'"],
      ['{\n  "a": 1,\n}', "2:9 a trailing comma before '}'"],
      ['{"a" 1}', "1:6 expected ':' after the key, found \"1\""],
      ["{a: 1}", '1:2 expected a quoted key, found "a"'],
      ['{"a": "x\ny"}', "1:9 a line break or control character inside a string; escape it"],
      ['{"a": "\\q"}', "1:8 an invalid escape in a string"],
      ['{"a": "open', "1:7 a string that never ends (a missing '\"')"],
      ['{"a": [1 2]}', "1:10 expected ',' or ']', found \"2\""],
      ['{"a": 1} x', '1:10 "x" after the end of the JSON value'],
      ['{"a": [', "1:8 the file ends before the JSON does"],
      ["\uFEFF{}", "1:1 a byte order mark; save the file as UTF-8 without one"],
      ['{"a": tru}', '1:7 expected a value, found "t"'],
      ["", "1:1 the file ends before the JSON does"],
    ];
    for (const [text, expected] of cases) {
      const found = jsonSyntaxError(text);
      assert.equal(found === null ? null : `${found.line}:${found.column} ${found.message}`, expected, text);
    }
  });

  it("accepts exactly what JSON.parse accepts (mutated documents)", () => {
    const base =
      '{"stages": [{"type": "env", "name": "a\\u00e9\\"", "w": -1.5e3}, [true, false, null, 0]], "x": {}}';
    const alphabet = [
      '"',
      ",",
      ":",
      "[",
      "]",
      "{",
      "}",
      " ",
      "\n",
      "0",
      "-",
      "e",
      ".",
      "\\",
      "t",
      "n",
      "x",
      "\t",
    ];
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    for (let k = 0; k < 20_000; k++) {
      let text = base;
      for (let m = 1 + rand(3); m > 0; m--) {
        const at = rand(text.length + 1);
        const op = rand(3);
        const ch = alphabet[rand(alphabet.length)]!;
        text =
          op === 0
            ? text.slice(0, at) + ch + text.slice(at)
            : op === 1
              ? text.slice(0, at) + text.slice(at + 1)
              : text.slice(0, at) + ch + text.slice(at + 1);
      }
      let valid = true;
      try {
        JSON.parse(text);
      } catch {
        valid = false;
      }
      assert.equal(jsonSyntaxError(text) === null, valid, text);
    }
  });

  it("scans nesting 100,000 deep without recursion", () => {
    assert.equal(jsonSyntaxError("[".repeat(100_000) + "]".repeat(100_000)), null);
    assert.equal(jsonSyntaxError("[".repeat(100_000))?.message, "the file ends before the JSON does");
  });
});
