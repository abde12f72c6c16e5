/**
 * Where a JSON text first breaks, for configuration files given by hand. V8's JSON.parse names a line
 * for some errors and only quotes the text for others ("Unexpected token ']', ..." for a trailing comma),
 * so after JSON.parse fails this scanner finds the place and says what is wrong there in words a person
 * fixing the file can use. Iterative: nesting depth costs no stack.
 */

export interface JsonSyntaxError {
  /** 1-based. */
  line: number;
  column: number;
  message: string;
}

type Expect = "value" | "value-or-]" | "key-or-}" | "key" | "colon" | "comma-or-close" | "end";

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const ESCAPE = /\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})/y;

/** The first syntax error of `text`, or null when it is valid JSON. */
export function jsonSyntaxError(text: string): JsonSyntaxError | null {
  const stack: Array<"[" | "{"> = [];
  let expect: Expect = "value";
  let lastComma = -1;
  let i = 0;
  const at = (offset: number, message: string): JsonSyntaxError => {
    let line = 1;
    let lineStart = 0;
    for (let k = 0; k < offset; k++) {
      if (text.charCodeAt(k) === 10) {
        line++;
        lineStart = k + 1;
      }
    }
    return { line, column: offset - lineStart + 1, message };
  };
  const afterValue = (): Expect => (stack.length === 0 ? "end" : "comma-or-close");
  const quoted = (c: string) => JSON.stringify(c);

  while (true) {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
    if (i === text.length) return expect === "end" ? null : at(i, "the file ends before the JSON does");
    const c = text[i]!;
    if (c === "\uFEFF") return at(i, "a byte order mark; save the file as UTF-8 without one");
    switch (expect) {
      case "end":
        return at(i, `${quoted(c)} after the end of the JSON value`);
      case "colon":
        if (c !== ":") return at(i, `expected ':' after the key, found ${quoted(c)}`);
        expect = "value";
        i++;
        continue;
      case "comma-or-close": {
        const close = stack[stack.length - 1] === "[" ? "]" : "}";
        if (c === ",") {
          lastComma = i;
          expect = close === "]" ? "value" : "key";
          i++;
        } else if (c === close) {
          stack.pop();
          expect = afterValue();
          i++;
        } else {
          return at(i, `expected ',' or '${close}', found ${quoted(c)}`);
        }
        continue;
      }
      case "key-or-}":
      case "key":
        if (c === "}") {
          if (expect === "key") return at(lastComma, "a trailing comma before '}'");
          stack.pop();
          expect = afterValue();
          i++;
          continue;
        }
        if (c !== '"') return at(i, `expected a quoted key, found ${quoted(c)}`);
        break;
      case "value":
      case "value-or-]":
        if (c === "]") {
          // Inside an array a value is expected (not "value-or-]") only after a comma.
          if (expect === "value" && stack[stack.length - 1] === "[")
            return at(lastComma, "a trailing comma before ']'");
          if (expect === "value-or-]") {
            stack.pop();
            expect = afterValue();
            i++;
            continue;
          }
        }
        break;
    }
    // A value (or an object key, a string).
    if (c === '"') {
      const start = i++;
      while (true) {
        if (i >= text.length) return at(start, "a string that never ends (a missing '\"')");
        const d = text.charCodeAt(i);
        if (d === 34) break;
        if (d < 32) return at(i, "a line break or control character inside a string; escape it");
        if (d === 92) {
          ESCAPE.lastIndex = i;
          if (!ESCAPE.test(text)) return at(i, "an invalid escape in a string");
          i = ESCAPE.lastIndex;
        } else {
          i++;
        }
      }
      i++;
      expect = expect === "key" || expect === "key-or-}" ? "colon" : afterValue();
      continue;
    }
    if (expect === "key" || expect === "key-or-}") return at(i, `expected a quoted key, found ${quoted(c)}`);
    if (c === "{" || c === "[") {
      stack.push(c);
      expect = c === "{" ? "key-or-}" : "value-or-]";
      i++;
      continue;
    }
    const literal = ["true", "false", "null"].find((w) => text.startsWith(w, i));
    if (literal !== undefined) {
      i += literal.length;
      expect = afterValue();
      continue;
    }
    NUMBER.lastIndex = i;
    if ((c === "-" || (c >= "0" && c <= "9")) && NUMBER.test(text)) {
      i = NUMBER.lastIndex;
      expect = afterValue();
      continue;
    }
    return at(i, `expected a value, found ${quoted(c)}`);
  }
}
