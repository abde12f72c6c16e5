import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { Ledger } from "./ledger.ts";

describe("offset ledger", () => {
  it("commits up to the next offset when nothing is held", () => {
    const l = new Ledger(10);
    l.next = 15;
    assert.equal(l.committable(), 15);
  });

  it("holds the first offset of the oldest session until its ack is released", () => {
    const l = new Ledger(0);
    const a = l.hold(3);
    const b = l.hold(5);
    l.next = 9;
    assert.equal(l.committable(), 3);
    b.release();
    assert.equal(l.committable(), 3, "a younger session's release moves nothing");
    a.release();
    assert.equal(l.committable(), 9);
  });

  it("releases a fanned-out ack only when every sink released it", () => {
    const l = new Ledger(0);
    const ack = l.hold(2);
    ack.retain(2); // three sinks
    l.next = 4;
    ack.release();
    ack.release();
    assert.equal(l.committable(), 2);
    assert.equal(ack.released, false);
    ack.release();
    assert.equal(ack.released, true);
    assert.equal(l.committable(), 4);
  });

  it("ignores extra releases and refuses to revive a released ack", () => {
    const l = new Ledger(0);
    const other = l.hold(1);
    const ack = l.hold(1);
    ack.release();
    ack.release();
    assert.equal(l.holds, 1, "the second release must not free another hold");
    assert.throws(() => ack.retain());
    other.release();
    assert.equal(l.holds, 0);
  });

  it("keeps a group's offsets until the whole group is durable", () => {
    // Three sessions of one GRPO group, each holding its first offset; the group leaves as one unit.
    const l = new Ledger(100);
    const acks = [l.hold(100), l.hold(104), l.hold(108)];
    l.next = 120;
    acks[1]!.release();
    acks[2]!.release();
    assert.equal(l.committable(), 100);
    acks[0]!.release();
    assert.equal(l.committable(), 120);
  });

  it("holds a dead letter's own offset until the dead-letter sink made it durable", () => {
    const l = new Ledger(0);
    const session = l.hold(0);
    const letter = l.hold(7);
    l.next = 10;
    session.release();
    assert.equal(l.committable(), 7);
    letter.release();
    assert.equal(l.committable(), 10);
  });
});
