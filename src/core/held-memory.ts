/**
 * The data each part of a pipeline holds, for the run report and the `memory_held_bytes` gauge: of a peak
 * RSS, how much was open sessions, rows waiting for a file, rows being encoded, records being decoded,
 * dead letters waiting. The per-thread figures (thread-usage.ts) say which thread held memory; these say
 * what it was, and each part has its own bound (docs/operations.md, "Memory").
 *
 * Components report what they hold (`Holdings`); the runtime samples them with the RSS and each thread's
 * heap and off-heap memory every 100 ms and keeps, per part, its peak and its value at the sample where
 * the RSS peaked, and that sample's account of the RSS by owner (`PeakAccount`): each thread's heap and
 * off-heap memory (the main thread's off-heap memory holds the Kafka client's fetched and decompressed
 * batches, the records handed to decoders and the rows' arrays), the fixed memory every process has
 * (Node's code, the isolates outside their heaps, stacks: the rest at the first sample), and what the
 * allocator holds beyond it (memory freed but not returned to the system, fragmentation).
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

/** One thread's memory at a sample: its V8 heap (committed) and what its objects hold outside it. */
export interface ThreadMemory {
  thread: string;
  heap_bytes: number;
  external_bytes: number;
}

/** The peak RSS, owner by owner; the owners add up to `rss_bytes`. */
export interface PeakAccount {
  rss_bytes: number;
  owners: Array<{ owner: string; bytes: number }>;
}

/** What a run reports of its memory (the run report's `held_memory` and `peak_rss_account`). */
export interface MemoryReport {
  /** The data each part held: its peak, and its share of the peak RSS. */
  held: HeldPart[];
  /** The peak RSS by owner: threads' heaps and off-heap memory, fixed memory, the allocator's. */
  peakAccount: PeakAccount;
}

/** Peaks of each part over a run, fed one sample at a time. */
export class HeldMemory {
  private readonly peaks = new Map<string, number>();
  private atPeak: Holdings = {};
  private peakRss = 0;
  private threadsAtPeak: ThreadMemory[] = [];
  /** The RSS no thread's heap or off-heap memory explains, at the first sample: fixed memory. */
  private fixed: number | null = null;

  /**
   * Records one sample of every part (`parts`, summed over components) at resident set size `rss`, with
   * each thread's memory then (a worker's as of its last report).
   */
  sample(parts: Holdings, rss: number, threads: ThreadMemory[] = []): void {
    for (const [part, bytes] of Object.entries(parts))
      if (bytes > (this.peaks.get(part) ?? -1)) this.peaks.set(part, bytes);
    this.fixed ??= Math.max(0, rss - sumThreads(threads));
    if (rss >= this.peakRss) {
      this.peakRss = rss;
      this.atPeak = parts;
      this.threadsAtPeak = threads;
    }
  }

  memoryReport(): MemoryReport {
    return { held: this.report(), peakAccount: this.account() };
  }

  /** The sample with the highest RSS, by owner (see the file's comment). */
  account(): PeakAccount {
    const owners: PeakAccount["owners"] = [];
    for (const t of this.threadsAtPeak) owners.push({ owner: `${t.thread} heap`, bytes: t.heap_bytes });
    for (const t of this.threadsAtPeak)
      owners.push({ owner: `${t.thread} off-heap`, bytes: t.external_bytes });
    const rest = this.peakRss - sumThreads(this.threadsAtPeak);
    const fixed = Math.min(this.fixed ?? 0, Math.max(0, rest));
    owners.push({ owner: "fixed (code, isolates, stacks)", bytes: fixed });
    owners.push({ owner: "allocator (freed, not returned)", bytes: rest - fixed });
    return { rss_bytes: this.peakRss, owners };
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

function sumThreads(threads: ThreadMemory[]): number {
  return threads.reduce((sum, t) => sum + t.heap_bytes + t.external_bytes, 0);
}

/** Adds `from` into `into`, part by part (components that report the same part, as two file sinks do). */
export function addHoldings(into: Holdings, from: Holdings | undefined): Holdings {
  if (from !== undefined)
    for (const [part, bytes] of Object.entries(from)) into[part] = (into[part] ?? 0) + bytes;
  return into;
}
