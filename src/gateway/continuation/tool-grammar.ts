/**
 * A GBNF grammar (llama.cpp's `grammar`) that admits exactly one tool call in the model family's format,
 * its arguments following the tool's JSON Schema: what makes `tool_choice: required` (or a named tool) hold
 * when the prompt goes to the engine as ids, where the chat route's own grammar is not applied.
 *
 * The schema subset covers what tool definitions use: objects with properties (required ones always, the
 * others optional, in the schema's order), strings, numbers, integers, booleans, null, enums and consts,
 * arrays, anyOf/oneOf; anything else is any JSON value. Whitespace is fixed (none), which is valid JSON and
 * what the formats' own examples show.
 */

/** How a format wraps one call's JSON object, and the key its arguments go under. */
export interface CallLayout {
  open: string;
  close: string;
  argumentsKey: string;
}

/** The layouts of the JSON-based formats (parsers/): the others fall back to the engine's chat route. */
export const CALL_LAYOUTS: Record<string, CallLayout> = {
  hermes: { open: "<tool_call>", close: "</tool_call>", argumentsKey: "arguments" },
  llama3_json: { open: "", close: "", argumentsKey: "parameters" },
  mistral: { open: "[TOOL_CALLS][", close: "]", argumentsKey: "arguments" },
};

interface Tool {
  name: string;
  parameters: unknown;
}

/** The tools a call may call: all of them, or the one `tool_choice` names. */
export function forcedTools(body: Record<string, unknown>): Tool[] {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const out: Tool[] = [];
  for (const t of tools) {
    const f = (t as { function?: { name?: unknown; parameters?: unknown } } | null)?.function;
    if (typeof f?.name === "string") out.push({ name: f.name, parameters: f.parameters ?? {} });
  }
  const choice = body.tool_choice as { function?: { name?: unknown } } | undefined;
  const named = typeof choice === "object" && choice !== null ? choice.function?.name : undefined;
  return typeof named === "string" ? out.filter((t) => t.name === named) : out;
}

/** Whether the call forces a tool call (tool_choice required, or a named function). */
export function forcesToolCall(body: Record<string, unknown>): boolean {
  const c = body.tool_choice;
  return c === "required" || (typeof c === "object" && c !== null);
}

const literal = (text: string) => JSON.stringify(text);

const BASE_RULES = [
  `ws ::= ""`,
  `string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""`,
  `number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?`,
  `integer ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} )`,
  `boolean ::= "true" | "false"`,
  `null ::= "null"`,
  `value ::= object | array | string | number | boolean | null`,
  `object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"`,
  `array ::= "[" ( value ( "," value )* )? "]"`,
];

/** The grammar of one call of any of `tools` in `layout`. */
export function toolCallGrammar(tools: Tool[], layout: CallLayout): string {
  const rules: string[] = [];
  let next = 0;
  const rule = (body: string): string => {
    const name = `r${next++}`;
    rules.push(`${name} ::= ${body}`);
    return name;
  };
  const schema = (s: unknown): string => {
    if (typeof s !== "object" || s === null) return "value";
    const o = s as Record<string, unknown>;
    if ("const" in o) return rule(literal(JSON.stringify(o.const)));
    if (Array.isArray(o.enum))
      return rule(o.enum.map((v) => literal(JSON.stringify(v))).join(" | ") || "null");
    const anyOf = (o.anyOf ?? o.oneOf) as unknown;
    if (Array.isArray(anyOf) && anyOf.length > 0) return rule(anyOf.map(schema).join(" | "));
    const type = Array.isArray(o.type) ? o.type : [o.type];
    const alternatives = type.map((t) => typed(t, o));
    return alternatives.length === 1 ? alternatives[0]! : rule(alternatives.join(" | "));
  };
  const typed = (t: unknown, o: Record<string, unknown>): string => {
    switch (t) {
      case "string":
        return "string";
      case "integer":
        return "integer";
      case "number":
        return "number";
      case "boolean":
        return "boolean";
      case "null":
        return "null";
      case "array":
        if (o.items === undefined) return "array";
        return arrayRule(schema(o.items));
      case "object":
        return objectRule(o);
      default:
        return "value";
    }
  };
  const arrayRule = (item: string) => rule(`"[" ( ${item} ( "," ${item} )* )? "]"`);
  const objectRule = (o: Record<string, unknown>): string => {
    const props = (o.properties ?? {}) as Record<string, unknown>;
    const keys = Object.keys(props);
    if (keys.length === 0)
      return o.additionalProperties === false || o.properties !== undefined ? rule(`"{}"`) : "object";
    const required = new Set(Array.isArray(o.required) ? (o.required as string[]) : []);
    // Key order does not matter in JSON: required keys first (so each later key takes a comma), then the
    // optional ones, each written or not.
    const item = (k: string) => `${literal(JSON.stringify(k) + ":")} ${schema(props[k])}`;
    const req = keys.filter((k) => required.has(k)).map(item);
    const opt = keys.filter((k) => !required.has(k)).map(item);
    const optionalAfter = (from: number) =>
      opt
        .slice(from)
        .map((i) => ` ( "," ${i} )?`)
        .join("");
    let body: string;
    if (req.length > 0) body = ` ${req.join(' "," ')}${optionalAfter(0)}`;
    // No required key: whichever optional key is written first takes no comma.
    else body = ` ( ${opt.map((i, at) => `${i}${optionalAfter(at + 1)}`).join(" | ")} )?`;
    return rule(`"{"${body} "}"`);
  };
  const calls = tools.map((t) =>
    rule(
      `${literal(`${layout.open}{"name":${JSON.stringify(t.name)},"${layout.argumentsKey}":`)} ${schema(t.parameters)} ${literal(`}${layout.close}`)}`,
    ),
  );
  return [`root ::= ${calls.join(" | ") || "null"}`, ...rules, ...BASE_RULES].join("\n");
}
