import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { pino } from "pino";
import { Ledger } from "../../contract/ledger.ts";
import { Metrics } from "../../core/metrics.ts";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";
import { FileSinkComponent } from "./component.ts";
import { fileSinkConfigSchema } from "./config.ts";
import { rowBytes } from "./sink.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-files-component-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** A lane with an input range (a partition): its files are named by the offsets they cover. */
const lane = (id: string) => ({
  id,
  ledger: new Ledger(0),
  live: true,
  fence: () => Promise.resolve(true),
  files: { range: `t-${id}`, describe: () => ({}) },
});

let offset = 0;

/** A unit of one session's rows, `tokens` prompt tokens long, its events at the next offsets. */
function unit(id: string, tokens: number) {
  const prompt = Array.from({ length: tokens }, (_, i) => i + 1);
  const rows = assemble(new SessionScript("u", id).call("c1", prompt, [7]).end().lines()).rows;
  const spans = [["u", id, offset, (offset += 4) - 1]];
  return { unit: { kind: "session", rows, acks: [], spans, finishedAt: performance.now() }, rows };
}

describe("file sink component", () => {
  it("cuts the lane holding the most once the lanes' rows waiting pass max_buffered_bytes", async () => {
    const metrics = new Metrics();
    const path = join(scratch, "out");
    const one = unit("a", 1_000).rows;
    const bytes = one.reduce((a, r) => a + rowBytes(r), 0);
    offset = 0;
    // Two lanes may hold three sessions' rows between them; each alone would buffer up to 100.
    const config = fileSinkConfigSchema.parse({
      path,
      max_buffered_bytes: 3 * bytes + 1,
      max_rows_per_file: 100,
    });
    const component = new FileSinkComponent(config, { metrics, logger: pino({ level: "silent" }) });
    await component.open();
    const [a, b] = [await component.openLane(lane("a")), await component.openLane(lane("b"))];
    const write = (sink: typeof a, id: string) => sink.write([unit(id, 1_000).unit as never]);
    await write(a, "a1");
    await write(a, "a2");
    await write(b, "b1");
    assert.equal(metrics.total("files_cut_for_memory"), 0);
    await write(b, "b2"); // four sessions waiting: lane a (first of the two largest) is cut
    assert.equal(metrics.total("files_cut_for_memory"), 1);
    assert.deepEqual(component.heldBytes()["rows waiting for a file"], 2 * bytes);
    await a.drain();
    await b.drain();
    await component.close();
    // Lane a's early cut (a1, a2) and lane b's file at its drain; lane a had nothing left.
    assert.deepEqual(
      readdirSync(path)
        .filter((f) => f.endsWith(".parquet"))
        .sort(),
      [
        "t-a-00000000000000000000-00000000000000000007.parquet",
        "t-b-00000000000000000008-00000000000000000015.parquet",
      ],
    );
  });
});
