/**
 * A run's quiet, tick by tick: whether a draining run (--until-idle-ms) is caught up and should cut its
 * files now, or has been quiet long enough to stop. Quiet alone is not caught up: a consumer starved of
 * CPU or throttled by a quota goes quiet with messages unread, so both ask the source (`drained`).
 */

/**
 * How long a draining run stays quiet, every batch applied, before it asks the source whether it is caught
 * up and, if so, cuts its buffered rows into files; the stop itself waits --until-idle-ms. Short: the
 * source's answer (every partition read to its high watermark) is what decides. The runtime looks this
 * long after its last batch is applied, not at its next 100 ms tick: a catch-up's last files landed
 * 0.1-0.2 s sooner (BENCHMARKS.md). 1 ms, not the 20 it was: the quiet only saved asking the broker between
 * two batches of a catch-up (one small request per batch at most, per delivered count), and cost every
 * drained run 20 ms before its last files (a fifth of the shared harness's tail from last record to last
 * file).
 */
export const DRAIN_CUT_QUIET_MS = 1;
const ASK_AGAIN_MS = 100;
/** The status tick: how often a run looks at its quiet, its failures and its memory. */
const TICK_MS = 100;

export type DrainStep = "go-on" | "cut" | "idle";

export class DrainWatch {
  private readonly untilIdleMs: number | undefined;
  private readonly drained: () => Promise<boolean>;
  private last = -1;
  private quietSince = Date.now();
  /** The delivered count at the last cut. */
  private cutAt = -1;
  /** The delivered count when the source was last asked whether it is drained, and when. */
  private askedFor = -1;
  private askedAt = 0;

  constructor(untilIdleMs: number | undefined, drained: () => Promise<boolean>) {
    this.untilIdleMs = untilIdleMs;
    this.drained = drained;
  }

  /** Wakes the look in progress (next()); null while the runtime is looking (tick, a cut). */
  private wake: (() => void) | null = null;
  /** When every batch was last applied, and when the last look began. */
  private settledAt = -Infinity;
  private lookedAt = -Infinity;

  /** The next look: at the status tick, or, draining, DRAIN_CUT_QUIET_MS after every batch is applied. */
  next(): Promise<"tick"> {
    // Applied while the runtime was looking (asking the broker, cutting files): no look was waiting to be
    // woken, and the status tick would have come up to 100 ms late (a catch-up's last files with it).
    const missed = this.untilIdleMs !== undefined && this.settledAt >= this.lookedAt;
    const delay = missed ? Math.max(0, this.settledAt + DRAIN_CUT_QUIET_MS - Date.now()) : TICK_MS;
    return new Promise((resolve) => {
      const wake = () => {
        if (this.wake === wake) this.wake = null;
        resolve("tick");
      };
      this.wake = wake;
      setTimeout(wake, delay).unref();
    });
  }

  /** Every batch handed over is applied, `delivered` records in all: the quiet starts now. */
  settled(delivered: number): void {
    this.last = delivered;
    this.quietSince = this.settledAt = Date.now();
    // A drain looks again just after its last batch is applied, not at the next tick.
    if (this.untilIdleMs !== undefined && this.wake !== null)
      setTimeout(this.wake, DRAIN_CUT_QUIET_MS).unref();
  }

  /** One tick: `delivered` records so far, `busy` while a batch is still being applied. */
  async tick(delivered: number, busy: boolean): Promise<DrainStep> {
    this.lookedAt = Date.now();
    if (delivered !== this.last || busy) {
      this.last = delivered;
      this.quietSince = Date.now();
      return "go-on";
    }
    if (this.untilIdleMs === undefined) return "go-on";
    const quiet = Date.now() - this.quietSince;
    // Caught up: the backlog's rows land now, not a file age (or the stop) later. The source is asked once
    // per count delivered, and again only at the ticks' pace (it asks the broker).
    const now = Date.now();
    if (
      this.cutAt !== delivered &&
      quiet >= DRAIN_CUT_QUIET_MS &&
      (delivered !== this.askedFor || now - this.askedAt >= ASK_AGAIN_MS)
    ) {
      this.askedFor = delivered;
      this.askedAt = now;
      if (await this.drained()) {
        this.cutAt = delivered;
        return "cut";
      }
    }
    if (quiet >= this.untilIdleMs && (await this.drained())) return "idle";
    return "go-on";
  }
}
