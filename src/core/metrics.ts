import type { CounterName, HistogramName } from "./metric-names.ts";

/** Upper bounds (seconds) of the latency histograms' buckets, as Prometheus histograms have them. */
export const LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** Observations kept for exact quantiles: the most recent ones, a fixed amount of memory per histogram. */
const RECENT = 10_000;

export interface Histogram {
  /** Upper bounds, ascending; the last bucket (+Inf) is implied. */
  bounds: number[];
  /** Observations per bucket (not cumulative); one more entry than `bounds`, for +Inf. */
  counts: number[];
  sum: number;
  count: number;
  /** The latest observations, a ring of up to RECENT. */
  recent: Float64Array;
}

export interface Timeline {
  /** When this process started (ms since the epoch). */
  process_started_at_ms: number;
  first_record_at_ms: number | null;
  /** When the last batch of records read so far was applied (a drain's last files follow it). */
  last_record_at_ms: number | null;
  first_file_at_ms: number | null;
  last_file_at_ms: number | null;
}

/**
 * Counters keyed by name and an optional label, and latency histograms. Deliberately tiny: the summary
 * printed by the CLI and the Prometheus endpoint both read from here, so every component counts through
 * one registry.
 */
export class Metrics {
  private readonly counters = new Map<string, Map<string, number>>();
  private readonly histograms = new Map<string, Histogram>();

  /**
   * When the run's milestones happened (ms since the epoch): the first record read, the last batch of
   * records applied, the first and the last data file committed. The report prints them, so an operator (or a benchmark) can tell startup
   * from steady state.
   */
  readonly timeline: Timeline = {
    process_started_at_ms: Math.round(performance.timeOrigin),
    first_record_at_ms: null,
    last_record_at_ms: null,
    first_file_at_ms: null,
    last_file_at_ms: null,
  };

  /** Notes that a data file was committed now. */
  fileCommitted(): void {
    const now = Date.now();
    this.timeline.first_file_at_ms ??= now;
    this.timeline.last_file_at_ms = now;
  }

  /** Records one observation (e.g. a latency in seconds) in histogram `name`. */
  observe(name: HistogramName, value: number, bounds: number[] = LATENCY_BUCKETS): void {
    let h = this.histograms.get(name);
    if (h === undefined) {
      h = {
        bounds,
        counts: new Array(bounds.length + 1).fill(0),
        sum: 0,
        count: 0,
        recent: new Float64Array(RECENT),
      };
      this.histograms.set(name, h);
    }
    let bucket = 0;
    while (bucket < h.bounds.length && value > h.bounds[bucket]!) bucket++;
    h.counts[bucket]!++;
    h.recent[h.count % RECENT] = value;
    h.sum += value;
    h.count++;
  }

  /** Histograms by name, sorted by name. */
  histogramEntries(): Array<[string, Histogram]> {
    return [...this.histograms.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /**
   * The q-quantile (0..1) of the latest observations of histogram `name` (up to the last 10,000), by the
   * nearest-rank method; null when nothing was observed.
   */
  quantile(name: HistogramName, q: number): number | null {
    const h = this.histograms.get(name);
    if (h === undefined || h.count === 0) return null;
    const sorted = h.recent.slice(0, Math.min(h.count, RECENT)).sort();
    return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
  }

  /** Adds `by` to counter `name` (with optional label value, e.g. an error code). */
  inc(name: CounterName, label = "", by = 1): void {
    let series = this.counters.get(name);
    if (series === undefined) {
      series = new Map();
      this.counters.set(name, series);
    }
    series.set(label, (series.get(label) ?? 0) + by);
  }

  /** The value of one series, 0 when never counted. */
  get(name: string, label = ""): number {
    return this.counters.get(name)?.get(label) ?? 0;
  }

  /** Sum over all labels of a counter. */
  total(name: string): number {
    let sum = 0;
    for (const v of this.counters.get(name)?.values() ?? []) sum += v;
    return sum;
  }

  /** Label → value for one counter, sorted by label so output is stable. */
  byLabel(name: string): Array<[string, number]> {
    return [...(this.counters.get(name) ?? new Map<string, number>()).entries()].sort((a, b) =>
      a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0,
    );
  }

  /** A plain object snapshot: `{ name: value }` or `{ name: { label: value } }`. */
  snapshot(): Record<string, number | Record<string, number>> {
    const out: Record<string, number | Record<string, number>> = {};
    for (const name of [...this.counters.keys()].sort()) {
      const series = this.byLabel(name);
      if (series.length === 1 && series[0]![0] === "") out[name] = series[0]![1];
      else out[name] = Object.fromEntries(series);
    }
    return out;
  }
}
