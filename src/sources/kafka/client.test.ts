import { strict as assert } from "node:assert";
import { it } from "node:test";
import kafkajs from "kafkajs";
import { isBrokerAway } from "./client.ts";

// kafkajs's typings leave out these constructors' arguments; at run time they take (message, { cause }).
const errors = kafkajs as unknown as Record<
  string,
  new (message: string, options?: { cause: Error }) => Error
>;

it("tells a broker that is away from a setup that is wrong, through the error's causes", () => {
  // Regression: a restarting single broker made kafkajs crash the consumer with this non-retriable error,
  // and the pipeline ended instead of waiting for the broker.
  assert.equal(
    isBrokerAway(new errors.KafkaJSGroupCoordinatorNotFound!("Failed to find group coordinator")),
    true,
  );
  const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9092"), { code: "ECONNREFUSED" });
  assert.equal(isBrokerAway(new errors.KafkaJSNonRetriableError!("gave up", { cause: refused })), true);
  assert.equal(isBrokerAway(new errors.KafkaJSConnectionError!("Connection error")), true);

  assert.equal(
    isBrokerAway(new errors.KafkaJSSASLAuthenticationError!("SASL PLAIN authentication failed")),
    false,
  );
  assert.equal(isBrokerAway(new errors.KafkaJSNonRetriableError!("Topic authorization failed")), false);
  assert.equal(isBrokerAway(new Error("a sink could not write")), false);
});
