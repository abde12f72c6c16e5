/**
 * The layout's rules (issue 22), checked on the imports of every source file, so they hold as the tree
 * grows: only the Kafka layer (src/kafka/) imports kafkajs, and sources and sinks never import each other
 * (what both need lives below them: src/contract, src/core, src/schemas, src/kafka).
 */
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { it } from "node:test";

const SRC = new URL("../src/", import.meta.url).pathname;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
  );
}

/** Every module a file imports (static and dynamic), resolved against src/ when relative. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specs = [...text.matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)].map((m) => m[1]!);
  return specs.map((s) => (s.startsWith(".") ? relative(SRC, join(file, "..", s)) : s));
}

const files = sourceFiles(SRC).map((f) => ({ path: relative(SRC, f), imports: importsOf(f) }));

it("lets only the Kafka layer import kafkajs", () => {
  const outside = files.filter((f) => !f.path.startsWith("kafka/") && f.imports.includes("kafkajs"));
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

it("finds the imports it checks (the scan is not vacuous)", () => {
  const client = files.find((f) => f.path === "kafka/client.ts");
  assert.ok(client?.imports.includes("kafkajs"));
  const source = files.find((f) => f.path === "sources/kafka/source.ts");
  assert.ok(source?.imports.includes("kafka/client.ts"), JSON.stringify(source?.imports));
});
