/**
 * The runner in front of every reward stage: batches items (size, tokens, wait), bounds the queue and the
 * batches in flight, times each call out, retries transient failures with exponential backoff, isolates a
 * poison item by splitting a failing batch in halves, and dead-letters the items that still fail. A failed
 * item's outcome is an error (its value becomes null with a flag), never a 0.
 */
import { z } from "zod";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { makeDeadLetter, type DeadLetterOutput } from "../../core/records.ts";
import type { RewardItem, RewardOutcome, RewardStage } from "./contract.ts";

/** The batch policy of one stage (every field has a default). */
export const batchPolicySchema = z.strictObject({
  max_batch_size: z.int().positive().default(16).describe("Items per call to the stage at most."),
  max_wait_ms: z
    .int()
    .nonnegative()
    .default(10)
    .describe("How long a partial batch waits for more items before it is sent."),
  max_batch_tokens: z
    .int()
    .positive()
    .optional()
    .describe("Tokens per batch at most (a single larger item still goes alone)."),
  concurrency: z.int().positive().default(2).describe("Batches in flight at once."),
  max_queue: z
    .int()
    .positive()
    .default(4_096)
    .describe("Items waiting at most; submitting beyond it waits (backpressure)."),
  timeout_ms: z.int().positive().default(30_000).describe("One call to the stage fails after this long."),
  retries: z
    .int()
    .nonnegative()
    .default(3)
    .describe("Retries of a failing batch (transient errors only) before it is split to find the poison."),
  backoff_ms: z.int().nonnegative().default(200).describe("First retry delay; doubles on each retry."),
});
export type BatchPolicy = z.output<typeof batchPolicySchema>;

interface Waiting {
  item: RewardItem;
  resolve: (outcome: RewardOutcome) => void;
}

export interface RunnerContext {
  metrics: Metrics;
  logger: Logger;
  deadLetters: DeadLetterOutput;
}

const isRetryable = (err: unknown) =>
  !(typeof err === "object" && err !== null && (err as { retryable?: unknown }).retryable === false);

export class StageRunner {
  readonly name: string;
  private readonly stage: RewardStage;
  private readonly policy: BatchPolicy;
  private readonly ctx: RunnerContext;
  private queue: Waiting[] = [];
  private queuedTokens = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | null = null;
  private due = false;
  private readonly spaceWaiters: Array<() => void> = [];
  private readonly idleWaiters: Array<() => void> = [];

  constructor(name: string, stage: RewardStage, policy: BatchPolicy, ctx: RunnerContext) {
    this.name = name;
    this.stage = stage;
    this.policy = policy;
    this.ctx = ctx;
  }

  /** Scores one item; resolves with its final outcome (errors already dead-lettered). */
  async score(item: RewardItem): Promise<RewardOutcome> {
    while (this.queue.length >= this.policy.max_queue) {
      await new Promise<void>((r) => this.spaceWaiters.push(r));
    }
    return new Promise<RewardOutcome>((resolve) => {
      this.queue.push({ item, resolve });
      this.queuedTokens += item.tokens;
      this.dispatch();
    });
  }

  /** Items waiting in the queue for a batch (at most `max_queue`; submitters beyond it wait outside). */
  get queued(): number {
    return this.queue.length;
  }

  /** Resolves once nothing is queued or in flight. */
  async idle(): Promise<void> {
    while (this.queue.length > 0 || this.inFlight > 0) {
      this.due = true;
      this.dispatch();
      await new Promise<void>((r) => this.idleWaiters.push(r));
    }
  }

  async close(): Promise<void> {
    await this.idle();
    await this.stage.close?.();
  }

  private full(): boolean {
    const { max_batch_size, max_batch_tokens } = this.policy;
    return (
      this.queue.length >= max_batch_size ||
      (max_batch_tokens !== undefined && this.queuedTokens >= max_batch_tokens)
    );
  }

  private dispatch(): void {
    while (this.inFlight < this.policy.concurrency && this.queue.length > 0 && (this.due || this.full())) {
      const batch = this.take();
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.dispatch();
        if (this.queue.length === 0 && this.inFlight === 0) {
          for (const w of this.idleWaiters.splice(0)) w();
        }
      });
    }
    if (this.queue.length === 0) this.due = false;
    if (this.queue.length > 0 && this.timer === null && !this.due) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.due = true;
        this.dispatch();
      }, this.policy.max_wait_ms);
    }
  }

  private take(): Waiting[] {
    const { max_batch_size, max_batch_tokens } = this.policy;
    let n = 0;
    let tokens = 0;
    while (n < this.queue.length && n < max_batch_size) {
      const t = this.queue[n]!.item.tokens;
      if (n > 0 && max_batch_tokens !== undefined && tokens + t > max_batch_tokens) break;
      tokens += t;
      n++;
    }
    const batch = this.queue.slice(0, n);
    this.queue = this.queue.slice(n);
    this.queuedTokens -= tokens;
    if (this.queue.length === 0 && this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    for (const w of this.spaceWaiters.splice(0, n)) w();
    return batch;
  }

  private async run(batch: Waiting[]): Promise<void> {
    const outcomes = await this.attempt(
      batch.map((w) => w.item),
      this.policy.retries,
    );
    batch.forEach((w, i) => w.resolve(outcomes[i]!));
  }

  /** Scores items with retries; a batch still failing is split to isolate the items that fail. */
  private async attempt(items: RewardItem[], retries: number): Promise<RewardOutcome[]> {
    const { metrics } = this.ctx;
    let lastError: unknown;
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (attempt > 0) {
        metrics.inc("reward_retries", this.name);
        await new Promise((r) => setTimeout(r, this.policy.backoff_ms * 2 ** (attempt - 1)));
      }
      try {
        const outcomes = await this.call(items);
        // Items the stage itself failed as retryable get their own retries, as a smaller batch.
        const again = outcomes.flatMap((o, i) => (o.kind === "error" && o.retryable === true ? [i] : []));
        if (again.length > 0 && attempt < retries) {
          const redone = await this.attempt(
            again.map((i) => items[i]!),
            retries - attempt - 1,
          );
          again.forEach((i, k) => (outcomes[i] = redone[k]!));
        }
        return outcomes.map((o, i) => (o.kind === "error" ? this.failed(items[i]!, o.message) : o));
      } catch (err) {
        lastError = err;
        if (!isRetryable(err)) break;
      }
    }
    if (items.length > 1) {
      // Split to find the poison: each half gets one attempt, so isolation costs log2(n) levels of calls.
      metrics.inc("reward_batch_splits", this.name);
      const half = items.length >> 1;
      const [a, b] = await Promise.all([
        this.attempt(items.slice(0, half), 0),
        this.attempt(items.slice(half), 0),
      ]);
      return [...a, ...b];
    }
    return [this.failed(items[0]!, lastError instanceof Error ? lastError.message : String(lastError))];
  }

  private async call(items: RewardItem[]): Promise<RewardOutcome[]> {
    const { metrics } = this.ctx;
    const controller = new AbortController();
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(Object.assign(new Error(`timed out after ${this.policy.timeout_ms} ms`), { retryable: true }));
      }, this.policy.timeout_ms);
    });
    try {
      const outcomes = await Promise.race([this.stage.score(items, controller.signal), timeout]);
      if (!Array.isArray(outcomes) || outcomes.length !== items.length) {
        throw Object.assign(
          new Error(
            `stage returned ${Array.isArray(outcomes) ? outcomes.length : typeof outcomes} outcomes for ` +
              `${items.length} items; a stage must return one outcome per item, in order`,
          ),
          { retryable: false },
        );
      }
      for (const o of outcomes) {
        if (o.kind === "score" && !Number.isFinite(o.score)) {
          throw Object.assign(new Error(`stage returned a non-finite score (${o.score})`), {
            retryable: false,
          });
        }
      }
      return outcomes;
    } catch (err) {
      metrics.inc("reward_call_failures", this.name);
      this.ctx.logger.warn(
        { stage: this.name, items: items.length, error: err instanceof Error ? err.message : String(err) },
        "A reward stage call failed.",
      );
      throw err;
    } finally {
      clearTimeout(timer);
      metrics.inc("reward_batches", this.name);
      metrics.inc("reward_batch_items", this.name, items.length);
      metrics.inc("reward_latency_ms", this.name, performance.now() - started);
    }
  }

  private failed(item: RewardItem, message: string): RewardOutcome {
    this.ctx.metrics.inc("reward_failures", this.name);
    this.ctx.deadLetters.write(
      makeDeadLetter(
        "REWARD_FAILED",
        `reward stage ${this.name} could not score ${item.key}: ${message}`,
        `reward.${this.name}`,
        {
          raw: JSON.stringify({ key: item.key, stage: this.name }),
          origin: { kind: "trajectory", key: item.key },
        },
        { uid: item.uid, session_id: item.session_id, details: { stage: this.name, error: message } },
      ),
    );
    return { kind: "error", message };
  }
}
