import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { pino } from "pino";
import type { DeadLetterSink, Unit } from "../../contract/components.ts";
import type { Ack } from "../../contract/ledger.ts";
import { Ledger } from "../../contract/ledger.ts";
import { Metrics } from "../../core/metrics.ts";
import type { DeadLetter } from "../../schemas/dead-letter.ts";
import { assemble, SessionScript } from "../../../test/helpers/sessions.ts";
import { RewardsComponent } from "./component.ts";
import { rewardsConfigSchema } from "./config.ts";

/** A dead-letter sink whose letters become durable only when the test says so. */
class HeldDeadLetters implements DeadLetterSink {
  readonly held: Array<{ letter: DeadLetter; ack: Ack | null }> = [];
  readonly location = "memory";
  backlogBytes = 0;
  write(letter: DeadLetter, ack: Ack | null): void {
    this.held.push({ letter, ack });
  }
  durable(): void {
    for (const h of this.held.splice(0)) h.ack?.release();
  }
  waitBelow = () => Promise.resolve();
  open = () => Promise.resolve();
  close = () => Promise.resolve();
}

describe("rewards component", () => {
  // Regression: the Kafka path cleared its lookup of sessions being scored before awaiting the scores, so
  // most reward dead letters held no offset and the offset could be committed before the letter was sent.
  it("holds the session's offset with its reward dead letter until the letter is durable", async () => {
    const failing = new URL("../../../test/fixtures/reward-stages/failing-stage.ts", import.meta.url)
      .pathname;
    const deadLetters = new HeldDeadLetters();
    const component = await RewardsComponent.build(
      rewardsConfigSchema.parse({
        stages: [{ name: "broken", type: "module", path: failing, required: false, batch: { retries: 0 } }],
        max_pending_sessions: 4,
      }),
      { metrics: new Metrics(), logger: pino({ level: "silent" }), deadLetters, baseDir: process.cwd() },
    );
    const ledger = new Ledger(5);
    const { sessions } = assemble(new SessionScript("u", "s1").call("c1", [1, 2], [3]).end().lines());
    const ack = ledger.hold(5);
    ledger.next = 9;
    const unit: Unit = { sessions, rows: null, acks: [ack], spans: [["u", "s1", 5, 8]], finishedAt: 0 };
    const part = component.openLane();
    const out = [...(await part.push(unit, 0)), ...(await part.flush(false, 0))];
    assert.equal(out.length, 1);
    assert.equal(deadLetters.held.length, 1);
    assert.equal(deadLetters.held[0]!.letter.code, "REWARD_FAILED");
    // The file is durable: the unit's own hold goes, the letter's stays.
    ack.release();
    assert.equal(ledger.committable(), 5);
    deadLetters.durable();
    assert.equal(ledger.committable(), 9);
    await component.close();
  });
});
