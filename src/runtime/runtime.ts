/**
 * The runtime: runs any valid plan, whatever its components; it knows them by their traits and roles
 * (registry.ts), never by their types. It builds every component from the registry (reward stages start
 * before any input or output opens, so one that cannot start fails the run with nothing written), opens
 * a lane's part of each component when the source assigns the lane, hands each batch of records to the
 * lane's part of the ingest stage (which decodes and applies them), and moves the units it gets back
 * through the lane's transforms to its sinks. It
 * stops the same way for every source: stop reading, finish or drop what is open, wait for every sink,
 * then commit and disconnect.
 */
import type {
  DeadLetterSink,
  IngestStage,
  Lane,
  SinkComponent,
  Source,
  SourceHandler,
  TransformComponent,
  Unit,
} from "../contract/components.ts";
import { isTrajflowError, TrajflowError } from "../core/errors.ts";
import { sourceFailure } from "./source-failure.ts";
import { addHoldings, HeldMemory, type Holdings, type MemoryReport } from "../core/held-memory.ts";
import type { Logger } from "../core/logger.ts";
import { Metrics } from "../core/metrics.ts";
import {
  registerThread,
  resetThreads,
  ThreadMeter,
  threadUsages,
  type ThreadUsage,
} from "../core/thread-usage.ts";
import type { DeadLetterOutput, RawRecord } from "../core/records.ts";
import type { DeadLetter } from "../schemas/dead-letter.ts";
import { originOffset } from "../schemas/origin.ts";
import { decodeWorkers } from "./decode-workers.ts";
import { DrainWatch } from "./drain-watch.ts";
import { LaneRunner } from "./lane.ts";
import type { Plan } from "./plan.ts";
import { REGISTRY, type RegistryContext, type StageContext } from "./registry.ts";
/**
 * Dead-letter bytes not yet durable past which reading waits (a flood of garbage). At 64 MiB a flood of
 * 100,000 rejected events held 70 MB of letters and ran a 192 MB heap out of memory (issue 27 item 10).
 */
const DEAD_LETTER_BACKLOG_BYTES = 16 * 2 ** 20;

export interface RunOptions {
  logger: Logger;
  /** Directory relative paths (models, modules) are resolved from. */
  baseDir: string;
  /** Resolves when the run should stop (a signal): open sessions are left for the next run. */
  stopSignal?: Promise<void>;
  /** Unbounded sources: stop after this long without records, finishing open sessions too. */
  untilIdleMs?: number;
  /** Called after every batch of records (progress bars). */
  onBatch?: (runtime: Runtime) => void;
}

export interface RunResult extends MemoryReport {
  /** What the source's records are called ("events", "messages"). */
  recordNoun: string;
  metrics: Metrics;
  seconds: number;
  /** Records read from the source. */
  events: number;
  files: string[];
  deadLetterFiles: string[];
  /** Where the durable sink writes (a directory). */
  out: string;
  /** Where dead letters go (a directory, a topic). */
  deadLetters: string;
  /** CPU and memory of each thread of the run: the ingest thread ("main"), decode workers, encoders. */
  threads: Array<{ thread: string } & ThreadUsage>;
}

export class Runtime implements SourceHandler {
  readonly metrics = new Metrics();
  readonly plan: Plan;
  private readonly options: RunOptions;
  private readonly log: Logger;
  source!: Source;
  private ingest!: IngestStage;
  private transforms: TransformComponent[] = [];
  private sinks: SinkComponent[] = [];
  private deadLetters!: DeadLetterSink;
  private readonly lanes = new Map<Lane, LaneRunner>();
  /** Batches being applied (idle detection waits for them). */
  private inFlight = 0;
  /** A draining run's watch, told when every batch handed over is applied. */
  private onSettled: (() => void) | null = null;
  /** Settles once the last batch handed over (and every one before it) is applied: a stop waits for it. */
  private applying: Promise<void> = Promise.resolve();
  private failure: Error | null = null;
  /** Moves quiet live lanes' clocks with the wall clock (live sources only). */
  private clockTimer: NodeJS.Timeout | null = null;
  // The ingest thread's figures, sampled as waitForEnd ticks (every 100 ms) and once more at the end.
  private readonly mainMeter = new ThreadMeter();
  private mainUsage = this.mainMeter.sample();
  // What each part holds, sampled with the RSS at the same ticks.
  private readonly held = new HeldMemory();
  private advancing = false;
  /** Set once the run stops or fails: no clock advance may forward anything after that. */
  private clockStopped = false;

  constructor(plan: Plan, options: RunOptions) {
    this.plan = plan;
    this.options = options;
    this.log = options.logger;
  }

  get openSessions(): number {
    return this.ingest?.openSessions ?? 0;
  }

  /** The data each part of the pipeline holds now (memory_held_bytes gauge, the run report). */
  holdings(): Holdings {
    const parts: Holdings = {};
    addHoldings(parts, this.source?.heldBytes?.());
    addHoldings(parts, this.ingest?.heldBytes?.());
    for (const s of this.sinks) addHoldings(parts, s.heldBytes?.());
    if (this.deadLetters !== undefined) parts["dead letters waiting"] = this.deadLetters.backlogBytes;
    return parts;
  }

  private sampleUsage(): void {
    this.mainUsage = this.mainMeter.sample();
    this.held.sample(this.holdings(), process.memoryUsage.rss(), threadUsages());
  }

  /** Held offsets per lane, for the offsets_held gauge. */
  heldByLane(): Array<{ lane: string; held: number }> {
    return [...this.lanes.keys()].map((l) => ({ lane: l.id, held: l.ledger.holds }));
  }

  /** Builds every component; nothing reads or writes yet. */
  private async build(): Promise<void> {
    const { plan, metrics } = this;
    const base: RegistryContext = {
      metrics,
      logger: this.log,
      baseDir: this.options.baseDir,
      deadLetters: this.countingOutput(null),
      sourceTraits: plan.sourceTraits,
    };
    const dl = plan.deadLetters;
    this.deadLetters = await REGISTRY.dead_letters[dl.type]!.build(dl.config as never, base);
    const ctx: StageContext = {
      ...base,
      deadLetterSink: this.deadLetters,
      decodeWorkers: decodeWorkers(plan),
      control: (event) => {
        for (const t of this.transforms) t.control?.(event);
      },
    };
    // Stages that load models or import modules start before anything opens, all at once.
    const built = await Promise.allSettled(
      plan.transforms.map((t) => REGISTRY.transforms[t.type]!.build(t.config as never, ctx)),
    );
    const failed = built.find((b) => b.status === "rejected");
    if (failed !== undefined) {
      await Promise.all(built.map((b) => (b.status === "fulfilled" ? b.value.close?.() : undefined)));
      throw (failed as PromiseRejectedResult).reason;
    }
    // The plan put the ingest stage first.
    const [ingest, ...transforms] = built.map((b) => (b as PromiseFulfilledResult<unknown>).value);
    this.ingest = ingest as IngestStage;
    this.transforms = transforms as TransformComponent[];
    this.sinks = await Promise.all(
      plan.sinks.map((s) => REGISTRY.sinks[s.type]!.build(s.config as never, ctx)),
    );
    this.source = await REGISTRY.sources[plan.source.type]!.build(plan.source.config as never, base);
  }

  /** The sink recovery trusts (the plan checked there is exactly one). */
  private get durable(): SinkComponent {
    return this.sinks.find((s) => s.role === "durable")!;
  }

  /** Dead letters of one lane (each holds its own offset) or of no lane; every one is counted. */
  private countingOutput(lane: Lane | null): DeadLetterOutput {
    return {
      write: (letter: DeadLetter) => {
        this.metrics.inc("dead_letters", letter.code);
        if (lane === null) return this.deadLetters.write(letter, null);
        const offset = originOffset(letter.origin) ?? lane.ledger.next;
        this.deadLetters.write(letter, lane.ledger.hold(offset));
      },
    };
  }

  // --- SourceHandler -------------------------------------------------------------------------------

  async assigned(lane: Lane): Promise<void> {
    // A live source is read again after a restart: output named in cut order (part-00000, ...) would
    // collide with its own earlier files, so its lanes must name the input range their offsets belong to.
    if (this.plan.sourceTraits.live && lane.files.range === undefined)
      throw new TrajflowError(
        "INTERNAL_ERROR",
        `lane ${lane.id} of a live source has no input range; a live source must name its lanes' range`,
      );
    const parts = await Promise.all(this.sinks.map((s) => s.openLane(lane)));
    const durable = parts[this.sinks.indexOf(this.durable)]!;
    const written = (await durable.recover?.()) ?? new Map<string, number>();
    this.lanes.set(
      lane,
      new LaneRunner({
        lane,
        ingest: this.ingest.openLane(lane, this.countingOutput(lane), written),
        transforms: this.transforms.map((t) => t.openLane(lane)),
        before: parts.filter((p) => p !== durable),
        durable,
      }),
    );
    if (written.size > 0)
      this.log.info({ lane: lane.id, sessions: written.size }, "Sessions already in files will be skipped.");
  }

  revoked(lanes: Lane[]): void {
    for (const lane of lanes) {
      const runner = this.lanes.get(lane);
      if (runner === undefined) continue;
      runner.abandon();
      runner.ingest.drop();
      this.lanes.delete(lane);
    }
  }

  records(lane: Lane, records: RawRecord[], offsets: number[], live: () => boolean): Promise<void> {
    this.metrics.timeline.first_record_at_ms ??= Date.now();
    // Decoding starts now, applying once the batches handed over before are applied: a source that
    // hands over the next batch early gets it decoded (on the decode workers) while this one assembles.
    const runner = this.lanes.get(lane);
    const batch = runner?.ingest.records(records, offsets, live);
    if (runner !== undefined) runner.batchesInFlight++;
    const run = this.applying.then(() => this.apply(lane, runner, batch, live));
    this.inFlight++;
    this.applying = run
      .catch(() => {})
      .finally(() => {
        this.inFlight--;
        this.metrics.timeline.last_record_at_ms = Date.now();
        if (this.inFlight === 0) this.onSettled?.();
        if (runner !== undefined) {
          runner.batchesInFlight--;
          runner.applied();
        }
      });
    return run;
  }

  /**
   * Lanes of a live source that are quiet (nothing handed over for `idleAdvanceMs`) and caught up with
   * their input move their clocks with the wall clock, in turn with the batches (never during one).
   */
  private async advanceQuietLanes(): Promise<void> {
    const live = this.source.live;
    if (live === undefined || this.advancing || this.clockStopped) return;
    const now = Date.now();
    const quiet = [...this.lanes.values()].filter(
      (r) => r.batchesInFlight === 0 && now - r.quietSince >= live.idleAdvanceMs,
    );
    if (quiet.length === 0) return;
    this.advancing = true;
    try {
      let caughtUp: Set<Lane>;
      try {
        caughtUp = await live.caughtUp(quiet.map((r) => r.lane));
      } catch (err) {
        // The broker away: time stands still meanwhile, as it does without events.
        this.log.debug({ err }, "Could not ask whether the quiet lanes are caught up.");
        return;
      }
      const run = this.applying.then(async () => {
        for (const r of quiet) {
          if (this.clockStopped) return;
          // Records handed over since the question (or the lane revoked): events move its clock.
          if (!caughtUp.has(r.lane) || r.batchesInFlight > 0 || this.lanes.get(r.lane) !== r) continue;
          await r.followWallClock(Date.now(), live.cutFilesWhenQuiet);
        }
      });
      // Not counted in inFlight: moving a clock is not input, and must not keep a drain from stopping.
      this.applying = run.catch(() => {});
      await run;
    } catch (err) {
      this.failure ??= err as Error;
    } finally {
      this.advancing = false;
    }
  }

  private async apply(
    lane: Lane,
    runner: LaneRunner | undefined,
    batch: AsyncIterable<Unit[]> | undefined,
    live: () => boolean,
  ): Promise<void> {
    // Revoked since it was handed over: nothing of it applies.
    if (runner === undefined || batch === undefined || this.lanes.get(lane) !== runner) return;
    for await (const units of batch) {
      if (units.length > 0) await runner.forward(units);
      if (this.ingest.overLimits) await this.enforceLimits();
    }
    if (!live()) return;
    await runner.endOfBatch(false);
    // A flood of rejected events must not pile up in memory faster than the dead-letter sink writes.
    if (this.deadLetters.backlogBytes > DEAD_LETTER_BACKLOG_BYTES)
      await this.deadLetters.waitBelow(DEAD_LETTER_BACKLOG_BYTES / 2);
    this.options.onBatch?.(this);
  }

  /**
   * Open sessions past the limits: the oldest, of any lane, is cut (finalized early, flagged
   * `session_cut`). Pausing instead would stall, since only new events let sessions end.
   */
  private async enforceLimits(): Promise<void> {
    while (this.ingest.overLimits) {
      const cut = this.ingest.cutOldest();
      if (cut === null) return;
      const runner = this.lanes.get(cut.lane);
      if (runner !== undefined && cut.units.length > 0) await runner.forward(cut.units);
    }
  }

  // --- running -------------------------------------------------------------------------------------

  /** Builds, runs until the source ends or a stop, stops, and reports. */
  /** Did the pipeline finalize this session? The embedded gateway refuses its rewards then (LATE_EVENT). */
  sessionFinalized = (uid: string, sessionId: string) => this.ingest?.finalized?.(uid, sessionId) === true;

  async run(ops?: { ready(ready: boolean): void }): Promise<RunResult> {
    const started = performance.now();
    resetThreads();
    registerThread("main", () => this.mainUsage);
    await this.build().catch(async (err: unknown) => {
      // What was built before a component that failed (worker threads among them) must not hold the exit.
      await this.closeAll().catch(() => {});
      await this.deadLetters?.close().catch(() => {});
      throw err;
    });
    let opened = false;
    try {
      // Outputs are checked before any input is read: an unwritable directory fails first. The source
      // connects meanwhile (reading nothing), and the outputs open side by side: start-up waits for the
      // slowest of them, not their sum.
      const connecting = this.source.connect?.();
      connecting?.catch(() => {}); // reported by start(), after the outputs' checks
      opened = await this.openOutputs();
      await this.source.start(this);
      const live = this.source.live;
      if (live !== undefined && live.idleAdvanceMs > 0)
        this.clockTimer = setInterval(
          () => void this.advanceQuietLanes(),
          Math.max(50, Math.min(500, Math.floor(live.idleAdvanceMs / 2))),
        );
      ops?.ready(true);
      const why = await this.waitForEnd();
      ops?.ready(false);
      await this.stop(why === "ended" || why === "idle");
      this.sampleUsage();
    } catch (err) {
      ops?.ready(false);
      this.failure ??= err as Error;
      await this.abort(opened);
      throw this.failure;
    }
    return {
      recordNoun: this.plan.sourceTraits.recordNoun,
      metrics: this.metrics,
      seconds: (performance.now() - started) / 1000,
      events: this.source.delivered,
      files: this.sinks.flatMap((s) => [...(s.files ?? [])]),
      deadLetterFiles: [...(this.deadLetters.files ?? [])],
      out: this.durable.location,
      deadLetters: this.deadLetters.location,
      threads: threadUsages(),
      ...this.held.memoryReport(),
    };
  }

  /** Every lane's buffered rows to files, in turn with the batches (never during one). */
  private async cutDrainedLanes(): Promise<void> {
    const run = this.applying.then(async () => {
      for (const r of this.lanes.values())
        if (r.batchesInFlight === 0 && !this.clockStopped) await r.cutFiles();
    });
    this.applying = run.catch(() => {});
    try {
      await run;
    } catch (err) {
      this.failure ??= err as Error;
    }
  }

  private async waitForEnd(): Promise<"ended" | "idle" | "signal"> {
    const ended = this.source.ended.then(() => "ended" as const);
    const signal = this.options.stopSignal?.then(() => "signal" as const);
    const live = this.source.live;
    const watch = new DrainWatch(this.options.untilIdleMs, () =>
      live === undefined ? Promise.resolve(true) : live.drained().catch(() => false),
    );
    this.onSettled = () => watch.settled(this.source.delivered);
    try {
      for (;;) {
        const why = await Promise.race([ended, watch.next(), ...(signal === undefined ? [] : [signal])]);
        this.sampleUsage();
        if (why !== "tick") return why;
        if (this.failure !== null) throw this.failure;
        if (this.source.error !== null) throw sourceFailure(this.source.error);
        // Not quiet while a batch is still being applied (waiting on a sink's backpressure, say).
        const step = await watch.tick(this.source.delivered, this.inFlight > 0);
        if (step === "idle") return "idle";
        if (step === "cut") await this.cutDrainedLanes();
      }
    } finally {
      this.onSettled = null;
    }
  }

  /**
   * Stops reading, finishes the lanes (with `final`, open sessions are written as they are; otherwise
   * they are left to the next run, their offsets uncommitted), waits for every sink, commits, closes.
   * Each step is logged: a stop that hangs says where.
   */
  private async stop(final: boolean): Promise<void> {
    this.stopClock();
    await this.source.pause();
    await this.applying;
    for (const runner of this.lanes.values()) await runner.endOfBatch(final);
    // Every lane's last files at once: the encoders and the disk work on all of them together instead of
    // one lane after another (a stop right after a burst spent 0.4 s writing four partitions in turn).
    const drained = await Promise.allSettled([...this.lanes.values()].map((runner) => runner.drain()));
    const failed = drained.find((d) => d.status === "rejected");
    if (failed !== undefined) throw (failed as PromiseRejectedResult).reason;
    await this.deadLetters.close();
    const say = this.plan.sourceTraits.live ? "info" : "debug";
    this.log[say]("Files written; committing offsets.");
    // A commit during a rebalance can wait for the group indefinitely; the files are in place either way
    // and recovery skips their sessions, so an uncommitted offset costs re-reading, never a duplicate.
    const committed = await Promise.race([
      this.source.commit().then(() => true),
      new Promise<false>((r) => setTimeout(() => r(false), 10_000).unref()),
    ]).catch(() => false);
    if (!committed)
      this.log.warn("Could not commit offsets while stopping; the next owner re-reads from the last commit.");
    await this.closeAll();
    this.log[say]("Stopped.");
  }

  /**
   * Opens every sink and the dead-letter output at once. On a failure the dead-letter output is closed
   * again if it had opened, and the first failure in the order sinks, dead letters is thrown (the same
   * error whichever finished first).
   */
  private async openOutputs(): Promise<true> {
    const sinks = Promise.allSettled(this.sinks.map((s) => s.open?.()));
    const deadLetters = await Promise.allSettled([this.deadLetters.open()]);
    const failed = [...(await sinks), ...deadLetters].find((r) => r.status === "rejected");
    if (failed === undefined) return true;
    if (deadLetters[0]!.status === "fulfilled") await this.deadLetters.close().catch(() => {});
    throw failed.reason;
  }

  /** After a failure: nothing more is written; connections and workers are closed. */
  private async abort(opened: boolean): Promise<void> {
    this.stopClock();
    await this.source?.pause().catch(() => {});
    if (opened) {
      for (const runner of this.lanes.values()) runner.abandon();
      await this.deadLetters.close().catch(() => {});
    }
    await this.closeAll().catch(() => {});
    // A finite input re-run into a place holding a different run's output: take this run's back out.
    if (
      isTrajflowError(this.failure) &&
      this.failure.code === "FILE_CONFLICT" &&
      !this.plan.sourceTraits.live
    ) {
      for (const sink of this.sinks) {
        const removed = (await sink.rollback?.()) ?? [];
        if (removed.length > 0)
          this.log.warn({ files: removed.length }, "Removed the files this run wrote before the conflict.");
      }
    }
  }

  private stopClock(): void {
    this.clockStopped = true;
    if (this.clockTimer !== null) clearInterval(this.clockTimer);
    this.clockTimer = null;
  }

  private async closeAll(): Promise<void> {
    await this.source?.close();
    for (const s of this.sinks) await s.close();
    for (const t of this.transforms) await t.close?.();
    await this.ingest?.close();
  }
}
