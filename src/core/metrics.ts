/**
 * Counters keyed by name and an optional label. Deliberately tiny: the summary printed by the CLI and the
 * Prometheus endpoint both read from here, so every component counts through one registry.
 */
export class Metrics {
  private readonly counters = new Map<string, Map<string, number>>();

  /** Adds `by` to counter `name` (with optional label value, e.g. an error code). */
  inc(name: string, label = "", by = 1): void {
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
