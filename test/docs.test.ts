import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { it } from "node:test";
import { ErrorCodes } from "../src/core/errors.ts";
import { METRICS } from "../src/core/metric-names.ts";
import { describeColumnType, ROW_COLUMNS, RowFlags } from "../src/schemas/trajectory.ts";
import { REWARD_STAGE_TYPES } from "../src/transforms/reward/stages/index.ts";

const doc = (name: string) => readFileSync(new URL(`../docs/${name}`, import.meta.url), "utf8");
/** A table row whose first cell is `name` in backticks (Prettier pads table cells). */
const tableRow = (text: string, name: string) => new RegExp(`^\\|\\s*\`${name}\`\\s*\\|`, "m").test(text);

it("docs/errors.md documents every error code", () => {
  const errors = doc("errors.md");
  const missing = Object.keys(ErrorCodes).filter((code) => !tableRow(errors, code));
  assert.deepEqual(missing, []);
});

it("docs/output.md documents every column, in file order with its type, and every flag", () => {
  const output = doc("output.md");
  const documented = [...output.matchAll(/^\|\s*`(\w+)`\s*\|\s*([^|]*?)\s*\|/gm)]
    .filter(([, name]) => name !== "column" && !Object.values(RowFlags).includes(name as never))
    .map(([, name, type]) => `${name}: ${type}`);
  const expected = ROW_COLUMNS.map((c) => `${c.name}: ${describeColumnType(c.type)}`);
  assert.deepEqual(documented, expected);
  const flags = Object.values(RowFlags).filter((flag) => !tableRow(output, flag));
  assert.deepEqual(flags, []);
});

it("docs/metrics.md documents every metric", () => {
  const metrics = doc("metrics.md");
  const missing = Object.keys(METRICS).filter((name) => !tableRow(metrics, name));
  assert.deepEqual(missing, []);
});

it("docs/rewards.md documents every registered reward stage type under a heading of its own", () => {
  const rewards = doc("rewards.md");
  const missing = Object.keys(REWARD_STAGE_TYPES).filter(
    (type) => !new RegExp(`^###.*\`${type}\``, "m").test(rewards),
  );
  assert.deepEqual(missing, []);
});
