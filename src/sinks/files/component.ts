/**
 * The file sinks (`parquet`, `arrow`) as pipeline components: one FileSink per lane, sharing one encoder
 * pool. A unit (a session, or a GRPO group) is one write, so it lands in one file; its acks are released
 * once that file is renamed into place. Files of a lane with an input range (a Kafka partition) are
 * named after the offsets they cover, list their sessions for recovery, and are fenced: a process that
 * no longer owns the partition drops them instead of landing them.
 */
import type { Lane, LaneSink, SessionSpan, SinkComponent, Unit } from "../../contract/components.ts";
import { unitRows } from "../../contract/components.ts";
import type { Holdings } from "../../core/held-memory.ts";
import type { Logger } from "../../core/logger.ts";
import type { Metrics } from "../../core/metrics.ts";
import { rangeFilePattern, rangeName, SESSIONS_KEY, writtenSessions } from "./recovery.ts";
import { displayLocation } from "../shared/location.ts";
import { openStore } from "../shared/open-store.ts";
import type { Store } from "../shared/store.ts";
import type { FileSinkConfig } from "./config.ts";
import { EncoderPool } from "./pool.ts";
import { FileSink } from "./sink.ts";

export class FileSinkComponent implements SinkComponent {
  readonly role = "durable";
  readonly location: string;
  private readonly config: FileSinkConfig;
  private readonly metrics: Metrics;
  private readonly logger: Logger;
  private readonly pool: EncoderPool;
  private readonly sinks = new Set<FileSink>();
  private readonly retired: FileSink[] = [];
  private storeInstance: Store | null = null;

  constructor(config: FileSinkConfig, ctx: { metrics: Metrics; logger: Logger }) {
    this.config = config;
    this.location = displayLocation(config.path);
    this.metrics = ctx.metrics;
    this.logger = ctx.logger;
    this.pool = new EncoderPool(config.encode_workers, {
      warmUp: config,
      location: config.path,
      s3: config.s3,
    });
  }

  private get store(): Store {
    if (this.storeInstance === null) throw new Error("the file sink was not opened");
    return this.storeInstance;
  }

  /** Files committed by every lane, in the order they were cut per lane. */
  get files(): string[] {
    return [...this.retired, ...this.sinks].flatMap((s) => s.files);
  }

  heldBytes(): Holdings {
    let buffered = 0;
    let writing = 0;
    for (const sink of [...this.retired, ...this.sinks]) {
      const held = sink.held;
      buffered += held.buffered;
      writing += held.writing;
    }
    return { "rows waiting for a file": buffered, "rows being written": writing };
  }

  /**
   * Past `max_buffered_bytes` of rows waiting over every lane, cuts the lane holding the most (its file
   * is smaller than its own limits would make it) until the rest fits: many partitions buffering at once
   * must not add up past what one process may hold.
   */
  private async boundBuffered(): Promise<void> {
    for (;;) {
      let total = 0;
      let largest: FileSink | null = null;
      for (const sink of this.sinks) {
        const { buffered } = sink.held;
        total += buffered;
        if (largest === null || buffered > largest.held.buffered) largest = sink;
      }
      if (total <= this.config.max_buffered_bytes || largest === null) return;
      this.metrics.inc("files_cut_for_memory");
      await largest.cut();
    }
  }

  /** Fails before anything is read when the output (a directory, an S3 prefix) cannot be written. */
  async open(): Promise<void> {
    this.storeInstance = await openStore(this.config.path, this.config.s3);
    await this.storeInstance.assertWritable("trajectory files");
  }

  async openLane(lane: Lane): Promise<LaneSink> {
    const { files } = lane;
    const { range } = files;
    const flat = (tags: unknown[]) => (tags as SessionSpan[][]).flat();
    const sink = new FileSink(this.config, {
      metrics: this.metrics,
      logger: this.logger.child({ lane: lane.id }),
      pool: this.pool,
      store: this.store,
      sharedDirectoryTempAgeMs: files.sharedDirectoryTempAgeMs,
      nameCut: range === undefined ? undefined : (_cut, tags) => rangeName(range, flat(tags)),
      describeCut: (tags) =>
        range === undefined
          ? files.describe()
          : { ...files.describe(), [SESSIONS_KEY]: JSON.stringify(flat(tags)) },
      fence: range === undefined ? undefined : () => lane.fence(),
      lowWater: range === undefined ? undefined : () => lane.ledger.committable(),
    });
    await sink.open();
    this.sinks.add(sink);
    const retire = () => {
      if (this.sinks.delete(sink)) this.retired.push(sink);
    };
    return {
      write: async (units: Unit[]) => {
        for (const unit of units) {
          // What the callback needs, not the unit: it would keep the unit's rows alive until the file
          // is written, though the encoder has its own copy of them by then.
          const { acks, finishedAt } = unit;
          const durable = () => {
            for (const ack of acks) ack.release();
            this.metrics.observe("session_durable_seconds", (performance.now() - finishedAt) / 1000);
          };
          await sink.write(unitRows(unit), durable, unit.spans);
        }
        await this.boundBuffered();
      },
      cut: () => sink.cut(),
      drain: async () => {
        await sink.close();
        retire();
      },
      abandon: () => {
        sink.abandon();
        retire();
      },
      recover: async () => {
        if (range === undefined) return new Map();
        // Unfinished uploads of this range are an earlier owner's: aborted before the listing, so a
        // file of an expelled member either is in the listing or never lands (docs/sinks.md).
        const pattern = rangeFilePattern(range);
        const aborted = await this.store.abortPending((name) => pattern.test(name));
        if (aborted > 0) {
          this.metrics.inc("uploads_aborted", "", aborted);
          this.logger.info({ lane: lane.id, aborted }, "Aborted an earlier owner's unfinished uploads.");
        }
        return writtenSessions(this.store, range, lane.ledger.next);
      },
    };
  }

  /**
   * Removes the files this run created (a replay that found another run's files in its directory):
   * after a FILE_CONFLICT the other run's dataset keeps none of this run's rows. Files found already
   * committed (identical bytes) are left: they belong to both.
   */
  async rollback(): Promise<string[]> {
    const created = [...this.retired, ...this.sinks].flatMap((s) => s.created);
    for (const name of created) await this.store.remove(name);
    return created.map((name) => this.store.url(name));
  }

  async close(): Promise<void> {
    try {
      for (const sink of this.sinks) await sink.close();
      // Files of revoked lanes already dispatched finish (or are fenced) before the workers stop.
      for (const sink of this.retired) await sink.drain().catch(() => {});
    } finally {
      await this.pool.close();
      this.storeInstance?.close();
    }
  }
}
