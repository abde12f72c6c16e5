/**
 * The component contract (Vector's model: a config schema, a build function and a registered type name;
 * Kafka Connect's per-partition open/put/preCommit/close).
 *
 * Data moves through a pipeline in *lanes*: one per Kafka partition, one for a replayed input. A lane
 * has its own ledger of input offsets, and every transform and sink opens a per-lane part of itself
 * when the lane is assigned and forgets it when the lane is revoked. Between transforms and sinks flow
 * *units*: one finished session, or a GRPO group of them, that must land together, carrying the acks
 * that hold their input offsets until every sink made them durable.
 */
import type { Holdings } from "../core/held-memory.ts";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import type { DeadLetterOutput, RawRecord } from "../core/records.ts";
import type { DeadLetter } from "../schemas/dead-letter.ts";
import type { PolicyUpdateEvent } from "../schemas/events.ts";
import type { SessionOutput } from "../schemas/session.ts";
import type { TrajectoryRow } from "../schemas/trajectory.ts";
import type { Ack, Ledger } from "./ledger.ts";

/** One session's place in its lane's input: uid, session_id, first and last offset of its events. */
export type SessionSpan = [uid: string, sessionId: string, first: number, last: number];

/** Sessions that must land together (one session, or a GRPO group), with what holds their input. */
export interface Unit {
  /** The sessions, as assembled (reward stages score them; grouping reads their status). */
  sessions: SessionOutput[];
  /** The rows to write; null: every session's rows, in order. Grouping sets it (placeholders). */
  rows: TrajectoryRow[] | null;
  /** Held input offsets: released by each sink once the unit is durable there. */
  acks: Ack[];
  /** Where each session's events were in the lane (file names and recovery of Kafka lanes). */
  spans: SessionSpan[];
  /** `performance.now()` when the last session finished assembling (latency to durable file). */
  finishedAt: number;
}

/** The rows a unit writes. */
export function unitRows(unit: Unit): TrajectoryRow[] {
  if (unit.rows !== null) return unit.rows;
  if (unit.sessions.length === 1) return unit.sessions[0]!.rows;
  return unit.sessions.flatMap((s) => s.rows);
}

/** What a sink needs to know about a lane's input to name and describe its output (the source knows it). */
export interface LaneFiles {
  /**
   * The lane's input range, when it has one that outlives this process (`topic-partition`): output is
   * then named by the range and the offsets it covers, lists its sessions with their offsets, and is
   * fenced before it lands, so a later owner of the lane recovers which sessions are written. Absent (a
   * replay, re-run whole): output is numbered in cut order and nothing is recovered.
   */
  range?: string;
  /** Metadata naming the input a file came from (the source, its coordinates or input paths). */
  describe(): Record<string, string>;
  /**
   * Other live processes may write to the same directory (a consumer group): then only temporaries
   * older than this are a crashed writer's. Absent: this process is the only writer.
   */
  sharedDirectoryTempAgeMs?: number;
}

export interface Lane {
  /** `topic/partition` or `replay`: for logs, metrics and dead-letter file names. */
  readonly id: string;
  readonly ledger: Ledger;
  readonly files: LaneFiles;
  /**
   * True while this process still owns the lane: a sink asks just before it makes output visible
   * (renames a file into place), so a member expelled from its consumer group never lands a file after
   * the partition's new owner recovered it.
   */
  fence(): Promise<boolean>;
  /** False once the lane was revoked: its pending output is abandoned. */
  readonly live: boolean;
}

/** What the runtime offers a source. */
export interface SourceHandler {
  /** A lane starts (a partition assigned); resolves once every component is ready for its records. */
  assigned(lane: Lane): Promise<void>;
  /**
   * Records of a lane, in offset order (`offsets[i]` is record i's). Resolves when they were applied;
   * `live()` false tells the runtime to stop early (a rebalance, a stop). A source may hand over the next
   * batch before this one resolved: batches are applied in the order they were handed over, and a later
   * one is decoded meanwhile.
   */
  records(lane: Lane, records: RawRecord[], offsets: number[], live: () => boolean): Promise<void>;
  /** These lanes are gone (a rebalance, a restart): their state is dropped, nothing they hold may land. */
  revoked(lanes: Lane[]): void;
}

/**
 * What a source type is, known before it is built: the plan and the runtime's defaults read it, so the
 * runtime never asks which source it runs.
 */
export interface SourceTraits {
  /**
   * Unbounded input (a topic): runs until stopped or idle, with the stop signals handled; a finite input
   * (recorded files) ends by itself and is re-run whole, so on a file conflict its output is rolled back.
   */
  readonly live: boolean;
  /**
   * Hands over the next batch before the last is applied, so decode workers pay off (by default one on a
   * host with a core to spare); a source applied batch by batch decodes on the ingest thread.
   */
  readonly pipelined: boolean;
  /**
   * Other processes may write to the same outputs (the members of a consumer group): dead-letter files
   * then carry the writer in their names and land by age.
   */
  readonly sharedOutputs: boolean;
  /** What its records are called in the report ("messages", "events"). */
  readonly recordNoun: string;
}

export interface Source {
  /**
   * Connects to the input without reading from it (a broker's handshake). The runtime calls it while the
   * outputs open, so start-up waits for the slower of the two instead of both; `start` connects by itself
   * when it was not called. Its failure surfaces from `start`.
   */
  connect?(): Promise<void>;
  /** Begins delivering records to `handler`. */
  start(handler: SourceHandler): Promise<void>;
  /** Resolves when the input is exhausted (a replay); never for an unbounded source. */
  readonly ended: Promise<void>;
  /** A fatal error of the source's client (checked by the runtime's loop), or null. */
  readonly error: Error | null;
  /** Records delivered so far (the runtime's idle detection and the status line). */
  readonly delivered: number;
  /** Stops delivering: handlers in flight return early. The runtime then flushes its lanes. */
  pause(): Promise<void>;
  /** Commits every lane's settled offset upstream (Kafka); a no-op for files. */
  commit(): Promise<void>;
  /** Disconnects. */
  close(): Promise<void>;
  /** Lag per lane, for the gauge (Kafka). */
  lag?(): Map<string, number>;
  /** Present on an unbounded source (a topic): how time moves while it is quiet, and when it is drained. */
  readonly live?: LiveSource;
  /** Bytes of input read so far (files), for a progress bar. */
  readonly progress?: { bytesRead: number };
  /** Data it holds now by part (records handed over, not yet applied): memory accounting. */
  heldBytes?(): Holdings;
}

/**
 * What an unbounded source tells the runtime. Its lanes' clocks are event time while events flow; a lane
 * that has read everything its input holds and received nothing for `idleAdvanceMs` moves its clock on
 * with wall-clock time, so reward grace, idle and group timeouts elapse on a quiet topic too
 * (docs/assembly.md, "Time").
 */
export interface LiveSource {
  /** How long a caught-up lane must be quiet before its clock follows the wall clock; 0: never. */
  readonly idleAdvanceMs: number;
  /** A caught-up, quiet lane writes its buffered rows at once instead of at the file age. */
  readonly cutFilesWhenQuiet: boolean;
  /** Of `lanes`, those that have read everything their input holds right now (asked upstream). */
  caughtUp(lanes: Lane[]): Promise<Set<Lane>>;
  /** True when everything assigned to this process is read to its end now: a drain may stop. */
  drained(): Promise<boolean>;
}

/**
 * One lane's part of the ingest stage: raw records in, finished units out. A control event it meets goes
 * to the transforms' `control`; a rejected record goes to the lane's dead letters.
 */
export interface LaneIngest {
  readonly lane: Lane;
  /** The lane's event time: the latest event time seen, or the wall clock a quiet lane follows. */
  readonly eventTime: number;
  /**
   * A batch of the lane's records (`offsets[i]` is record i's), as the source handed it over. Decoding
   * starts at once (on worker threads when configured), so a batch handed over early decodes while the
   * one before it is applied; iterating applies the records in order, yielding the units of the sessions
   * they finish. A record below the ledger's `next` (delivered again) is skipped; each one applied moves
   * `next` past it. It also yields (possibly no units) when the stage is over its limits, for the runtime
   * to cut the oldest sessions before the next record; `live()` false stops it early.
   */
  records(records: RawRecord[], offsets: number[], live: () => boolean): AsyncIterable<Unit[]>;
  /** Moves the lane's clock to at least `time` (a quiet live lane); returns what that finishes. */
  advanceClock(time: number): Unit[];
  /** Every open session, finished as it is (end of input, or a draining stop). */
  flush(): Unit[];
  /** The lane was revoked: its open sessions are dropped (the next owner reads them again). */
  drop(): void;
}

/**
 * The first stage of every pipeline (decode + assemble): raw records become sessions. Built from the
 * registry like every component; its limits on open sessions span all lanes.
 */
export interface IngestStage {
  /**
   * Opens a lane. `written`: sessions of the lane already durable (recovery) with the last offset
   * applied there; their events are skipped.
   */
  openLane(lane: Lane, deadLetters: DeadLetterOutput, written: Map<string, number>): LaneIngest;
  readonly openSessions: number;
  /** True while open sessions exceed a limit: the runtime cuts the oldest until it is not. */
  readonly overLimits: boolean;
  /** Finalizes the oldest open session of any lane early; null when none is open. */
  cutOldest(): { lane: Lane; units: Unit[] } | null;
  /** Data it holds now by part (open sessions): memory accounting. */
  heldBytes?(): Holdings;
  /**
   * True once the session is finalized in a lane of this process (or was found written at its start):
   * its rows are written or on their way, and a later event of it is a LATE_EVENT dead letter.
   */
  finalized?(uid: string, sessionId: string): boolean;
  close(): Promise<void>;
}

/** A transform's part for one lane. Units in, units out, in order. */
export interface LaneTransform {
  /**
   * Takes a unit at the lane's event time; returns the units ready to go on (possibly none, possibly
   * earlier ones).
   */
  push(unit: Unit, eventTime: number): Promise<Unit[]> | Unit[];
  /** Event time moved to `eventTime`: units whose wait is over (group timeouts). */
  tick?(eventTime: number): Unit[];
  /**
   * End of a batch of records (`final` false) or of the lane's input (`final` true, after a replay or a
   * draining stop): units held only for throughput go on; with `final`, everything held goes on.
   */
  flush(final: boolean, eventTime: number): Promise<Unit[]> | Unit[];
}

export interface TransformComponent {
  openLane(lane: Lane): LaneTransform;
  /** A control event (policy.update) reached the pipeline. */
  control?(event: PolicyUpdateEvent): void;
  close?(): Promise<void>;
}

/** A sink's part for one lane. */
export interface LaneSink {
  /**
   * Takes units. Each unit's acks were retained once for this sink: release each once the unit is
   * durable here. Resolves when the units were accepted (buffered or written), waiting when too much is
   * in flight (backpressure).
   */
  write(units: Unit[]): Promise<void>;
  /** Makes what is buffered durable soon (cuts a file); resolves once dispatched. */
  cut(): Promise<void>;
  /** Waits until everything accepted is durable. */
  drain(): Promise<void>;
  /** The lane was revoked: drop what is buffered (its acks never release), land nothing more. */
  abandon(): void;
  /** Sessions of this lane already durable (recovery): key `sessionKey(uid, session_id)` → last offset applied. */
  recover?(): Promise<Map<string, number>>;
}

/**
 * A sink's place in a pipeline. `durable`: the one sink progress is recovered from (the files); it
 * receives units only after every other sink acknowledged them, so what it holds is everywhere. `topic`:
 * a copy acknowledged before the durable sink (a trajectory topic).
 */
export type SinkRole = "durable" | "topic";

export interface SinkComponent {
  readonly role: SinkRole;
  /** Where its output goes, for the report (a directory, a topic). */
  readonly location: string;
  openLane(lane: Lane): Promise<LaneSink>;
  /**
   * Removes what this run created: a finite input re-run into a place holding another run's output
   * (FILE_CONFLICT) must leave that output as it was. Returns what was removed.
   */
  rollback?(): Promise<string[]>;
  /** Checked before anything is read (an unwritable output fails first). */
  open?(): Promise<void>;
  close(): Promise<void>;
  /** Files committed, for the report. */
  readonly files?: readonly string[];
  /** Data it holds now by part (rows waiting for a file, rows being written): memory accounting. */
  heldBytes?(): Holdings;
}

/** Where dead letters go: files or a topic. A letter holds `ack` (when given) until it is durable. */
export interface DeadLetterSink {
  /** Where letters go, for the report (a directory, a topic). */
  readonly location: string;
  write(letter: DeadLetter, ack: Ack | null): void;
  /** Bytes accepted but not yet durable: the runtime stops reading while it is over its limit. */
  readonly backlogBytes: number;
  /** Waits until the backlog is at most `bytes`. */
  waitBelow(bytes: number): Promise<void>;
  open(): Promise<void>;
  /** Makes everything durable, then stops. */
  close(): Promise<void>;
  readonly files?: readonly string[];
}

/**
 * Settings the source shares with the pipeline's other components, by name (a Kafka source shares its
 * connection, which a dead-letter or trajectory topic without one of its own takes). The plan hands them
 * from the source to the others without knowing what they are.
 */
export type SharedSettings = Readonly<Record<string, unknown>>;

/** A component's config completed from the shared settings, or what it lacks (`path` in its config). */
export type Resolved<C> = { config: C } | { path: string[]; problem: string };

/** What every component is built with. */
export interface BuildContext {
  metrics: Metrics;
  logger: Logger;
  /** Dead letters of components that have no unit at hand (counted; they hold no offset). */
  deadLetters: DeadLetterOutput;
  /** Directory relative paths in the pipeline (models, modules) are resolved from. */
  baseDir: string;
}
