import { strict as assert } from "node:assert";
import { it } from "node:test";
import { type Field, Table, tableFromIPC, tableToIPC } from "apache-arrow";
import { trajectoryArrowSchema } from "../../../schemas/trajectory-arrow.ts";
import { ColumnTypes, nullable, ROW_COLUMNS, structList } from "../../../schemas/trajectory.ts";
import { arrowSchemaMessage } from "./arrow-schema.ts";

/** A field as apache-arrow reads it: name, type, nullability, and the same for its children. */
const describe = (f: Field): unknown => [
  f.name,
  String(f.type),
  f.nullable,
  (f.type.children ?? []).map((c: Field) => describe(c)),
];

/** Reads the message as apache-arrow does: an IPC stream of the schema and the end-of-stream marker. */
function readBack(message: Uint8Array): Field[] {
  const stream = new Uint8Array(message.length + 8);
  stream.set(message);
  stream.set([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], message.length);
  return tableFromIPC(stream).schema.fields;
}

it("writes the trajectory columns' schema message byte for byte as apache-arrow does", () => {
  const message = arrowSchemaMessage(ROW_COLUMNS);
  // apache-arrow's stream of an empty table: the schema message, then the end-of-stream marker.
  const stream = tableToIPC(new Table(trajectoryArrowSchema), "stream");
  assert.deepEqual(Buffer.from(message), Buffer.from(stream.subarray(0, stream.length - 8)));
  assert.equal(message.length % 8, 0);
  assert.deepEqual(
    readBack(message).map((f) => describe(f)),
    trajectoryArrowSchema.fields.map((f) => describe(f)),
  );
});

it("writes every column type a row can hold", () => {
  const columns = [
    ...Object.entries(ColumnTypes).map(([name, type]) => ({ name, type })),
    { name: "maybe", type: nullable(ColumnTypes.int32List) },
    {
      name: "turns",
      type: structList([
        { name: "a", kind: "float64" },
        { name: "b", kind: "utf8" },
      ]),
    },
  ];
  assert.deepEqual(
    readBack(arrowSchemaMessage(columns)).map((f) => describe(f)),
    [
      ["utf8", "Utf8", false, []],
      ["binary", "Binary", false, []],
      ["int8", "Int8", false, []],
      ["int32", "Int32", false, []],
      ["float64", "Float64", false, []],
      ["bool", "Bool", false, []],
      ["int8List", "List<Int8>", false, [["element", "Int8", false, []]]],
      ["int32List", "List<Int32>", false, [["element", "Int32", false, []]]],
      ["float32List", "List<Float32>", false, [["element", "Float32", false, []]]],
      ["utf8List", "List<Utf8>", false, [["element", "Utf8", false, []]]],
      ["float64NullableList", "List<Float64>", false, [["element", "Float64", true, []]]],
      ["maybe", "List<Int32>", true, [["element", "Int32", false, []]]],
      [
        "turns",
        "List<Struct<{a:Float64, b:Utf8}>>",
        false,
        [
          [
            "element",
            "Struct<{a:Float64, b:Utf8}>",
            true,
            [
              ["a", "Float64", true, []],
              ["b", "Utf8", true, []],
            ],
          ],
        ],
      ],
    ],
  );
});
