/**
 * A run's quiet, tick by tick: whether a draining run (--until-idle-ms) is caught up and should cut its
 * files now, or has been quiet long enough to stop. Quiet alone is not caught up: a consumer starved of
 * CPU or throttled by a quota goes quiet with messages unread, so both ask the source (`drained`).
 */

/**
 * How long a draining run that is caught up with its input stays quiet before its buffered rows are cut
 * into files: one status tick. The stop itself waits --until-idle-ms.
 */
const DRAIN_CUT_QUIET_MS = 100;

export type DrainStep = "go-on" | "cut" | "idle";

export class DrainWatch {
  private readonly untilIdleMs: number | undefined;
  private readonly drained: () => Promise<boolean>;
  private last = -1;
  private quietSince = Date.now();
  /** The delivered count at the last cut. */
  private cutAt = -1;

  constructor(untilIdleMs: number | undefined, drained: () => Promise<boolean>) {
    this.untilIdleMs = untilIdleMs;
    this.drained = drained;
  }

  /** One tick: `delivered` records so far, `busy` while a batch is still being applied. */
  async tick(delivered: number, busy: boolean): Promise<DrainStep> {
    if (delivered !== this.last || busy) {
      this.last = delivered;
      this.quietSince = Date.now();
      return "go-on";
    }
    if (this.untilIdleMs === undefined) return "go-on";
    const quiet = Date.now() - this.quietSince;
    // Caught up: the backlog's rows land now, not a file age (or the stop) later.
    if (this.cutAt !== delivered && quiet >= DRAIN_CUT_QUIET_MS && (await this.drained())) {
      this.cutAt = delivered;
      return "cut";
    }
    if (quiet >= this.untilIdleMs && (await this.drained())) return "idle";
    return "go-on";
  }
}
