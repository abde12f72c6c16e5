/**
 * The data each part of a pipeline holds, for the run report and the `memory_held_bytes` gauge: of a peak
 * RSS, how much was open sessions, rows waiting for a file, rows being encoded, records being decoded,
 * dead letters waiting. The per-thread figures (thread-usage.ts) say which thread held memory; these say
 * what it was, and each part has its own bound (docs/operations.md, "Memory").
 *
 * Components report what they hold (`Holdings`); the runtime samples them with the RSS every 100 ms and
 * keeps, per part, its peak and its value at the sample where the RSS peaked. What no part accounts for
 * (the Kafka client's fetched batches, V8's heaps, Node's own code) is the RSS minus the parts.
 */

/** Bytes held now, by part ("open sessions", "rows waiting for a file"); a component sums its lanes. */
export type Holdings = Record<string, number>;

export interface HeldPart {
  part: string;
  /** The most this part held at any sample. */
  peak_bytes: number;
  /** What it held at the sample where the process's RSS was highest. */
  at_peak_rss_bytes: number;
}

/** Peaks of each part over a run, fed one sample at a time. */
export class HeldMemory {
  private readonly peaks = new Map<string, number>();
  private atPeak: Holdings = {};
  private peakRss = 0;

  /** Records one sample of every part (`parts`, summed over components) at resident set size `rss`. */
  sample(parts: Holdings, rss: number): void {
    for (const [part, bytes] of Object.entries(parts))
      if (bytes > (this.peaks.get(part) ?? -1)) this.peaks.set(part, bytes);
    if (rss >= this.peakRss) {
      this.peakRss = rss;
      this.atPeak = parts;
    }
  }

  /** Every part seen, in the order first seen, with its peak and its value at the RSS peak. */
  report(): HeldPart[] {
    return [...this.peaks].map(([part, peak]) => ({
      part,
      peak_bytes: peak,
      at_peak_rss_bytes: this.atPeak[part] ?? 0,
    }));
  }
}

/** Adds `from` into `into`, part by part (components that report the same part, as two file sinks do). */
export function addHoldings(into: Holdings, from: Holdings | undefined): Holdings {
  if (from !== undefined)
    for (const [part, bytes] of Object.entries(from)) into[part] = (into[part] ?? 0) + bytes;
  return into;
}
