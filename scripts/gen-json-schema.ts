/**
 * Writes schemas/events.v1.schema.json from the zod schemas. With --check, fails when the checked-in
 * file is stale (CI runs this through `npm run check`).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { eventJsonSchema } from "../src/schemas/events.ts";

const target = new URL("../schemas/events.v1.schema.json", import.meta.url);
const schema = {
  ...eventJsonSchema(),
  $id: "https://trajflow.dev/schemas/events.v1.schema.json",
  title: "trajflow gateway event, protocol v1",
};
const text = `${JSON.stringify(schema, null, 2)}\n`;

if (process.argv.includes("--check")) {
  let current = "";
  try {
    current = readFileSync(target, "utf8");
  } catch {
    // missing counts as stale
  }
  if (current !== text) {
    console.error("schemas/events.v1.schema.json is stale: run `npm run schema` and commit the result.");
    process.exit(1);
  }
  console.log("schemas/events.v1.schema.json is up to date.");
} else {
  writeFileSync(target, text);
  console.log("wrote schemas/events.v1.schema.json");
}
