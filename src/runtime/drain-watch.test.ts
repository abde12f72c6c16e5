import assert from "node:assert/strict";
import { mock, test } from "node:test";
import { DRAIN_CUT_QUIET_MS, DrainWatch } from "./drain-watch.ts";

test("a drain cuts once its batches are applied and quiet briefly, asking the source once per count", async (t) => {
  t.mock.timers.enable({ apis: ["Date"], now: 1_000_000 });
  let asked = 0;
  let drained = false;
  const watch = new DrainWatch(4000, () => {
    asked++;
    return Promise.resolve(drained);
  });
  assert.equal(await watch.tick(10, true), "go-on", "busy: a batch is being applied");
  watch.settled(10);
  assert.equal(await watch.tick(10, false), "go-on", "not yet quiet");
  assert.equal(asked, 0);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  assert.equal(await watch.tick(10, false), "go-on", "quiet, but the source has more");
  assert.equal(asked, 1);
  assert.equal(await watch.tick(10, false), "go-on");
  assert.equal(asked, 1, "asked again only at the ticks' pace");
  t.mock.timers.tick(100);
  drained = true;
  assert.equal(await watch.tick(10, false), "cut");
  assert.equal(asked, 2);
  t.mock.timers.tick(100);
  assert.equal(await watch.tick(10, false), "go-on", "one cut per count delivered");
  watch.settled(12);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  assert.equal(await watch.tick(12, false), "cut", "more records, caught up again: another cut");
  t.mock.timers.tick(4000);
  assert.equal(await watch.tick(12, false), "idle", "quiet for --until-idle-ms and drained: stop");
});

test("without --until-idle-ms nothing is cut or stopped", async () => {
  mock.timers.enable({ apis: ["Date"], now: 0 });
  try {
    const watch = new DrainWatch(undefined, () => Promise.resolve(true));
    watch.settled(5);
    mock.timers.tick(60_000);
    assert.equal(await watch.tick(5, false), "go-on");
  } finally {
    mock.timers.reset();
  }
});

test("a draining run looks again DRAIN_CUT_QUIET_MS after its last batch is applied, not at the next tick", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: 0 });
  // The looks' promises settle on the real event loop: one turn lets a woken look's callback run.
  const turn = () => new Promise((resolve) => setImmediate(resolve));
  const woken: string[] = [];
  const draining = new DrainWatch(4000, () => Promise.resolve(true));
  void draining.next().then(() => woken.push("draining"));
  draining.settled(3);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  await turn();
  assert.deepEqual(woken, ["draining"]);
  // Not draining: the same settle leaves the look to the status tick.
  const live = new DrainWatch(undefined, () => Promise.resolve(true));
  void live.next().then(() => woken.push("live"));
  live.settled(3);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  await turn();
  assert.deepEqual(woken, ["draining"]);
  t.mock.timers.tick(100);
  await turn();
  assert.deepEqual(woken, ["draining", "live"]);
});

// Regression (issue 46): the last batch applied while the runtime was asking the broker (or cutting) woke
// no look, and the catch-up's last files waited for the next 100 ms tick.
test("a batch applied while the runtime looks still brings the next look DRAIN_CUT_QUIET_MS after it", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: 0 });
  const turn = () => new Promise((resolve) => setImmediate(resolve));
  let answer: ((v: boolean) => void) | null = null;
  let asks = 0;
  // The first answer takes a while; later ones come at once.
  const watch = new DrainWatch(4000, () =>
    asks++ === 0 ? new Promise((resolve) => (answer = resolve)) : Promise.resolve(false),
  );
  let looks = 0;
  void watch.next().then(() => looks++);
  watch.settled(3);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  await turn();
  assert.equal(looks, 1);
  const step = watch.tick(3, false); // asks the source, which takes a while to answer
  watch.settled(5); // meanwhile the last batch is applied
  answer!(false);
  assert.equal(await step, "go-on");
  void watch.next().then(() => looks++);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  await turn();
  assert.equal(looks, 2, "looked again 20 ms after the settle, not at the 100 ms tick");
  // Nothing applied since that look began: the next one waits for the tick.
  assert.equal(await watch.tick(5, false), "go-on");
  void watch.next().then(() => looks++);
  t.mock.timers.tick(DRAIN_CUT_QUIET_MS);
  await turn();
  assert.equal(looks, 2);
  t.mock.timers.tick(100);
  await turn();
  assert.equal(looks, 3);
});
