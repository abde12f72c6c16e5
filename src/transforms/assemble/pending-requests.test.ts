import { strict as assert } from "node:assert";
import { it } from "node:test";
import type { RequestEvent } from "../../schemas/events.ts";
import { PendingRequests } from "./pending-requests.ts";

const request = (callId: string) => ({ type: "request", call_id: callId }) as unknown as RequestEvent;

it("keeps the requests waiting for their response, as a Map would, through many answered calls", () => {
  const pending = new PendingRequests();
  const model = new Map<string, RequestEvent>();
  // Calls answered one at a time, then bursts of parallel calls answered out of order, and ids reused.
  const ops: Array<["set" | "delete", string]> = [];
  for (let i = 0; i < 200; i++) ops.push(["set", `c${i}`], ["delete", `c${i}`]);
  for (let b = 0; b < 10; b++) {
    for (let i = 0; i < 50; i++) ops.push(["set", `p${b}-${i}`]);
    for (let i = 49; i >= 0; i -= 2) ops.push(["delete", `p${b}-${i}`]);
  }
  ops.push(["set", "c5"], ["delete", "never-sent"], ["delete", "c5"], ["delete", "c5"]);
  for (const [op, id] of ops) {
    if (op === "set") {
      pending.set(id, request(id));
      model.set(id, request(id));
    } else assert.equal(pending.delete(id), model.delete(id), `delete ${id}`);
    assert.equal(pending.size, model.size);
  }
  for (const id of ["c0", "c5", "c199", "p0-0", "p0-49", "p9-48", "never-sent"]) {
    assert.equal(pending.has(id), model.has(id), id);
    assert.deepEqual(pending.get(id), model.get(id), id);
  }
  assert.equal(pending.size, 10 * 25);
});
