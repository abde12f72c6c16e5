/**
 * The layout's rules (issue 22), checked on the imports of every source file, so they hold as the tree
 * grows: only the Kafka layer (src/kafka/) imports the Kafka clients (kafkajs, @confluentinc/kafka-javascript), sources and sinks never import each other
 * (what both need lives below them: src/contract, src/core, src/schemas, src/kafka), the runtime
 * knows components only through the registry (their traits and roles, never their types) and knows no
 * Kafka, no module imports itself through others (an import circle), and every unit is one a reader can
 * hold (issue 37 item 6): no file over 500 lines, no function over 80.
 */
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { it } from "node:test";
import ts from "typescript";

const SRC = new URL("../src/", import.meta.url).pathname;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
  );
}

/**
 * Every module a file imports (static, dynamic, or through `require`) or starts as a worker
 * (`new URL("./worker.ts", ...)`), resolved against src/ when relative.
 */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specs = [...text.matchAll(/(?:from|import|require|new URL)\s*\(?\s*"([^"]+)"/g)].map((m) => m[1]!);
  return specs.map((s) => (s.startsWith(".") ? relative(SRC, join(file, "..", s)) : s));
}

const files = sourceFiles(SRC).map((f) => ({ path: relative(SRC, f), imports: importsOf(f) }));

/** The Kafka client libraries (a package or one of its files). */
const KAFKA_CLIENT = /^(kafkajs|@confluentinc\/kafka-javascript)(\/|$)/;

it("lets only the Kafka layer import the Kafka clients", () => {
  const outside = files.filter(
    (f) => !f.path.startsWith("kafka/") && f.imports.some((i) => KAFKA_CLIENT.test(i)),
  );
  assert.deepEqual(
    outside.map((f) => f.path),
    [],
  );
});

it("keeps sources and sinks from importing each other", () => {
  const crossing = files.flatMap((f) => {
    const [top] = f.path.split("/");
    const other = top === "sources" ? "sinks/" : top === "sinks" ? "sources/" : null;
    return other === null ? [] : f.imports.filter((i) => i.startsWith(other)).map((i) => `${f.path} → ${i}`);
  });
  assert.deepEqual(crossing, []);
});

/** Folders of components and of what only components use (the Kafka client layer, the gateway). */
const COMPONENT_FOLDERS = /^(sources|sinks|transforms|kafka|gateway)\//;

it("keeps the runtime blind to component types: only the registry names components", () => {
  const runtime = files.filter((f) => f.path.startsWith("runtime/") && f.path !== "runtime/registry.ts");
  const reaching = runtime.flatMap((f) =>
    f.imports.filter((i) => COMPONENT_FOLDERS.test(i)).map((i) => `${f.path} → ${i}`),
  );
  assert.deepEqual(reaching, []);
  const asking = runtime.flatMap((f) => {
    const text = readFileSync(join(SRC, f.path), "utf8");
    const found = text.match(/\.type\s*[!=]==?\s*["']|instanceof\s+\w*(Component|Sink|Source)\b/g) ?? [];
    return found.map((m) => `${f.path}: ${m}`);
  });
  assert.deepEqual(asking, []);
  assert.ok(runtime.some((f) => f.path === "runtime/runtime.ts"));
});

it("keeps Kafka out of the runtime, the registry included: components resolve their own connections", () => {
  const reaching = files
    .filter((f) => f.path.startsWith("runtime/"))
    .flatMap((f) =>
      f.imports.filter((i) => i.startsWith("kafka/") || KAFKA_CLIENT.test(i)).map((i) => `${f.path} → ${i}`),
    );
  assert.deepEqual(reaching, []);
});

it("has no import circle anywhere under src/ (type-only and dynamic imports included)", () => {
  const graph = new Map(files.map((f) => [f.path, f.imports]));
  const state = new Map<string, "visiting" | "done">();
  const circles: string[] = [];
  const visit = (path: string, trail: string[]): void => {
    if (state.get(path) === "done") return;
    if (state.get(path) === "visiting") {
      circles.push([...trail.slice(trail.indexOf(path)), path].join(" → "));
      return;
    }
    state.set(path, "visiting");
    for (const i of graph.get(path)!) if (graph.has(i)) visit(i, [...trail, path]);
    state.set(path, "done");
  };
  for (const path of [...graph.keys()].sort()) visit(path, []);
  assert.deepEqual(circles, []);
});

it("holds in src/ only what the product runs: every module is reached from the CLI", () => {
  const graph = new Map(files.map((f) => [f.path, f.imports]));
  const reached = new Set<string>();
  const todo = ["cli/main.ts"];
  while (todo.length > 0) {
    const path = todo.pop()!;
    if (reached.has(path) || !graph.has(path)) continue;
    reached.add(path);
    todo.push(...graph.get(path)!);
  }
  const unreached = files
    .map((f) => f.path)
    // Declarations are for types.
    .filter((p) => !reached.has(p) && !p.endsWith(".test.ts") && !p.endsWith(".d.ts"));
  // Test models, PRNGs and test data live under test/, benchmark hooks nowhere.
  assert.deepEqual(unreached, []);
  assert.ok(reached.has("transforms/assemble/decode/worker.ts"), "workers count as reached");
});

it("finds the imports it checks (the scan is not vacuous)", () => {
  const client = files.find((f) => f.path === "kafka/client.ts");
  assert.ok(client?.imports.includes("kafkajs"));
  // librdkafka's addon is loaded with `require`, only when asked for.
  const binding = files.find((f) => f.path === "kafka/rdkafka-binding.ts");
  assert.ok(binding?.imports.includes("@confluentinc/kafka-javascript"), JSON.stringify(binding?.imports));
  const source = files.find((f) => f.path === "sources/kafka/source.ts");
  assert.ok(source?.imports.includes("kafka/client.ts"), JSON.stringify(source?.imports));
  // Type-only and dynamic imports count: the circle check sees them.
  const store = files.find((f) => f.path === "sinks/shared/open-store.ts");
  assert.ok(store?.imports.includes("sinks/shared/local-store.ts"), JSON.stringify(store?.imports));
  assert.ok(store?.imports.includes("sinks/shared/store.ts"), JSON.stringify(store?.imports));
});

it("keeps the gateway apart from the pipeline: it writes events and imports no component or the runtime", () => {
  const gateway = files.filter((f) => f.path.startsWith("gateway/"));
  const reaching = gateway.flatMap((f) =>
    f.imports
      .filter((i) => /^(sources|sinks|transforms|runtime|cli)\//.test(i))
      .map((i) => `${f.path} → ${i}`),
  );
  assert.deepEqual(reaching, []);
  assert.ok(gateway.some((f) => f.path === "gateway/server.ts"));
});

const MAX_FILE_LINES = 500;
const MAX_FUNCTION_LINES = 80;

/**
 * What is over the limits still, and why; an entry that no longer is must go (the test says so), so the
 * list only shrinks. Keys: a file's path under src/, or `path:function` (`Class.method` for methods).
 */
const OVERSIZED_ALLOWED: Record<string, string> = {};

/** Lines of every function-like node (methods as `Class.method`), with its name. */
function functionSizes(path: string, text: string): Array<{ key: string; lines: number }> {
  const sf = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const lineOf = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line;
  const out: Array<{ key: string; lines: number }> = [];
  const visit = (node: ts.Node, owner: string | undefined): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const parent = node.parent;
      const name = ts.isConstructorDeclaration(node)
        ? "constructor"
        : node.name !== undefined
          ? node.name.getText(sf)
          : ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)
            ? parent.name.getText(sf)
            : "<anonymous>";
      const lines = lineOf(node.getEnd()) - lineOf(node.getStart(sf)) + 1;
      out.push({ key: `${path}:${owner === undefined ? "" : `${owner}.`}${name}`, lines });
    }
    const next = ts.isClassDeclaration(node) ? node.name?.getText(sf) : owner;
    ts.forEachChild(node, (child) => visit(child, next));
  };
  visit(sf, undefined);
  return out;
}

it("keeps every file under src/ within 500 lines and every function within 80 (allow-listed ones aside)", () => {
  const oversized = new Map<string, number>();
  for (const f of files) {
    if (f.path.endsWith(".test.ts") || f.path.endsWith(".d.ts")) continue;
    const text = readFileSync(join(SRC, f.path), "utf8");
    const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
    if (lines > MAX_FILE_LINES) oversized.set(f.path, lines);
    for (const fn of functionSizes(f.path, text))
      if (fn.lines > MAX_FUNCTION_LINES) oversized.set(fn.key, fn.lines);
  }
  const unexpected = [...oversized]
    .filter(([key]) => !(key in OVERSIZED_ALLOWED))
    .map(([k, n]) => `${k}: ${n}`);
  assert.deepEqual(unexpected, [], "split these by responsibility");
  const stale = Object.keys(OVERSIZED_ALLOWED).filter((key) => !oversized.has(key));
  assert.deepEqual(stale, [], "within the limits now: remove them from OVERSIZED_ALLOWED");
});

/** Every file under `dir` whose name ends in one of `ends`, recursively. */
function filesUnder(dir: string, ends: string[]): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === "__pycache__" ? [] : filesUnder(path, ends);
    return ends.some((x) => e.name.endsWith(x)) ? [path] : [];
  });
}

it("gives every server a test starts a free port, never a fixed one (issue 67)", () => {
  const root = new URL("..", import.meta.url).pathname;
  const tests = [
    ...filesUnder(join(root, "test"), [".ts", ".py"]),
    ...filesUnder(join(root, "python/tests"), [".py"]),
  ];
  // A port written out where a test starts or calls its own server: KAFKA_PORT, --listen, a loopback URL.
  const FIXED = /KAFKA_PORT["']?\s*[:=]\s*["']\d+|(?:127\.0\.0\.1|localhost):\d{2,5}\b/;
  const fixed = tests.flatMap((file) =>
    readFileSync(file, "utf8")
      .split("\n")
      .flatMap((line, i) => (FIXED.test(line) ? [`${relative(root, file)}:${i + 1}: ${line.trim()}`] : [])),
  );
  assert.ok(tests.length > 50, "the scan found the test files");
  assert.deepEqual(fixed, []);
});

it("kills a test's children where the test names, never after a timer (issue 67)", () => {
  const root = new URL("..", import.meta.url).pathname;
  const tests = [
    ...filesUnder(join(root, "test"), [".ts", ".py"]),
    ...filesUnder(join(root, "python/tests"), [".py"]),
  ];
  // A kill scheduled by the clock lands somewhere different on every host: kill at a named point
  // (TRAJFLOW_TEST_KILL_AT, killAt in test/helpers/cli.ts) or once the test has seen what it waits for.
  const TIMED = /setTimeout\(\s*\(\)\s*=>\s*[\w.!?]*\.kill\(|threading\.Timer\([^)]*kill|killAfterFiles/;
  const timed = tests
    .filter((file) => !file.endsWith("layout.test.ts") && TIMED.test(readFileSync(file, "utf8")))
    .map((f) => relative(root, f));
  assert.ok(TIMED.test('setTimeout(() => running.child.kill("SIGKILL"), extraMs)'), "the pattern finds one");
  assert.ok(tests.length > 50, "the scan found the test files");
  assert.deepEqual(timed, []);
});
