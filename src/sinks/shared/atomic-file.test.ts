import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { commitFile } from "./atomic-file.ts";

const dir = mkdtempSync(join(tmpdir(), "trajflow-atomic-"));
after(() => rmSync(dir, { recursive: true, force: true }));

// A file's chunks go out gathered into a few writes (issue 46): many small chunks, chunks past a batch's
// byte size, and an empty one must land byte for byte in order.
it("writes a file made of many chunks, small and large, byte for byte in order", async () => {
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < 700; i++)
    chunks.push(Uint8Array.from({ length: (i * 37) % 300 }, (_, k) => (i + k) & 255));
  chunks.push(new Uint8Array(0), Buffer.alloc(3 * 1024 * 1024, 7), Uint8Array.of(1, 2, 3));
  const path = join(dir, "many.bin");
  // One pass, as an encoder's chunks come (a generator is read once).
  const outcome = await commitFile(
    path,
    (function* () {
      yield* chunks;
    })(),
  );
  assert.equal(outcome, "written");
  assert.deepEqual(readFileSync(path), Buffer.concat(chunks));
  assert.deepEqual(readdirSync(dir), ["many.bin"], "no temporary left behind");
});
