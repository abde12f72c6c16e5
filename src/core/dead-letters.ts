import type { DeadLetter } from "../schemas/dead-letter.ts";
import type { Metrics } from "./metrics.ts";
import type { DeadLetterOutput } from "./records.ts";

/** Counts every dead letter by code and forwards it. All components write dead letters through one. */
export class CountingDeadLetters implements DeadLetterOutput {
  private readonly metrics: Metrics;
  private readonly next: DeadLetterOutput;

  constructor(metrics: Metrics, next: DeadLetterOutput) {
    this.metrics = metrics;
    this.next = next;
  }

  write(letter: DeadLetter): void {
    this.metrics.inc("dead_letters", letter.code);
    this.next.write(letter);
  }
}

/** Keeps dead letters in memory (tests, and small replays before they are written out). */
export class MemoryDeadLetters implements DeadLetterOutput {
  readonly letters: DeadLetter[] = [];

  write(letter: DeadLetter): void {
    this.letters.push(letter);
  }
}
