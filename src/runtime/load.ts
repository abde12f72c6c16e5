/**
 * Reading a pipeline file: YAML (JSON is YAML too), `${VAR}` / `${VAR:-default}` environment interpolation
 * in string values, and `--set path=value` overrides. Problems are collected with where they are
 * (`file:line: path: message`), never thrown one at a time.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type * as Yaml from "yaml";
import type { Document, LineCounter, Scalar, YAMLMap, YAMLSeq } from "yaml";

/**
 * yaml, loaded when a pipeline file is first read: the commands that take no YAML (consume, the gateway)
 * start without its 73 modules.
 */
const yaml = (): typeof Yaml => createRequire(import.meta.url)("yaml") as typeof Yaml;

function isNode(node: unknown): node is Scalar | YAMLMap | YAMLSeq {
  const { isMap, isScalar, isSeq } = yaml();
  return isScalar(node) || isMap(node) || isSeq(node);
}

export interface LoadedPipeline {
  file: string;
  /** The document as plain data; null when the file could not be read or parsed. */
  value: unknown;
  /** `file:line` of a path in the document, or just `file` when the path is not in it. */
  where(path: ReadonlyArray<string | number>): string;
}

const VAR = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/** A scalar written in YAML syntax (`--set x=3` gives a number, `--set x=true` a boolean). */
function scalar(text: string): unknown {
  const doc = yaml().parseDocument(text);
  if (doc.errors.length > 0) return text;
  try {
    return doc.toJS() as unknown;
  } catch {
    return text; // an alias bomb: taken as the string it is
  }
}

type Problem = { path: Array<string | number>; message: string };

function interpolate(
  value: unknown,
  path: Array<string | number>,
  env: NodeJS.ProcessEnv,
  problems: Problem[],
): unknown {
  if (typeof value === "string") {
    let missing = false;
    const replaced = value.replace(VAR, (_, name: string, fallback: string | undefined) => {
      const v = env[name];
      if (v !== undefined && v !== "") return v;
      if (fallback !== undefined) return fallback;
      missing = true;
      problems.push({
        path,
        message: `environment variable ${name} is not set (write \${${name}:-default} for a default)`,
      });
      return "";
    });
    // Always a string, inserted after parsing: a password `123456` or `pa ss #word` stays as it is. Where
    // a component expects a number or a boolean, the plan reads the string as one (typedFromString).
    return missing ? value : replaced;
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, [...path, i], env, problems));
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]): [string, unknown] => [
        k,
        interpolate(v, [...path, k], env, problems),
      ]),
    );
  }
  return value;
}

/** Applies `a.b.c=value` (objects are created along the path; a numeric segment indexes an array). */
function applySet(root: Record<string, unknown>, assignment: string, problems: string[]): void {
  const eq = assignment.indexOf("=");
  if (eq <= 0) {
    problems.push(`--set ${assignment}: expected path=value, e.g. sinks.files.path=/data/out`);
    return;
  }
  const path = assignment.slice(0, eq).split(".");
  // Setting these would change every object of the process (prototype pollution), not the pipeline.
  const bad = path.find((p) => p === "__proto__" || p === "constructor" || p === "prototype" || p === "");
  if (bad !== undefined) {
    problems.push(`--set ${assignment}: ${JSON.stringify(bad)} is not a pipeline key`);
    return;
  }
  let node: Record<string, unknown> = root;
  for (const part of path.slice(0, -1)) {
    const next = Object.hasOwn(node, part) ? node[part] : undefined;
    if (typeof next !== "object" || next === null) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[path[path.length - 1]!] = scalar(assignment.slice(eq + 1));
}

/** `file:line` of the deepest node of a path that exists in the document (`file` when none does). */
function locator(
  file: string,
  doc: Document,
  lines: LineCounter,
): (path: ReadonlyArray<string | number>) => string {
  return (path) => {
    for (let n = path.length; n >= 0; n--) {
      const node = n === 0 ? doc.contents : doc.getIn(path.slice(0, n), true);
      const range = node !== undefined && node !== null && isNode(node) ? node.range : undefined;
      if (range !== undefined && range !== null) return `${file}:${lines.linePos(range[0]).line}`;
    }
    return file;
  };
}

/**
 * Where paths of a JSON document are (`file:line`), for files given beside a pipeline (`--rewards`), so
 * their problems point into them as a pipeline file's do.
 */
export function jsonLocator(file: string, text: string): (path: ReadonlyArray<string | number>) => string {
  const { LineCounter: Lines, parseDocument } = yaml();
  const lines = new Lines();
  const doc = parseDocument(text, { lineCounter: lines });
  return doc.errors.length > 0 ? () => file : locator(file, doc, lines);
}

/** `:line` of the document's first alias, or "". */
function aliasLine(doc: Document, lines: LineCounter): string {
  let at: number | undefined;
  const { visit } = yaml();
  visit(doc, {
    Alias(_key, node) {
      at = node.range?.[0];
      return visit.BREAK;
    },
  });
  return at === undefined ? "" : `:${lines.linePos(at).line}`;
}

export function loadPipeline(
  file: string,
  options: { set?: string[]; env?: NodeJS.ProcessEnv } = {},
): { pipeline: LoadedPipeline; problems: string[] } {
  const problems: string[] = [];
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    return {
      pipeline: { file, value: null, where: () => file },
      problems: [`${file}: cannot read: ${(err as Error).message}`],
    };
  }
  const { LineCounter: Lines, parseDocument } = yaml();
  const lines = new Lines();
  const doc: Document = parseDocument(text, { lineCounter: lines, prettyErrors: true });
  for (const e of doc.errors) {
    const at = e.linePos?.[0];
    problems.push(`${file}${at === undefined ? "" : `:${at.line}`}: ${e.message.split("\n")[0]}`);
  }
  const where = locator(file, doc, lines);
  if (doc.errors.length > 0) return { pipeline: { file, value: null, where: () => file }, problems };
  let value: unknown;
  try {
    value = doc.toJS();
  } catch (err) {
    // yaml refuses to expand an alias bomb (aliases of aliases, billions of nodes once expanded).
    return {
      pipeline: { file, value: null, where: () => file },
      problems: [`${file}${aliasLine(doc, lines)}: ${(err as Error).message}; expand the aliases by hand`],
    };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    if (doc.errors.length === 0)
      problems.push(`${file}: a pipeline is a mapping with sources, transforms and sinks`);
    value = {};
  }
  const unset: Problem[] = [];
  value = interpolate(value, [], options.env ?? process.env, unset);
  for (const p of unset) problems.push(`${where(p.path)}: ${p.path.join(".")}: ${p.message}`);
  for (const s of options.set ?? []) applySet(value as Record<string, unknown>, s, problems);
  return { pipeline: { file, value, where }, problems };
}
