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
  return new Scanner(text).run();
}

const quoted = (c: string) => JSON.stringify(c);

/** One pass over a text: punctuation by what is expected next, then the value or key found there. */
class Scanner {
  private readonly text: string;
  private readonly stack: Array<"[" | "{"> = [];
  private expect: Expect = "value";
  private lastComma = -1;
  private i = 0;

  constructor(text: string) {
    this.text = text;
  }

  run(): JsonSyntaxError | null {
    const { text } = this;
    while (true) {
      while (this.i < text.length && " \t\n\r".includes(text[this.i]!)) this.i++;
      if (this.i === text.length)
        return this.expect === "end" ? null : this.at(this.i, "the file ends before the JSON does");
      const c = text[this.i]!;
      if (c === "\uFEFF") return this.at(this.i, "a byte order mark; save the file as UTF-8 without one");
      const found = this.punctuation(c);
      if (found === "next") continue;
      const error = found === "value" ? this.token(c) : found;
      if (error !== null) return error;
    }
  }

  /** Where `offset` is (1-based line and column), with what is wrong there. */
  private at(offset: number, message: string): JsonSyntaxError {
    let line = 1;
    let lineStart = 0;
    for (let k = 0; k < offset; k++) {
      if (this.text.charCodeAt(k) === 10) {
        line++;
        lineStart = k + 1;
      }
    }
    return { line, column: offset - lineStart + 1, message };
  }

  private afterValue(): Expect {
    return this.stack.length === 0 ? "end" : "comma-or-close";
  }

  /**
   * What `c` is, given what is expected: punctuation taken ("next"), the start of a value or key
   * ("value"), or an error.
   */
  private punctuation(c: string): JsonSyntaxError | "next" | "value" {
    const { stack } = this;
    switch (this.expect) {
      case "end":
        return this.at(this.i, `${quoted(c)} after the end of the JSON value`);
      case "colon":
        if (c !== ":") return this.at(this.i, `expected ':' after the key, found ${quoted(c)}`);
        this.expect = "value";
        this.i++;
        return "next";
      case "comma-or-close": {
        const close = stack[stack.length - 1] === "[" ? "]" : "}";
        if (c === ",") {
          this.lastComma = this.i;
          this.expect = close === "]" ? "value" : "key";
        } else if (c === close) {
          stack.pop();
          this.expect = this.afterValue();
        } else {
          return this.at(this.i, `expected ',' or '${close}', found ${quoted(c)}`);
        }
        this.i++;
        return "next";
      }
      case "key-or-}":
      case "key":
        if (c === "}") {
          if (this.expect === "key") return this.at(this.lastComma, "a trailing comma before '}'");
          stack.pop();
          this.expect = this.afterValue();
          this.i++;
          return "next";
        }
        if (c !== '"') return this.at(this.i, `expected a quoted key, found ${quoted(c)}`);
        return "value";
      case "value":
      case "value-or-]":
        if (c === "]") {
          // Inside an array a value is expected (not "value-or-]") only after a comma.
          if (this.expect === "value" && stack[stack.length - 1] === "[")
            return this.at(this.lastComma, "a trailing comma before ']'");
          if (this.expect === "value-or-]") {
            stack.pop();
            this.expect = this.afterValue();
            this.i++;
            return "next";
          }
        }
        return "value";
    }
  }

  /** A value (or an object key, a string) starting at `c`; null when it is well formed. */
  private token(c: string): JsonSyntaxError | null {
    const { text } = this;
    if (c === '"') return this.string();
    if (this.expect === "key" || this.expect === "key-or-}")
      return this.at(this.i, `expected a quoted key, found ${quoted(c)}`);
    if (c === "{" || c === "[") {
      this.stack.push(c);
      this.expect = c === "{" ? "key-or-}" : "value-or-]";
      this.i++;
      return null;
    }
    const literal = ["true", "false", "null"].find((w) => text.startsWith(w, this.i));
    if (literal !== undefined) {
      this.i += literal.length;
      this.expect = this.afterValue();
      return null;
    }
    NUMBER.lastIndex = this.i;
    if ((c === "-" || (c >= "0" && c <= "9")) && NUMBER.test(text)) {
      this.i = NUMBER.lastIndex;
      this.expect = this.afterValue();
      return null;
    }
    return this.at(this.i, `expected a value, found ${quoted(c)}`);
  }

  private string(): JsonSyntaxError | null {
    const { text } = this;
    const start = this.i++;
    while (true) {
      if (this.i >= text.length) return this.at(start, "a string that never ends (a missing '\"')");
      const d = text.charCodeAt(this.i);
      if (d === 34) break;
      if (d < 32) return this.at(this.i, "a line break or control character inside a string; escape it");
      if (d === 92) {
        ESCAPE.lastIndex = this.i;
        if (!ESCAPE.test(text)) return this.at(this.i, "an invalid escape in a string");
        this.i = ESCAPE.lastIndex;
      } else {
        this.i++;
      }
    }
    this.i++;
    this.expect = this.expect === "key" || this.expect === "key-or-}" ? "colon" : this.afterValue();
    return null;
  }
}
