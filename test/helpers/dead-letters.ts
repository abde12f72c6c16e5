import type { Metrics } from "../../src/core/metrics.ts";
import type { DeadLetterOutput } from "../../src/core/records.ts";
import type { DeadLetter } from "../../src/schemas/dead-letter.ts";

/** Keeps dead letters in memory, counting them in `metrics` by code as the runtime's output does. */
export class MemoryDeadLetters implements DeadLetterOutput {
  readonly letters: DeadLetter[] = [];
  private readonly metrics: Metrics | undefined;

  constructor(metrics?: Metrics) {
    this.metrics = metrics;
  }

  write(letter: DeadLetter): void {
    this.metrics?.inc("dead_letters", letter.code);
    this.letters.push(letter);
  }
}
