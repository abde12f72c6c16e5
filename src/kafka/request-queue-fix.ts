/**
 * A fix for kafkajs 2.2's request queue, applied to its prototype once per process.
 *
 * After every response, `checkPendingRequests` schedules the next check with `setTimeout` even when no
 * request waits and no throttle is on, and with a negative delay (`throttledUntil` is -1), which Node
 * clamps to 1 ms: each connection that ever got a response re-arms a 1 ms timer forever. Measured on this
 * project's machine, an idle consumer ran that timer ~1,300 times a second, 45-50 ms of CPU per second
 * (5% of a core, per connection, on hosts where the pipeline is CPU-bound); Node 24 also prints a
 * TimeoutNegativeWarning for it. Upstream: tulios/kafkajs#1704 and #1751 (open, the project unreleased
 * since 2023).
 *
 * The check is still scheduled whenever it has work to do: a request waits (`push` schedules, responses
 * call `checkPendingRequests` directly) or a throttle ends later.
 */
import { kafkajsClass, patchKafkajsOnce } from "./kafkajs-internals.ts";

interface RequestQueue {
  pending: unknown[];
  throttledUntil: number;
  scheduleCheckPendingRequests(): void;
}

const QUEUE = "network/requestQueue/index.js";

/** The request queue class of the kafkajs the project resolves. */
export const kafkajsRequestQueue = () => kafkajsClass<RequestQueue>(QUEUE);

export function fixKafkajsRequestQueue(): void {
  patchKafkajsOnce<RequestQueue>(QUEUE, "idle timer", (proto) => {
    const schedule = proto.scheduleCheckPendingRequests;
    proto.scheduleCheckPendingRequests = function (this: RequestQueue) {
      if (this.pending.length === 0 && this.throttledUntil <= Date.now()) return;
      schedule.call(this);
    };
  });
}
