import assert from "node:assert/strict";
import { test } from "node:test";
import { fixKafkajsRequestQueue, kafkajsRequestQueue } from "./request-queue-fix.ts";

interface Entry {
  correlationId: number;
  resolve(): void;
  reject(): void;
}

interface Queue {
  push(request: { entry: Entry; expectResponse: boolean; sendRequest(): void }): void;
  fulfillRequest(response: { correlationId: number; payload: Buffer | null; size: number }): void;
  maybeThrottle(ms: number): void;
  destroy(): void;
  throttleCheckTimeoutId: unknown;
}

function queue(): Queue {
  const RequestQueue = kafkajsRequestQueue() as unknown as new (options: object) => Queue;
  const logger = { debug() {}, info() {}, warn() {}, error() {} };
  return new RequestQueue({
    maxInFlightRequests: 1,
    requestTimeout: 30_000,
    enforceRequestTimeout: false,
    clientId: "test",
    broker: "127.0.0.1:1",
    logger,
  });
}

const entry = (correlationId: number): Entry => ({ correlationId, resolve() {}, reject() {} });

test("kafkajs request queue: no timer left armed once nothing waits and no throttle is on", () => {
  fixKafkajsRequestQueue();
  const q = queue();
  const sent: number[] = [];
  q.push({ entry: entry(1), expectResponse: true, sendRequest: () => sent.push(1) });
  q.fulfillRequest({ correlationId: 1, payload: null, size: 0 });
  const armed = q.throttleCheckTimeoutId;
  q.destroy();
  // Unfixed, this is a 1 ms timer that re-arms itself for the life of the connection.
  assert.equal(armed, null);
  assert.deepEqual(sent, [1]);
});

test("kafkajs request queue: requests held back by the in-flight limit or a throttle are still sent", (t) => {
  // The throttle is kafkajs's own clock (Date.now) and timers: mocked, so the test moves time itself.
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: 1_000_000 });
  fixKafkajsRequestQueue();
  const q = queue();
  const sent: number[] = [];
  const push = (id: number) =>
    q.push({ entry: entry(id), expectResponse: true, sendRequest: () => sent.push(id) });
  push(1);
  push(2); // waits: one request in flight at most
  assert.deepEqual(sent, [1]);
  q.fulfillRequest({ correlationId: 1, payload: null, size: 0 });
  assert.deepEqual(sent, [1, 2]);

  q.maybeThrottle(40);
  q.fulfillRequest({ correlationId: 2, payload: null, size: 0 });
  push(3); // waits for the throttle to end
  assert.deepEqual(sent, [1, 2]);
  t.mock.timers.tick(39);
  assert.deepEqual(sent, [1, 2], "sent while still throttled");
  t.mock.timers.tick(1);
  assert.deepEqual(sent, [1, 2, 3]);
  q.fulfillRequest({ correlationId: 3, payload: null, size: 0 });
  t.mock.timers.tick(20);
  const armed = q.throttleCheckTimeoutId;
  q.destroy();
  assert.equal(armed, null);
});
