import { strict as assert } from "node:assert";
import { it } from "node:test";
import { TrajflowError } from "../core/errors.ts";
import { failureText } from "./failure.ts";

const STACK_FRAME = /^\s+at /m;

it("gives every failure a code and one line, never a stack trace", () => {
  const coded = new TrajflowError("SINK_WRITE_FAILED", "cannot write /out: ENOSPC");
  assert.equal(failureText(coded, {}), "trajflow: [SINK_WRITE_FAILED] cannot write /out: ENOSPC\n");

  // Shaped as kafkajs throws them when it gives up: named errors, the first one's cause the real one.
  const closed = Object.assign(new Error("Closed connection"), { name: "KafkaJSConnectionClosedError" });
  const gaveUp = Object.assign(new Error("Closed connection", { cause: closed }), {
    name: "KafkaJSNonRetriableError",
  });
  const kafka = failureText(gaveUp, {});
  assert.match(
    kafka,
    /^trajflow: \[KAFKA_CLIENT_FAILED\] the Kafka client gave up: KafkaJSNonRetriableError: /,
  );
  assert.match(kafka, /caused by KafkaJSConnectionClosedError: Closed connection; check --brokers/);
  assert.doesNotMatch(kafka, STACK_FRAME);

  const bug = new TypeError("Cannot read properties of undefined (reading 'x')", {
    cause: Object.assign(new Error("inner"), { code: "EPIPE" }),
  });
  const text = failureText(bug, {});
  assert.equal(
    text,
    "trajflow: [INTERNAL_ERROR] TypeError: Cannot read properties of undefined (reading 'x'); caused by " +
      "Error (EPIPE): inner. This is a bug in trajflow: please report it with the output of the same command " +
      "run with TRAJFLOW_DEBUG=1 (which adds where it happened)\n",
  );
  assert.match(failureText(bug, { TRAJFLOW_DEBUG: "1" }), STACK_FRAME);
});

it("ends a cause chain that loops, and takes what is not an Error", () => {
  const a = new Error("a");
  const b = new Error("b", { cause: a });
  a.cause = b;
  assert.equal(failureText(a, {}).split("caused by").length, 8);
  assert.match(
    failureText("a string was thrown", {}),
    /^trajflow: \[INTERNAL_ERROR\] a string was thrown\. /,
  );
});
